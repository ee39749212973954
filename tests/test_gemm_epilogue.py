"""A product and its bias add as one step (funcgrad/cuda/epilogue.py).

- The plan pairs a dot_general with the cluster after it when that cluster only adds a bias
  over the last axis (and at most one residual), in any order of the sums; anything else in the
  cluster (an activation, a bias over another axis, a second reader of the product, a batched
  product) keeps the two steps apart.
- A reduce_sum of a cotangent over the axes a dot_general contracts it over (a bias gradient
  beside its weight gradient) pairs with that product, on either side of it.
- Results equal float64 numpy within fp32 tolerance for hypothesis-drawn shapes with 1-sized
  dims, with and without the matching (FUNCGRAD_GEMM_EPILOGUE), and so do the gradients of a
  two-layer MLP. On a GPU with nvmath-python the fused step runs as one cuBLASLt call (counted);
  in the simulator it runs the numba product and the cluster (never cuBLASLt).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.cuda import blas, blaslt, epilogue

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")]
LT = (not fcuda.simulator_active() and blas.available("float32")
      and isinstance(blas._load()[0], blas._Nvmath))


def cu(a):
    return funcgrad.device_put(np.asarray(a, np.float32), "cuda")


@pytest.fixture
def lt_calls(monkeypatch):
    """Counts cuBLASLt bias-epilogue launches."""
    calls = []
    orig = blaslt.run_bias

    def spy(*a, **k):
        calls.append(a[1][2:5])
        return orig(*a, **k)
    monkeypatch.setattr(blaslt, "run_bias", spy)
    return calls


def _fused(f, *args, what="dot_general+bias ") -> int:
    """Steps of jit(f)'s plan whose description starts with `what` (the bias-add pairs; the
    weight/bias-gradient pairs with what="dot_general+bias_grad")."""
    desc = funcgrad.jit(f).lower(*args).compile().describe()
    return sum(line.strip().startswith(what) for line in desc.splitlines())


FORMS = {
    "x@w+b": lambda x, w, b, r: x @ w + b,
    "b+x@w": lambda x, w, b, r: b + x @ w,
    "r+(x@w+b)": lambda x, w, b, r: r + (x @ w + b),
    "(r+x@w)+b": lambda x, w, b, r: (r + x @ w) + b,
    "x@w+(b+r)": lambda x, w, b, r: x @ w + (b + r),
}


def _want(form, x, w, b, r):
    """The form in float64 on the CPU backend (numpy operands alone would go to the default
    device, "cuda" on a GPU host)."""
    x, w, b, r = (a.astype(np.float64) for a in (x, w, b, r))
    with funcgrad.default_device("cpu"):
        return FORMS[form](x, w, b, r)


@settings(max_examples=12, deadline=None)
@given(form=st.sampled_from(sorted(FORMS)), B=st.integers(1, 3), T=st.integers(1, 5),
       K=st.integers(1, 9), N=st.integers(1, 10), seed=st.integers(0, 99))
def test_dense_forms_fuse_and_equal_numpy(form, B, T, K, N, seed):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal((B, T, K)), rng.standard_normal((K, N))
    b, r = rng.standard_normal(N), rng.standard_normal((B, T, N))
    args = [cu(a) for a in (x, w, b, r)]
    want = _want(form, x, w, b, r)
    assert _fused(FORMS[form], *args) == 1
    got = np.asarray(funcgrad.jit(FORMS[form])(*args))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * (1 + np.sqrt(K)))


def test_lt_runs_only_on_a_gpu_and_equals_the_unfused_plan(monkeypatch, lt_calls):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 33, 24)), rng.standard_normal((24, 40))
    b, r = rng.standard_normal(40), rng.standard_normal((4, 33, 40))
    args = [cu(a) for a in (x, w, b, r)]
    f = FORMS["r+(x@w+b)"]
    fused = np.asarray(funcgrad.jit(f)(*args))
    assert len(lt_calls) == (1 if LT else 0)
    monkeypatch.setattr(epilogue, "ENABLED", False)
    assert _fused(f, *args) == 0
    plain = np.asarray(funcgrad.jit(lambda *a: f(*a))(*args))
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fused, _want("r+(x@w+b)", x, w, b, r), rtol=1e-5, atol=1e-4)


NOT_FUSED = {
    "activation": lambda x, w, b, r: fnp.tanh(x @ w + b),
    "bias over rows": lambda x, w, b, r: x @ w + r[0, :, :1],
    "product read twice": lambda x, w, b, r: (x @ w + b, x @ w),
    "two residuals": lambda x, w, b, r: r + (x @ w + b) + r,
    "batched": lambda x, w, b, r: fnp.matmul(x, fnp.broadcast_to(w, (2,) + w.shape)) + b,
}


@pytest.mark.parametrize("name", sorted(NOT_FUSED))
def test_other_clusters_stay_apart(name):
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    b, r = rng.standard_normal(5), rng.standard_normal((2, 3, 5))
    f = NOT_FUSED[name]
    args = [cu(a) for a in (x, w, b, r)]
    assert _fused(f, *args) == 0
    got = funcgrad.jit(f)(*args)
    with funcgrad.default_device("cpu"):
        want = f(*(a.astype(np.float64) for a in (x, w, b, r)))
    for g, v in zip(got if isinstance(got, tuple) else [got],
                    want if isinstance(want, tuple) else [want]):
        np.testing.assert_allclose(np.asarray(g), np.asarray(v), rtol=1e-5, atol=1e-5)


def test_mlp_gradients_equal_the_unfused_plan(monkeypatch, lt_calls):
    rng = np.random.default_rng(3)
    p = {"w1": rng.standard_normal((6, 16)) * 0.3, "b1": rng.standard_normal(16),
         "w2": rng.standard_normal((16, 6)) * 0.3, "b2": rng.standard_normal(6),
         "v": rng.standard_normal((6, 5)) * 0.3}
    p = {k: cu(v) for k, v in p.items()}
    x = cu(rng.standard_normal((3, 7, 6)))

    def loss(p, x):   # the sums feed products only (as a GPT's feed layer norms)
        z = x @ p["w1"] + p["b1"]
        h = x + (z @ p["w2"] + p["b2"])
        return fnp.sum((h @ p["v"]) ** 2)

    f = funcgrad.value_and_grad(loss)
    assert _fused(f, p, x) == 2 and _fused(f, p, x, what="dot_general+bias_grad") == 2
    val, g = funcgrad.jit(f)(p, x)
    assert len(lt_calls) == (4 if LT else 0)
    monkeypatch.setattr(epilogue, "ENABLED", False)
    assert _fused(f, p, x) == 0 and _fused(f, p, x, what="dot_general+bias_grad") == 0
    val0, g0 = funcgrad.jit(lambda p, x: f(p, x))(p, x)
    np.testing.assert_allclose(float(val), float(val0), rtol=1e-5)
    for k in g:
        np.testing.assert_allclose(np.asarray(g[k]), np.asarray(g0[k]), rtol=1e-4, atol=1e-4,
                                   err_msg=k)


GRADS = {   # (weight gradient, bias gradient) of a cotangent ct [B, T, N] and an input x
    "dW = x^T ct": lambda x, ct: (lax.dot_general(x, ct, (((0, 1), (0, 1)), ((), ()))),
                                  fnp.sum(ct, axis=(0, 1))),
    "dW^T = ct^T x": lambda x, ct: (lax.dot_general(ct, x, (((0, 1), (0, 1)), ((), ()))),
                                    fnp.sum(ct, axis=(0, 1))),
}


@settings(max_examples=10, deadline=None)
@given(form=st.sampled_from(sorted(GRADS)), B=st.integers(1, 3), T=st.integers(1, 5),
       K=st.integers(1, 9), N=st.integers(1, 10), seed=st.integers(0, 99))
def test_weight_and_bias_gradients_pair_and_equal_numpy(form, B, T, K, N, seed):
    rng = np.random.default_rng(seed)
    x, ct = rng.standard_normal((B, T, K)), rng.standard_normal((B, T, N))
    f = GRADS[form]
    assert _fused(f, cu(x), cu(ct), what="dot_general+bias_grad") == 1
    got = funcgrad.jit(f)(cu(x), cu(ct))
    want = (np.einsum("btk,btn->kn", x, ct), ct.sum((0, 1)))
    if form.startswith("dW^T"):
        want = (want[0].T, want[1])
    for g, v in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), v, rtol=1e-5, atol=1e-5 * (1 + B * T))


def test_sums_over_other_axes_stay_apart():
    rng = np.random.default_rng(4)
    x, ct = cu(rng.standard_normal((2, 3, 4))), cu(rng.standard_normal((2, 3, 5)))

    def f(x, ct):   # the sum keeps the batch axis: not the product's contraction
        return lax.dot_general(x, ct, (((0, 1), (0, 1)), ((), ()))), fnp.sum(ct, axis=1)
    assert _fused(f, x, ct, what="dot_general+bias_grad") == 0
    got = funcgrad.jit(f)(x, ct)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(ct).sum(1), rtol=1e-5)


def test_step_profiling_names_epilogue_steps(monkeypatch):
    # FUNCGRAD_PROFILE's per-step timing keys a ("gemm", ...) step by what it computes and
    # its output, as others
    from funcgrad.cuda import plan
    monkeypatch.setattr(plan, "PROFILE", {})
    rng = np.random.default_rng(0)
    x, w, b = (funcgrad.device_put(rng.standard_normal(s).astype(np.float32), "cuda")
               for s in ((4, 3), (3, 5), (5,)))
    got = funcgrad.jit(lambda x, w, b: x @ w + b)(x, w, b)
    np.testing.assert_allclose(np.asarray(got), np.asarray(x) @ np.asarray(w) + np.asarray(b),
                               rtol=1e-5, atol=1e-6)
    assert "dot_general+bias -> f32[4,5] f32[4,5]" in plan.PROFILE, plan.PROFILE


def test_step_ranges_wrap_every_step(monkeypatch):
    # STEP_RANGES gets each step's profile key and wraps its launches (a CUPTI profile then
    # names kernels by step); the plan then runs step by step, never from a graph
    import contextlib
    from funcgrad.cuda import plan
    seen = []

    @contextlib.contextmanager
    def rng(key):
        seen.append(key)
        yield
    monkeypatch.setattr(plan, "STEP_RANGES", rng)
    rs = np.random.default_rng(1)
    x, w, b = (funcgrad.device_put(rs.standard_normal(s).astype(np.float32), "cuda")
               for s in ((4, 3), (3, 5), (5,)))
    f = funcgrad.jit(lambda x, w, b: funcgrad.numpy.tanh(x @ w + b) * 2.0)
    for _ in range(3):
        got = f(x, w, b)
    want = np.tanh(np.asarray(x) @ np.asarray(w) + np.asarray(b)) * 2.0
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    assert seen[:2] == ["dot_general f32[4,5]",
                        "fused[broadcast_in_dim+add+tanh+broadcast_in_dim+mul] [4, 5]"], seen
    assert seen == seen[:2] * 3, seen
