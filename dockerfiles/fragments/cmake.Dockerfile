COPY sources/${archive} /opt/envkit/sources/
ARG MAX_JOBS=
RUN mkdir -p /opt/envkit/src/${tree} \
 && tar -xzf /opt/envkit/sources/${archive} --strip-components=1 -C /opt/envkit/src/${tree} \
 && cmake -S /opt/envkit/src/${tree} -B /opt/envkit/src/${tree}/build ${cmake_args} \
 && cmake --build /opt/envkit/src/${tree}/build --target ${target} -j "$${MAX_JOBS:-$$(nproc)}" \
 && pip install --no-cache-dir --no-deps --no-build-isolation /opt/envkit/src/${tree}/build/${package_dir} \
 && rm -rf /opt/envkit/src/${tree}
