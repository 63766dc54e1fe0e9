COPY ${files} ${dest}
