"""Vector shared-memory loads for the SIMT attention kernels: numba intrinsics (one 8- or 16-byte
load of 2 or 4 consecutive elements at a 16-byte-aligned word index: ld.shared.v2 / v4).

NVVM merges consecutive scalar loads only where it can prove their alignment, which it does not
inside the product loops (pointer recurrences); these make the VEC tile layout's float4 reads
explicit. The simulator cannot run them: its kernels keep scalar loads (attention_src.py).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic


def _vector_load(n):
    def typer(typingctx, arr, idx):
        if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
            return None
        sig = types.UniTuple(arr.dtype, n)(arr, idx)

        def codegen(context, builder, sig, args):
            aryty = sig.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = builder.gep(ary.data, [args[1]])
            vty = ir.VectorType(context.get_value_type(aryty.dtype), n)
            vec = builder.load(builder.bitcast(ptr, vty.as_pointer()), align=4 * n)
            return context.make_tuple(builder, sig.return_type,
                                      [builder.extract_element(vec, ir.IntType(32)(i))
                                       for i in range(n)])
        return sig, codegen
    return typer


# (x[i], x[i + 1]) and (x[i], ..., x[i + 3]): i a multiple of 2 (4), x's data 16-byte aligned
ld2 = intrinsic(_vector_load(2))
ld4 = intrinsic(_vector_load(4))
