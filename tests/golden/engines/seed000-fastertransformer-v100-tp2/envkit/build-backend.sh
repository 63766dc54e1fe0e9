#!/bin/sh
# Builds the backend image the Dockerfile starts FROM, by upstream's own recipe. Run it in a checkout of
# fastertransformer_backend (https://github.com/triton-inference-server/fastertransformer_backend, the last commit c6936c39):
#   sh /path/to/this/envkit/build-backend.sh
# The recipe downloads what its Dockerfile names (TensorRT, pip packages): on an intranet, run it where
# those mirrors are reachable, then push the image to the site's registry.
set -eu
docker build -t envkit/fastertransformer-backend:triton23.05 --build-arg TRITON_VERSION=23.05 --build-arg BASE_IMAGE=registry.corp.example:5000/nvidia/tritonserver:23.05-py3 -f docker/Dockerfile .
