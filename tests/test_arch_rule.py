"""The rule for whether compiled code runs on a GPU exists twice on purpose: model/matrix.py for the
resolver and the doctor, and inimage/selftest.py, which is copied alone into images and so cannot import
it. This test holds the two to the same answer for every pair of architectures the matrix names."""
from __future__ import annotations

import itertools

from envkit.config import matrix_file
from envkit.inimage.selftest import arch_runs
from envkit.model.matrix import CC, runs_on, sass_runs_on

M = matrix_file.load()
ARCHS = sorted({CC.parse(a) for b in M.torch if b.platform == "cuda" for a in b.archs}
               | {CC.parse(g.arch) for g in M.gpus if g.vendor == "nvidia"},
               key=lambda c: (c.major, c.minor))


def test_the_matrix_names_enough_archs_to_mean_something():
    assert len(ARCHS) >= 10 and {a.major for a in ARCHS} >= {7, 8, 9, 12}


def test_sass_rule_agrees_with_the_in_image_copy():
    for built, gpu in itertools.product(ARCHS, ARCHS):
        assert sass_runs_on(built, gpu) == arch_runs((gpu.major, gpu.minor), [f"sm_{built.major}{built.minor}"]), (built, gpu)


def test_ptx_rule_agrees_with_the_in_image_copy():
    for ptx, gpu in itertools.product(ARCHS, ARCHS):
        assert runs_on((), ptx, gpu) == arch_runs((gpu.major, gpu.minor), [f"compute_{ptx.major}{ptx.minor}"]), (ptx, gpu)
