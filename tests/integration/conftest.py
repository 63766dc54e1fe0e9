"""The real servers of the integration tests, started once per session for every module that asks (a vLLM server
takes a while to start on two cores); serving_env.py has how."""
from __future__ import annotations

import pytest

import serving_env


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    yield from serving_env.vllm_server(tmp_path_factory.mktemp("vllm"))


@pytest.fixture(scope="session")
def fastllm_server(tmp_path_factory):
    yield from serving_env.fastllm_server(tmp_path_factory.mktemp("fastllm"))
