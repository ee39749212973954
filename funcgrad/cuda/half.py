"""bfloat16 in generated kernels: 16-bit storage (uint16 bits) with explicit fp32 conversion.

numba types no array of ml_dtypes' bfloat16, so a bfloat16 DeviceBuffer's typed view is uint16
(arrays.storage_dtype) and every kernel that computes on it loads `bf16_ld(x[i])` (the bits
shifted into a float32: exact) and stores `bf16_st(v)` (float32 -> bfloat16 bits, rounding to
nearest even as JAX / ml_dtypes do; NaN stays a quiet NaN of its sign). `bf16_rnd(v)` rounds a
float32 to the nearest bfloat16 and keeps it a float32 (a fused kernel's bfloat16
intermediates: the value an unfused step would have stored). The bit casts are numba
intrinsics (LLVM bitcast) on a GPU and numpy scalar views under the simulator, which runs the
same kernels. Generated sources that use these names get the import from
runtime.module_from_source.
"""
from __future__ import annotations

import numpy as np
from numba.cuda.core import config

NAMES = ("bf16_ld", "bf16_st", "bf16_rnd")

if config.ENABLE_CUDASIM:   # (read as funcgrad.cuda.runtime.load does)
    def bits_f32(u):
        """The float32 whose bits are the uint32 `u`."""
        return np.uint32(u).view(np.float32)

    def f32_bits(f):
        """The bits of the float32 `f` as a uint32."""
        return np.float32(f).view(np.uint32)
else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def bits_f32(typingctx, u):
        """The float32 whose bits are the uint32 `u` (an LLVM bitcast)."""
        if isinstance(u, types.Integer):
            def codegen(context, builder, sig, args):
                v = context.cast(builder, args[0], sig.args[0], types.uint32)
                return builder.bitcast(v, ir.FloatType())
            return types.float32(u), codegen
        return None

    @intrinsic
    def f32_bits(typingctx, f):
        """The bits of the float32 `f` as a uint32 (an LLVM bitcast)."""
        if isinstance(f, (types.Float, types.Integer)):
            def codegen(context, builder, sig, args):
                v = context.cast(builder, args[0], sig.args[0], types.float32)
                return builder.bitcast(v, ir.IntType(32))
            return types.uint32(f), codegen
        return None


def _define():
    from numba import cuda
    from numba.cuda.types import float32, uint16, uint32

    @cuda.jit(device=True)
    def bf16_ld(h):
        return bits_f32(uint32(h) << uint32(16))

    @cuda.jit(device=True)
    def bf16_st(f):
        u = f32_bits(float32(f))
        if (u & uint32(0x7FFFFFFF)) > uint32(0x7F800000):   # NaN: quiet, sign kept
            return uint16((u >> uint32(16)) | uint32(0x40))
        return uint16((u + uint32(0x7FFF) + ((u >> uint32(16)) & uint32(1))) >> uint32(16))

    @cuda.jit(device=True)
    def bf16_rnd(f):
        u = f32_bits(float32(f))
        if (u & uint32(0x7FFFFFFF)) > uint32(0x7F800000):
            return float32(f)
        return bits_f32((u + uint32(0x7FFF) + ((u >> uint32(16)) & uint32(1)))
                        & uint32(0xFFFF0000))
    return bf16_ld, bf16_st, bf16_rnd


bf16_ld, bf16_st, bf16_rnd = _define()


def import_line(src: str) -> str:
    """The import a generated source needs for the helpers it names ("" when none)."""
    used = [n for n in NAMES if n + "(" in src]
    return f"from funcgrad.cuda.half import {', '.join(used)}\n" if used else ""


def to_bits(a: np.ndarray) -> np.ndarray:
    """Host float32 values as bfloat16 bits (uint16), rounded to nearest even (tests)."""
    import ml_dtypes
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
