RUN ln -s ${prefix} ${cuda_home}${links} \
 && ${cuda_home}/bin/nvcc --version
ENV CUDA_HOME=${cuda_home} PATH=${cuda_home}/bin:$$PATH
