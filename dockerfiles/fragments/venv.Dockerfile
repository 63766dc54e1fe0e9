${copy_wheelhouse}RUN ${python} -m venv ${venv}
ENV PATH=${venv}/bin:$$PATH VIRTUAL_ENV=${venv} PIP_DISABLE_PIP_VERSION_CHECK=1
