"""dot_general on cuBLAS: one strided-batched GEMM call from the host on the launch stream.

The call goes through NVIDIA's nvmath-python bindings (`nvmath.bindings.cublas`, the optional
`gpu` extra: `pip install 'funcgrad[gpu]'`), else CuPy's (`cupy_backends.cuda.libs.cublas`).
It is issued on runtime.stream(), so inside a jit plan's CUDA-graph capture it is recorded into
the graph and replayed with no host work; its workspace comes from the pool, so the plan's
static memory plan places it like any other buffer. libcublas is preloaded from the `nvidia`
wheels (torch's or nvmath's) when found, so no LD_LIBRARY_PATH is needed.

Row-major C = X Y is column-major C^T = Y^T X^T: cuBLAS's "A" is y, its "B" is x, m = N, n = M;
an operand whose rows or columns are contiguous is read in place (transa/transb and a leading
dimension), batches through their batch stride (0: broadcast); other layouts are copied first.

numba's kernel (matmul.py) serves instead under the simulator, without either binding, for
integer dtypes, for sizes over 2^31, and when FUNCGRAD_GEMM=numba: gemm_backend() says which
path a dtype takes and why.

Example:
    >>> import funcgrad.cuda
    >>> funcgrad.cuda.gemm_backend("float32")                            # doctest: +SKIP
    'cublas: nvmath-python 1.0.0, cuBLAS 130100'
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import sys
import threading

import numpy as np

from funcgrad.compile import switches
from funcgrad.cuda import blaslt, runtime

# cudaDataType_t and cublasComputeType_t values (cuBLAS's C API)
CUDA_R = {"float16": 2, "float32": 0, "float64": 1, "bfloat16": 14}
HALF = ("float16", "bfloat16")   # 16-bit operands: fp32 accumulation, C in 16 bits or float32
COMPUTE_16F, COMPUTE_32F, COMPUTE_64F = 64, 68, 70
COMPUTE_32F_FAST_16BF, COMPUTE_32F_FAST_TF32 = 75, 77
OP_N, OP_T = 0, 1
GEMM_DEFAULT = -1
INT_MAX = 2 ** 31 - 1
WORKSPACE = 8 << 20    # bytes per workspace lane
# Workspaces the GEMMs of a captured graph take (concurrent.py orders steps sharing memory),
# by policy. "ordered": products of at least SMALL_GEMM multiply-adds share lane 0 and so run
# one after another, smaller ones take the other lanes in turn and overlap (W5: 0.080 ms
# against 0.087 with every GEMM in order). "spread": every GEMM takes lanes 1..LANES-1 in turn,
# so large ones overlap too. Neither wins everywhere (H200, 2026-11-24): spread made the GPT
# step W2 10.93 ms against 11.61 ordered, but the MLP step W1 0.409 ms against 0.303 (two big
# GEMMs side by side each ran 2-3x slower). So a GraphSet whose graph has two or more large
# GEMMs captures it under both and keeps the one that replays faster (graph_ab.py);
# FUNCGRAD_GEMM_POLICY=ordered|spread skips the measurement (default: measure).
# Eager and uncaptured calls always take lane 0 (they run in stream order).
# FUNCGRAD_GEMM_LANES=1: every GEMM in order, under either policy.
LANES = max(1, int(os.environ.get("FUNCGRAD_GEMM_LANES", "4")))
SMALL_GEMM = 1 << 22
POLICIES = ("ordered", "spread")
GEMM_POLICY = os.environ.get("FUNCGRAD_GEMM_POLICY", "measure").strip().lower()
switches.register(__name__, "WORKSPACE", "LANES", "SMALL_GEMM", "GEMM_POLICY")
_lanes: list = []
_turn = [0]
_policy = ["ordered"]   # the workspace policy of the capture under way
_large = [0]   # GEMMs of >= SMALL_GEMM multiply-adds captured since workspace_policy() began

# alpha = 1, beta = 0 in host memory (cuBLAS's default pointer mode reads them at call time)
_ONE = {k: np.ones(1, k) for k in ("float32", "float64")}
_ZERO = {k: np.zeros(1, k) for k in ("float32", "float64")}

_lock = threading.Lock()
_state: dict = {}   # "api": the binding in use or None, "why": the reason for None


def compute_type(dtype, precision) -> int:
    """cuBLAS compute type for operands of `dtype` at dot_general's `precision` param."""
    name = np.dtype(dtype).name
    if name == "float64":
        return COMPUTE_64F
    if name == "float32" and precision == "tensorfloat32":
        return COMPUTE_32F_FAST_TF32
    if name == "float32" and precision == "bfloat16":
        return COMPUTE_32F_FAST_16BF
    return COMPUTE_32F   # float32 at None/"float32" (full fp32); 16-bit floats accumulate in fp32


def _op(r, c, sr, sc):
    """(trans, ld) reading an r x c operand whose (i, j) is at i*sr + j*sc, else None."""
    if sr < 0 or sc < 0:
        return None
    if sr == 1 or r == 1:        # columns contiguous: column-major r x c as stored
        ld = sc if c > 1 else max(r, 1)
        if ld >= max(r, 1):
            return OP_N, ld
    if sc == 1 or c == 1:        # rows contiguous: a column-major c x r matrix, transposed
        ld = sr if r > 1 else max(c, 1)
        if ld >= max(c, 1):
            return OP_T, ld
    return None


def plan(Bn, M, N, K, xs, ys):
    """cuBLAS arguments for out[b] (M x N, contiguous) = x[b] (M x K) @ y[b] (K x N).

    xs = (batch, row, contract) element strides of x, ys = (batch, contract, col) of y.
    Returns (transa, transb, m, n, k, lda, stride_a, ldb, stride_b, ldc, stride_c, batch) with
    cuBLAS's A = y and B = x, or None when a layout or a size cannot be expressed.
    """
    (sab, sam, sak), (sbb, sbk, sbn) = xs, ys
    a = _op(N, K, sbn, sbk)      # op(A) = Y^T: N x K, (n, k) at n*sbn + k*sbk
    b = _op(K, M, sak, sam)      # op(B) = X^T: K x M, (k, m) at k*sak + m*sam
    if a is None or b is None or sab < 0 or sbb < 0:
        return None
    if max(M, N, K, a[1], b[1], Bn) > INT_MAX:
        return None
    return (a[0], b[0], N, M, K, a[1], sbb if Bn > 1 else 0, b[1], sab if Bn > 1 else 0,
            max(N, 1), M * N, Bn)


# ---------------------------------------------------------------------------------------------
# the bindings
# ---------------------------------------------------------------------------------------------

def _preload_cublas() -> str:
    """dlopen libcublasLt and libcublas (RTLD_GLOBAL) from an `nvidia` wheel on sys.path, the
    newest major version first; returns the path loaded or ""."""
    found = []
    for p in sys.path:
        for sub in ("cublas/lib", "cu13/lib", "cu12/lib"):
            for f in glob.glob(os.path.join(p or ".", "nvidia", sub, "libcublas.so.*")):
                found.append(f)
    for f in sorted(set(found), key=lambda f: f.rsplit(".so.", 1)[-1], reverse=True):
        lt = os.path.join(os.path.dirname(f), "libcublasLt.so." + f.rsplit(".so.", 1)[-1])
        try:
            if os.path.exists(lt):
                ctypes.CDLL(lt, mode=ctypes.RTLD_GLOBAL)
            ctypes.CDLL(f, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        return f
    return ""


def unbatched(args):
    """cublasGemmEx's arguments from cublasGemmStridedBatchedEx's (batch-1 products take the
    plain call; on an H200 both ran at the same speed, benchmarks/RESULTS.md)."""
    return args[:9] + args[10:13] + args[14:18] + args[20:]


class _Nvmath:
    """nvmath-python's low-level cuBLAS bindings (raw pointers, a handle, a stream)."""

    def __init__(self):
        import nvmath
        from nvmath.bindings import cublas
        self.cb = cublas
        self.handle = cublas.create()
        self.describe = (f"nvmath-python {getattr(nvmath, '__version__', '?')}, cuBLAS "
                         f"{cublas.get_version(self.handle)}")

    def gemm(self, stream, ws, nbytes, args):
        cb, h = self.cb, self.handle
        cb.set_stream(h, stream)
        cb.set_workspace(h, ws, nbytes)   # after set_stream, which resets it
        if args[19] == 1:
            cb.gemm_ex(h, *unbatched(args))
        else:
            cb.gemm_strided_batched_ex(h, *args)


class _Cupy:
    """CuPy's cuBLAS bindings; CuPy sets the handle's stream to its current stream itself, and
    that resets the workspace to cuBLAS's own."""

    def __init__(self):
        import cupy
        from cupy_backends.cuda.libs import cublas
        self.cupy, self.cb = cupy, cublas
        self.handle = cublas.create()
        self.describe = f"CuPy {cupy.__version__}, cuBLAS {cublas.getVersion(self.handle)}"

    def gemm(self, stream, ws, nbytes, args):
        cp = self.cupy
        s = cp.cuda.ExternalStream(stream) if stream else cp.cuda.Stream.null
        with s:
            if args[19] == 1:
                self.cb.gemmEx(self.handle, *unbatched(args))
            else:
                self.cb.gemmStridedBatchedEx(self.handle, *args)


def _gpu():
    from funcgrad.cuda.probe import is_available, unavailable_reason
    return is_available(), unavailable_reason()


def _load():
    """(binding or None, why not), decided once per process."""
    if "why" in _state:
        return _state["api"], _state["why"]
    with _lock:
        if "why" in _state:
            return _state["api"], _state["why"]
        api, why = None, ""
        choice = os.environ.get("FUNCGRAD_GEMM", "auto").strip().lower()
        if runtime.sim_requested():
            why = "numba's CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1)"
        elif choice == "numba":
            why = "FUNCGRAD_GEMM=numba"
        elif choice not in ("auto", "nvmath", "cupy"):
            why = f"FUNCGRAD_GEMM={choice!r} is not one of auto, nvmath, cupy, numba"
        elif not _gpu()[0]:
            why = f"no usable GPU ({_gpu()[1]})"
        else:
            runtime.load().current_context()   # the primary context, shared with cuBLAS
            lib = _preload_cublas()
            tried = []
            for name, cls in (("nvmath", _Nvmath), ("cupy", _Cupy)):
                if choice not in ("auto", name):
                    continue
                try:
                    api = cls()
                    break
                except ImportError as e:
                    tried.append(f"{name}: not installed ({e})")
                except Exception as e:   # noqa: BLE001 - library/driver errors: report them
                    tried.append(f"{name}: {type(e).__name__}: {e}")
            if api is None:
                why = ("no cuBLAS binding loaded (pip install 'funcgrad[gpu]' for "
                       f"nvmath-python; libcublas {lib or 'not found in nvidia wheels'}): "
                       + "; ".join(tried))
        _state["api"], _state["why"] = api, why
    return api, why


def gemm_backend(dtype="float32") -> str:
    """Which GEMM a CUDA dot_general of `dtype` runs, and why: "cublas: <binding>" or
    "numba: <reason>".

    Example:
        >>> import funcgrad.cuda
        >>> funcgrad.cuda.gemm_backend("int32")                          # doctest: +SKIP
        'numba: cuBLAS has no int32 GEMM here (integer products use the numba kernel)'
    """
    api, why = _load()
    if api is None:
        return f"numba: {why}"
    name = np.dtype(dtype).name
    if name not in CUDA_R:
        return f"numba: cuBLAS has no {name} GEMM here (integer products use the numba kernel)"
    return f"cublas: {api.describe}"


def available(dtype) -> bool:
    return np.dtype(dtype).name in CUDA_R and _load()[0] is not None


def _ptr(buf) -> int:
    return buf.block.ptr() + buf.offset * buf.dtype.itemsize


def policy_setting() -> str:
    """FUNCGRAD_GEMM_POLICY: "measure" (the default), "ordered" or "spread"."""
    if GEMM_POLICY not in ("measure",) + POLICIES:
        raise ValueError(f"FUNCGRAD_GEMM_POLICY={GEMM_POLICY!r} is not one of measure, "
                         + ", ".join(POLICIES))
    return GEMM_POLICY


@contextlib.contextmanager
def workspace_policy(name: str):
    """Capture under workspace policy `name` ("ordered" or "spread"), counting large GEMMs
    from zero (large_gemms()); the previous policy is restored on exit."""
    if name not in POLICIES:
        raise ValueError(f"GEMM workspace policy {name!r} is not one of {POLICIES}")
    prev, _policy[0], _large[0] = _policy[0], name, 0
    try:
        yield
    finally:
        _policy[0] = prev


def large_gemms() -> int:
    """GEMMs of >= SMALL_GEMM multiply-adds captured since workspace_policy() was entered."""
    return _large[0]


def policies_differ(large: int) -> bool:
    """Whether a graph with `large` large GEMMs can differ between the two policies: only when
    two of them could take different lanes under "spread" (LANES >= 3)."""
    return large >= 2 and LANES >= 3


def _workspace(macs: int) -> int:
    """cuBLAS's workspace, outside the memory plan. While a graph is captured: under "ordered"
    lane 0 for a product of `macs` >= SMALL_GEMM multiply-adds, else the other lanes in turn;
    under "spread" the other lanes in turn for every product. Lane 0 for eager and uncaptured
    calls (they run in stream order)."""
    if not _lanes:
        from funcgrad.cuda.arrays import base_pool
        _lanes.extend(base_pool().empty((WORKSPACE,), np.uint8) for _ in range(LANES))
    k = 0
    if runtime._keep is not None:
        large = macs >= SMALL_GEMM
        _large[0] += large
        if LANES > 1 and (not large or _policy[0] == "spread"):
            k = _turn[0] = _turn[0] % (LANES - 1) + 1
    p = _ptr(_lanes[k])
    runtime.note_write(p, WORKSPACE)
    return p


def out_ok(x_dtype, out_dtype) -> bool:
    """Whether cuBLAS writes a product of `x_dtype` operands as `out_dtype`: the operands' own
    type, or float32 for 16-bit operands (preferred_element_type=float32: the fp32
    accumulator stored unrounded)."""
    x, o = np.dtype(x_dtype).name, np.dtype(out_dtype).name
    return o == x or (x in HALF and o == "float32")


def gemm(x, xs, y, ys, out, Bn, M, N, K, precision=None) -> bool:
    """out (Bn, M, N contiguous) = x @ y by cuBLAS; False when cuBLAS cannot take it (the
    caller runs the numba kernel). x/y are DeviceBuffers whose (batch, row, contract) /
    (batch, contract, col) element strides are xs / ys from their offsets."""
    if not available(x.dtype) or y.dtype != x.dtype or not out_ok(x.dtype, out.dtype):
        return False
    from funcgrad.cuda.elementwise import contiguous
    args = plan(Bn, M, N, K, xs, ys)
    if args is None:   # a layout cuBLAS cannot read: copy the operand(s) it cannot
        if plan(Bn, M, N, K, xs, (0, N, 1)) is None:
            x = contiguous(x.view((Bn, M, K), xs, x.offset))
            xs = (M * K, K, 1)
        if plan(Bn, M, N, K, xs, ys) is None:
            y = contiguous(y.view((Bn, K, N), ys, y.offset))
            ys = (K * N, N, 1)
        args = plan(Bn, M, N, K, xs, ys)
        if args is None:
            return False
    dt = CUDA_R[x.dtype.name]
    if runtime.dry_run:   # compile.dry_run records numba launches only
        return True
    ws = _workspace(Bn * M * N * K)
    s = runtime.stream()
    stream = 0 if isinstance(s, int) else int(s.handle)
    full = _ex_args(args, x, y, out, precision)
    api = _state["api"]
    try:
        if not (isinstance(api, _Nvmath) and blaslt.gemm(
                full, dt, stream, ws, WORKSPACE, lambda: api.gemm(stream, ws, WORKSPACE, full))):
            api.gemm(stream, ws, WORKSPACE, full)
    except Exception as e:   # noqa: BLE001 - name the product that failed
        raise RuntimeError(f"cuBLAS GEMM failed for {x.dtype.name} batch={Bn} M={M} N={N} "
                           f"K={K} (precision={precision}): {e}") from e
    return True


def gemm_bias(x, xs, y, ys, out, M, N, K, precision, bias, residual=None) -> bool:
    """out (M, N contiguous) = x @ y + bias[None, :] (+ residual) as one cuBLASLt call with the
    BIAS epilogue (epilogue.py); False, having launched nothing, when that cannot be done here
    (no GPU or nvmath, not float32 / bfloat16 / float16 throughout, a layout cuBLAS reads only
    after a copy, a misaligned or
    strided bias, a residual not laid out like out, no cuBLASLt algorithm): the caller then runs
    the product and the bias add apart. x/y as for gemm(), unbatched."""
    if bias.shape != (N,) or (N > 1 and bias.strides != (1,)):
        return False
    if residual is not None and (residual.dtype != out.dtype or residual.shape != out.shape
                                 or not residual.is_contiguous()):
        return False
    full = _lt_args(x, xs, y, ys, out, bias, M, N, K, precision)
    if full is None:
        return False
    c = out if residual is None else residual
    return _lt_call(full, out, c, bias, residual is not None, "BIAS", (M, N, K, precision))


def gemm_bgrad(x, xs, y, ys, out, grad, M, N, K, precision, side: str) -> bool:
    """out (M, N contiguous) = x @ y and grad = the operand on `side` summed over k ("x":
    grad[m] = sum_k x[m, k]; "y": grad[n] = sum_k y[k, n]) as one cuBLASLt call with the
    BGRADB / BGRADA epilogue (a weight gradient and the bias gradient of the same cotangent,
    epilogue.py); False, having launched nothing, when that cannot be done here (as
    gemm_bias)."""
    if grad.size != (M if side == "x" else N) or not grad.is_contiguous():
        return False
    full = _lt_args(x, xs, y, ys, out, grad, M, N, K, precision)
    if full is None:
        return False
    # cuBLAS's A is y and its B is x (column-major C^T = Y^T X^T)
    return _lt_call(full, out, out, grad, False, "BGRADA" if side == "y" else "BGRADB",
                    (M, N, K, precision))


def _lt_args(x, xs, y, ys, out, vec, M, N, K, precision):
    """cublasGemmStridedBatchedEx's arguments for an unbatched x @ y into out (float32,
    bfloat16 or float16 throughout) with
    the epilogue's vector `vec` (a bias or its gradient, 16-byte aligned); None when cuBLASLt
    cannot take them here (no GPU or nvmath, another dtype, a layout needing a copy)."""
    if (x.dtype.name not in ("float32",) + HALF or any(a.dtype != x.dtype for a in (y, out, vec))
            or not available(x.dtype) or not isinstance(_state["api"], _Nvmath)
            or _ptr(vec) % 16):
        return None
    args = plan(1, M, N, K, xs, ys)
    if args is None or min(M, N, K) < 1:
        return None
    return _ex_args(args, x, y, out, precision)


def _ex_args(args, x, y, out, precision):
    """cublasGemmStridedBatchedEx's arguments (after the handle) from plan()'s `args`: alpha =
    1, beta = 0 in host memory, cuBLAS's A = y and B = x of x's dtype, C of out's."""
    ta, tb, m, n, k, lda, sa, ldb, sb, ldc, sc, batch = args
    dt, dc = CUDA_R[x.dtype.name], CUDA_R[out.dtype.name]
    scal = "float64" if x.dtype.name == "float64" else "float32"
    return (ta, tb, m, n, k, _ONE[scal].ctypes.data, _ptr(y), dt, lda, sa, _ptr(x), dt, ldb,
            sb, _ZERO[scal].ctypes.data, _ptr(out), dc, ldc, sc, batch,
            compute_type(x.dtype, precision), GEMM_DEFAULT)


def _lt_call(full, out, c, vec, residual: bool, epilogue: str, what) -> bool:
    aligns = (blaslt._align(full[6]), blaslt._align(full[10]),
              min(blaslt._align(_ptr(out)), blaslt._align(_ptr(c))))
    choice = blaslt.bias_choice(full, residual, aligns, WORKSPACE, epilogue)
    if choice is None:
        return False
    if runtime.dry_run:   # compile.dry_run records numba launches only
        return True
    M, N, K, precision = what
    ws = _workspace(M * N * K)
    s = runtime.stream()
    stream = 0 if isinstance(s, int) else int(s.handle)
    beta = (_ONE if residual else _ZERO)["float32"].ctypes.data
    try:
        blaslt.run_bias(choice, full, _ptr(vec), _ptr(c), beta, stream, ws, WORKSPACE)
    except Exception as e:   # name the product that failed
        raise RuntimeError(f"cuBLASLt {epilogue} GEMM failed for M={M} N={N} K={K} "
                           f"(precision={precision}): {e}") from e
    return True
