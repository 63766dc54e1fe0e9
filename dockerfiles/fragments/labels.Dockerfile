COPY envkit/solution.json envkit/selftest.py /opt/envkit/
LABEL org.opencontainers.image.title="${title}" \
      org.opencontainers.image.description="${stack}" \
      org.opencontainers.image.vendor="envkit ${envkit_version}" \
      org.opencontainers.image.base.name="${base_name}" \
      io.envkit.lock.sha256="${lock_sha256}" \
      io.envkit.solution="${solution_json}"
${cmd}
