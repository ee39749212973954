"""Vector shared-memory loads and stores for the SIMT attention kernels: numba intrinsics (one 8- or
16-byte access of 2 or 4 consecutive elements at a 16-byte-aligned word index: ld.shared.v2 / v4,
st.shared.v2 / v4).

NVVM merges consecutive scalar loads only where it can prove their alignment, which it does not
inside the product loops (pointer recurrences); these make the VEC tile layout's float4 reads
explicit. The simulator cannot run them: its kernels keep scalar loads (attention_src.py).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic

from .vecmem import _ptr, vector_load

# (x[i], x[i + 1]) and (x[i], ..., x[i + 3]): i a multiple of 2 (4), x's data 16-byte aligned.
# Declared 8 / 16 bytes aligned whatever the dtype: a float64 tile's 4-word index is only known
# to be 16-byte aligned (vecmem's default would declare 32)
ld2 = intrinsic(vector_load(2, align=8))
ld4 = intrinsic(vector_load(4, align=16))


def _store(n, align):
    """The typer of an intrinsic (x, i, a0, ..., a{n-1}): x[i + k] = a_k by one vector store
    declared `align` bytes aligned."""
    def codegen(context, builder, sig, args):
        dt = sig.args[0].dtype
        ptr, vty = _ptr(context, builder, sig.args[0], args[0], args[1], n)
        vec = ir.Constant(vty, ir.Undefined)
        for i, (v, t) in enumerate(zip(args[2:], sig.args[2:])):
            vec = builder.insert_element(vec, context.cast(builder, v, t, dt), ir.IntType(32)(i))
        builder.store(vec, ptr, align=align)
        return context.get_dummy_value()

    def ok(arr, idx):
        return isinstance(arr, types.Array) and isinstance(idx, types.Integer)
    if n == 2:
        def typer(typingctx, arr, idx, a, b):
            if ok(arr, idx):
                return types.none(arr, idx, a, b), codegen
    else:
        def typer(typingctx, arr, idx, a, b, c, d):
            if ok(arr, idx):
                return types.none(arr, idx, a, b, c, d), codegen
    return typer


# x[i:i + 2] = a, b and x[i:i + 4] = a, b, c, d (the same alignment as ld2 / ld4)
st2 = intrinsic(_store(2, 8))
st4 = intrinsic(_store(4, 16))
