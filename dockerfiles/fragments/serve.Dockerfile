RUN echo "envkit:x:${uid}:${uid}:envkit:${home}:/bin/sh" >> /etc/passwd \
 && echo "envkit:x:${uid}:" >> /etc/group \
 && mkdir -p ${home} \
 && chown ${uid}:${uid} ${home}
ENV ${env}
USER ${uid}:${uid}
EXPOSE ${port}
HEALTHCHECK --interval=10s --timeout=5s --start-period=900s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('${health_url}', timeout=4)"]
LABEL ${labels}
ENTRYPOINT ${argv}
CMD []
