RUN pip uninstall -y ${packages}${remove}
