"""The real servers of the integration tests and the tiny model they serve, made or started once per session for every
module that asks (a vLLM server takes a while to start on two cores); serving_env.py has how."""
from __future__ import annotations

import pytest

import serving_env


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """The tiny trained Llama of tests/vllm/make_tiny_model.py, trained once: every server and image test reads it, none writes it."""
    return serving_env.tiny_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory, tiny_model):
    yield from serving_env.vllm_server(tmp_path_factory.mktemp("vllm"), tiny_model)


@pytest.fixture(scope="session")
def fastllm_server(tmp_path_factory, tiny_model):
    yield from serving_env.fastllm_server(tmp_path_factory.mktemp("fastllm"), tiny_model)
