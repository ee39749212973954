"""The cuBLAS GEMM path of CUDA dot_general (funcgrad/cuda/blas.py).

- blas.plan's arguments, run through a numpy model of cublasGemmStridedBatchedEx (column-major,
  op, leading dimension, batch stride) on the operands' flat storage, equal numpy's product for
  hypothesis-drawn sizes and layouts (row/column-major, padded, broadcast batch); layouts cuBLAS
  cannot read give None (the caller copies). No GPU needed.
- cuda-marked: CUDA == numpy for transposed, batched, broadcast and odd-sized operands at every
  precision (a real GPU runs cuBLAS when a binding loads, the simulator the numba fallback), the
  reason gemm_backend() gives, and TF32 within its documented error bound:

      |C_tf32 - C| <= (2^-9 + K 2^-23) (|A| |B|)   elementwise, C the float64 product,

  2^-9 covering both inputs' rounding to TF32's 10-bit mantissa (truncation or nearest) and
  K 2^-23 the float32 accumulation. The full-fp32 path must stay within K 2^-23 alone, and on
  a GPU running cuBLAS TF32 must actually differ from it (the opt-in takes effect).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import lax, prims
from funcgrad.core import bind
from funcgrad.cuda import blas

SIM = fcuda.simulator_active()
REQUIRE_CUBLAS = os.environ.get("FUNCGRAD_REQUIRE_CUBLAS", "") == "1"
needs_device = pytest.mark.skipif(not fcuda.usable(), reason="no GPU; set NUMBA_ENABLE_CUDASIM=1")


def _run_plan(args, xflat, yflat, dtype):
    """numpy model of cublasGemmStridedBatchedEx(A=y, B=x) writing a column-major C."""
    ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, batch = args
    c = np.zeros(batch * m * n, dtype)

    def mat(flat, trans, rows, cols, ld, base):   # op(X) as a rows x cols matrix
        r, cc = (cols, rows) if trans else (rows, cols)
        i, j = np.meshgrid(np.arange(r), np.arange(cc), indexing="ij")
        x = flat[base + i + j * ld]
        return x.T if trans else x

    for b in range(batch):
        a = mat(yflat, ta == blas.OP_T, m, k, lda, b * sa)
        bb = mat(xflat, tb == blas.OP_T, k, n, ldb, b * sb)
        r = a.astype(np.float64) @ bb.astype(np.float64)
        i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
        c[b * sc + i + j * ldc] = r
    return c


@st.composite
def _layouts(draw):
    """(Bn, M, N, K, x flat, x strides, y flat, y strides) with x[b,m,k], y[b,k,n] in place."""
    Bn, M, N, K = (draw(st.integers(1, n)) for n in (3, 5, 5, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))

    def operand(rows, cols):
        kind = draw(st.sampled_from(["row", "col", "padded_row", "padded_col", "bcast"]))
        pad = 2 if kind.startswith("padded") else 0
        if kind in ("row", "padded_row", "bcast"):
            s_r, s_c = cols + pad, 1
        else:
            s_r, s_c = 1, rows + pad
        mat = rows * cols + pad * max(rows, cols)
        s_b = 0 if kind == "bcast" else mat + draw(st.integers(0, 3))
        size = (Bn - 1) * s_b + mat + 1
        return rng.standard_normal(size), (s_b, s_r, s_c)

    xf, xs = operand(M, K)
    yf, ys = operand(K, N)
    return Bn, M, N, K, xf, xs, yf, ys


def _gather(flat, strides, shape):
    idx = sum(np.arange(n).reshape([-1 if d == i else 1 for d in range(3)]) * s
              for i, (n, s) in enumerate(zip(shape, strides)))
    return flat[idx]


@given(_layouts())
def test_plan_matches_numpy(case):
    Bn, M, N, K, xf, xs, yf, ys = case
    args = blas.plan(Bn, M, N, K, xs, ys)
    assert args is not None
    c = _run_plan(args, xf, yf, np.float64)
    want = _gather(xf, xs, (Bn, M, K)) @ _gather(yf, ys, (Bn, K, N))
    # column-major N x M per batch is row-major M x N: out[b] contiguous
    np.testing.assert_allclose(c.reshape(Bn, M, N), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("xs,ys", [
    ((0, 2, 2), (0, 4, 1)),    # x's rows and columns both strided: no leading dimension
    ((0, 3, 1), (0, 0, 1)),    # y broadcast along its contracting axis (stride 0)
    ((0, -3, 1), (0, 4, 1)),   # a negative stride
])
def test_plan_refuses_layouts_cublas_cannot_read(xs, ys):
    assert blas.plan(1, 3, 4, 3, xs, ys) is None


def test_compute_types():
    assert blas.compute_type(np.float32, None) == blas.COMPUTE_32F
    assert blas.compute_type(np.float32, "float32") == blas.COMPUTE_32F
    assert blas.compute_type(np.float32, "tensorfloat32") == blas.COMPUTE_32F_FAST_TF32
    assert blas.compute_type(np.float32, "bfloat16") == blas.COMPUTE_32F_FAST_16BF
    assert blas.compute_type(np.float64, "tensorfloat32") == blas.COMPUTE_64F
    assert blas.compute_type(np.float16, "tensorfloat32") == blas.COMPUTE_32F


# ---------------------------------------------------------------------------------------------
# on the device (cuBLAS on a GPU with a binding; the numba fallback in the simulator)
# ---------------------------------------------------------------------------------------------

def cu(a):
    return funcgrad.device_put(np.asarray(a), "cuda")


def _transposed(a):
    """A "cuda" array equal to a whose last two axes are a strided (transposed) view."""
    t = cu(np.ascontiguousarray(np.swapaxes(a, -1, -2)))
    perm = list(range(a.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return bind(prims.transpose_p, t, permutation=tuple(perm))


@pytest.mark.cuda
@needs_device
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_backend_reason(dtype):
    why = fcuda.gemm_backend(dtype)
    assert why.startswith(("cublas: ", "numba: "))
    if dtype == "int32":
        assert why.startswith("numba: ")
    if SIM:
        assert why.startswith("numba: ") and "simulator" in why
    if REQUIRE_CUBLAS and dtype != "int32":
        assert why.startswith("cublas: "), why


SHAPES = [(1, 1, 1), (3, 5, 7), (9, 6, 13)] if SIM else [
    (1, 1, 1), (3, 5, 7), (17, 9, 33), (129, 257, 65), (500, 384, 1000)]
PRECISIONS = [None, "tensorfloat32"] if SIM else [None, "highest", "tensorfloat32", "bfloat16"]
# per-input rounding of each precision (bf16: 7 mantissa bits) on top of K 2^-23 accumulation
UNIT = {None: 0.0, "highest": 0.0, "tensorfloat32": 2.0 ** -9, "bfloat16": 2.0 ** -6}


def _check(got, a, b, precision):
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = (UNIT[precision] + a.shape[-1] * 2.0 ** -23) * (np.abs(a) @ np.abs(b)) + 1e-30
    err = np.abs(np.asarray(got, np.float64) - want)
    assert got.shape == want.shape and np.all(err <= bound), np.max(err / bound)


@pytest.mark.cuda
@needs_device
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_matmul_layouts_equal_numpy(M, N, K, precision, rng):
    a = rng.standard_normal((2, M, K)).astype("float32")
    b = rng.standard_normal((2, K, N)).astype("float32")
    ops = {"plain": (cu(a), cu(b)), "a^T": (_transposed(a), cu(b)),
           "b^T": (cu(a), _transposed(b)), "both^T": (_transposed(a), _transposed(b))}
    for name, (x, y) in ops.items():
        _check(fnp.matmul(x, y, precision=precision), a, b, precision)
    # a matrix on the right (batch folded into rows), a broadcast operand, a strided batch axis
    _check(fnp.matmul(cu(a), cu(b[0]), precision=precision), a, b[0], precision)
    _check(fnp.einsum("mk,bkn->bmn", cu(a[0]), cu(b), precision=precision), a[0], b, precision)
    got = lax.dot_general(cu(np.ascontiguousarray(a.transpose(1, 0, 2))), cu(b),
                          (((2,), (1,)), ((1,), (0,))), precision=precision)
    _check(got, a, b, precision)


@pytest.mark.cuda
@needs_device
@pytest.mark.parametrize("dtype", ["float64", "float16", "int32"])
def test_other_dtypes_equal_numpy(dtype, rng):
    a = (rng.standard_normal((2, 5, 7)) * 3).astype(dtype)
    b = (rng.standard_normal((2, 7, 6)) * 3).astype(dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    got = np.asarray(fnp.matmul(_transposed(a), cu(b)), np.float64)
    if dtype == "int32":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-12 if dtype == "float64" else 2e-2
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 10)


@pytest.mark.cuda
@needs_device
def test_tf32_error_bound(rng):
    M, N, K = (8, 6, 16) if SIM else (512, 384, 2048)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    exact = a.astype(np.float64) @ b
    scale = np.abs(a).astype(np.float64) @ np.abs(b)
    f = funcgrad.jit(lambda x, y, p: fnp.matmul(x, y, precision=p), static_argnums=2)
    full = np.asarray(f(cu(a), cu(b), "highest"))
    tf32 = np.asarray(f(cu(a), cu(b), "tensorfloat32"))
    assert np.all(np.abs(full - exact) <= K * 2.0 ** -23 * scale)
    assert np.all(np.abs(tf32 - exact) <= (2.0 ** -9 + K * 2.0 ** -23) * scale)
    if fcuda.gemm_backend("float32").startswith("numba: "):
        np.testing.assert_array_equal(tf32, full)   # the numba kernel computes in fp32
    else:   # TF32 really ran: its error is well above fp32's
        assert np.max(np.abs(tf32 - exact)) > 8 * np.max(np.abs(full - exact))


@pytest.mark.cuda
@needs_device
def test_config_switch_reaches_the_device(rng):
    from funcgrad.config import config
    a = rng.standard_normal((4, 8)).astype("float32")
    old = config.default_matmul_precision
    f = funcgrad.jit(lambda x: x @ x.T)
    try:
        full = np.asarray(f(cu(a)))
        config.update("default_matmul_precision", "tensorfloat32")
        tf32 = np.asarray(f(cu(a)))
    finally:
        config.update("default_matmul_precision", old)
    assert f.stats()["traces"] == 2
    np.testing.assert_allclose(tf32, full, rtol=2.0 ** -8, atol=2.0 ** -8 * 8)



class _ModelCublas:
    """Stands in for a binding under the simulator, where device pointers are host addresses:
    runs each call's arguments through _run_plan on the memory they point to."""
    describe = "model"
    DT = {0: np.float32, 1: np.float64, 2: np.float16}

    def __init__(self):
        self.calls = []

    def gemm(self, stream, ws, nbytes, args):
        import ctypes
        (ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc, sc, batch,
         compute, algo) = args
        assert at == bt == ct and stream == 0 and ws and nbytes == blas.WORKSPACE
        dt = np.dtype(self.DT[at])
        scal = np.float64 if dt == np.float64 else np.float32

        def mem(ptr, count, t=dt):
            buf = (ctypes.c_char * (count * np.dtype(t).itemsize)).from_address(ptr)
            return np.frombuffer(buf, t)
        assert mem(alpha, 1, scal)[0] == 1 and mem(beta, 1, scal)[0] == 0

        def extent(trans, rows, cols, ld, stride):   # elements an operand's batches span
            r, cc = (cols, rows) if trans else (rows, cols)
            return (batch - 1) * stride + (cc - 1) * ld + r
        A = mem(a, extent(ta == blas.OP_T, m, k, lda, sa))
        B = mem(b, extent(tb == blas.OP_T, k, n, ldb, sb))
        plan = (ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, batch)
        out = np.ndarray((batch * m * n,), dt,
                         buffer=(ctypes.c_char * (batch * m * n * dt.itemsize)).from_address(c))
        out[:] = _run_plan(plan, B, A, np.float64)
        self.calls.append((plan, compute))


@pytest.mark.cuda
@pytest.mark.skipif(not SIM, reason="reads device pointers as host memory (simulator only)")
def test_gemm_wiring_through_a_model_cublas(monkeypatch, rng):
    model = _ModelCublas()
    monkeypatch.setattr(blas, "_state", {"api": model, "why": ""})
    monkeypatch.setattr(blas, "WORKSPACE", 256)
    monkeypatch.setattr(blas, "_lanes", [])
    a = rng.standard_normal((2, 3, 5)).astype("float32")
    b = rng.standard_normal((2, 5, 4)).astype("float32")
    want = a.astype(np.float64) @ b
    cases = {"plain": (cu(a), cu(b)), "a^T": (_transposed(a), cu(b)),
             "b^T": (cu(a), _transposed(b)), "both^T": (_transposed(a), _transposed(b))}
    for name, (x, y) in cases.items():
        got = np.asarray(fnp.matmul(x, y, precision="tensorfloat32"))
        np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=name)
    # an offset view (a slice), a broadcast batch, a batch axis that is not leading, float64
    got = np.asarray(fnp.matmul(cu(a)[1:, 1:], cu(b)[1:]))
    np.testing.assert_allclose(got, a[1:, 1:] @ b[1:], rtol=1e-5)
    np.testing.assert_allclose(np.asarray(fnp.matmul(cu(a), cu(b[0]))), a @ b[0], rtol=1e-5)
    got = lax.dot_general(cu(np.ascontiguousarray(a.transpose(1, 0, 2))), cu(b),
                          (((2,), (1,)), ((1,), (0,))))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(np.asarray(fnp.matmul(_transposed(a64), cu(b[0].astype(
        np.float64)))), a64 @ b[0], rtol=1e-12)
    assert len(model.calls) == 8
    assert model.calls[0][1] == blas.COMPUTE_32F_FAST_TF32
    assert model.calls[4][1] == blas.COMPUTE_32F and model.calls[-1][1] == blas.COMPUTE_64F
    # integers still take the numba kernel
    i = rng.integers(-3, 3, (3, 4)).astype("int32")
    np.testing.assert_array_equal(np.asarray(fnp.matmul(cu(i), cu(i.T))), i @ i.T)
    assert len(model.calls) == 8
    # inside a jit plan (a dry run records the workspace but calls nothing), twice
    f = funcgrad.jit(lambda x, y: fnp.tanh(x @ fnp.swapaxes(y, -1, -2)))
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(f(cu(a), cu(a))), np.tanh(a @ a.swapaxes(1, 2)),
                                   rtol=1e-5, atol=1e-6)
    assert len(model.calls) == 10 and model.calls[-1][0][:2] == (blas.OP_T, blas.OP_N)


@pytest.mark.cuda
@pytest.mark.skipif(SIM or not blas.available("float32"),
                    reason="cuBLASLt needs a real GPU and nvmath-python")
def test_cublaslt_path_equals_numpy(monkeypatch, rng):
    # the autotuned path (blaslt.py) forced onto cuBLASLt's first candidate: every layout
    # blas.plan produces (transposed operands, offset views, batches, broadcast batch, TF32)
    from funcgrad.cuda import blaslt
    if blaslt._lt() is None:
        pytest.skip("nvmath-python's cuBLASLt bindings are not installed")
    monkeypatch.setattr(blaslt, "ENABLED", True)
    monkeypatch.setattr(blaslt, "FORCE_LT", True)
    monkeypatch.setattr(blaslt, "_choice", {})
    a = rng.standard_normal((3, 33, 17)).astype("float32")
    b = rng.standard_normal((3, 17, 20)).astype("float32")
    want = a.astype(np.float64) @ b
    cases = {"plain": (cu(a), cu(b)), "a^T": (_transposed(a), cu(b)),
             "b^T": (cu(a), _transposed(b)), "both^T": (_transposed(a), _transposed(b))}
    for name, (x, y) in cases.items():
        np.testing.assert_allclose(np.asarray(fnp.matmul(x, y)), want, rtol=1e-4, atol=1e-4,
                                   err_msg=name)
    np.testing.assert_allclose(np.asarray(fnp.matmul(cu(a)[1:, 1:], cu(b)[1:])),
                               a[1:, 1:] @ b[1:], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(fnp.matmul(cu(a), cu(b[0]))), a @ b[0], rtol=1e-4,
                               atol=1e-4)
    tf32 = fnp.matmul(cu(a[0]), cu(b[0]), precision="tensorfloat32")
    np.testing.assert_allclose(np.asarray(tf32), a[0] @ b[0], rtol=2e-2, atol=2e-2)
    assert any(v.startswith("lt") for v in blaslt.choices().values())
