"""Concurrent CUDA graphs: steps ordered by the memory they share (funcgrad/cuda/concurrent.py)."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad.cuda.concurrent import step_deps


def test_step_deps_orders_conflicts_only():
    # 0 writes A; 1 writes B; 2 reads A writes C; 3 reads B, C writes D; 4 writes A again
    A, B, C, D = (0, 10), (10, 20), (20, 30), (30, 40)
    steps = [([], [A]), ([], [B]), ([A], [C]), ([B, C], [D]), ([], [A])]
    deps = step_deps(steps)
    assert deps[0] == [] and deps[1] == []          # independent: side by side
    assert deps[2] == [0]                            # read after write
    assert sorted(deps[3]) == [1, 2]                 # two producers
    assert deps[4] == [2]                            # write after read (0 is ordered via 2)


def test_step_deps_partial_overlap_and_transitive_skip():
    steps = [([], [(0, 8)]), ([(4, 6)], [(100, 108)]), ([(100, 101)], [(200, 208)]),
             ([(0, 1), (200, 201)], [(300, 308)])]
    deps = step_deps(steps)
    assert deps == [[], [0], [1], [2]]   # 3 reads step 0's bytes, already ordered through 2


@pytest.mark.cuda
@pytest.mark.skipif(not fcuda.usable(), reason="no GPU; NUMBA_ENABLE_CUDASIM=1 simulates")
def test_independent_branches_equal_eager(rng):
    # four independent chains (shapes differ, so none fuse) joined at the end: on a real GPU
    # the captured graph starts them side by side; every replay equals the eager result
    def f(a, b, c, d):
        outs = [fnp.tanh(x * 2.0 + 1.0).sum(axis=0) for x in (a, b, c, d)]
        return outs[0] * outs[1] + outs[2] - outs[3]
    xs = [rng.standard_normal((n, 5)).astype(np.float32) for n in (8, 9, 10, 11)]
    want = np.asarray(f(*xs))
    jf = funcgrad.jit(f)
    ds = [funcgrad.device_put(x, "cuda") for x in xs]
    for _ in range(4):
        np.testing.assert_allclose(np.asarray(jf(*ds)), want, rtol=1e-5, atol=1e-5)
    plan = jf.lower(*ds).compile()
    if not fcuda.simulator_active():
        assert plan.graphs is not None, plan.graph_error
        info = plan.graphs.rewired
        assert info is not None and "why" not in info, info
        assert info["roots"] >= 4, info
