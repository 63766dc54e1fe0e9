COPY --from=${stage} ${path}/ ${path}/
