RUN python -c "import ${modules}; print('envkit: import check passed')"
