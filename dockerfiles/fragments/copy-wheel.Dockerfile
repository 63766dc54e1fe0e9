COPY wheelhouse/${wheel} /opt/envkit/wheelhouse/
