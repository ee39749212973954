"""Vector global-memory loads and stores for generated kernels: numba intrinsics for one 8- or
16-byte access of 2 or 4 consecutive elements (ld.global.v2 / v4, st.global.v2 / v4).

NVVM merges consecutive scalar accesses only where it can prove their alignment, which a
generated kernel's runtime offsets never let it; fusion.py calls these where it checked the
alignment at launch. The simulator cannot run them (its kernels keep scalar accesses).
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.cuda.extending import intrinsic


def _ptr(context, builder, aryty, ary, idx, n):
    a = context.make_array(aryty)(context, builder, ary)
    vty = ir.VectorType(context.get_data_type(aryty.dtype), n)
    return builder.bitcast(builder.gep(a.data, [idx]), vty.as_pointer()), vty


def vector_load(n, align=None):
    """The typer of an intrinsic (x, i) -> (x[i], ..., x[i + n - 1]) by one vector load,
    declared `align` bytes aligned (default itemsize * n)."""
    def typer(typingctx, arr, idx):
        if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
            return None
        sig = types.UniTuple(arr.dtype, n)(arr, idx)

        def codegen(context, builder, sig, args):
            ptr, _ = _ptr(context, builder, sig.args[0], args[0], args[1], n)
            size = context.get_abi_sizeof(context.get_data_type(sig.args[0].dtype))
            vec = builder.load(ptr, align=align or size * n)
            return context.make_tuple(builder, sig.return_type,
                                      [builder.extract_element(vec, ir.IntType(32)(i))
                                       for i in range(n)])
        return sig, codegen
    return typer


def vector_store(n, align=None):
    """The typer of an intrinsic (x, i, a0, ..., a{n-1}): x[i + k] = a_k by one vector store,
    declared `align` bytes aligned (default itemsize * n)."""
    def codegen(context, builder, sig, args):
        dt = sig.args[0].dtype
        ptr, vty = _ptr(context, builder, sig.args[0], args[0], args[1], n)
        vec = ir.Constant(vty, ir.Undefined)
        for i, (v, t) in enumerate(zip(args[2:], sig.args[2:])):
            vec = builder.insert_element(vec, context.cast(builder, v, t, dt), ir.IntType(32)(i))
        size = context.get_abi_sizeof(context.get_data_type(dt))
        builder.store(vec, ptr, align=align or size * n)
        return context.get_dummy_value()

    def ok(arr, idx):
        return isinstance(arr, types.Array) and isinstance(idx, types.Integer)
    # (numba's intrinsics take no *args: one typer per width)
    if n == 2:
        def typer(typingctx, arr, idx, a, b):
            if ok(arr, idx):
                return types.none(arr, idx, a, b), codegen
    else:
        def typer(typingctx, arr, idx, a, b, c, d):
            if ok(arr, idx):
                return types.none(arr, idx, a, b, c, d), codegen
    return typer


# ldv4(x, i) -> (x[i], ..., x[i + 3]); stv4(x, i, a, b, c, d): x[i:i + 4] = a, b, c, d. The
# element address must be aligned to the access (itemsize * n bytes; at most 16)
ldv2, ldv4 = intrinsic(vector_load(2)), intrinsic(vector_load(4))
stv2, stv4 = intrinsic(vector_store(2)), intrinsic(vector_store(4))
