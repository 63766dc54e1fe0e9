COPY ${archive}envkit/fill_triton_repo.py envkit/fill_triton_repo.json ${cafile}/tmp/envkit/
RUN python3 /tmp/envkit/fill_triton_repo.py /tmp/envkit/fill_triton_repo.json ${source} --out ${out}
