"""16-bit flash attention on cuDNN's fused SDPA: forward (with or without its logsumexp) and
backward graphs built once per geometry through the `nvidia-cudnn-frontend` Python API, run on
the launch stream (recorded into a jitted step's CUDA graph).

The bfloat16 / float16 attention primitives run here when cuDNN can take them, as JAX's
`dot_product_attention(implementation="cudnn")` and torch's SDPA do on Hopper: cuDNN's kernels
(warp-group MMAs, pipelined loads) run 3-5x the rate of the mma.sync kernels of
attention_bf.py, which stay the fallback (no frontend, FUNCGRAD_CUDNN_ATTN=0, a geometry cuDNN
refuses, the simulator). Layouts are funcgrad's [B, T, N, H] read through their strides, as
cuDNN's [B, N, T, H] dims with permuted strides; the statistics are cuDNN's float32 logsumexp
of the scaled logits per query row ([B, N, T], natural log, the same quantity as
attention_stats' first column). The backward is cuDNN's deterministic algorithm
(`use_deterministic_algorithm=True`; FUNCGRAD_CUDNN_ATTN_DETERMINISTIC=0 lets cuDNN choose), so
gradients are bit-reproducible as the numba kernels' are.

Graphs are built (validated, planned, their workspace sized) outside any capture: a plan's
first, uncaptured call meets every geometry, and its capture finds them cached; a geometry
cuDNN cannot take is remembered as None and the caller falls back.

Example:
    >>> from funcgrad.cuda import cudnn_attn
    >>> cudnn_attn.backend()                                           # doctest: +SKIP
    'cudnn-frontend 1.32.0 over cudnn 91500'
"""
from __future__ import annotations

import os
import threading

import numpy as np

from funcgrad.compile import switches
from funcgrad.core.dtypes import bfloat16
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import pool

DETERMINISTIC = os.environ.get("FUNCGRAD_CUDNN_ATTN_DETERMINISTIC", "1").strip() != "0"
MAX_HEAD_DIM = 128
_lock = threading.Lock()
_state: dict = {}      # "mod" (the frontend), "handle", "stream", "why"
_graphs: dict = {}     # geometry key -> (graph, {role: tensor}, workspace bytes) or None
calls = {"fwd": 0, "fwd_stats": 0, "bwd": 0}   # cuDNN SDPA executions (or dry-run records)


def _load():
    """The frontend module, or None with _state["why"]; decided once per process."""
    if "why" in _state:
        return _state.get("mod")
    with _lock:
        if "why" in _state:
            return _state.get("mod")
        why = ""
        if runtime.sim_requested():
            why = "numba's CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1)"
        elif os.environ.get("FUNCGRAD_CUDNN_ATTN", "1").strip() == "0":
            why = "FUNCGRAD_CUDNN_ATTN=0"
        elif os.environ.get("FUNCGRAD_CUDNN", "1").strip() == "0":
            why = "FUNCGRAD_CUDNN=0"
        else:
            why = _open()
        _state["why"] = why
    return _state.get("mod")


def _open() -> str:
    from funcgrad.cuda.probe import is_available, unavailable_reason
    if not is_available():
        return f"no usable GPU ({unavailable_reason()})"
    from funcgrad.cuda import cudnn as _capi
    _capi._load()   # libcudnn.so.9 (and its cuBLASLt / nvrtc) loaded globally first
    try:
        import cudnn as mod
    except Exception as e:   # noqa: BLE001 (not installed, or its libcudnn missing)
        return f"nvidia-cudnn-frontend not importable ({e}); pip install 'funcgrad[cudnn]'"
    try:
        if int(mod.backend_version()) < 90000:
            return f"cuDNN {mod.backend_version()} is older than 9.0"
        runtime.load().current_context()
        _state.update(mod=mod, handle=mod.create_handle(), stream=None,
                      version=f"cudnn-frontend {getattr(mod, '__version__', '?')} over cudnn "
                              f"{mod.backend_version()}")
    except Exception as e:   # noqa: BLE001
        return f"cuDNN frontend failed to start: {e!r}"
    return ""


def backend() -> str:
    """"cudnn-frontend <v> over cudnn <v>" when 16-bit attention runs on cuDNN here, else
    "numba: <reason>"."""
    if _load() is None:
        return f"numba: {_state['why']}"
    return _state["version"]


def usable(q, k, v, causal=None) -> bool:
    """Whether 16-bit attention of these shapes (avals or buffers: q [B, T, N, H], k [B, S, K,
    H], v [B, S, K, Hv]) may go to cuDNN: bf16 / f16, no empty axis, head dims multiples of 8
    up to 128, and the frontend loaded. cuDNN's own check runs when a graph is built."""
    dt = np.dtype(q.dtype)
    if dt not in (np.dtype(bfloat16), np.dtype(np.float16)):
        return False
    if 0 in tuple(q.shape) + tuple(k.shape) + tuple(v.shape):
        return False
    h, hv = q.shape[3], v.shape[3]
    if h % 8 or hv % 8 or h > MAX_HEAD_DIM or hv > MAX_HEAD_DIM:
        return False
    return _load() is not None


# whether a CUDA plan rewrites 16-bit training attention to the saved-lse pair (attention_fwdl /
# attention_bwdl): None (the default) where cuDNN loads; True always (tests: the fallback kernels
# then run the pair), False never
REWRITE = None
switches.register(__name__, "REWRITE", "DETERMINISTIC")   # a change keys jit's cache apart


def supports(q, k, v, params) -> bool:
    """The CUDA plan's test for compile/rewrites/attention_lse.rewrite_saved (avals)."""
    if REWRITE is False:
        return False
    if REWRITE:
        return np.dtype(q.dtype) in (np.dtype(bfloat16), np.dtype(np.float16))
    return usable(q, k, v)


def _dims(x):
    """cuDNN's [B, heads, rows, dim] dims and strides of a [B, rows, heads, dim] buffer."""
    b, r, n, d = x.shape
    sb, sr, sn, sd = x.strides
    return [b, n, r, d], [sb, sn, sr, sd]


def _aligned(*bufs) -> bool:
    """cuDNN wants 16-byte aligned pointers, unit last strides and 8-element-aligned others.
    Decided from offsets and strides alone (blocks start 256-byte aligned: the pool's and the
    memory plan's), so a plan's dry run, whose addresses are not yet the arena's, and its
    capture choose alike."""
    for x in bufs:
        if x.strides[-1] != 1 and x.shape[-1] > 1:
            return False
        if any(s * x.dtype.itemsize % 16 for n, s in zip(x.shape[:-1], x.strides[:-1])
               if n > 1):
            return False
        if x.offset * x.dtype.itemsize % 16:
            return False
    return True


def _ptr(x) -> int:
    return x.block.ptr() + x.offset * x.dtype.itemsize


def _stats_geom(q):
    b, t, n, _ = q.shape
    return [b, n, t, 1], [n * t, t, 1, 1]


def _build(kind, dt, geo, scale, causal):
    """A built frontend graph for `kind` ("fwd", "fwd_stats", "bwd") and the geometry geo
    (role -> (dims, strides)), or None (cuDNN refused it; the reason is kept in _state)."""
    mod = _state["mod"]
    io = mod.data_type.BFLOAT16 if dt == np.dtype(bfloat16) else mod.data_type.HALF
    g = mod.pygraph(io_data_type=io, intermediate_data_type=mod.data_type.FLOAT,
                    compute_data_type=mod.data_type.FLOAT, handle=_state["handle"])
    t = {}

    def tensor(role, dtype=io):
        dims, strides = geo[role]
        t[role] = g.tensor(name=role, dim=list(dims), stride=list(strides), data_type=dtype)
        return t[role]
    q, k, v = tensor("q"), tensor("k"), tensor("v")
    if kind in ("fwd", "fwd_stats"):
        train = kind == "fwd_stats"
        try:
            o, st = g.sdpa(name="sdpa", q=q, k=k, v=v, generate_stats=train,
                           attn_scale=float(scale), use_causal_mask=bool(causal))
        except TypeError:   # frontends before generate_stats
            o, st = g.sdpa(name="sdpa", q=q, k=k, v=v, is_inference=not train,
                           attn_scale=float(scale), use_causal_mask=bool(causal))
        o.set_output(True).set_dim(list(geo["o"][0])).set_stride(list(geo["o"][1]))
        t["o"] = o
        if train:
            st.set_output(True).set_dim(list(geo["stats"][0])).set_stride(
                list(geo["stats"][1])).set_data_type(mod.data_type.FLOAT)
            t["stats"] = st
    else:
        o, do = tensor("o"), tensor("do")
        st = tensor("stats", mod.data_type.FLOAT)
        kw = dict(name="sdpa_backward", q=q, k=k, v=v, o=o, dO=do, stats=st,
                  attn_scale=float(scale), use_causal_mask=bool(causal))
        if DETERMINISTIC:
            kw["use_deterministic_algorithm"] = True
        dq, dk, dv = g.sdpa_backward(**kw)
        for role, x in (("dq", dq), ("dk", dk), ("dv", dv)):
            x.set_output(True).set_dim(list(geo[role][0])).set_stride(list(geo[role][1]))
            t[role] = x
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([mod.heur_mode.A, mod.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, t, int(g.get_workspace_size())


def _graph(kind, dt, bufs, scale, causal):
    geo = {}
    for role, x in bufs.items():
        geo[role] = _stats_geom(bufs["q"]) if role == "stats" else _dims(x)
    key = (kind, dt.name, float(scale), bool(causal),
           tuple((r, tuple(d), tuple(s)) for r, (d, s) in sorted(geo.items())))
    if key in _graphs:
        return _graphs[key]
    if runtime._stream is not None:   # a graph being captured (as cudnn.py): never build then
        return None
    try:
        got = _build(kind, dt, geo, scale, causal)
    except Exception as e:   # noqa: BLE001 (cudnnGraphNotSupportedError and kin)
        _state.setdefault("refused", []).append(f"{kind} {geo}: {e}")
        got = None
    _graphs[key] = got
    return got


def _execute(kind, entry, ptrs):
    g, tensors, ws = entry
    calls[kind] += 1
    if runtime.dry_run:
        pool().empty((max(ws, 1),), np.uint8)
        return
    mod, handle = _state["mod"], _state["handle"]
    s = runtime.stream()
    stream = 0 if isinstance(s, int) else int(s.handle)
    if _state["stream"] != stream:
        mod.set_stream(handle=handle, stream=stream)
        _state["stream"] = stream
    work = pool().empty((max(ws, 1),), np.uint8)
    pack = {tensors[r]: ptrs[r] for r in tensors}
    g.execute(pack, _ptr(work), handle=handle)


def forward(q, k, v, o, scale, causal, lse=None) -> bool:
    """o = attention(q, k, v) on cuDNN (and lse, a float32 [B, N, T] C-contiguous buffer, the
    rows' logsumexp, when given); False, having launched nothing, when cuDNN cannot."""
    if not usable(q, k, v) or not _aligned(q, k, v, o):
        return False
    kind = "fwd" if lse is None else "fwd_stats"
    bufs = {"q": q, "k": k, "v": v, "o": o}
    if lse is not None:
        if not _aligned(lse):
            return False
        bufs["stats"] = lse
    entry = _graph(kind, np.dtype(q.dtype), bufs, scale, causal)
    if entry is None:
        return False
    _execute(kind, entry, {r: _ptr(x) for r, x in bufs.items()})
    return True


def backward(q, k, v, o, do, lse, dq, dk, dv, scale, causal) -> bool:
    """dq, dk, dv (views written through their strides) of attention(q, k, v) from its output
    o, the output's cotangent do and the forward's float32 logsumexp lse [B, N, T]; False,
    having launched nothing, when cuDNN cannot."""
    if not usable(q, k, v) or not _aligned(q, k, v, o, do, lse, dq, dk, dv):
        return False
    bufs = {"q": q, "k": k, "v": v, "o": o, "do": do, "stats": lse, "dq": dq, "dk": dk,
            "dv": dv}
    entry = _graph("bwd", np.dtype(q.dtype), bufs, scale, causal)
    if entry is None:
        return False
    _execute("bwd", entry, {r: _ptr(x) for r, x in bufs.items()})
    return True


def refused() -> list:
    """The geometries cuDNN refused in this process, with its reasons (for diagnosis)."""
    return list(_state.get("refused", ()))
