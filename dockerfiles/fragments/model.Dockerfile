COPY model/ ${dest}/
