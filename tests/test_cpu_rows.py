"""The CPU backend's njit twins of the norm primitives (layer_norm, rms_norm and their packed
backward, funcgrad/backends/cpu/rows.py): the numpy impls' bits, in plans and alone."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import jit, nn
from funcgrad.backends.cpu import rows as cpu_rows
from funcgrad.core import ShapedArray
from funcgrad.prims import rows as PR, rows_bwd as PB
from funcgrad.test_util import check_grads

NORMS = {  # name -> (center, forward impl, backward impl)
    "layer_norm": (True, PR._ln_impl, PB.layer_norm_bwd_p.impl),
    "rms_norm": (False, PR._rms_impl, PB.rms_norm_bwd_p.impl),
}


def _twins(name, x, scale, bias, ct, eps):
    center, fwd, bwd = NORMS[name]
    aval = ShapedArray(x.shape, x.dtype)
    f = cpu_rows.norm_into(aval, center, False, eps)
    b = cpu_rows.norm_into(aval, center, True, eps)
    out = np.full(x.shape, np.nan, x.dtype)
    f(x, scale, *([bias] if center else []), out)
    packed = np.full(bwd(x, scale, ct, eps=eps).shape, np.nan, x.dtype)
    if b is None:   # one column: numpy sums it pairwise, and so the plan runs the impl
        assert x.shape[-1] == 1
        return out, bwd(x, scale, ct, eps=eps)
    b(x, scale, ct, packed)
    return out, packed


@pytest.mark.parametrize("name", sorted(NORMS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3, 8, 17, 128, 130, 3001])
def test_norm_twins_equal_the_numpy_impls(rng, name, dtype, n):
    x = (rng.standard_normal((2, 9, n)) * 3 + 1).astype(dtype)
    x[0, 0, 0], x[1, 1, -1] = np.nan, np.inf
    scale = rng.standard_normal(n).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    ct = rng.standard_normal(x.shape).astype(dtype)
    center, fwd, bwd = NORMS[name]
    with np.errstate(all="ignore"):
        out, packed = _twins(name, x, scale, bias, ct, 1e-5)
        want = fwd(x, scale, bias, eps=1e-5) if center else fwd(x, scale, eps=1e-5)
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(packed, bwd(x, scale, ct, eps=1e-5))


@given(lead=st.lists(st.integers(0, 4), min_size=0, max_size=2), n=st.integers(0, 40),
       name=st.sampled_from(sorted(NORMS)), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2**16))
def test_jitted_norms_equal_the_interpreter_bit_for_bit(lead, n, name, dtype, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*lead, n)).astype(dtype)
    s = rng.standard_normal(n).astype(dtype)
    w = rng.standard_normal(x.shape).astype(dtype)

    def loss(x, s):
        y = nn.layer_norm(x, s, s) if name == "layer_norm" else nn.rms_norm(x, s)
        return fnp.sum(y * w), y

    f = funcgrad.value_and_grad(loss, argnums=(0, 1), has_aux=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
        (val, y), g = jit(f)(x, s)
    (val0, y0), g0 = f(x, s)   # eager: the numpy impls
    for a, b in zip([val, y, *g], [val0, y0, *g0]):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_plans_run_the_twins(monkeypatch, rng):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    x = rng.standard_normal((4, 16)).astype(np.float32)
    s = np.ones(16, np.float32)
    f = jit(funcgrad.grad(lambda x, s: fnp.sum(nn.layer_norm(x, s, s) ** 2), argnums=(0, 1)))
    f(x, s)
    steps = f.lower(x, s).compile().program.steps
    kinds = {s.eqn.prim.name: s.kind for s in steps}
    assert kinds["layer_norm"] == "into" and kinds["layer_norm_bwd"] == "into"


def test_strided_rows_take_the_numpy_impl(rng):
    # a transposed x: numpy may sum its rows in another order, so the twin defers to the impl
    x = rng.standard_normal((12, 5)).astype(np.float32).T
    s = rng.standard_normal(12).astype(np.float32)
    out = np.empty(x.shape, np.float32)
    cpu_rows.norm_into(ShapedArray(x.shape, x.dtype), True, False, 1e-5)(x, s, s, out)
    np.testing.assert_array_equal(out, PR._ln_impl(x, s, s, eps=1e-5))


def test_norm_grads_float64_through_jit(monkeypatch, rng):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    x = rng.standard_normal((3, 6))
    s = rng.standard_normal(6)
    check_grads(jit(lambda x, s: nn.layer_norm(x, s, s)), (x, s), order=1, modes=("rev",))
    check_grads(jit(lambda x, s: nn.rms_norm(x, s)), (x, s), order=1, modes=("rev",))
