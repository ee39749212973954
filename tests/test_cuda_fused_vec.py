"""Fused coordinate kernels that take several last-axis neighbours per thread (fusion.vec_width):
broadcasts, transposed views, iotas and odd last dims agree with the CPU, 0- and 1-sized dims
included."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.cuda
import funcgrad.numpy as fnp
from funcgrad.cuda import fusion

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (funcgrad.cuda.usable()
                            or __import__("os").environ.get("FUNCGRAD_REQUIRE_GPU") == "1"),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]


def _f(x, b, t):
    # x [r, c]; b [c] broadcast over rows; t [c, r] read transposed; an iota along the last axis
    col = fnp.arange(x.shape[1], dtype=np.float32)
    y = fnp.tanh(x * 0.7 + b) * t.T - col * 0.01
    return y, fnp.exp(-x * x) + b[None, :] * col


def _check(r, c, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((r, c)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    t = rng.standard_normal((c, r)).astype(np.float32)
    want = _f(*funcgrad.device_put((x, b, t), "cpu"))
    got = funcgrad.jit(_f)(*funcgrad.device_put((x, b, t), "cuda"))
    for u, v in zip(want, got):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=2e-6, atol=2e-6)


@given(r=st.integers(0, 5), c=st.integers(0, 13), seed=st.integers(0, 2 ** 16))
def test_neighbour_kernels_match_cpu_on_drawn_shapes(r, c, seed):
    _check(r, c, seed)


@pytest.mark.parametrize("c, want", [(12, 4), (6, 2), (7, 1), (1, 1)])
def test_vec_width_divides_the_last_dim(c, want, monkeypatch):
    monkeypatch.setattr(fusion, "VEC", 4)
    low = funcgrad.jit(_f).lower(*funcgrad.device_put(
        (np.ones((3, c), np.float32), np.ones(c, np.float32), np.ones((c, 3), np.float32)),
        "cuda"))
    plan = low.compile()
    plan = getattr(plan, "plan", plan)
    clusters = [s for kind, s in plan.steps if kind == "fused"]
    assert clusters and all(fusion.vec_width(s) == want for s in clusters if s.shape[-1] == c)
    _check(3, c, 0)


def _g(x, y, s):
    # flat operands (y read at an offset when it is a slice), a scalar, two outputs
    return x * s + fnp.sin(y[1:]), fnp.maximum(x, y[1:]) - s


@given(n=st.integers(0, 14), seed=st.integers(0, 2 ** 16))
def test_flat_neighbour_kernels_match_cpu_on_drawn_sizes(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n + 1).astype(np.float32)
    s = np.float32(0.5)
    want = _g(*funcgrad.device_put((x, y, s), "cpu"))
    got = funcgrad.jit(_g)(*funcgrad.device_put((x, y, s), "cuda"))
    for u, v in zip(want, got):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=2e-6, atol=2e-6)


def test_aligned_needs_offset_and_size():
    from funcgrad.cuda.arrays import from_host
    b = from_host(np.zeros(8, np.float32))
    assert fusion.aligned(b, 4, True) and fusion.aligned(b, 2, True)
    assert not fusion.aligned(b.view((7,), (1,), b.offset + 1), 4, True)
    assert not fusion.aligned(from_host(np.zeros(8, np.float64)), 4, True)   # 32 bytes
    assert not fusion.aligned(from_host(np.zeros(8, np.bool_)), 4, True)


def _fused_big(f, *args, least=None):
    """The fused clusters over `least` (UNROLL_MAX_EQNS) equations of f's plan."""
    plan = funcgrad.jit(f).lower(*funcgrad.device_put(args, "cuda")).compile()
    plan = getattr(plan, "plan", plan)
    return [s for kind, s in plan.steps
            if kind == "fused" and len(s.eqns) > (least or fusion.UNROLL_MAX_EQNS)]


def test_wide_flat_clusters_take_neighbours_only_while_memory_bound(monkeypatch):
    """AdamW-like packs (few equations an array) take neighbours: VEC for one parameter's
    update, 2 for a pack of three (over VEC_WIDE_OPERANDS arrays: registers); a long chain of
    math on one array (Threefry's shape of work) keeps one, so its source is not VEC copies."""
    monkeypatch.setattr(fusion, "VEC", 4)
    opt = funcgrad.optim.adam(1e-3)

    def step(p, g, s):
        u, s = opt.update(g, s, p)
        return funcgrad.optim.apply_updates(p, u), s

    for names, want in (("a", 4), ("abc", 2)):
        params = {k: np.full((5, 8), 0.5, np.float32) for k in names}
        packs = _fused_big(step, params, params, opt.init(params), least=12)
        ops = [len(fusion.external_inputs(c)) + len(c.outputs) for c in packs]
        assert packs and all((n > fusion.VEC_WIDE_OPERANDS) == (want == 2) for n in ops), ops
        assert all(fusion.vec_width(c, coords=False) == want for c in packs), (names, ops)

    def chain(x):
        for _ in range(12):
            x = fnp.sin(x) * 1.01 + 0.1
        return x

    long = _fused_big(chain, np.ones((5, 8), np.float32))
    assert long and all(fusion.vec_width(c, coords=False) == 1 for c in long)
    x = np.linspace(-1, 1, 40, dtype=np.float32).reshape(5, 8)
    np.testing.assert_allclose(np.asarray(funcgrad.jit(chain)(funcgrad.device_put(x, "cuda"))),
                               np.asarray(chain(funcgrad.device_put(x, "cpu"))),
                               rtol=2e-6, atol=2e-6)
