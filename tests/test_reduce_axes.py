"""CUDA sum/max/min/prod over row, column, middle and mixed axes (chunked two-pass included),
contiguous and strided operands, against numpy on hypothesis-drawn shapes (simulator in CI)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
import funcgrad.cuda as fcuda
from funcgrad import prims as P
from funcgrad.core import bind

SIM = fcuda.simulator_active()
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")]

PRIMS = {"sum": (P.reduce_sum_p, np.sum), "max": (P.reduce_max_p, np.max),
         "min": (P.reduce_min_p, np.min), "prod": (P.reduce_prod_p, np.prod)}


@pytest.fixture(scope="module", autouse=True)
def _fast_barriers(fast_barriers):
    """The simulator's short GIL slices (conftest) for every test here."""


def _device_view(x: np.ndarray, how: str):
    """x on the device as a contiguous array, a transposed view, or a reversed slice view."""
    if how == "contiguous" or x.ndim == 0:
        return funcgrad.device_put(x, "cuda")
    if how == "transposed":
        t = funcgrad.device_put(np.ascontiguousarray(x.T), "cuda")
        return bind(P.transpose_p, t, permutation=tuple(reversed(range(x.ndim))))
    # every other element of a twice-as-long last axis, reversed: stride -2 with an offset
    wide = np.repeat(x[..., ::-1], 2, axis=-1)
    w = funcgrad.device_put(np.ascontiguousarray(wide), "cuda")
    rev = bind(P.rev_p, w, dimensions=(x.ndim - 1,))
    n = wide.shape[-1]
    return bind(P.slice_p, rev, start_indices=(0,) * x.ndim, limit_indices=wide.shape[:-1] + (n,),
                strides=(1,) * (x.ndim - 1) + (2,))


def _check(x, axes, kind, how):
    prim, ref = PRIMS[kind]
    axes = tuple(axes)
    want = np.asarray(ref(x, axis=axes)).astype(x.dtype)
    got = bind(prim, _device_view(x, how), axes=tuple(axes))
    assert got.device == "cuda"
    got = np.asarray(got)
    assert got.shape == np.shape(want) and got.dtype == x.dtype
    if x.dtype.kind == "f" and kind in ("sum", "prod"):
        tol = 1e-5 if x.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)
    else:
        np.testing.assert_array_equal(got, want)


@settings(max_examples=12 if SIM else 60, deadline=None)
@given(data=st.data())
def test_reductions_match_numpy(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    # a long axis somewhere exercises the chunked two-pass path
    if data.draw(st.booleans()):
        d = data.draw(st.integers(0, len(shape) - 1))
        shape = shape[:d] + (data.draw(st.integers(9, 40)),) + shape[d + 1:]
    axes = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    kind = data.draw(st.sampled_from(sorted(PRIMS)))
    dtype = np.dtype(data.draw(st.sampled_from(["float32", "float64", "int32"])))
    how = data.draw(st.sampled_from(["contiguous", "transposed", "strided"]))
    rng = np.random.default_rng(0)
    if kind == "prod":
        x = rng.choice([-1.0, 1.0, 0.5, 2.0], shape)   # products stay in range
    else:
        x = rng.standard_normal(shape) * 4
    _check(x.astype(dtype), axes, kind, how)


@pytest.mark.parametrize("shape,axes", [((37, 5), (0,)), ((5, 37), (1,)), ((3, 21, 5), (1,)),
                                        ((2, 3, 33), (0, 2)), ((70,), (0,)), ((4, 1, 3), (1,))])
def test_edge_shapes_and_nan(shape, axes):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(np.float32)
    for kind in ("sum", "max", "min"):
        _check(x, axes, kind, "contiguous")
    x.reshape(-1)[len(x.reshape(-1)) // 2] = np.nan
    for kind in ("max", "min", "sum"):
        prim, ref = PRIMS[kind]
        got = np.asarray(bind(prim, funcgrad.device_put(x, "cuda"), axes=axes))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref(x, axis=axes)))


def test_bit_identical_across_calls():
    x = funcgrad.device_put(np.random.default_rng(2).standard_normal((45, 7)).astype(np.float32),
                            "cuda")
    for axes in ((0,), (1,), (0, 1)):
        a = np.asarray(bind(P.reduce_sum_p, x, axes=axes))
        b = np.asarray(bind(P.reduce_sum_p, x, axes=axes))
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("shape,axes,dtype,how", [
    ((37, 12), (1,), "float32", "contiguous"),      # rows: 3 runs of 4 a row
    ((5, 400), (1,), "float32", "contiguous"),      # rows: long rows, chunked
    ((6, 10), (1,), "float64", "contiguous"),       # rows: runs of 2 doubles
    ((3, 9, 8), (2,), "float32", "contiguous"),
    ((37, 12), (0,), "float32", "contiguous"),      # cols: a partial tile of 12 columns
    ((300, 20), (0,), "float32", "contiguous"),     # cols: chunked, partials reduced again
    ((3, 9, 8), (1,), "float32", "contiguous"),     # middle axis: cols per outer index
    ((2, 3, 16), (0, 1), "float32", "contiguous"),
    ((9, 12), (1,), "float32", "transposed"),       # strided operands keep the scalar path
    ((7, 5), (1,), "float32", "contiguous")])
def test_vector_kernels_match_numpy(shape, axes, dtype, how):
    """Aligned float runs take the vector kernels (16-byte loads on a GPU), the rest the scalar
    ones; both agree with numpy for sum, max, min and prod."""
    from funcgrad.cuda import reduce as R
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    for kind in ("sum", "max", "min"):
        _check(x, axes, kind, how)
    _check(rng.choice([-1.0, 1.0, 0.5, 2.0], shape).astype(dtype), axes, "prod", how)
    if how == "contiguous":   # which kernels ran: vector ones exactly for whole aligned runs
        view = R._as_3d(funcgrad.device_put(x, "cuda").buf, tuple(axes))
        assert (R._width(*view) > 1) == (x.shape[-1] % (16 // x.itemsize) == 0)
