"""matrixgen/derive_triton.py on plain data: a release's notes state its driver requirement for every container of the
release on the notes' CUDA."""
from __future__ import annotations

from envkit.matrixgen.derive_triton import forward_compatible

NOTES = {"release": "25.03", "flavor": "py3", "cuda": "12.8.1", "driver": "570", "datacenter_drivers": ["535.86"],
         "not_forward_compatible": [545], "source": "https://docs.nvidia.com/rel-25-03.html; server version: x"}


def test_a_container_on_the_notes_cuda_gets_their_forward_compatibility_with_their_citation():
    vllm = {"release": "25.03", "flavor": "vllm-python-py3", "cuda": "12.8.1.012", "driver": "570.124.06", "source": "compat.md"}
    [row] = forward_compatible([vllm], [NOTES])
    assert row["datacenter_drivers"] == ["535.86"] and row["not_forward_compatible"] == [545]
    assert row["source"] == "compat.md; forward compatibility: https://docs.nvidia.com/rel-25-03.html"
    assert list(row)[-1] == "source"


def test_a_container_on_another_cuda_or_release_keeps_its_own_requirement():
    other_cuda = {"release": "25.03", "flavor": "trtllm-python-py3", "cuda": "12.9.0", "source": "compat.md"}
    other_release = {"release": "25.04", "flavor": "vllm-python-py3", "cuda": "12.8.1", "source": "compat.md"}
    no_cuda = {"release": "25.03", "flavor": "vllm-python-py3", "source": "compat.md"}
    assert forward_compatible([other_cuda, other_release, no_cuda], [NOTES]) == [other_cuda, other_release, no_cuda]
