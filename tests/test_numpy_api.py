"""funcgrad.numpy against numpy: values, shapes, JAX-style dtypes, indexing, updates, products,
and gradients through the API (check_grads in float64)."""
from __future__ import annotations

import operator
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import nn
from funcgrad.core import typecheck_expr
from funcgrad.test_util import check_grads
from funcgrad.api.config_states import check_indices

F32, F64, I32, I64, BOOL = (np.dtype(d) for d in ("float32", "float64", "int32", "int64", "bool"))


def close(got, want, rtol=1e-5, atol=1e-6, dtype=None):
    """Values and shape equal numpy's (and the dtype when given)."""
    got_np = np.asarray(got)
    want = np.asarray(want)
    assert got_np.shape == want.shape, (got_np.shape, want.shape)
    if dtype is not None:
        assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    if want.dtype.kind in "biu" and got_np.dtype.kind in "biu":
        np.testing.assert_array_equal(got_np, want)
    else:
        np.testing.assert_allclose(got_np.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True)


def rnd(rng, shape, dtype=np.float32, lo=None, hi=None):
    if np.dtype(dtype).kind == "b":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-5 if lo is None else lo, 6 if hi is None else hi,
                            size=shape).astype(dtype)
    if lo is not None:
        return rng.uniform(lo, hi, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# creation and dtypes
# ---------------------------------------------------------------------------------------------

def test_creation_functions():
    close(fnp.array([[1, 2], [3, 4]]), np.array([[1, 2], [3, 4]]), dtype=I32)
    close(fnp.asarray([1.0, 2.0]), [1.0, 2.0], dtype=F32)
    close(fnp.asarray(np.arange(3.0)), np.arange(3.0), dtype=F64)
    close(fnp.asarray(np.arange(3)), np.arange(3), dtype=I64)
    close(fnp.asarray([True, False]), [True, False], dtype=BOOL)
    close(fnp.zeros((2, 3)), np.zeros((2, 3)), dtype=F32)
    close(fnp.zeros(4, fnp.int32), np.zeros(4), dtype=I32)
    close(fnp.ones((0, 2)), np.ones((0, 2)), dtype=F32)
    close(fnp.ones(3, dtype=np.float64), np.ones(3), dtype=F64)
    close(fnp.full((2, 2), 7), np.full((2, 2), 7), dtype=I32)
    close(fnp.full((2,), 1.5), np.full((2,), 1.5), dtype=F32)
    close(fnp.full(3, 2, dtype=float), np.full(3, 2.0), dtype=F32)
    x = fnp.asarray(rnd(np.random.default_rng(0), (2, 3)))
    close(fnp.zeros_like(x), np.zeros((2, 3)), dtype=F32)
    close(fnp.ones_like(x, dtype=int), np.ones((2, 3)), dtype=I32)
    close(fnp.full_like(x, 3.0), np.full((2, 3), 3.0), dtype=F32)
    close(fnp.full_like(np.arange(3), 2), np.full(3, 2), dtype=I64)
    close(fnp.arange(5), np.arange(5), dtype=I32)
    close(fnp.arange(2, 9, 3), np.arange(2, 9, 3), dtype=I32)
    close(fnp.arange(5, 0, -2), np.arange(5, 0, -2), dtype=I32)
    close(fnp.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25), dtype=F32)
    close(fnp.arange(4, dtype=fnp.float32), np.arange(4.0), dtype=F32)
    close(fnp.arange(0), np.arange(0), dtype=I32)
    close(fnp.linspace(0, 1, 5), np.linspace(0, 1, 5), dtype=F32)
    close(fnp.linspace(0, 1, 4, endpoint=False), np.linspace(0, 1, 4, endpoint=False))
    close(fnp.linspace(-1, 1, 3, dtype=np.float64), np.linspace(-1, 1, 3), dtype=F64)
    close(fnp.eye(3), np.eye(3), dtype=F32)
    close(fnp.eye(2, 4, k=1), np.eye(2, 4, k=1))
    close(fnp.eye(3, k=-1, dtype=int), np.eye(3, k=-1), dtype=I32)


@pytest.mark.parametrize("k", [-2, -1, 0, 1, 3])
@pytest.mark.parametrize("shape", [(3, 3), (2, 4), (4, 2), (2, 3, 3), (0, 2), (1, 1)])
def test_tril_triu(shape, k):
    x = rnd(np.random.default_rng(0), shape)
    close(fnp.tril(x, k), np.tril(x, k), dtype=F32)
    close(fnp.triu(x, k), np.triu(x, k), dtype=F32)
    close(fnp.tril(x.astype(np.int32), k), np.tril(x.astype(np.int32), k), dtype=I32)


def test_scalar_types_as_constructors_and_dtypes():
    x = fnp.float32(3)
    assert x.dtype == F32 and x.shape == () and float(x) == 3.0
    assert fnp.int32(2.7).dtype == I32 and int(fnp.int32(2.7)) == 2
    assert fnp.float64(1.5).dtype == F64
    assert fnp.bool_(1).dtype == BOOL
    assert fnp.float32([1, 2]).shape == (2,)
    assert fnp.zeros(2, dtype=fnp.float64).dtype == F64
    assert fnp.zeros(2, dtype=float).dtype == F32
    assert fnp.zeros(2, dtype=int).dtype == I32
    assert fnp.zeros(2, dtype=bool).dtype == BOOL
    assert fnp.asarray([1, 2], dtype=float).dtype == F32
    assert fnp.ones(2).astype(int).dtype == I32
    assert fnp.ones(2).astype(fnp.float64).dtype == F64
    assert fnp.float32 == np.float32 and fnp.dtype("float32") == F32
    assert fnp.ones(3).dtype == fnp.float32


def test_array_protocol_and_methods():
    a = rnd(np.random.default_rng(1), (2, 3, 4))
    x = fnp.asarray(a)
    assert isinstance(x, fnp.ndarray)
    np.testing.assert_array_equal(np.asarray(x), a)
    np.testing.assert_array_equal(np.array(x), a)
    assert (x.shape, x.ndim, x.size, x.dtype) == ((2, 3, 4), 3, 24, F32)
    close(x.T, a.T)
    close(x.astype(np.float64), a.astype(np.float64), dtype=F64)
    close(x.reshape(6, 4), a.reshape(6, 4))
    close(x.reshape((-1, 2)), a.reshape((-1, 2)))
    close(x.sum(), a.sum())
    close(x.sum(axis=1, keepdims=True), a.sum(axis=1, keepdims=True))
    close(x.mean(axis=(0, 2)), a.mean(axis=(0, 2)))
    close(x.max(axis=-1), a.max(axis=-1))
    close(x.min(), a.min())
    close(x.transpose(), a.transpose())
    close(x.transpose(1, 0, 2), a.transpose(1, 0, 2))
    close(x.transpose((2, 0, 1)), a.transpose((2, 0, 1)))
    close(x.repeat(2, axis=1), a.repeat(2, axis=1))
    close(x[:, :1].squeeze(), a[:, :1].squeeze())
    close(x.var(axis=0), a.var(axis=0))
    close(x.std(), a.std())
    close(x.prod(axis=2), a.prod(axis=2))
    close(x.argmax(axis=1), a.argmax(axis=1), dtype=I32)
    close(x.argmin(), a.argmin())
    close(x.flatten(), a.flatten())
    close(x.ravel(), a.ravel())
    close(x.swapaxes(0, 2), a.swapaxes(0, 2))
    close(x.clip(-0.5, 0.5), a.clip(-0.5, 0.5))
    close(abs(x), abs(a))
    close(-x, -a)
    assert len(x) == 2
    assert [r.shape for r in x] == [(3, 4), (3, 4)]
    assert x[0, 0, 0].item() == a[0, 0, 0]
    assert x[0].tolist() == a[0].tolist()
    with pytest.raises(TypeError, match="immutable"):
        x[0] = 1.0
    assert "Array(" in repr(x[0, 0])


def test_numpy_arrays_and_scalars_accepted():
    a = np.arange(3.0, dtype=np.float32)
    close(fnp.add(a, 1), a + 1, dtype=F32)
    close(fnp.multiply(2.0, a), 2 * a, dtype=F32)
    close(fnp.sin(0.5), np.sin(np.float32(0.5)), dtype=F32)
    close(fnp.exp(np.arange(3)), np.exp(np.arange(3)), dtype=F32)
    close(fnp.asarray(a) + np.ones(3, np.float32), a + 1)
    close(np.ones(3, np.float32) + fnp.asarray(a), a + 1)
    assert isinstance(np.ones(3, np.float32) * fnp.asarray(a), fnp.ndarray)


# JAX's promotion with weak Python scalars, and the dtypes numpy leaves platform-dependent
PROMOTION = [
    (lambda: fnp.ones(3, fnp.int32) * 2.5, F32),
    (lambda: fnp.ones(3, fnp.int32) + 1, I32),
    (lambda: fnp.ones(3, fnp.int64) + 1, I64),
    (lambda: fnp.ones(3, fnp.float64) * 2.5, F64),
    (lambda: fnp.ones(3, fnp.float64) + fnp.ones(3, fnp.float32), F64),
    (lambda: fnp.ones(3, fnp.float32) + 1, F32),
    (lambda: fnp.ones(3, fnp.float32) * fnp.ones(3, fnp.int32), F32),
    (lambda: fnp.ones(3, fnp.int32) + fnp.ones(3, fnp.int64), I64),
    (lambda: fnp.ones(3, fnp.bool_) + 1, I32),
    (lambda: fnp.ones(3, fnp.bool_) * 1.5, F32),
    (lambda: fnp.ones(3, fnp.bool_) & True, BOOL),
    (lambda: fnp.asarray(1.5), F32),
    (lambda: fnp.asarray(2), I32),
    (lambda: fnp.asarray(True), BOOL),
    (lambda: fnp.asarray([1.0, 2]), F32),
    (lambda: fnp.add(1.5, 2), F32),
    (lambda: fnp.add(1, 2), I32),
    (lambda: fnp.ones(3, fnp.int32) / 2, F32),
    (lambda: fnp.ones(3, fnp.int32) / fnp.ones(3, fnp.int32), F32),
    (lambda: fnp.ones(3, fnp.float64) / 2, F64),
    (lambda: fnp.ones(3, fnp.int32) // 2, I32),
    (lambda: fnp.ones(3, fnp.int32) ** 2, I32),
    (lambda: fnp.ones(3, fnp.float32) ** 2.5, F32),
    (lambda: fnp.sqrt(fnp.ones(3, fnp.int32)), F32),
    (lambda: fnp.exp(fnp.ones(3, fnp.float64)), F64),
    (lambda: fnp.mean(fnp.ones(3, fnp.int32)), F32),
    (lambda: fnp.sum(fnp.ones(3, fnp.int32)), I32),
    (lambda: fnp.sum(fnp.ones(3, fnp.bool_)), I32),
    (lambda: fnp.var(fnp.ones(3, fnp.float64)), F64),
    (lambda: fnp.argmax(fnp.ones(3)), I32),
    (lambda: fnp.ones(3) < 1, BOOL),
    (lambda: fnp.where(fnp.ones(3) > 0, 1, 2.5), F32),
    (lambda: fnp.where(fnp.ones(3) > 0, fnp.ones(3, fnp.float64), 0.0), F64),
    (lambda: fnp.maximum(fnp.ones(3, fnp.int32), 0), I32),
    (lambda: fnp.clip(fnp.ones(3, fnp.float64), 0, 1), F64),
    (lambda: fnp.concatenate([fnp.ones(2, fnp.int32), fnp.ones(2)]), F32),
    (lambda: fnp.stack([fnp.ones(2, fnp.float64), fnp.ones(2)]), F64),
    (lambda: fnp.ones((2, 2), fnp.int32) @ fnp.ones((2, 2)), F32),
    (lambda: fnp.einsum("i,i->", fnp.ones(2, fnp.float64), fnp.ones(2)), F64),
    (lambda: fnp.abs(fnp.ones(2, fnp.int32)), I32),
    (lambda: fnp.square(fnp.ones(2, fnp.int32)), I32),
    (lambda: fnp.reciprocal(fnp.ones(2, fnp.int32)), F32),
    (lambda: fnp.round(fnp.ones(2, fnp.float64)), F64),
    (lambda: fnp.floor(fnp.ones(2, fnp.float64)), F64),
    (lambda: nn.softmax(fnp.ones(2, fnp.float64)), F64),
]


@pytest.mark.parametrize("i", range(len(PROMOTION)))
def test_promotion(i):
    fn, want = PROMOTION[i]
    assert fn().dtype == want


def test_promotion_values():
    close(fnp.ones(3, fnp.int32) * 2.5, np.full(3, 2.5))
    close(fnp.arange(4) + 1, np.arange(4) + 1, dtype=I32)
    close(fnp.arange(7) // 2, np.arange(7) // 2)
    close(fnp.arange(-7, 7) // 3, np.arange(-7, 7) // 3)
    close(fnp.arange(-7, 7) % 3, np.arange(-7, 7) % 3)
    close(fnp.arange(-7, 7) % -3, np.arange(-7, 7) % -3)
    close(fnp.arange(-3.5, 3.5) % 2.0, np.arange(-3.5, 3.5) % 2.0)
    close(fnp.arange(-3.5, 3.5) // 2.0, np.arange(-3.5, 3.5) // 2.0)
    close(fnp.arange(-7, 7) / 2, np.arange(-7, 7) / 2)


# ---------------------------------------------------------------------------------------------
# elementwise functions, with broadcasting pairs from hypothesis
# ---------------------------------------------------------------------------------------------

UNARY = {  # name: (domain low, high) or None for the standard normal
    "negative": None, "square": None, "sqrt": (0.1, 3.0), "exp": None, "log": (0.1, 3.0),
    "log1p": (-0.9, 3.0), "expm1": None, "tanh": None, "sin": None, "cos": None, "abs": None,
    "sign": None, "reciprocal": (0.5, 2.0), "floor": None, "round": None, "isnan": None,
    "isfinite": None, "tan": (-1.0, 1.0), "log2": (0.1, 3.0), "log10": (0.1, 3.0),
    "exp2": None, "ceil": None, "trunc": None, "logical_not": None, "isinf": None,
}


@pytest.mark.parametrize("name", sorted(UNARY))
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
       seed=st.integers(0, 1000))
def test_unary(name, shape, seed):
    rng = np.random.default_rng(seed)
    dom = UNARY[name]
    a = rnd(rng, shape, np.float32, *(dom or (None, None)))
    if name in ("isnan", "isfinite", "isinf", "round") and a.size:
        a.flat[0] = [np.nan, np.inf, -np.inf, 2.5][seed % 4] if name != "round" else 2.5
    if name in ("floor", "ceil", "trunc"):
        a = a * 3
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a)
    close(getattr(fnp, name)(a), want, rtol=2e-6, dtype=want.dtype)
    close(getattr(fnp, name)(fnp.asarray(a.astype(np.float64))),
          getattr(np, name)(a.astype(np.float64)), rtol=1e-12)


@pytest.mark.parametrize("name", ["negative", "square", "abs", "sign"])
def test_unary_int(name):
    a = np.arange(-4, 5, dtype=np.int32)
    close(getattr(fnp, name)(a), getattr(np, name)(a), dtype=I32)


BINARY = {  # name: domain of the second operand
    "add": None, "subtract": None, "multiply": None, "divide": "nonzero", "power": "pos",
    "maximum": None, "minimum": None, "equal": None, "not_equal": None, "less": None,
    "less_equal": None, "greater": None, "greater_equal": None, "logical_and": None,
    "logical_or": None, "logical_xor": None, "true_divide": "nonzero", "floor_divide": "nonzero",
    "remainder": "nonzero", "mod": "nonzero", "fmod": "nonzero", "logaddexp": None,
}


@pytest.mark.parametrize("name", sorted(BINARY))
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                 min_side=0, max_side=3),
       seed=st.integers(0, 1000))
def test_binary_broadcasting(name, shapes, seed):
    rng = np.random.default_rng(seed)
    s1, s2 = shapes.input_shapes
    a = rnd(rng, s1)
    b = rnd(rng, s2)
    if name == "power":
        a = np.abs(a) + 0.1
    if BINARY[name] == "nonzero":
        b = np.where(np.abs(b) < 0.2, 0.5, b).astype(np.float32)
    if name in ("equal", "not_equal", "less_equal", "greater_equal", "maximum") and b.size \
            and a.size:
        a = np.broadcast_to(b, np.broadcast_shapes(s1, s2)).copy() if a.shape == \
            np.broadcast_shapes(s1, s2) and rng.random() < 0.5 else a  # ties
    want = getattr(np, name)(a, b)
    close(getattr(fnp, name)(a, b), want, rtol=2e-6, dtype=want.dtype)
    close(getattr(fnp, name)(fnp.asarray(a), b), want, rtol=2e-6)


OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
             "**": operator.pow, "<": operator.lt, "<=": operator.le, ">": operator.gt,
             ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "//": operator.floordiv,
             "%": operator.mod, "@": operator.matmul}


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_operators(op):
    """Array operators on either side, with numpy arrays and Python scalars (float32 results)."""
    fn = OPERATORS[op]
    rng = np.random.default_rng(0)
    a = rnd(rng, (3, 3), lo=0.5, hi=2.0)
    b = rnd(rng, (3,), lo=0.5, hi=2.0)
    x = fnp.asarray(a)
    pairs = [(x, b, a, b), (a, fnp.asarray(b), a, b)]
    if op != "@":
        pairs += [(x, 2.0, a, np.float32(2.0)), (2.0, x, np.float32(2.0), a)]
    for lhs, rhs, np_lhs, np_rhs in pairs:
        want = fn(np_lhs, np_rhs)
        got = fn(lhs, rhs)
        assert isinstance(got, fnp.ndarray)
        close(got, want, rtol=2e-6, dtype=want.dtype)


def test_integer_and_bitwise_ops():
    a = np.arange(-6, 6, dtype=np.int32)
    b = np.array([1, 2, 3, -1, -2, -3] * 2, dtype=np.int32)
    close(fnp.floor_divide(a, b), a // b, dtype=I32)
    close(fnp.remainder(a, b), a % b, dtype=I32)
    close(fnp.fmod(a, b), np.fmod(a, b), dtype=I32)
    close(fnp.asarray(a) & 3, a & 3, dtype=I32)
    close(fnp.asarray(a) | 3, a | 3)
    close(fnp.asarray(a) ^ 5, a ^ 5)
    close(~fnp.asarray(a), ~a)
    close(fnp.left_shift(a, 2), np.left_shift(a, 2))
    close(fnp.right_shift(a, 1), np.right_shift(a, 1))
    close(fnp.right_shift(np.arange(8, dtype=np.uint32), 1),
          np.right_shift(np.arange(8, dtype=np.uint32), 1))
    # integer ** integer array (square-and-multiply)
    e = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], dtype=np.int32)
    close(fnp.power(a, e), np.power(a, e), dtype=I32)
    close(2 ** fnp.arange(10), 2 ** np.arange(10), dtype=I32)
    close(fnp.asarray(a) ** fnp.asarray(e)[::-1], a ** e[::-1])
    with pytest.raises(ValueError, match="negative"):
        fnp.power(a, -e)
    traced = funcgrad.make_jaxpr(lambda x, y: x ** y)(a[:5], e[:5])  # traced exponent
    got = funcgrad.core.eval_expr(traced.expr, [np.array([2, -1, -1, 1, -2], np.int32),
                                                np.array([-1, -3, -2, -5, 31], np.int32)],
                                  traced.consts)[0]
    close(got, [0, -1, 1, 1, -2 ** 31])  # lax semantics for negative exponents
    m = np.array([True, False, True])
    close(~fnp.asarray(m), ~m, dtype=BOOL)
    close(fnp.logical_not(np.array([0, 1, 2])), np.logical_not(np.array([0, 1, 2])))


@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3,
                                                 min_side=0, max_side=3),
       seed=st.integers(0, 1000))
def test_where_broadcasting(shapes, seed):
    rng = np.random.default_rng(seed)
    c, x, y = (rnd(rng, s) for s in shapes.input_shapes)
    close(fnp.where(c > 0, x, y), np.where(c > 0, x, y), dtype=F32)
    close(fnp.where(c, x, 0.0), np.where(c != 0, x, 0.0))


def test_where_and_clip():
    a = np.linspace(-2, 2, 9).astype(np.float32)
    close(fnp.clip(a, -1, 1), np.clip(a, -1, 1), dtype=F32)
    close(fnp.clip(a, None, 0.5), np.clip(a, None, 0.5))
    close(fnp.clip(a, -0.5), np.clip(a, -0.5, None))
    close(fnp.clip(np.arange(10), 2, 7), np.clip(np.arange(10), 2, 7))
    close(fnp.where(a > 0, a, -1), np.where(a > 0, a, -1), dtype=F32)
    np.testing.assert_array_equal(fnp.where(a > 0)[0], np.where(a > 0)[0])  # = nonzero
    with pytest.raises(TypeError):   # traced without size=: a ConcretizationError (TypeError)
        funcgrad.jit(lambda v: fnp.where(v > 0))(a)


def test_isnan_isfinite():
    a = np.array([0.0, np.nan, np.inf, -np.inf, 1.0], np.float32)
    close(fnp.isnan(a), np.isnan(a), dtype=BOOL)
    close(fnp.isfinite(a), np.isfinite(a), dtype=BOOL)
    close(fnp.isinf(a), np.isinf(a), dtype=BOOL)
    close(fnp.isnan(np.arange(3)), np.zeros(3, bool), dtype=BOOL)
    close(fnp.isfinite(np.arange(3)), np.ones(3, bool), dtype=BOOL)


def test_float64_precision_and_int_inputs():
    a = np.array([8.0, 1000.0, 3.0])
    close(fnp.log2(a), np.log2(a), rtol=1e-15, dtype=F64)
    close(fnp.log10(a), np.log10(a), rtol=1e-15, dtype=F64)
    close(fnp.exp2(a), np.exp2(a), rtol=1e-13, dtype=F64)  # exp(x ln 2): error grows with x
    close(fnp.exp2(np.arange(3)), [1, 2, 4], dtype=F32)  # integers give float32
    close(fnp.log2(np.arange(1, 4)), np.log2(np.arange(1, 4)), dtype=F32)
    close(fnp.ceil(np.arange(3)), np.arange(3), dtype=I64)  # integers pass through, like JAX
    close(fnp.ceil(np.array([-0.5, 0.5])), [0, 1])


def test_infinities_and_small_int_reductions():
    inf = np.array([-np.inf, np.inf, -np.inf, 1.0])
    other = np.array([-np.inf, np.inf, 2.0, np.inf])
    close(fnp.logaddexp(inf, other), np.logaddexp(inf, other))  # numpy operands: no warnings
    close(nn.softplus(np.array([-np.inf, np.inf])), [0, np.inf])
    i8 = np.array([100, 100, -100], np.int8)
    close(fnp.prod(i8), -1000000, dtype=I32)  # like sum: small ints accumulate in int32
    close(fnp.sum(i8), 100, dtype=I32)
    close(fnp.prod(np.array([True, True])), 1, dtype=I32)
    close(fnp.hstack([np.float32(1), np.float32(2)]), [1, 2])


def test_python_int_overflow():
    with pytest.raises(OverflowError):
        fnp.asarray(2 ** 40)
    with pytest.raises(OverflowError):
        fnp.asarray([1, -2 ** 35])
    assert fnp.asarray(np.int64(2 ** 40)).dtype == I64  # numpy ints keep their dtype


def test_round_half_to_even_and_decimals():
    a = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 1.234567], np.float32)
    close(fnp.round(a), np.round(a))
    close(fnp.round(a, 2), np.round(a, 2), rtol=1e-6)
    close(fnp.asarray(a).round(), np.round(a))


# ---------------------------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------------------------

REDUCTIONS = ["sum", "mean", "max", "min", "prod", "var", "std", "all", "any"]


@st.composite
def _shape_and_axis(draw, nonempty=False):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1 if nonempty else 0,
                                  max_side=4))
    nd = len(shape)
    kind = draw(st.sampled_from(["none", "int", "tuple"] if nd else ["none", "tuple"]))
    if kind == "none":
        axis = None
    elif kind == "int":
        axis = draw(st.integers(-nd, nd - 1))
    else:
        axes = draw(st.lists(st.integers(0, nd - 1), unique=True, max_size=nd)) if nd else []
        axis = tuple(a - nd if draw(st.booleans()) else a for a in axes)
    return shape, axis, draw(st.booleans())


@pytest.mark.parametrize("name", REDUCTIONS)
@given(case=_shape_and_axis(), seed=st.integers(0, 1000))
def test_reductions(name, case, seed):
    shape, axis, keepdims = case
    rng = np.random.default_rng(seed)
    a = rnd(rng, shape, np.float32, 0.5, 1.5) if name == "prod" else rnd(rng, shape)
    if name in ("all", "any"):
        a = a > 0.5
    if name in ("max", "min"):
        reduced = range(len(shape)) if axis is None else np.atleast_1d(axis)
        if any(shape[i] == 0 for i in reduced):
            with pytest.raises(funcgrad.core.FuncgradError, match="zero-size"):
                getattr(fnp, name)(a, axis=axis, keepdims=keepdims)
            return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy: mean of an empty slice
        want = getattr(np, name)(a, axis=axis, keepdims=keepdims)
    got = getattr(fnp, name)(a, axis=axis, keepdims=keepdims)
    close(got, want, rtol=1e-5, atol=1e-5, dtype=want.dtype)
    got64 = getattr(fnp, name)(fnp.asarray(a.astype(np.float64) if name not in ("all", "any")
                                           else a), axis=axis, keepdims=keepdims)
    assert got64.dtype == (BOOL if name in ("all", "any") else F64)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@given(case=_shape_and_axis(nonempty=True), seed=st.integers(0, 1000))
def test_argmax_argmin(name, case, seed):
    shape, axis, keepdims = case
    if isinstance(axis, tuple):
        axis = axis[0] if axis else None
    a = rnd(np.random.default_rng(seed), shape, np.int32, 0, 3)  # ties: the first one wins
    want = getattr(np, name)(a, axis=axis, keepdims=keepdims)
    close(getattr(fnp, name)(a, axis=axis, keepdims=keepdims), want, dtype=I32)


def test_reduction_details():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    close(fnp.sum(a, axis=(0, 1)), a.sum(), dtype=I32)
    close(fnp.prod(a + 1, axis=0), np.prod(a + 1, axis=0), dtype=I32)
    close(fnp.max(a, axis=1), a.max(axis=1), dtype=I32)
    close(fnp.mean(a), a.mean(), dtype=F32)
    close(fnp.var(a, axis=0, ddof=1), a.var(axis=0, ddof=1))
    close(fnp.std(a.astype(np.float32), ddof=1), a.astype(np.float32).std(ddof=1))
    close(fnp.max(a, axis=0, initial=5), np.max(a, axis=0, initial=5))
    close(fnp.all(np.ones((2, 0), bool), axis=1), np.ones(2, bool), dtype=BOOL)
    close(fnp.any(np.ones((2, 0), bool)), False, dtype=BOOL)
    close(fnp.all(np.array([[1, 0], [2, 3]])), False)
    close(fnp.count_nonzero(np.array([[1, 0], [2, 3]]), axis=0), [2, 1])
    close(fnp.sum(np.zeros((0, 3), np.float32), axis=0), np.zeros(3))
    close(fnp.amax(a), 11)
    close(fnp.max(np.zeros((0, 3), np.float32), axis=0, initial=1.5), np.full(3, 1.5))
    close(fnp.min(np.zeros((2, 0), np.int32), axis=1, keepdims=True, initial=4),
          np.full((2, 1), 4), dtype=I32)
    with pytest.raises(funcgrad.ShapeError, match="out of bounds"):
        fnp.sum(a, axis=2)
    with pytest.raises(funcgrad.ShapeError, match="repeated axis"):
        fnp.sum(a, axis=(0, 0))
    with pytest.raises(funcgrad.core.FuncgradError, match="empty"):
        fnp.argmax(np.zeros((2, 0)), axis=1)


# ---------------------------------------------------------------------------------------------
# shape functions
# ---------------------------------------------------------------------------------------------

def test_shape_functions():
    rng = np.random.default_rng(0)
    a = rnd(rng, (2, 3, 4))
    close(fnp.reshape(a, (4, -1)), a.reshape(4, -1))
    close(fnp.reshape(a, 24), a.reshape(24))
    close(fnp.reshape(np.zeros((0, 3)), (3, 0, 5)), np.zeros((3, 0, 5)))
    close(fnp.transpose(a), a.transpose())
    close(fnp.transpose(a, (1, 2, 0)), a.transpose(1, 2, 0))
    close(fnp.transpose(a, (-1, 0, 1)), a.transpose(-1, 0, 1))
    close(fnp.swapaxes(a, 0, -1), np.swapaxes(a, 0, -1))
    close(fnp.moveaxis(a, 0, -1), np.moveaxis(a, 0, -1))
    close(fnp.moveaxis(a, [0, 1], [-1, 0]), np.moveaxis(a, [0, 1], [-1, 0]))
    close(fnp.moveaxis(a, 2, 0), np.moveaxis(a, 2, 0))
    close(fnp.expand_dims(a, 1), np.expand_dims(a, 1))
    close(fnp.expand_dims(a, -1), np.expand_dims(a, -1))
    close(fnp.expand_dims(a, (0, 4)), np.expand_dims(a, (0, 4)))
    close(fnp.expand_dims(a, (0, -1)), np.expand_dims(a, (0, -1)))
    b = rnd(rng, (1, 3, 1))
    close(fnp.squeeze(b), np.squeeze(b))
    close(fnp.squeeze(b, 0), np.squeeze(b, 0))
    close(fnp.squeeze(b, (0, -1)), np.squeeze(b, (0, -1)))
    with pytest.raises(funcgrad.ShapeError, match="squeeze"):
        fnp.squeeze(b, 1)
    close(fnp.broadcast_to(b, (2, 4, 3, 5)), np.broadcast_to(b, (2, 4, 3, 5)))
    close(fnp.broadcast_to(3.0, (2,)), np.broadcast_to(3.0, (2,)), dtype=F32)
    close(fnp.broadcast_to(np.ones((1, 3)), (0, 3)), np.ones((0, 3)))
    with pytest.raises(funcgrad.ShapeError, match="broadcast"):
        fnp.broadcast_to(a, (3, 3, 4))
    close(fnp.flip(a), np.flip(a))
    close(fnp.flip(a, 1), np.flip(a, 1))
    close(fnp.flip(a, (0, -1)), np.flip(a, (0, -1)))
    close(fnp.fliplr(a), np.fliplr(a))
    close(fnp.flipud(a), np.flipud(a))
    close(fnp.ravel(a), np.ravel(a))
    xs = fnp.broadcast_arrays(np.ones((3, 1)), np.ones(4))
    assert [x.shape for x in xs] == [(3, 4), (3, 4)]


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_concatenate_stack(axis):
    rng = np.random.default_rng(0)
    a, b, c = rnd(rng, (2, 3)), rnd(rng, (2, 3)), rnd(rng, (2, 3))
    close(fnp.concatenate([a, b, c], axis=axis), np.concatenate([a, b, c], axis=axis))
    if axis is not None:
        close(fnp.stack([a, b, c], axis=axis), np.stack([a, b, c], axis=axis))
    close(fnp.stack([a, b], axis=2), np.stack([a, b], axis=2))
    d = rnd(rng, (2, 0))
    close(fnp.concatenate([a, d, b], axis=1), np.concatenate([a, d, b], axis=1))
    close(fnp.concatenate((a,)), a)
    close(fnp.hstack([a, b]), np.hstack([a, b]))
    close(fnp.vstack([a, b]), np.vstack([a, b]))
    close(fnp.vstack([np.ones(3), np.zeros(3)]), np.vstack([np.ones(3), np.zeros(3)]))
    close(fnp.hstack([np.ones(3), np.zeros(2)]), np.hstack([np.ones(3), np.zeros(2)]))
    close(fnp.stack([fnp.float32(1), fnp.float32(2)]), [1, 2])


@pytest.mark.parametrize("spec,axis", [(3, 0), (2, 1), ([1, 3], 0), ([2], 1), ([0, 0, 5], 1),
                                       ([-2], 0), ([1, 10], 0), ([4, 2], 1), (1, 1), ([], 0)])
def test_split(spec, axis):
    a = rnd(np.random.default_rng(0), (6, 4))
    got = fnp.split(a, spec, axis=axis)
    want = np.split(a, spec, axis=axis)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        close(g, w)


def test_split_errors_and_array_split():
    a = np.arange(7.0)
    with pytest.raises(ValueError):
        fnp.split(a, 3)
    for g, w in zip(fnp.array_split(a, 3), np.array_split(a, 3)):
        close(g, w)


@pytest.mark.parametrize("reps,axis", [(2, None), (3, 0), (2, 1), (1, -1), (0, 0),
                                       ([1, 0, 2], 0), ([2, 1, 0, 3], 1), ([1] * 12, None)])
def test_repeat(reps, axis):
    a = rnd(np.random.default_rng(0), (3, 4))
    close(fnp.repeat(a, reps, axis=axis), np.repeat(a, reps, axis=axis))


@pytest.mark.parametrize("reps", [2, (2, 1), (1, 3), (2, 2, 2), (0, 1), 1, (3,)])
def test_tile(reps):
    a = rnd(np.random.default_rng(0), (2, 3))
    close(fnp.tile(a, reps), np.tile(a, reps))
    close(fnp.tile(np.arange(3), reps), np.tile(np.arange(3), reps))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take(axis):
    rng = np.random.default_rng(0)
    a = rnd(rng, (4, 5))
    n = a.size if axis is None else a.shape[axis]
    for idx in (np.array([0, n - 1, -1, 2]), np.array([[1, 0], [-n, 2]]), 3, np.zeros(0, int),
                np.array([1, 1, 1])):
        close(fnp.take(a, idx, axis=axis), np.take(a, idx, axis=axis))
    close(fnp.asarray(a).take(np.array([1, 2]), axis=axis), np.take(a, [1, 2], axis=axis))


@pytest.mark.parametrize("axis", [0, 1, 2, -1, None])
def test_take_along_axis(axis):
    rng = np.random.default_rng(0)
    a = rnd(rng, (3, 4, 5))
    if axis is None:
        idx = rng.integers(-60, 60, size=(7,))
    else:
        shape = list(a.shape)
        n = shape[axis]
        shape[axis] = 2
        idx = rng.integers(-n, n, size=shape)
    close(fnp.take_along_axis(a, idx, axis), np.take_along_axis(a, idx, axis))
    srt = np.argsort(a, axis=-1)
    close(fnp.take_along_axis(a, srt, -1), np.sort(a, axis=-1))
    # broadcasting of the non-indexed axes (as in numpy)
    i1 = rng.integers(0, 5, size=(1, 4, 2))
    close(fnp.take_along_axis(a, i1, 2), np.take_along_axis(a, i1, 2))


# ---------------------------------------------------------------------------------------------
# indexing
# ---------------------------------------------------------------------------------------------

_A = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
INDICES = [
    0, -1, (1, 2), (1, -1, 3, -5), slice(None), slice(1, None), slice(None, None, -1),
    slice(None, None, 2), (slice(None), slice(None, None, -2)), (slice(None), slice(-1, 0, -1)),
    (Ellipsis, slice(4, 0, -3)), (0, slice(2, 100)), (slice(5, 1),), (slice(None), slice(1, 1)),
    None, (None, 0), (0, None, slice(None), None), (Ellipsis, None), (Ellipsis, 1),
    (0, Ellipsis, 2), (Ellipsis,), (slice(None), Ellipsis, None, 0),
    np.array([1, 0, 1]), [0, 1], (slice(None), np.array([2, 0, -1])),
    (slice(None), [[0, 1], [2, 1]]),
    (np.array([0, 1]), np.array([1, 2])),  # adjacent arrays
    (np.array([0, 1]), slice(None), np.array([1, 3])),  # non-adjacent: result dims first
    (slice(None), np.array([0, 2]), slice(None), np.array([[1], [4]])),  # non-adjacent, bcast
    (np.array([1]), 0, np.array([[0, 1, 2]])),  # int between arrays: adjacent advanced group
    (0, slice(None), np.array([1, 2])),  # int and array separated by a slice
    (np.array([[0], [1]]), np.array([0, 2])),
    (Ellipsis, np.array([0, -1])),
    (1, np.array([0, 2]), slice(1, 3), np.array([4, 0])),
    (None, np.array([0, 1]), None, slice(None), 0),
    np.array([], dtype=np.int32), (slice(None), np.zeros((0, 2), np.int64)),
    np.array([True, False]), (slice(None), np.array([True, False, True])),
    (np.array([[True, False, True], [False, False, True]]),),
    (Ellipsis, np.array([False] * 5)),
    (0, np.array([True, True, False]), slice(None, None, -1)),
    (np.int64(1), np.int32(-1)),
    (None, np.array([0, 1]), Ellipsis, 1, 2, 3),  # an empty Ellipsis separates the arrays
    (slice(None), np.array([0, 2]), Ellipsis, 1, slice(None)),
    (np.array([1, 0]), Ellipsis, np.array([4, 0])),
]


@pytest.mark.parametrize("i", range(len(INDICES)))
def test_getitem(i):
    idx = INDICES[i]
    x = fnp.asarray(_A)
    want = _A[idx]
    close(x[idx], want, dtype=F32)
    close(x.at[idx].get(), want)


def test_getitem_with_funcgrad_index_arrays():
    x = fnp.asarray(_A)
    close(x[fnp.asarray([1, 0])], _A[[1, 0]])
    close(x[:, fnp.asarray([[0, 2]]), 1], _A[:, [[0, 2]], 1])
    close(x[fnp.asarray(_A[:, 0, 0, 0] > 50)], _A[_A[:, 0, 0, 0] > 50])
    close(x[fnp.int32(1)], _A[1])
    close(fnp.arange(10)[fnp.arange(3) * 3], np.arange(10)[np.arange(3) * 3])


def test_getitem_errors():
    x = fnp.asarray(_A)
    for bad in (2, (0, 3), (0, 0, -5), (0, 0, 0, 5)):
        with pytest.raises(IndexError, match="out of bounds"):
            x[bad]
    with check_indices():   # integer arrays out of range: JAX clamps (the default)
        with pytest.raises(IndexError):
            x[np.array([0, 2])]
        with pytest.raises(IndexError):
            x[:, np.array([0, -4])]
        with pytest.raises(IndexError):
            x[np.array([0]), np.array([5])]
    with pytest.raises(IndexError):
        x[0, 0, 0, 0, 0]
    with pytest.raises(IndexError):
        x[..., ...]
    with pytest.raises(IndexError):
        x[1.5]


UPDATE_INDICES = [0, -1, (1, 2), slice(None, None, -2), (slice(None), 1, slice(1, 3)),
                  np.array([1, 0]), (0, np.array([0, 2]), np.array([1, 3])),
                  (Ellipsis, np.array([0, -1])), (slice(None), None, 0),
                  (np.array([[0], [1]]), slice(None), np.array([2, 3]))]


@pytest.mark.parametrize("i", range(len(UPDATE_INDICES)))
def test_at_updates(i):
    idx = UPDATE_INDICES[i]
    x = fnp.asarray(_A)
    shape = _A[idx].shape
    v = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 0.5
    for method, op in (("set", lambda a, b: b), ("add", np.add), ("multiply", np.multiply),
                       ("min", np.minimum), ("max", np.maximum)):
        want = _A.copy()
        want[idx] = op(want[idx], v)
        close(getattr(x.at[idx], method)(v), want)
        want = _A.copy()
        want[idx] = op(want[idx], 2.0)
        close(getattr(x.at[idx], method)(2.0), want)  # broadcast scalar
    np.testing.assert_array_equal(np.asarray(x), _A)  # x itself unchanged


def test_at_repeated_indices_and_dtypes():
    x = fnp.zeros(4)
    close(x.at[np.array([0, 0, 2, 0])].add(1.0), [3, 0, 1, 0])
    close(x.at[np.array([1, 1])].set(5.0), [0, 5, 0, 0])
    y = fnp.ones(3, fnp.int32)
    out = y.at[1].add(2)
    close(out, [1, 3, 1], dtype=I32)
    close(fnp.ones(3).at[np.array([True, False, True])].set(0.0), [0, 1, 0])
    close(fnp.arange(6).reshape(2, 3).at[:, -1].multiply(10), [[0, 1, 20], [3, 4, 50]])
    # JAX applies every repeated update of .multiply/.min/.max (numpy's ufunc.at)
    idx = (np.array([0, 1, 0, 0]), np.array([2, 2, 2, 0]))
    v = np.array([2.0, 3.0, -1.5, 0.5], np.float32)
    base = np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3)
    for method, ufunc in (("multiply", np.multiply), ("min", np.minimum),
                          ("max", np.maximum), ("add", np.add)):
        want = base.copy()
        ufunc.at(want, idx, v)
        close(getattr(fnp.asarray(base).at[idx], method)(v), want)
        check_grads(lambda a, b, m=method: getattr(fnp.asarray(a).at[idx], m)(b),
                    (base.astype(np.float64), v.astype(np.float64)), order=2)
    close(fnp.ones(3).at[np.array([0, 0])].multiply(2.0), [4, 1, 1])
    with pytest.raises(IndexError):
        fnp.zeros(3).at[3].set(1.0)
    with pytest.raises(IndexError):
        fnp.zeros(3).at[np.array([0, 3])].add(1.0)


# ---------------------------------------------------------------------------------------------
# products
# ---------------------------------------------------------------------------------------------

MATMUL_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)),
                 ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((5, 1, 2, 3), (4, 3, 2)),
                 ((1, 2, 3), (6, 3, 4)), ((3,), (2, 3, 4)), ((2, 2, 3), (3,)),
                 ((0, 3), (3, 2)), ((2, 0), (0, 4)), ((2, 1, 3), (3, 1)), ((4, 0, 3), (3, 2))]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=str)
def test_matmul(sa, sb):
    rng = np.random.default_rng(0)
    a, b = rnd(rng, sa), rnd(rng, sb)
    want = np.matmul(a, b)
    close(fnp.matmul(a, b), want, rtol=1e-5, atol=1e-5, dtype=F32)
    close(fnp.asarray(a) @ b, want, rtol=1e-5, atol=1e-5)
    close(a @ fnp.asarray(b), want, rtol=1e-5, atol=1e-5)
    ai, bi = a.astype(np.int32) * 3, b.astype(np.int32) * 3
    close(fnp.matmul(ai, bi), np.matmul(ai, bi), dtype=I32)


@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((2, 3), (3,)), ((2, 3), (3, 4)),
                                   ((2, 3, 4), (4,)), ((2, 3), (4, 3, 5)), ((), (3,)),
                                   ((2, 3), ())], ids=str)
def test_dot_inner_outer(sa, sb):
    rng = np.random.default_rng(0)
    a, b = rnd(rng, sa), rnd(rng, sb)
    close(fnp.dot(a, b), np.dot(a, b), rtol=1e-5, atol=1e-5)
    if sa and sb and sa[-1] == sb[-1]:
        close(fnp.inner(a, b), np.inner(a, b), rtol=1e-5, atol=1e-5)
    close(fnp.outer(a, b), np.outer(a, b))
    close(fnp.vdot(a, a), np.vdot(a, a), rtol=1e-5)
    close(fnp.tensordot(a, b, 0), np.tensordot(a, b, 0))


def test_tensordot():
    rng = np.random.default_rng(0)
    a, b = rnd(rng, (2, 3, 4)), rnd(rng, (4, 3, 5))
    close(fnp.tensordot(a, b, axes=([1, 2], [1, 0])), np.tensordot(a, b, axes=([1, 2], [1, 0])),
          rtol=1e-5, atol=1e-5)
    close(fnp.tensordot(a, b, axes=(2, 0)), np.tensordot(a, b, axes=(2, 0)), rtol=1e-5)
    close(fnp.tensordot(a, a, axes=3), np.tensordot(a, a, axes=3), rtol=1e-5)


EINSUM = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("i,i->", [(3,), (3,)]),
    ("i,j->ij", [(3,), (4,)]), ("bij,bjk->bik", [(5, 2, 3), (5, 3, 4)]),
    ("bij,jk->bik", [(5, 2, 3), (3, 4)]), ("ij->ji", [(2, 3)]), ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]), ("ijk->kji", [(2, 3, 4)]), ("ij", [(2, 3)]), ("ji", [(2, 3)]),
    ("...ij,...jk->...ik", [(5, 2, 3), (5, 3, 4)]), ("...ij,...jk->...ik", [(2, 3), (7, 3, 4)]),
    ("...i,...i->...", [(2, 3, 4), (3, 4)]), ("i...->...", [(3, 2, 4)]),
    ("...ij->...ji", [(2, 3, 4)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhqk,bhkd->bqhd", [(2, 3, 4, 6), (2, 3, 6, 5)]), ("ij,ij->ij", [(2, 3), (2, 3)]),
    ("ij,kj->ik", [(2, 3), (4, 3)]), ("ijk,ik->j", [(2, 3, 4), (2, 4)]),
    ("i,jk->ijk", [(2,), (3, 4)]), ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
    ("ij,k->", [(2, 3), (4,)]), ("ij->i", [(0, 3)]), ("i,i", [(3,), (3,)]),
    (" ij , jk -> ik ", [(2, 3), (3, 4)]), ("...,...->...", [(2, 3), (3,)]),
]


@pytest.mark.parametrize("i", range(len(EINSUM)))
def test_einsum(i):
    spec, shapes = EINSUM[i]
    rng = np.random.default_rng(i)
    ops = [rnd(rng, s) for s in shapes]
    want = np.einsum(spec.replace(" ", ""), *ops)
    close(fnp.einsum(spec, *ops), want, rtol=1e-5, atol=1e-5, dtype=F32)


def test_linalg_norm():
    a = rnd(np.random.default_rng(0), (3, 4))
    close(fnp.linalg.norm(a), np.linalg.norm(a), rtol=1e-6)
    close(fnp.linalg.norm(a, axis=1), np.linalg.norm(a, axis=1), rtol=1e-6)
    close(fnp.linalg.norm(a[0], 1), np.linalg.norm(a[0], 1), rtol=1e-6)
    close(fnp.linalg.norm(a[0], np.inf), np.linalg.norm(a[0], np.inf))


def test_pad():
    a = rnd(np.random.default_rng(0), (2, 3))
    close(fnp.pad(a, 1), np.pad(a, 1))
    close(fnp.pad(a, ((0, 1), (2, 0)), constant_values=3.0),
          np.pad(a, ((0, 1), (2, 0)), constant_values=3.0))


# ---------------------------------------------------------------------------------------------
# funcgrad.nn
# ---------------------------------------------------------------------------------------------

def test_nn_values():
    from math import erf
    a = np.linspace(-4, 4, 17).astype(np.float64)
    close(nn.relu(a), np.maximum(a, 0), dtype=F64)
    close(nn.sigmoid(a), 1 / (1 + np.exp(-a)), rtol=1e-12)
    close(nn.silu(a), a / (1 + np.exp(-a)), rtol=1e-12)
    close(nn.softplus(a), np.log1p(np.exp(a)), rtol=1e-12)
    c = np.sqrt(2 / np.pi)
    close(nn.gelu(a), 0.5 * a * (1 + np.tanh(c * (a + 0.044715 * a ** 3))), rtol=1e-12)
    close(nn.gelu(a, approximate=False), 0.5 * a * (1 + np.vectorize(erf)(a / np.sqrt(2))),
          rtol=1e-12)
    x = np.random.default_rng(0).standard_normal((3, 4)) * 10
    lse = np.log(np.sum(np.exp(x), axis=-1, keepdims=True))
    close(nn.logsumexp(x, axis=-1, keepdims=True), lse, rtol=1e-12)
    close(nn.logsumexp(x, axis=-1), lse[:, 0], rtol=1e-12)
    close(nn.logsumexp(x), np.log(np.sum(np.exp(x))), rtol=1e-12)
    close(nn.logsumexp(x, axis=(0, 1)), np.log(np.sum(np.exp(x))), rtol=1e-12)
    close(nn.softmax(x), np.exp(x - lse), rtol=1e-12)
    close(nn.softmax(x, axis=0), np.exp(x) / np.exp(x).sum(0), rtol=1e-12)
    close(nn.log_softmax(x), x - lse, rtol=1e-12)
    close(nn.one_hot(np.array([0, 2, 1]), 3), np.eye(3)[[0, 2, 1]], dtype=F32)
    close(nn.one_hot(np.array([0, 2]), 3, axis=0), np.eye(3)[[0, 2]].T)
    close(nn.one_hot(np.array([5, -1]), 3), np.zeros((2, 3)))  # out of range: all zeros
    close(nn.logsumexp(np.array([-np.inf, -np.inf])), -np.inf)
    close(nn.relu(np.float32(2.0)), 2.0, dtype=F32)
    assert nn.sigmoid(np.arange(3)).dtype == F32
    close(nn.softmax(np.array([1000.0, 1000.0])), [0.5, 0.5])


NN = ["relu", "sigmoid", "silu", "softplus", "gelu", "softmax", "log_softmax", "logsumexp"]


@pytest.mark.parametrize("name", NN)
def test_nn_grads(name):
    x = np.random.default_rng(0).standard_normal((3, 4))
    x = np.where(np.abs(x) < 0.05, 0.3, x)  # relu's kink
    check_grads(getattr(nn, name), (x,), order=2)


# ---------------------------------------------------------------------------------------------
# gradients through the API
# ---------------------------------------------------------------------------------------------

def _x(shape, seed=0, lo=None, hi=None):
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, size=shape) if lo is not None else rng.standard_normal(shape)


GRAD_CASES = {
    "getitem_basic": (lambda x: x[1:, ::-2, None, 0] * 2.0, [(3, 4, 2)]),
    "getitem_int_arrays": (lambda x: x[np.array([0, 2, 2]), :, np.array([1, 0, 1])], [(3, 4, 2)]),
    "getitem_ellipsis": (lambda x: x[..., np.array([[1, 1], [0, 1]])], [(3, 2)]),
    "getitem_mask": (lambda x: x[np.array([True, False, True])], [(3, 2)]),
    "at_set": (lambda x, v: fnp.asarray(x).at[1:, 0].set(v), [(3, 2), (2,)]),
    "at_add_repeated": (lambda x, v: fnp.asarray(x).at[np.array([0, 0, 2])].add(v),
                        [(3, 2), (3, 2)]),
    "at_multiply": (lambda x, v: fnp.asarray(x).at[:, 1].multiply(v), [(3, 2), (3,)]),
    "take": (lambda x: fnp.take(x, np.array([[2, 0], [0, -1]]), axis=1), [(2, 3)]),
    "take_flat": (lambda x: fnp.take(x, np.array([5, 0, 5])), [(2, 3)]),
    "take_along_axis": (lambda x: fnp.take_along_axis(x, np.array([[0, 2, 2], [1, 1, 0]]), 1),
                        [(2, 3)]),
    "einsum_mm": (lambda a, b: fnp.einsum("ij,jk->ik", a, b), [(2, 3), (3, 4)]),
    "einsum_batch": (lambda a, b: fnp.einsum("bij,bkj->bki", a, b), [(2, 2, 3), (2, 4, 3)]),
    "einsum_ellipsis": (lambda a, b: fnp.einsum("...i,...i->...", a, b), [(2, 3, 4), (3, 4)]),
    "einsum_sum": (lambda a: fnp.einsum("ijk->j", a), [(2, 3, 4)]),
    "matmul_bcast": (lambda a, b: a @ b, [(2, 1, 2, 3), (4, 3, 2)]),
    "matmul_vec": (lambda a, b: fnp.matmul(a, b), [(3,), (2, 3, 4)]),
    "dot": (lambda a, b: fnp.dot(a, b), [(2, 3, 4), (4,)]),
    "outer": (lambda a, b: fnp.outer(a, b), [(3,), (2,)]),
    "where": (lambda a, b: fnp.where(a > 0, a * b, b - a), [(3, 4), (4,)]),
    "max": (lambda a: fnp.max(a, axis=1), [(3, 4)]),
    "min_keepdims": (lambda a: fnp.min(a, axis=(0, 2), keepdims=True), [(2, 3, 2)]),
    "max_all": (lambda a: fnp.max(a), [(3, 4)]),
    "maximum": (lambda a, b: fnp.maximum(a, b), [(3, 4), (3, 1)]),
    "concatenate": (lambda a, b: fnp.concatenate([a, b, a], axis=1), [(2, 3), (2, 1)]),
    "stack": (lambda a, b: fnp.stack([a, b], axis=-1), [(2, 3), (2, 3)]),
    "split": (lambda a: [s * (i + 1.0) for i, s in enumerate(fnp.split(a, [1, 3], axis=1))],
              [(2, 5)]),
    "split_sections": (lambda a: fnp.split(a, 2)[1] ** 2, [(4, 3)]),
    "repeat": (lambda a: fnp.repeat(a, 3, axis=0), [(2, 3)]),
    "repeat_seq": (lambda a: fnp.repeat(a, [2, 0, 1], axis=1), [(2, 3)]),
    "tile": (lambda a: fnp.tile(a, (2, 1, 3)), [(2, 3)]),
    "flip_transpose": (lambda a: fnp.flip(a, 0).T @ a, [(3, 2)]),
    "moveaxis_reshape": (lambda a: fnp.moveaxis(a, 0, -1).reshape(-1, 2), [(2, 3, 2)]),
    "broadcast_to": (lambda a: fnp.broadcast_to(a, (4, 2, 3)) * fnp.arange(3.0), [(2, 1)]),
    "sum_mean_var": (lambda a: fnp.sum(a, 0) + fnp.mean(a, (0, 1)) + fnp.var(a, axis=1),
                     [(3, 3)]),
    "std": (lambda a: fnp.std(a, axis=0, ddof=1), [(4, 3)]),
    "prod": (lambda a: fnp.prod(a, axis=1), [(3, 4)]),
    "prod_with_zero": (lambda a: fnp.prod(fnp.asarray(a).at[0, 1].set(0.0), axis=1),
                       [(3, 4)]),
    "power": (lambda a, b: fnp.power(fnp.abs(a) + 0.5, b), [(3,), (3,)]),
    "integer_power": (lambda a: a ** 3 + a ** -2 + fnp.square(a), [(3,)]),
    "sqrt_log_exp": (lambda a: fnp.sqrt(fnp.exp(a)) + fnp.log(1.0 + a * a) + fnp.log1p(a * a),
                     [(4,)]),
    "trig": (lambda a: fnp.sin(a) * fnp.cos(a) + fnp.tanh(a) + fnp.tan(a * 0.3), [(4,)]),
    "divide_reciprocal": (lambda a, b: a / (b * b + 1.0) + fnp.reciprocal(b * b + 1.0),
                          [(3, 2), (2,)]),
    "clip_abs": (lambda a: fnp.clip(a, -0.5, 0.5) + fnp.abs(a), [(6,)]),
    "tril_triu": (lambda a: fnp.tril(a, -1) * 2.0 + fnp.triu(a), [(3, 3)]),
    "logaddexp": (lambda a, b: fnp.logaddexp(a, b), [(3,), (3,)]),
    "expand_squeeze": (lambda a: fnp.squeeze(fnp.expand_dims(a, (0, 2)), 0), [(2, 3)]),
    "norm": (lambda a: fnp.linalg.norm(a, axis=1), [(3, 4)]),
    "astype": (lambda a: a.astype(fnp.float64) * 2.0, [(3,)]),
    "pad": (lambda a: fnp.pad(a, ((1, 0), (2, 1))), [(2, 2)]),
    "scalar_python": (lambda a: 2.0 * a - 1.0 / (1.0 + a * a), [()]),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_api_grads(name):
    fn, shapes = GRAD_CASES[name]
    args = [_x(s, seed=i) for i, s in enumerate(shapes)]
    if name in ("clip_abs",):
        args = [np.array([-0.9, -0.3, -0.1, 0.2, 0.4, 0.8])]
    check_grads(fn, args, order=2)
    # the backward expression type-checks
    loss = lambda *a: sum(fnp.sum(o * 1.5) for o in funcgrad.tree_util.tree_leaves(fn(*a)))
    closed = funcgrad.make_jaxpr(funcgrad.grad(loss, argnums=tuple(range(len(args)))))(*args)
    typecheck_expr(closed.expr)


def test_api_grads_dtype_follow_inputs():
    g = funcgrad.grad(lambda x: fnp.sum(x[::2] * 3.0))(fnp.ones(5, fnp.float64))
    assert g.dtype == F64
    np.testing.assert_array_equal(np.asarray(g), [3, 0, 3, 0, 3])
    g32 = funcgrad.grad(lambda x: fnp.sum(fnp.take(x, np.array([0, 0]))))(fnp.ones(3))
    assert g32.dtype == F32
    np.testing.assert_array_equal(np.asarray(g32), [2, 0, 0])


# ---------------------------------------------------------------------------------------------
# property tests: random indices, broadcasting gradients, reduction gradients
# ---------------------------------------------------------------------------------------------

@st.composite
def _index_for(draw, shape):
    """A random numpy index for `shape`: ints, slices (any step), None, Ellipsis, int arrays."""
    nd = len(shape)
    items, dim = [], 0
    n_arrays = 0
    use_ellipsis = draw(st.booleans())
    ell_at = draw(st.integers(0, nd)) if use_ellipsis else -1
    arr_shape = draw(st.sampled_from([(), (2,), (2, 1), (1, 3), (0,)]))
    while dim < nd:
        if dim == ell_at:
            items.append(Ellipsis)
            ell_at = -1
            dim += draw(st.integers(0, nd - dim))
            continue
        n = shape[dim]
        kind = draw(st.sampled_from(["int", "slice", "slice", "none", "array", "full", "mask",
                                     "list"]))
        if kind == "int" and n:
            items.append(draw(st.integers(-n, n - 1)))
        elif kind == "array" and n and n_arrays < 3:
            n_arrays += 1
            items.append(np.asarray(draw(hnp.arrays(np.int32, arr_shape,
                                                    elements=st.integers(-n, n - 1)))))
        elif kind == "mask" and n_arrays < 3:  # a concrete boolean mask over this axis
            n_arrays += 1
            items.append(np.asarray(draw(hnp.arrays(np.bool_, (n,)))))
        elif kind == "list" and n and n_arrays < 3:  # a Python list, maybe a funcgrad array
            n_arrays += 1
            lst = draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=3))
            items.append(fnp.asarray(lst) if draw(st.booleans()) else lst)
        elif kind == "none":
            items.append(None)
            continue
        elif kind == "slice":
            bound = st.none() | st.integers(-n - 2, n + 2)
            step = draw(st.none() | st.sampled_from([1, 2, 3, -1, -2, -3]))
            items.append(slice(draw(bound), draw(bound), step))
        else:
            items.append(slice(None))
        dim += 1
    if ell_at == nd:
        items.append(Ellipsis)
    if draw(st.booleans()):
        items.append(None)
    return tuple(items)


@st.composite
def _array_and_index(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4))
    return shape, draw(_index_for(shape))


@settings(max_examples=100)  # cheap, and indexing has many corners
@given(case=_array_and_index())
def test_getitem_random(case):
    shape, idx = case
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    want = _numpy_getitem(a, idx)
    if want is None:  # numpy rejects it (index arrays that do not broadcast): so do we
        with pytest.raises((IndexError, TypeError)):
            fnp.asarray(a)[idx]
        return
    close(fnp.asarray(a)[idx], want, dtype=F32)


def _numpy_index(idx):
    """idx for numpy: funcgrad arrays as numpy arrays (numpy would __index__ a size-1 one)."""
    return tuple(np.asarray(i) if isinstance(i, fnp.ndarray) else i for i in idx)


def _numpy_getitem(a, idx):
    try:
        return a[_numpy_index(idx)]
    except IndexError:
        return None


@settings(max_examples=60)
@given(case=_array_and_index(), seed=st.integers(0, 100))
def test_at_add_set_random(case, seed):
    shape, idx = case
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    if _numpy_getitem(a, idx) is None:
        return
    idx = _numpy_index(idx)
    v = np.random.default_rng(seed).standard_normal(a[idx].shape).astype(np.float32)
    for method, ufunc in (("add", np.add), ("multiply", np.multiply), ("min", np.minimum),
                          ("max", np.maximum)):
        want = a.copy()
        ufunc.at(want, idx, v)  # applies every repeated index, like JAX
        close(getattr(fnp.asarray(a).at[idx], method)(v), want)
    flat = np.arange(a.size).reshape(shape)[idx].reshape(-1)
    if len(set(flat.tolist())) == flat.size:  # set with repeated indices keeps any one update
        want = a.copy()
        want[idx] = v
        close(fnp.asarray(a).at[idx].set(v), want)


@settings(max_examples=10)
@given(case=_array_and_index())
def test_getitem_grads_random(case):
    shape, idx = case
    x = np.random.default_rng(0).standard_normal(shape)
    if _numpy_getitem(x, idx) is None:
        return
    check_grads(lambda t: fnp.asarray(t)[idx], (x,), order=1)


GRAD_BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
               "logaddexp", "where"]


@settings(max_examples=10)
@pytest.mark.parametrize("name", GRAD_BINARY)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                 min_side=0, max_side=3),
       seed=st.integers(0, 100))
def test_binary_grads_broadcasting(name, shapes, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal(s) for s in shapes.input_shapes)
    if name in ("divide", "power"):
        b = np.where(np.abs(b) < 0.3, 0.7, b)
        a = np.abs(a) + 0.5 if name == "power" else a
    if name in ("maximum", "minimum"):
        b = b + 0.05  # no ties
    if name == "where":
        f = lambda x, y: fnp.where(x > 0, x * y, y)
    else:
        f = getattr(fnp, name)
    check_grads(f, (a, b), order=2)


@settings(max_examples=10)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "var", "std"])
@given(case=_shape_and_axis(nonempty=True), seed=st.integers(0, 100))
def test_reduction_grads(name, case, seed):
    shape, axis, keepdims = case
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    x = (rng.permutation(n).reshape(shape) * 0.3 + 0.5)  # distinct (max/min), non-zero (prod)
    if name in ("var", "std"):
        red = range(len(shape)) if axis is None else np.atleast_1d(axis)
        if np.prod([shape[i] for i in red]) < 2:  # std of one element: not differentiable
            return
    check_grads(lambda t: getattr(fnp, name)(t, axis=axis, keepdims=keepdims), (x,),
                order=2, atol=1e-5, rtol=1e-4)


@st.composite
def _einsum_case(draw):
    """A random one- or two-operand contraction (distinct labels within an operand)."""
    pool = "abcde"
    sizes = {c: draw(st.integers(0, 3)) for c in pool}
    n_ops = draw(st.integers(1, 2))
    terms = [draw(st.lists(st.sampled_from(pool), unique=True, max_size=4)) for _ in range(n_ops)]
    used = sorted(set().union(*map(set, terms)))
    out = draw(st.permutations(used)) if used else []
    out = out[:draw(st.integers(0, len(out)))]
    spec = ",".join("".join(t) for t in terms) + "->" + "".join(out)
    shapes = [tuple(sizes[c] for c in t) for t in terms]
    return spec, shapes


@given(case=_einsum_case(), seed=st.integers(0, 100))
def test_einsum_random(case, seed):
    spec, shapes = case
    rng = np.random.default_rng(seed)
    ops = [rnd(rng, s) for s in shapes]
    close(fnp.einsum(spec, *ops), np.einsum(spec, *ops), rtol=1e-5, atol=1e-5, dtype=F32)
    if all(0 not in s for s in shapes):
        check_grads(lambda *xs: fnp.einsum(spec, *xs), [o.astype(np.float64) for o in ops],
                    order=1)
