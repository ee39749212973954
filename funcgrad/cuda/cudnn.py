"""cuDNN through ctypes: convolution forward, backward-data and backward-filter calls on the
launch stream, with descriptors, heuristic algorithm and workspace size cached per geometry.

libcudnn.so.9 is found in an `nvidia` wheel on sys.path (torch's, or the optional `cudnn`
extra: `pip install 'funcgrad[cudnn]'`, nvidia-cudnn-cu13), else on the loader's path. The
calls are cuDNN's convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter)
with an algorithm chosen once per geometry: cudnnGet*Algorithm_v7's heuristic candidates,
timed by cudnnFind*AlgorithmEx on scratch buffers (FUNCGRAD_CUDNN_FIND=0: the heuristics'
first), never while a graph is captured (a plan's dry run meets every geometry first, so its
capture reuses the cached choice and workspace size), and a workspace the caller takes from
the pool. Each call is issued on runtime.stream(): inside a jit plan's capture it is recorded
into the CUDA graph and replayed with no host work.

Why this API and not the `nvidia-cudnn-frontend` Python package: both replay from a captured
CUDA graph (benchmarks/cudnn_probe.py on an H200, 2026-12-02: a 3x3 NHWC conv replayed from a
torch CUDA graph matched eager through either route). This one needs nothing but libcudnn
(torch's, or the `cudnn` extra), takes raw pointers with no Python work between the call and
the library, and its choice is cached per geometry before any capture; the frontend's graph
API would add an 11.6 MB wheel and its own per-call Python dispatch. Its limits, handled by the
caller (conv_cudnn.py): padding is symmetric and filters are packed (KCRS or KRSC).
FUNCGRAD_CUDNN=0 turns cuDNN off (numba kernels everywhere).

Example:
    >>> import funcgrad.cuda.cudnn as cudnn
    >>> cudnn.backend()                                                 # doctest: +SKIP
    'cudnn 91500'
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading

import numpy as np

from funcgrad.compile import switches
from funcgrad.cuda import runtime

# cudnnDataType_t, cudnnTensorFormat_t, cudnnConvolutionMode_t, cudnnMathType_t
DATA = {"float32": 0, "float64": 1, "float16": 2, "bfloat16": 9}
NCHW, NHWC = 0, 1
CROSS_CORRELATION = 1
DEFAULT_MATH, TENSOR_OP_MATH, FMA_MATH = 0, 1, 3
MAX_WORKSPACE = 1 << 30      # bytes: algorithms needing more are skipped
# FUNCGRAD_CUDNN_FIND=0: take the heuristics' first algorithm; else (the default) time the
# candidates once per geometry on scratch buffers (cudnnFind*AlgorithmEx, as torch's
# cudnn.benchmark and XLA's autotuning do), outside any capture
FIND = os.environ.get("FUNCGRAD_CUDNN_FIND", "1").strip() != "0"
switches.register(__name__, "FIND")   # a change keys jit's shared cache apart
FIND_WORKSPACE = 512 << 20
KINDS = ("fwd", "bwd_data", "bwd_filter")
INT_MAX = 2 ** 31 - 1


class _Perf(ctypes.Structure):
    """cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t (the three share this layout)."""
    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int),
                ("mathType", ctypes.c_int), ("reserved", ctypes.c_int * 3)]


_lock = threading.Lock()
_state: dict = {}      # "lib", "handle", "why", "version", "stream"
_plans: dict = {}      # geometry key -> _Plan or None (cuDNN has no algorithm for it)
_ONE = {"f": ctypes.c_float(1.0), "d": ctypes.c_double(1.0)}
_ZERO = {"f": ctypes.c_float(0.0), "d": ctypes.c_double(0.0)}


def _candidates():
    found = []
    for p in sys.path:
        for sub in ("nvidia/cudnn/lib", "nvidia/cu13/lib", "nvidia/cu12/lib", "torch/lib"):
            found += glob.glob(os.path.join(p or ".", sub, "libcudnn.so.9"))
    return sorted(set(found)) + ["libcudnn.so.9"]


def _preload_deps(libdir: str) -> None:
    """cuDNN's engines dlopen libcublasLt and libnvrtc by name: load those of the wheels."""
    from funcgrad.cuda import blas
    blas._preload_cublas()
    for f in sorted(glob.glob(os.path.join(os.path.dirname(libdir), "*", "lib",
                                           "libnvrtc.so.*"))):
        try:
            ctypes.CDLL(f, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass


def _load():
    """(lib, handle) or (None, None) with _state["why"], decided once per process."""
    if "why" in _state:
        return _state.get("lib"), _state.get("handle")
    with _lock:
        if "why" in _state:
            return _state.get("lib"), _state.get("handle")
        why = ""
        if runtime.sim_requested():
            why = "numba's CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1)"
        elif os.environ.get("FUNCGRAD_CUDNN", "1").strip() == "0":
            why = "FUNCGRAD_CUDNN=0"
        else:
            from funcgrad.cuda.probe import is_available, unavailable_reason
            if not is_available():
                why = f"no usable GPU ({unavailable_reason()})"
        if not why:
            why = _open()
        _state["why"] = why
    return _state.get("lib"), _state.get("handle")


def _open() -> str:
    runtime.load().current_context()   # the primary context, shared with cuDNN
    tried = []
    for path in _candidates():
        try:
            if os.path.isabs(path):
                _preload_deps(os.path.dirname(path))
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            lib.cudnnGetVersion.restype = ctypes.c_size_t
            lib.cudnnGetErrorString.restype = ctypes.c_char_p
            h = ctypes.c_void_p()
            st = lib.cudnnCreate(ctypes.byref(h))
            if st != 0:
                tried.append(f"{path}: cudnnCreate returned {st}")
                continue
            for name in ("cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                         "cudnnConvolutionBackwardFilter"):
                getattr(lib, name)
        except (OSError, AttributeError) as e:
            tried.append(f"{path}: {e}")
            continue
        _state.update(lib=lib, handle=h, version=int(lib.cudnnGetVersion()), path=path,
                      stream=None)
        return ""
    return "libcudnn.so.9 not loaded (pip install 'funcgrad[cudnn]'): " + "; ".join(tried)


def backend() -> str:
    """"cudnn <version>" when convolutions can run on cuDNN here, else "numba: <reason>"."""
    lib, _ = _load()
    if lib is None:
        return f"numba: {_state['why']}"
    return f"cudnn {_state['version']}"


def available(dtype) -> bool:
    return np.dtype(dtype).name in DATA and _load()[0] is not None


def _check(st, what):
    if st != 0:
        msg = _state["lib"].cudnnGetErrorString(st).decode()
        raise RuntimeError(f"cuDNN {what} failed: {msg} ({st})")


def _ints(xs):
    return (ctypes.c_int * len(xs))(*[int(v) for v in xs])


def _tensor(lib, dt, dims, strides):
    d = ctypes.c_void_p()
    _check(lib.cudnnCreateTensorDescriptor(ctypes.byref(d)), "cudnnCreateTensorDescriptor")
    _check(lib.cudnnSetTensorNdDescriptor(d, dt, len(dims), _ints(dims), _ints(strides)),
           f"cudnnSetTensorNdDescriptor(dims={list(dims)}, strides={list(strides)})")
    return d


def _filter(lib, dt, fmt, dims):
    d = ctypes.c_void_p()
    _check(lib.cudnnCreateFilterDescriptor(ctypes.byref(d)), "cudnnCreateFilterDescriptor")
    _check(lib.cudnnSetFilterNdDescriptor(d, dt, fmt, len(dims), _ints(dims)),
           f"cudnnSetFilterNdDescriptor(dims={list(dims)})")
    return d


class _Plan:
    __slots__ = ("algo", "conv", "descs", "kind", "scal", "ws")


def _math_type(dtype, precision) -> int:
    name = np.dtype(dtype).name
    if name in ("float16", "bfloat16"):
        return TENSOR_OP_MATH
    if name == "float32" and precision in ("tensorfloat32", "bfloat16"):
        return DEFAULT_MATH      # TF32 tensor cores permitted (Ampere and later)
    return FMA_MATH              # full float32 (funcgrad's default), float64


def plan(kind, dtype, x, w, y, fmt, pads, strides, dils, groups, precision):
    """The cached plan of one convolution, or None when cuDNN has no algorithm for it.

    kind is "fwd" (y = conv(x, w)), "bwd_data" (x = conv^T(y, w)) or "bwd_filter"
    (w = conv^T(x, y)); x and y are (dims, strides) in (N, C, spatial...) order, w the filter
    dims (K, C / groups, spatial...) packed in format fmt (NCHW or NHWC)."""
    key = (kind, np.dtype(dtype).name, x, w, y, fmt, pads, strides, dils, groups, precision)
    if key in _plans:
        return _plans[key]
    lib, handle = _load()
    dt = DATA[np.dtype(dtype).name]
    comp = DATA["float64"] if dt == DATA["float64"] else DATA["float32"]
    p = _Plan()
    p.kind, p.scal = kind, "d" if dt == DATA["float64"] else "f"
    xd, yd = _tensor(lib, dt, *x), _tensor(lib, dt, *y)
    wd = _filter(lib, dt, fmt, w)
    cd = ctypes.c_void_p()
    _check(lib.cudnnCreateConvolutionDescriptor(ctypes.byref(cd)),
           "cudnnCreateConvolutionDescriptor")
    _check(lib.cudnnSetConvolutionNdDescriptor(cd, len(pads), _ints(pads), _ints(strides),
                                               _ints(dils), CROSS_CORRELATION, comp),
           f"cudnnSetConvolutionNdDescriptor(pads={pads}, strides={strides}, dils={dils})")
    _check(lib.cudnnSetConvolutionGroupCount(cd, groups), "cudnnSetConvolutionGroupCount")
    _check(lib.cudnnSetConvolutionMathType(cd, _math_type(dtype, precision)),
           "cudnnSetConvolutionMathType")
    n = 16
    perf = (_Perf * n)()
    got = ctypes.c_int(0)
    if kind == "fwd":
        st = lib.cudnnGetConvolutionForwardAlgorithm_v7(handle, xd, wd, cd, yd, n,
                                                        ctypes.byref(got), perf)
    elif kind == "bwd_data":
        st = lib.cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, wd, yd, cd, xd, n,
                                                             ctypes.byref(got), perf)
    else:
        st = lib.cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, xd, yd, cd, wd, n,
                                                               ctypes.byref(got), perf)
    fma = _math_type(dtype, precision) == FMA_MATH
    choice = _first(perf, got.value, fma) if st == 0 else None
    if choice is not None and FIND and runtime._stream is None:   # not while capturing
        try:
            found = _find(kind, lib, handle, dtype, (xd, x), (wd, w), (yd, y), cd, perf,
                          got.value, fma)
        except Exception:   # noqa: BLE001 - the heuristics' choice stands
            found = None
        if found is not None:
            choice = found
    if choice is None:
        _plans[key] = None
        return None
    # the algorithm's math type (its tensor-core variant is listed apart); FMA for full fp32
    _check(lib.cudnnSetConvolutionMathType(cd, FMA_MATH if fma else choice.mathType),
           "cudnnSetConvolutionMathType")
    ws = ctypes.c_size_t(0)
    size_fn = {"fwd": (lib.cudnnGetConvolutionForwardWorkspaceSize, (xd, wd, cd, yd)),
               "bwd_data": (lib.cudnnGetConvolutionBackwardDataWorkspaceSize, (wd, yd, cd, xd)),
               "bwd_filter": (lib.cudnnGetConvolutionBackwardFilterWorkspaceSize,
                              (xd, yd, cd, wd))}[kind]
    st = size_fn[0](handle, *size_fn[1], choice.algo, ctypes.byref(ws))
    if st != 0:
        _plans[key] = None
        return None
    p.algo, p.conv, p.descs, p.ws = choice.algo, cd, (xd, wd, yd), int(ws.value)
    if len(_plans) > 4096:
        _plans.clear()
    _plans[key] = p
    return p


def _first(perf, n, fma):
    """The first usable result (fastest first, as cuDNN sorts them): succeeded, within the
    workspace limit, and an FMA algorithm when full float32 is asked for."""
    for r in perf[:n]:
        if r.status == 0 and r.memory <= MAX_WORKSPACE and (
                not fma or r.mathType in (FMA_MATH, DEFAULT_MATH)):
            return r
    return None


def _extent(dims, strides, itemsize) -> int:
    return (sum((d - 1) * s for d, s in zip(dims, strides)) + 1) * itemsize


def _find(kind, lib, handle, dtype, x, w, y, cd, perf, n, fma):
    """cudnnFind*AlgorithmEx over scratch copies of the operands (timed runs on the legacy
    stream): the fastest usable result, or None."""
    from funcgrad.cuda.arrays import device_pointer
    cuda = runtime.load()
    it = np.dtype(dtype).itemsize
    need = max((r.memory for r in perf[:n] if r.status == 0), default=0)
    wsb = min(max(need, 1), FIND_WORKSPACE)
    bufs = [cuda.device_array(max(nb, 1), np.uint8) for nb in (
        _extent(*x[1], it), int(np.prod(w[1])) * it, _extent(*y[1], it), wsb)]
    X, W, Y, WS = (ctypes.c_void_p(device_pointer(b)) for b in bufs)
    _check(lib.cudnnSetStream(handle, None), "cudnnSetStream")
    _state["stream"] = 0
    res = (_Perf * 16)()
    got = ctypes.c_int(0)
    size = ctypes.c_size_t(wsb)
    if kind == "fwd":
        st = lib.cudnnFindConvolutionForwardAlgorithmEx(
            handle, x[0], X, w[0], W, cd, y[0], Y, 16, ctypes.byref(got), res, WS, size)
    elif kind == "bwd_data":
        st = lib.cudnnFindConvolutionBackwardDataAlgorithmEx(
            handle, w[0], W, y[0], Y, cd, x[0], X, 16, ctypes.byref(got), res, WS, size)
    else:
        st = lib.cudnnFindConvolutionBackwardFilterAlgorithmEx(
            handle, x[0], X, y[0], Y, cd, w[0], W, 16, ctypes.byref(got), res, WS, size)
    cuda.synchronize()
    del bufs
    if st != 0:
        return None
    return _first(res, got.value, fma)


def execute(p: _Plan, xp: int, wp: int, yp: int, ws_ptr: int) -> None:
    """Run plan p on device pointers (x, w, y as plan() named them) and a workspace of p.ws
    bytes, on the launch stream."""
    lib, handle = _state["lib"], _state["handle"]
    s = runtime.stream()
    stream = 0 if isinstance(s, int) else int(s.handle)
    if _state["stream"] != stream:
        _check(lib.cudnnSetStream(handle, ctypes.c_void_p(stream)), "cudnnSetStream")
        _state["stream"] = stream
    one, zero = ctypes.byref(_ONE[p.scal]), ctypes.byref(_ZERO[p.scal])
    xd, wd, yd = p.descs
    X, W, Y, WS = (ctypes.c_void_p(v) for v in (xp, wp, yp, ws_ptr))
    size = ctypes.c_size_t(p.ws)
    if p.kind == "fwd":
        st = lib.cudnnConvolutionForward(handle, one, xd, X, wd, W, p.conv, p.algo, WS, size,
                                         zero, yd, Y)
    elif p.kind == "bwd_data":
        st = lib.cudnnConvolutionBackwardData(handle, one, wd, W, yd, Y, p.conv, p.algo, WS,
                                              size, zero, xd, X)
    else:
        st = lib.cudnnConvolutionBackwardFilter(handle, one, xd, X, yd, Y, p.conv, p.algo, WS,
                                                size, zero, wd, W)
    _check(st, {"fwd": "cudnnConvolutionForward", "bwd_data": "cudnnConvolutionBackwardData",
                "bwd_filter": "cudnnConvolutionBackwardFilter"}[p.kind])
