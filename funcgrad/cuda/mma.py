"""Tensor-core TF32 instructions for generated kernels: inline PTX as numba intrinsics (sm_80+).

`mma_tf32` is one warp's `mma.sync.m16n8k8` (D = A . B + C; A 16x8 row-major, B 8x8
column-major, tf32 inputs, float32 accumulators). Lane l = 4 g + t (g = l // 4, t = l % 4)
holds A[g, t], A[g + 8, t], A[g, t + 4], A[g + 8, t + 4]; B[t, g], B[t + 4, g]; and
C/D[g, 2t], C/D[g, 2t + 1], C/D[g + 8, 2t], C/D[g + 8, 2t + 1]. `tf32` rounds a float32 to
tf32 (cvt.rna: nearest, ties away from zero). The simulator cannot run inline PTX: generated
kernels carry Python emulations instead (attention_tc.SIM_SOURCE), through shared memory.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic

_MMA = ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")


@intrinsic
def mma_tf32(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """(d0, d1, d2, d3) = this lane's part of A . B + C (layout: the module docstring)."""
    f32 = types.float32
    sig = types.UniTuple(f32, 4)(*([f32] * 10))

    def codegen(context, builder, sig, args):
        fty, ity = ir.FloatType(), ir.IntType(32)
        fnty = ir.FunctionType(ir.LiteralStructType([fty] * 4), [ity] * 6 + [fty] * 4)
        asm = ir.InlineAsm(fnty, _MMA, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")
        ins = [builder.bitcast(a, ity) for a in args[:6]] + list(args[6:])
        res = builder.call(asm, ins)
        return context.make_tuple(builder, sig.return_type,
                                  [builder.extract_value(res, i) for i in range(4)])
    return sig, codegen


@intrinsic
def tf32(typingctx, x):
    """x rounded to tf32 (10 mantissa bits), as a float32."""
    sig = types.float32(types.float32)

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.FloatType()])
        asm = ir.InlineAsm(fnty, "cvt.rna.tf32.f32 $0, $1;", "=r,f")
        return builder.bitcast(builder.call(asm, list(args)), ir.FloatType())
    return sig, codegen

