COPY sources/${tarball} /opt/envkit/sources/
WORKDIR /tmp/cpython
RUN tar -xzf /opt/envkit/sources/${tarball} --strip-components=1 \
 && ./configure --prefix=${prefix} --with-ensurepip=install --quiet \
 && make -j"$$(nproc)" \
 && make altinstall \
 && rm -rf /tmp/cpython/* /opt/envkit/sources/${tarball}
WORKDIR /
