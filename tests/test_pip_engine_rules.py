"""The rules the pip engines share (core/resolve/pip_engines/common.py), on plain data."""
from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envkit.core.resolve.pip_engines.common import admits_triton, pin, runs_on, triton_wanted
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
    (("100f-real",), CC(10, 3), True),  # family-specific SASS: later GPUs of its family
    (("100f-real",), CC(10, 0), True),
    (("103f-real",), CC(10, 0), False),  # not an earlier one
    (("100f-real",), CC(12, 0), False),  # nor another family
])
def test_a_cmake_arch_list_runs_where_nvcc_s_rules_say(archs, cc, runs):
    assert runs_on(archs, cc) is runs


def test_a_requirement_line_loses_its_extra_marker_and_keeps_its_pin():
    assert pin('torch==2.6.0; extra == "srt"') == "torch==2.6.0"
    assert pin("flashinfer_python[cu13]==0.4.0") == "flashinfer_python[cu13]==0.4.0"
    assert pin(None) is None


LMDEPLOY_065 = ("torch <=2.5.1,>=2.0.0", 'triton ==3.0.0 ; sys_platform == "linux"',
                "triton ==3.0.0 ; (sys_platform == \"linux\") and extra == 'all'", "gradio ; extra == 'serve'")
TORCH_251 = 'triton (==3.1.0) ; platform_system == "Linux" and platform_machine == "x86_64" and python_version < "3.13"'
TORCH_241 = 'triton (==3.0.0) ; platform_system == "Linux" and platform_machine == "x86_64" and python_version < "3.13"'
TORCH_2141 = 'triton~=3.8.0; platform_system == "Linux" and python_version < "3.15"'


def test_the_triton_an_engine_asks_for_is_its_default_install_s_on_linux():
    assert triton_wanted(LMDEPLOY_065, None) == SpecifierSet("==3.0.0")
    assert triton_wanted(("torch<=2.12.1", 'triton<=3.7.1,>=3.4.0; sys_platform == "linux" and "aarch64" not in platform_machine'),
                         Version("3.12")) == SpecifierSet(">=3.4.0,<=3.7.1")
    assert triton_wanted(("torch", "triton ; extra == 'all'"), None) is None
    assert triton_wanted(("torch",), None) is None


@pytest.mark.parametrize("torch_triton, wanted, python, admits", [
    (TORCH_251, "==3.0.0", None, False),            # torch 2.5.1 pins 3.1.0: pip cannot install lmdeploy 0.6.5 beside it
    (TORCH_241, "==3.0.0", None, True),
    (TORCH_251, "==3.0.0", Version("3.13"), True),  # on 3.13 torch 2.5.1 requires no triton
    (TORCH_2141, ">=3.4.0,<=3.7.1", None, False),   # ~=3.8.0 starts above 3.7.1
    (TORCH_2141, ">=3.4.0,<=3.8.2", None, True),
    (None, "==3.0.0", None, True),                  # a torch that requires no triton
    (TORCH_2141, ">3.8.0,<3.8.5", None, True),      # only a version strictly between the bounds meets both
    ("triton===3.8.0-custom", ">=3.4.0", None, False),  # an arbitrary string pins no version envkit can compare
])
def test_a_torch_admits_an_engine_s_triton_when_some_triton_meets_both(torch_triton, wanted, python, admits):
    assert admits_triton(torch_triton, SpecifierSet(wanted), python) is admits
