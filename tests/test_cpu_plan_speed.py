"""CPU plan speed-ups that must not change results: kernels storing several outputs in one
innermost loop each, fills computed in the kernels that read them, pairwise vector sums and
products called on x or x.T (the BLAS threading choice is tested in test_cpu_engine.py)."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import jit, nn


def _plans(monkeypatch, f, *args):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE", "0")
    plain = jit(f)
    want = plain(*args)
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE", "1")
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    fused = jit(f)
    got = fused(*args)
    return fused.lower(*args).compile(), got, want


@pytest.mark.parametrize("shape", [(7, 13), (3, 1, 5), (1, 9), (16, 40)])
def test_multi_output_kernels_split_their_stores_and_equal_numpy(monkeypatch, rng, shape):
    # a forward layer's bias add, ReLU and the backward's mask (float and bool outputs of a
    # broadcasting cluster, so a loop over coordinates): one innermost loop per output
    x = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape[-1:]).astype(np.float32)

    def f(x, b):
        z = x + b
        h = nn.relu(z)
        return h, z > 0, z * 3.0 - b

    plan, got, want = _plans(monkeypatch, f, x, b)
    import inspect
    kernel = next(s.fn for s in plan.program.steps if s.kind == "kernel")
    src = inspect.getsource(kernel.py_func)
    inner = f"for i{len(shape) - 1} in range("
    assert src.count(inner) == 3, src
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_expensive_shared_ops_keep_one_loop(monkeypatch, rng):
    # with inexact ops fused (FUNCGRAD_CPU_EXACT=0) a shared exp is computed once, not per output
    monkeypatch.setenv("FUNCGRAD_CPU_EXACT", "0")
    x = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)

    def f(x, b):
        e = fnp.exp(x + b)
        return e * 2.0, e + 1.0

    plan, got, want = _plans(monkeypatch, f, x, b)
    import inspect
    kernel = next(s.fn for s in plan.program.steps if s.kind == "kernel")
    assert inspect.getsource(kernel.py_func).count("for i1 in range(") == 1
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)


def test_mlp_backward_with_split_kernels_equals_numpy_bit_for_bit(monkeypatch, rng):
    w1 = (rng.standard_normal((12, 20)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((20, 4)) * 0.3).astype(np.float32)
    b1 = rng.standard_normal(20).astype(np.float32)
    x = rng.standard_normal((9, 12)).astype(np.float32)
    y = rng.integers(0, 4, 9).astype(np.int32)

    def loss(w1, b1, w2):
        h = nn.relu(x @ w1 + b1)
        return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(h @ w2, y))

    from funcgrad import value_and_grad
    _, got, want = _plans(monkeypatch, value_and_grad(loss, argnums=(0, 1, 2)), w1, b1, w2)
    from funcgrad.tree_util import tree_leaves
    for g, w in zip(tree_leaves(got), tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_constant_fills_are_computed_in_the_kernels_that_read_them(monkeypatch, rng):
    # CSE shares one broadcast zeros between a ReLU and the backward's select; the kernels
    # compute it in registers, none stores it, and the gradients keep numpy's bits
    from funcgrad import value_and_grad
    from funcgrad.backends.cpu import steps as cpu_steps
    from funcgrad.tree_util import tree_leaves
    w = (rng.standard_normal((6, 16)) * 0.5).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    x = rng.standard_normal((11, 6)).astype(np.float32)

    def loss(w, b):
        h = nn.relu(x @ w + b)
        return fnp.sum(nn.relu(h * 2.0 - 1.0) * h)

    f = value_and_grad(loss, argnums=(0, 1))
    plan, got, want = _plans(monkeypatch, f, w, b)
    stored = sum(len(s.outs) for s in plan.program.steps if s.kind == "kernel")
    monkeypatch.setattr(cpu_steps, "inline_fills", lambda clustered, expr: clustered)
    funcgrad.clear_caches()   # jit(f) shares f's plans, as in JAX: build them again
    before, _, _ = _plans(monkeypatch, f, w, b)
    assert stored < sum(len(s.outs) for s in before.program.steps if s.kind == "kernel")
    for g, w_ in zip(tree_leaves(got), tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w_))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 9, 128, 130, 256, 3001])
def test_vector_sums_equal_numpy_bit_for_bit(monkeypatch, rng, dtype, n):
    # the sum of a whole float vector (a loss's mean) runs as the pairwise-sum twin
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-4, 4, n)).astype(dtype)
    specials = [x, np.full(n, -0.0, dtype), np.where(np.arange(n) == n // 2, np.inf, x)]
    for v in specials:
        plan, got, want = _plans(monkeypatch, lambda v: (fnp.sum(v * 1.0), fnp.mean(v)), v)
        assert any(s.kind == "into" and s.eqn.prim.name == "reduce_sum"
                   for s in plan.program.steps)
        for g, w in zip(got, want):
            g, w = np.asarray(g), np.asarray(w)
            assert g.dtype == w.dtype and np.signbit(g) == np.signbit(w)
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(np.asarray(got[0]), np.sum(v, dtype=dtype))


def test_products_of_matrices_and_their_transposes_equal_numpy(monkeypatch, rng):
    # 2-D products call the BLAS runner on x or x.T right in the plan's line
    from funcgrad import lax
    a = rng.standard_normal((7, 5)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    c = rng.standard_normal((7, 3)).astype(np.float32)

    def dot(x, y, lc, rc):
        return lax.dot_general(x, y, (((lc,), (rc,)), ((), ())))

    def f(a, b, c):
        return dot(a, b, 1, 1), dot(a, c, 0, 0), dot(c, a, 0, 0), dot(b, a.T, 1, 0)

    plan, got, want = _plans(monkeypatch, f, a, b, c)
    assert "v1.T" in plan.source or ".T," in plan.source
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    np.testing.assert_allclose(np.asarray(got[0]), a @ b.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), a.T @ c, rtol=1e-5, atol=1e-5)
