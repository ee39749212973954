"""bfloat16 and the float8 storage types on the CUDA backend: which lowerings take them.

bfloat16 buffers are 16-bit storage (funcgrad/cuda/half.py). The kernels in NATIVE load and
store it themselves and compute in float32: elementwise ops and casts, views and layout kernels,
reductions (float32 accumulators), gathers and scatters (scatter_add sums in float32, no
atomics), dot_general (cuBLAS bf16 with fp32 accumulation), the fused row primitives and their
backward, flash attention (mma.sync bf16 tensor cores), dynamic slices and loops. Every
other primitive given bfloat16 operands runs on float32 copies and rounds its results back to
bfloat16, as XLA's bfloat16 normalization does for ops without a bf16 kernel (`WIDENED`:
argsort, convolutions and windows, linalg, attention_delta); their
products at the default precision take TF32, exact on bfloat16 values. The float8 types (`STORAGE_ONLY_DTYPES`)
move only: views, layout kernels, gathers and dynamic slices take them as bytes; any other
primitive raises TypeError naming the primitive, the dtype and the user's line.
"""
from __future__ import annotations

import numpy as np

from funcgrad.core import ShapedArray, user_frame_src
from funcgrad.core.dtypes import STORAGE_ONLY_DTYPES, bfloat16
from funcgrad.cuda import elementwise as ew

F32 = np.dtype(np.float32)
# primitives whose moves copy bits only: any storage dtype
MOVES = frozenset({"broadcast_in_dim", "reshape", "transpose", "slice", "rev", "pad",
                   "concatenate", "take", "scatter", "dynamic_slice", "dynamic_update_slice",
                   "stop_gradient", "copy", "loop_run", "loop_run_effect", "loop_out"})
# primitives with bfloat16 kernels of their own (besides the elementwise table's)
NATIVE = MOVES | frozenset({
    "convert_element_type", "iota", "reduce_sum", "reduce_prod", "reduce_max", "reduce_min",
    "argmax", "argmin", "scatter_add", "dot_general", "softmax", "log_softmax", "softmax_xent",
    "layer_norm", "rms_norm", "softmax_bwd", "log_softmax_bwd", "softmax_xent_bwd",
    "layer_norm_bwd", "rms_norm_bwd",
    # bfloat16 flash attention on cuDNN or tensor cores (cudnn_attn.py, attention_bfl.py);
    # attention_fwdl / attention_bwdl carry the float32 lse's bits (attention_saved.py);
    # attention_delta (the float32 path's statistics) stays widened
    "attention", "attention_stats", "attention_dq", "attention_dkv", "attention_bwd",
    "attention_fwdl", "attention_bwdl"})
_STORAGE = frozenset(STORAGE_ONLY_DTYPES)
WIDENED: set = set()   # names of the primitives that ran widened in this process (tests)


def _avals(aval):
    """The result avals (one, a tuple or list of them; anything without a dtype is skipped)."""
    avals = list(aval) if isinstance(aval, (tuple, list)) else [aval]
    return [a for a in avals if hasattr(a, "dtype")]


def _widen(aval):
    if isinstance(aval, (tuple, list)):
        return type(aval)(_widen(a) for a in aval)
    return ShapedArray(aval.shape, F32) if getattr(aval, "dtype", None) == bfloat16 else aval


def _narrow(res, aval):
    if isinstance(aval, (tuple, list)):
        return type(res)(_narrow(r, a) for r, a in zip(res, aval))
    if getattr(aval, "dtype", None) == bfloat16 and res.dtype != bfloat16:
        return ew.run("convert_element_type", [res], bfloat16)
    return res


def _guard(prim, fn, native: bool, move: bool):
    name = prim.name
    tc = name.startswith("attention")   # lowerings that read params.get("precision")

    def lower(bufs, params, aval):
        dts = [b.dtype for b in bufs] + [a.dtype for a in _avals(aval)]
        bad = next((d for d in dts if d in _STORAGE), None)
        if bad is not None and not move:
            raise TypeError(
                f"the CUDA backend has no {np.dtype(bad).name} kernel for primitive {name!r} "
                f"({np.dtype(bad).name} is a storage-only type: convert it with "
                f"astype(jnp.float32 or jnp.bfloat16) first)\n  at {user_frame_src()}")
        if native or bfloat16 not in dts:
            return fn(bufs, params, aval)
        WIDENED.add(name)
        ins = [ew.run("convert_element_type", [b], F32) if b.dtype == bfloat16 else b
               for b in bufs]
        if params.get("precision") is None and ("precision" in params or tc):
            # bfloat16 values are exact in TF32 (8 bits of mantissa in 10): their widened
            # products may take the TF32 tensor cores and lose nothing
            params = {**params, "precision": "tensorfloat32"}
        return _narrow(fn(ins, params, _widen(aval)), aval)
    return lower


def register(table: dict) -> None:
    """Wrap table's lowerings: bfloat16 reaches the kernels that take it, other primitives run
    widened to float32; float8 operands reach only the moves."""
    for prim, fn in list(table.items()):
        ew_native = prim.kind == "elementwise" and prim.name in ew.OPS
        native = ew_native or prim.name in NATIVE
        table[prim] = _guard(prim, fn, native, prim.name in MOVES)
