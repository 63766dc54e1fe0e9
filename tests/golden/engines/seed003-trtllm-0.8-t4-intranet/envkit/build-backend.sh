#!/bin/sh
# Builds the backend image the Dockerfile starts FROM, by upstream's own recipe. Run it in a checkout of
# tensorrtllm_backend at tag v0.8.0 with its tensorrt_llm submodule (5955b8afbad2ddcc3156202b16c567e94c52248f):
#   sh /path/to/this/envkit/build-backend.sh
# The recipe downloads what its Dockerfile names (TensorRT, pip packages): on an intranet, run it where
# those mirrors are reachable, then push the image to the site's registry.
set -eu
docker build -t envkit/tensorrtllm-backend:0.8.0 --build-arg BASE_IMAGE=registry.corp.example:5000/nvidia/tritonserver --build-arg BASE_TAG=23.12-py3 -f dockerfile/Dockerfile.trt_llm_backend .
