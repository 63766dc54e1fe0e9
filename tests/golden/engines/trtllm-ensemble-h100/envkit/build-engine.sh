#!/bin/sh
# Builds the TensorRT engines on the GPU they will run on (an engine runs only on the arch and TensorRT
# version it was built with), inside this image:
#   docker run --rm --gpus all -v CHECKPOINTS:/checkpoints:ro -v ENGINES:/engines IMAGE sh /opt/envkit/build-engine.sh
# CHECKPOINTS: TensorRT-LLM checkpoints for 1 rank(s), from the model's convert_checkpoint.py
# (TensorRT-LLM's examples/<model>/ at the same release).
set -eu
trtllm-build --checkpoint_dir /checkpoints --output_dir /engines --max_batch_size 64
