${copy_python}COPY --from=build ${venv} ${venv}
ENV PATH=${venv}/bin:$$PATH VIRTUAL_ENV=${venv}
