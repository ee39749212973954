"""CPU engine: every elementwise op in a fused njit kernel equals the numpy interpreter."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
from funcgrad import jit
from funcgrad import prims as P
from funcgrad.core import bind

FLOATS = [np.float32, np.float64]
INTS = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64]


@pytest.fixture(autouse=True)
def _fuse_at_once(monkeypatch):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")


def _edge_values(dtype, n, rng):
    """n values of dtype, the type's edge cases first (NaN, infinities, -0.0, MIN, MAX...)."""
    d = np.dtype(dtype)
    if d == np.bool_:
        return rng.integers(0, 2, n).astype(bool)
    m = max(n, 16)
    if d.kind == "f":
        edge = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, np.nan, np.inf,
                         -np.inf, 1e30, -1e-30, 3.0, 7.25], d)
        rest = (rng.standard_normal(m) * 10).astype(d)
    else:
        info = np.iinfo(d)
        edge = np.array([0, 1, 2, 3, info.max, info.min, info.max - 1, 7, 100 % (info.max + 1)]
                        + ([-1, -2, -7] if d.kind == "i" else []), d)
        rest = rng.integers(info.min, info.max, m, dtype=d, endpoint=True)
    rest[:len(edge)] = edge
    return rng.permutation(rest)[:n]


def _ops_for(dtype):
    """(name, function of (x, y, p)) for every op that applies to dtype."""
    d = np.dtype(dtype)
    k = d.kind
    ops = []
    un = {"neg": "fi", "abs": "fi", "sign": "fi", "not": "biu", "stop_gradient": "fiub",
          "sqrt": "f", "rsqrt": "f", "erf": "f", "floor": "f", "round": "f", "isfinite": "f"}
    for name, kinds in un.items():
        if k in kinds:
            prim = getattr(P, f"{name}_p")
            ops.append((name, lambda x, y, p, prim=prim: bind(prim, x)))
    bi = {"add": "fiu", "sub": "fiu", "mul": "fiu", "div": "fiu", "rem": "fiu", "max": "fiub",
          "min": "fiub", "eq": "fiub", "ne": "fiub", "lt": "fiub", "le": "fiub", "gt": "fiub",
          "ge": "fiub", "and": "biu", "or": "biu", "xor": "biu", "shift_left": "iu",
          "shift_right_logical": "iu"}
    for name, kinds in bi.items():
        if k in kinds:
            prim = getattr(P, f"{name}_p")
            ops.append((name, lambda x, y, p, prim=prim: bind(prim, x, y)))
    ops.append(("select", lambda x, y, p: bind(P.select_p, p, x, y)))
    if k in "fiu":
        for n in (0, 1, 2, 3, -1, -2, 9) if k in "iu" else (0, 1, 2, -1):
            ops.append((f"ipow{n}", lambda x, y, p, n=n: bind(P.integer_pow_p, x, y=n)))
    for to in [np.float32, np.float64, np.int32, np.uint8, np.int64, np.bool_]:
        if k == "f" and np.dtype(to).kind in "iu":
            continue   # out-of-range float -> int casts are undefined in C (numpy's too)
        ops.append((f"to_{np.dtype(to).name}", lambda x, y, p, to=to: bind(
            P.convert_element_type_p, x, new_dtype=np.dtype(to))))
    return ops


def _shift_amounts(dtype, n, rng):
    bits = np.dtype(dtype).itemsize * 8
    lo = -2 if np.dtype(dtype).kind == "i" else 0
    return rng.integers(lo, bits + 3, n).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS + INTS + [np.bool_], ids=lambda d: np.dtype(d).name)
def test_every_op_fused_equals_numpy_bit_for_bit(dtype, rng):
    ops = _ops_for(dtype)
    n = 96
    x = _edge_values(dtype, n, rng).reshape(8, 12)
    y = _edge_values(dtype, n, rng).reshape(8, 12)
    p = rng.integers(0, 2, (8, 12)).astype(bool)

    def f(x, y, p):
        return [op(x, y, p) for name, op in ops if not name.startswith("shift")]

    def g(x, s):   # shifts read their amounts from their own operand
        return [op(x, s, None) for name, op in ops if name.startswith("shift")]

    jf = jit(f)
    got, want = jf(x, y, p), f(x, y, p)
    assert jf.lower(x, y, p).compile().fused
    names = [name for name, _ in ops if not name.startswith("shift")]
    for name, a, b in zip(names, got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
        assert np.asarray(a).dtype == np.asarray(b).dtype, name
    if np.dtype(dtype).kind in "iu":
        s = _shift_amounts(dtype, n, rng).reshape(8, 12)
        for a, b in zip(jit(g)(x, s), g(x, s)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@given(st.sampled_from([(), (1,), (4,), (3, 1), (1, 5), (3, 5), (2, 1, 3)]),
       st.sampled_from([np.float32, np.int32, np.uint8]), st.integers(0, 2 ** 31))
def test_broadcasts_iota_and_scalars_in_one_kernel(shape, dtype, seed):
    # every way a cluster reads an operand: full, broadcast through a dims map (size-1 dims
    # included), a rank-0 variable, a literal, an iota; including 0- and 1-sized dims
    rng = np.random.default_rng(seed)
    a = _edge_values(dtype, int(np.prod(shape)), rng).reshape(shape)
    row = _edge_values(dtype, shape[-1] if shape else 1, rng)
    s = _edge_values(dtype, 1, rng).reshape(())

    def f(a, row, s):
        r = bind(P.broadcast_in_dim_p, row, shape=shape,
                 broadcast_dimensions=(len(shape) - 1,)) if shape else row.reshape(())
        sb = bind(P.broadcast_in_dim_p, s, shape=shape, broadcast_dimensions=())
        io = bind(P.iota_p, dtype=np.dtype(dtype), shape=shape,
                  dimension=len(shape) - 1) if shape else sb
        t = bind(P.mul_p, bind(P.add_p, a, r), sb)
        return bind(P.max_p, bind(P.sub_p, t, io), a), bind(P.gt_p, t, a)

    got, want = jit(f)(a, row, s), f(a, row, s)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_empty_and_noncontiguous_operands(rng):
    # a transposed (strided) operand and an empty array both read correctly
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 4)).astype(np.float32)
    z = np.zeros((0, 3), np.float32)

    def f(a, b, z):
        t = funcgrad.numpy.transpose(b)
        return (a * t + 1.0) * a, z * 2.0 + 1.0

    got, want = jit(f)(a, b, z), f(a, b, z)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_inexact_ops_stay_numpy_unless_asked(monkeypatch, rng):
    # exp/tanh/pow round differently in numpy's SIMD loops: by default they run as numpy
    # calls between kernels (bit for bit); FUNCGRAD_CPU_EXACT=0 fuses them (an ulp or two)
    x = rng.standard_normal((16, 8)).astype(np.float32)

    def f(x):
        return funcgrad.numpy.tanh(x * 0.5 + 1.0) * x + funcgrad.numpy.exp(-x) ** 1.5

    want = np.asarray(f(x))
    exact = jit(f)
    np.testing.assert_array_equal(np.asarray(exact(x)), want)
    plan = exact.lower(x).compile()
    assert "tanh" in [e.prim.name for e in plan.line_eqn.values()]
    monkeypatch.setenv("FUNCGRAD_CPU_EXACT", "0")
    fast = jit(f)
    np.testing.assert_allclose(np.asarray(fast(x)), want, rtol=2e-6, atol=1e-6)
    assert "tanh" not in [e.prim.name for e in fast.lower(x).compile().line_eqn.values()]


def test_float16_clusters_fuse_bit_for_bit(rng):
    """16-bit float clusters are kernels over their uint16 bits that round after each op
    (tests/test_bfloat16_cpu_kernels.py has the rest): the numpy program's bits."""
    x = rng.standard_normal((5, 7)).astype(np.float16)

    def f(x):
        return x * x + x - 1.0

    jf = jit(f)
    outs = [np.asarray(jf(x)) for _ in range(3)]   # fused from the third call on
    assert jf.lower(x).compile().fused
    for out in outs:
        np.testing.assert_array_equal(out, np.asarray(f(x)))


@given(n=st.integers(0, 6), m=st.integers(0, 9), d=st.sampled_from([(), (1,), (3,), (2, 2)]),
       dtype=st.sampled_from([np.float32, np.float64]), seed=st.integers(0, 2**16))
def test_scatter_add_twin_is_add_at_bit_for_bit(n, m, d, dtype, seed):
    # an embedding's gradient: duplicate and negative indices, rows added in index order
    from funcgrad.backends.cpu import indexing
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, *d)) * 1e3).astype(dtype)
    idx = rng.integers(-n, n, m).astype(np.int32) if n else np.zeros(0, np.int32)
    upd = rng.standard_normal((m, *d)).astype(dtype)
    got = indexing._scatter_add_rows(x, idx, upd)
    np.testing.assert_array_equal(got, P.scatter_add_p.impl(x, idx, upd, axis=0))


def test_scatter_add_twin_raises_the_impls_error():
    from funcgrad.backends.cpu import indexing
    with pytest.raises(P.IndexOutOfRange, match="index 5 is out of bounds for an axis of size 3"):
        indexing._scatter_add_rows(np.zeros((3, 2)), np.array([1, 5, 7]), np.ones((3, 2)))


def test_embedding_gradient_runs_the_twin_in_plans():
    import funcgrad.numpy as fnp
    from funcgrad.backends.cpu import indexing
    w = np.random.default_rng(0).standard_normal((7, 4)).astype(np.float32)
    idx = np.array([[1, 3, 1], [6, 0, 1]], np.int32)
    f = jit(funcgrad.grad(lambda w: fnp.sum(fnp.take(w, idx, axis=0) ** 2)))
    got = f(w)
    assert any(s.fn is indexing._scatter_add_rows for s in f.lower(w).compile().program.steps)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(funcgrad.grad(
        lambda w: fnp.sum(fnp.take(w, idx, axis=0) ** 2))(w)))
