RUN pip install --no-cache-dir ${args}${packages}
