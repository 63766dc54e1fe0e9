"""The rules the pip engines share (core/resolve/pip_engines/common.py), on plain data."""
from __future__ import annotations

import pytest

from envkit.core.resolve.pip_engines.common import pin, runs_on
from envkit.model.matrix import CC


@pytest.mark.parametrize("archs, cc, runs", [
    (("80-real",), CC(8, 6), True),     # SASS runs on later minors of its major
    (("80-real",), CC(9, 0), False),    # and not on the next major
    (("80",), CC(9, 0), True),          # PTX: the driver compiles it for a later GPU
    (("70-real",), CC(6, 1), False),    # nothing runs below the arch it was built for
    (("90a-real",), CC(9, 0), True),    # arch-specific SASS: on its own arch
    (("100a-real",), CC(10, 3), False),  # and no other, not even a later minor
    (("120a-real",), CC(12, 1), False),
    (("70-real", "90a-real", "120a-real"), CC(12, 0), True),
])
def test_a_cmake_arch_list_runs_where_nvcc_s_rules_say(archs, cc, runs):
    assert runs_on(archs, cc) is runs


def test_a_requirement_line_loses_its_extra_marker_and_keeps_its_pin():
    assert pin('torch==2.6.0; extra == "srt"') == "torch==2.6.0"
    assert pin("flashinfer_python[cu13]==0.4.0") == "flashinfer_python[cu13]==0.4.0"
    assert pin(None) is None
