"""Tensor-core TF32 and bf16 instructions for generated kernels: inline PTX numba intrinsics.

`mma_tf32` is one warp's `mma.sync.m16n8k8` (D = A . B + C; A 16x8 row-major, B 8x8
column-major, tf32 inputs, float32 accumulators). Lane l = 4 g + t (g = l // 4, t = l % 4)
holds A[g, t], A[g + 8, t], A[g, t + 4], A[g + 8, t + 4]; B[t, g], B[t + 4, g]; and
C/D[g, 2t], C/D[g, 2t + 1], C/D[g + 8, 2t], C/D[g + 8, 2t + 1]. `tf32` rounds a float32 to
tf32 (cvt.rna: nearest, ties away from zero). The simulator cannot run inline PTX: generated
kernels carry Python emulations instead (attention_tc_sim.SIM_SOURCE), through shared memory.
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



# bfloat16: mma.sync.m16n8k16 (A 16x16 row-major, B 16x8 column-major, bf16 pairs packed in
# 32-bit registers, the lower-indexed element in the low half; float32 accumulators). Lane
# l = 4 g + t holds A[g, 2t:2t+2], A[g + 8, 2t:2t+2], A[g, 2t+8:2t+10], A[g + 8, 2t+8:2t+10];
# B[2t:2t+2, g], B[2t+8:2t+10, g]; C/D as m16n8k8's.
_MMA_BF16 = ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
             "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")


@intrinsic
def mma_bf16(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """(d0, d1, d2, d3) = this lane's part of A . B + C for bf16 A, B (packed uint32 pairs)."""
    f32, u32 = types.float32, types.uint32
    sig = types.UniTuple(f32, 4)(*([u32] * 6 + [f32] * 4))

    def codegen(context, builder, sig, args):
        fty, ity = ir.FloatType(), ir.IntType(32)
        fnty = ir.FunctionType(ir.LiteralStructType([fty] * 4), [ity] * 6 + [fty] * 4)
        asm = ir.InlineAsm(fnty, _MMA_BF16, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f")
        res = builder.call(asm, list(args))
        return context.make_tuple(builder, sig.return_type,
                                  [builder.extract_value(res, i) for i in range(4)])
    return sig, codegen


@intrinsic
def pack_bf16(typingctx, lo, hi):
    """uint32 holding lo (low half) and hi (high half) rounded to bfloat16 (nearest even)."""
    sig = types.uint32(types.float32, types.float32)

    def codegen(context, builder, sig, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.FloatType(), ir.FloatType()])
        asm = ir.InlineAsm(fnty, "cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f")
        return builder.call(asm, [args[1], args[0]])
    return sig, codegen


@intrinsic
def u2f(typingctx, x):
    """The float32 whose bits are the uint32 x (a bfloat16 in the high half widens exactly)."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return sig, codegen
