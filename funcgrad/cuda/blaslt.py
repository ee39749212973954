"""float32 GEMMs through cuBLASLt with the algorithm picked by timing (nvmath-python's bindings).

cublasGemmEx takes the algorithm cuBLAS's heuristics name first; for the mid-sized products of
a training step (4096x384x1536, 512x1024x784) another of the candidates is often faster. The
first time a product of some shape and layout runs outside a graph capture, the candidates
cuBLASLt's heuristic offers (up to CANDIDATES) and cublasGemmEx itself are each timed on the
real operands (CUDA events, a few runs); the fastest is kept for that shape and used from then
on, also inside captured graphs (where nothing can be timed: an untimed shape takes the
heuristic's first choice).

Opt-in (FUNCGRAD_GEMM_AUTOTUNE=1): measured on an H200 (2026-11-24, benchmarks/RESULTS.md) the
picks made W1 and W2 slower inside their concurrent graphs (W1 0.339 against 0.304 ms, W2
11.80 against 11.52 ms, W2 TF32 6.38 against 6.02 ms): a product timed alone on an idle GPU is
not the product that runs beside other kernels in a step. cublasGemmEx is the default.

The operands come as cublasGemmStridedBatchedEx's column-major arguments (blas.plan).
"""
from __future__ import annotations

import os

import numpy as np

from funcgrad.compile import switches
from funcgrad.cuda import runtime

CANDIDATES = 8
REPS = 3
ENABLED = os.environ.get("FUNCGRAD_GEMM_AUTOTUNE", "0") == "1"
FORCE_LT = False   # tests: take cuBLASLt's first candidate whatever the timing
switches.register(__name__, "ENABLED", "FORCE_LT")   # a change keys jit's shared cache apart

_state: dict = {}      # "lt": the binding module, "handle"
_choice: dict = {}     # key -> ("lt", (desc, layouts, algo array, index)) | ("ex", None)


def _lt():
    if "lt" not in _state:
        try:
            from nvmath.bindings import cublasLt
            _state["lt"], _state["handle"] = cublasLt, cublasLt.create()
        except Exception:   # noqa: BLE001 - no nvmath or no cuBLASLt: cublasGemmEx only
            _state["lt"] = None
    return _state["lt"]


def _set(setter, obj, attr, value, dtype):
    v = np.asarray([value], dtype)
    setter(obj, attr, v.ctypes.data, v.nbytes)


def _describe(lt, a, compute):
    """(desc, (adesc, bdesc, cdesc)) for gemm arguments `a` (blas.gemm's tuple; each matrix
    of its own cudaDataType)."""
    (ta, tb, m, n, k, _, _, at, lda, sa, _, bt, ldb, sb, _, _, ct, ldc, sc, batch, _, _) = a
    scale = 1 if compute == 70 else 0   # CUDA_R_64F for a float64 compute type, else 32F
    desc = lt.matmul_desc_create(compute, scale)
    D = lt.MatmulDescAttribute
    _set(lt.matmul_desc_set_attribute, desc, D.TRANSA, ta, np.int32)
    _set(lt.matmul_desc_set_attribute, desc, D.TRANSB, tb, np.int32)
    L = lt.MatrixLayoutAttribute
    lays = []
    for dt, (rows, cols, ld, st) in zip((at, bt, ct), (
            ((k, m) if ta else (m, k)) + (lda, sa), ((n, k) if tb else (k, n)) + (ldb, sb),
            (m, n, ldc, sc))):
        lay = lt.matrix_layout_create(dt, rows, cols, ld)
        if batch > 1:
            _set(lt.matrix_layout_set_attribute, lay, L.BATCH_COUNT, batch, np.int32)
            _set(lt.matrix_layout_set_attribute, lay, L.STRIDED_BATCH_OFFSET, st, np.int64)
        lays.append(lay)
    return desc, lays


def _heuristic(lt, desc, lays, nbytes, aligns):
    pref = lt.matmul_preference_create()
    P = lt.MatmulPreferenceAttribute
    _set(lt.matmul_preference_set_attribute, pref, P.MAX_WORKSPACE_BYTES, nbytes, np.uint64)
    for attr, al in ((P.MIN_ALIGNMENT_A_BYTES, aligns[0]), (P.MIN_ALIGNMENT_B_BYTES, aligns[1]),
                     (P.MIN_ALIGNMENT_C_BYTES, aligns[2]), (P.MIN_ALIGNMENT_D_BYTES, aligns[2])):
        _set(lt.matmul_preference_set_attribute, pref, attr, al, np.uint32)
    res = np.zeros(CANDIDATES, lt.matmul_heuristic_result_dtype)
    count = np.zeros(1, np.int32)
    a, b, c = lays
    try:
        lt.matmul_algo_get_heuristic(_state["handle"], desc, a, b, c, c, pref, CANDIDATES,
                                     res.ctypes.data, count.ctypes.data)
    finally:
        lt.matmul_preference_destroy(pref)
    return res[:int(count[0])]


def _algo_ptr(res, i) -> int:
    return res.ctypes.data + i * res.itemsize + res.dtype.fields["algo"][1]


def _run_lt(choice, a, stream, ws, nbytes):
    lt = _state["lt"]
    desc, (la, lb, lc), res, i = choice
    (_, _, _, _, _, alpha, A, _, _, _, B, _, _, _, beta, C, _, _, _, _, _, _) = a
    lt.matmul(_state["handle"], desc, alpha, A, la, B, lb, beta, C, lc, C, lc,
              _algo_ptr(res, i), ws, nbytes, stream)


def _timed(fn, reps=REPS) -> float:
    """Seconds per call of fn on the legacy stream (CUDA events; a warm-up call first)."""
    from cuda.bindings import driver as cb
    fn()
    e0, e1 = cb.cuEventCreate(0)[1], cb.cuEventCreate(0)[1]
    try:
        cb.cuEventRecord(e0, 0)
        for _ in range(reps):
            fn()
        cb.cuEventRecord(e1, 0)
        cb.cuEventSynchronize(e1)
        err, ms = cb.cuEventElapsedTime(e0, e1)
    finally:
        cb.cuEventDestroy(e0)
        cb.cuEventDestroy(e1)
    return ms / reps if int(err) == 0 else float("inf")


def _align(ptr: int) -> int:
    return min(256, ptr & -ptr) if ptr else 256


def gemm(a, dt, stream, ws, nbytes, gemm_ex) -> bool:
    """Run blas.gemm's product `a` by the fastest known way; True when done here (else the
    caller runs cublasGemmEx)."""
    if not ENABLED or dt != 0:   # float32 operands only (TF32 or fp32 compute)
        return False
    aligns = (_align(a[6]), _align(a[10]), _align(a[15]))
    key = a[:5] + a[7:10] + a[11:14] + a[16:21] + aligns
    hit = _choice.get(key)
    if hit is None:
        if runtime._keep is not None or stream != 0 or _lt() is None:
            return False   # capturing (nothing can be timed) or no cuBLASLt: cublasGemmEx
        _choice[key] = hit = _tune(a, dt, stream, ws, nbytes, gemm_ex, aligns)
    if hit[0] == "ex":
        return False
    _run_lt(hit[1], a, stream, ws, nbytes)
    return True


def _tune(a, dt, stream, ws, nbytes, gemm_ex, aligns):
    """Time cublasGemmEx and cuBLASLt's candidates on these operands; the fastest."""
    lt = _state["lt"]
    desc, lays = _describe(lt, a, a[20])
    res = _heuristic(lt, desc, lays, nbytes, aligns)
    if FORCE_LT and len(res):
        _run_lt((desc, lays, res, 0), a, stream, ws, nbytes)
        return ("lt", (desc, lays, res, 0))
    best, t_best = ("ex", None), _timed(gemm_ex)
    for i in range(len(res)):
        cand = (desc, lays, res, i)
        try:
            t = _timed(lambda cand=cand: _run_lt(cand, a, stream, ws, nbytes))
        except Exception:   # noqa: BLE001 - an algorithm that cannot run here
            continue
        if t < t_best * 0.97:      # a clear win over cublasGemmEx's choice
            best, t_best = ("lt", cand), t
    gemm_ex()   # the result: written last by the chosen way (all write the same product)
    if best[0] == "lt":
        _run_lt(best[1], a, stream, ws, nbytes)
    return best


def choices() -> dict:
    """What was picked per product: {(ta, tb, m, n, k, ...): "cublasGemmEx" | "lt algo i"}."""
    return {k: ("cublasGemmEx" if v[0] == "ex" else f"lt candidate {v[1][3]}")
            for k, v in _choice.items()}


# ---------------------------------------------------------------------------------------------
# the bias epilogues (epilogue.py): D = A B (+ C) + bias, or D = A B and the bias gradient
# ---------------------------------------------------------------------------------------------

_epi: dict = {}        # key -> (desc, layouts, heuristic results, 0) or None (not offered)


def bias_choice(a, residual: bool, aligns, nbytes: int, epilogue: str = "BIAS"):
    """cuBLASLt's first algorithm for blas.gemm's product `a` with `epilogue`: "BIAS"
    (a vector of D's type added over D's rows, column-major: the row-major output's last axis;
    with `residual`, beta = 1 reading C), "BGRADA" / "BGRADB" (the sums of A's rows / B's
    columns over k written to the bias pointer); None when cuBLASLt is missing or offers none
    within `nbytes` of workspace."""
    key = a[:5] + a[7:10] + a[11:14] + a[16:21] + tuple(aligns) + (residual, epilogue)
    if key not in _epi:
        lt = _lt()
        _epi[key] = None if lt is None else _bias_plan(lt, a, aligns, nbytes, epilogue)
    return _epi[key]


def _bias_plan(lt, a, aligns, nbytes, epilogue):
    desc, lays = _describe(lt, a, a[20])
    D = lt.MatmulDescAttribute
    _set(lt.matmul_desc_set_attribute, desc, D.EPILOGUE, int(lt.Epilogue[epilogue]), np.uint32)
    # the bias (or its gradient) in D's type: float32, or bfloat16 / float16 products' own
    _set(lt.matmul_desc_set_attribute, desc, D.BIAS_DATA_TYPE, a[16], np.int32)
    try:
        res = _heuristic(lt, desc, lays, nbytes, aligns)
    except Exception:   # noqa: BLE001 - an epilogue this cuBLASLt rejects: the unfused path
        return None
    return (desc, lays, res, 0) if len(res) else None


def run_bias(choice, a, bias_ptr: int, c_ptr: int, beta_ptr: int, stream, ws, nbytes):
    """Launch `choice` (bias_choice) on blas.gemm's arguments `a`: D = A B + beta C (+ bias, or
    the bias gradient written at bias_ptr), C read at c_ptr (D's layout; may be D itself)."""
    lt = _state["lt"]
    desc, (la, lb, lc), res, i = choice
    _set(lt.matmul_desc_set_attribute, desc, lt.MatmulDescAttribute.BIAS_POINTER, bias_ptr,
         np.uint64)
    (_, _, _, _, _, alpha, A, _, _, _, B, _, _, _, _, D, _, _, _, _, _, _) = a
    lt.matmul(_state["handle"], desc, alpha, A, la, B, lb, beta_ptr, c_ptr, lc, D, lc,
              _algo_ptr(res, i), ws, nbytes, stream)
