"""jit: casts between 16-bit floats and float32 around a product fused into its GEMM.

- `convert_element_type(dot_general(x, y), float32)` with bfloat16 / float16 operands, where
  the product feeds only the convert (an LM head's `(h @ wte.T).astype(float32)`), becomes one
  cuBLAS call whose C is float32: the fp32 accumulator is stored as it is, never rounded to 16
  bits and widened again, and the 16-bit logits are never written (S1: 824 MB and a 2.5 GB pass
  fewer). That is XLA's algebraic simplification of convert(dot) into a dot of the wider result
  type; the values are the unrounded ones (closer to the exact product).
- `dot_general(float32(x), float32(y))` with x, y of one 16-bit type (what
  `preferred_element_type=float32` binds) reads x and y themselves: a 16-bit tensor-core GEMM
  writing float32, equal to the float32 product (16-bit values multiply exactly in fp32 and both
  accumulate in fp32), with no float32 copies of the operands.
FUNCGRAD_CAST_GEMM=0: off.
"""
from __future__ import annotations

import os

import numpy as np

from funcgrad import prims as P
from funcgrad.compile import switches
from funcgrad.core import ShapedArray, Var
from funcgrad.cuda import matmul
from funcgrad.cuda.epilogue import _readers, fuse_into_reader

ENABLED = os.environ.get("FUNCGRAD_CAST_GEMM", "1") != "0"
switches.register(__name__, "ENABLED")   # a change keys jit's shared cache apart
HALF = ("bfloat16", "float16")


class CastGemm:
    """A plan step: the dot_general eqn `dot` and the convert `conv` of its result to float32,
    as one product written in float32."""

    FRESH = True   # its result is a new buffer (rows_inplace may write over it)

    def __init__(self, dot, conv):
        self.dot, self.conv = dot, conv
        self.outputs = [conv.out]
        self.inputs = [x for x in dot.inputs if isinstance(x, Var)]

    def describe(self) -> str:
        return f"dot_general->float32 -> {self.conv.out.aval.str_short()}"

    def run(self, env: dict, read) -> None:
        p = self.dot.params
        aval = ShapedArray(self.dot.out.aval.shape, np.float32)
        env[self.conv.out] = matmul.dot_general(
            *(read(x) for x in self.dot.inputs), p["dimension_numbers"], aval,
            p.get("precision"))


class WideGemm:
    """A plan step: the float32 dot_general eqn `dot` of two widened 16-bit operands, run on
    the 16-bit values `srcs` (cuBLAS: 16-bit A and B, float32 C)."""

    FRESH = True

    def __init__(self, dot, srcs):
        self.dot, self.srcs = dot, srcs
        self.outputs = [dot.out]
        self.inputs = list(srcs)

    def describe(self) -> str:
        return (f"dot_general({self.srcs[0].aval.dtype.name} operands) -> "
                f"{self.dot.out.aval.str_short()}")

    def run(self, env: dict, read) -> None:
        p = self.dot.params
        env[self.dot.out] = matmul.dot_general(*(read(x) for x in self.srcs),
                                               p["dimension_numbers"], self.dot.out.aval,
                                               p.get("precision"))


def _widened(c, v):
    """The 16-bit source x when cluster c makes v as float32(x) of an operand x (one of its
    inputs), else None."""
    e = next((e for e in c.eqns if e.out is v), None)
    if e is None or c.recomputed or e.prim is not P.convert_element_type_p:
        return None
    x = e.inputs[0]
    if (not isinstance(x, Var) or x in c.members or x.aval.dtype.name not in HALF
            or v.aval.dtype != np.float32):
        return None
    return x


def _widening(c, h):
    """The convert eqn when cluster c is exactly float32(h), else None."""
    if c.recomputed or len(c.eqns) != 1 or len(c.outputs) != 1:
        return None
    e = c.eqns[0]
    if (e.prim is not P.convert_element_type_p or e.inputs[0] is not h
            or e.out is not c.outputs[0] or e.out.aval.dtype != np.float32):
        return None
    return e


def fuse(steps: list, expr) -> list:
    """steps with each 16-bit dot_general whose only reader is a cluster widening it to float32
    made one ("rows", CastGemm) step at the cluster's place, and each float32 dot_general of
    two widened operands of one 16-bit type a ("rows", WideGemm) step reading them (a widening
    cluster read by nothing else is dropped)."""
    if not ENABLED:
        return steps
    return _fuse_wide(_fuse_cast(steps, expr), expr)


def _fuse_wide(steps: list, expr) -> list:
    readers = _readers(steps)
    outs = {o for o in expr.outs if isinstance(o, Var)}
    made = {}
    for i, (kind, s) in enumerate(steps):
        if kind == "fused":
            for o in s.outputs:
                made[o] = i
    drop, put = set(), {}
    for i, (kind, s) in enumerate(steps):
        if (kind != "eqn" or s.prim is not P.dot_general_p or s.out.aval.dtype != np.float32
                or not all(isinstance(x, Var) and x in made for x in s.inputs)):
            continue
        w = [_widened(steps[made[x]][1], x) for x in s.inputs]
        if any(v is None for v in w) or w[0].aval.dtype != w[1].aval.dtype:
            continue
        put[i] = ("rows", WideGemm(s, w))
        for x in s.inputs:
            if readers.get(x, set()) <= set(put) and x not in outs:
                drop.add(made[x])
    # (a widened operand two replaced products read is dropped once both are replaced)
    return [put.get(i, st) for i, st in enumerate(steps)
            if i not in drop or any(o in outs or readers.get(o, set()) - set(put)
                                    for o in steps[i][1].outputs)]


def _fuse_cast(steps: list, expr) -> list:
    def make(s, cluster):
        if (s.out.aval.dtype.name not in HALF
                or any(x.aval.dtype != s.out.aval.dtype for x in s.inputs)):
            return None
        conv = _widening(cluster, s.out)
        return None if conv is None else ("rows", CastGemm(s, conv))
    return fuse_into_reader(steps, expr, make)
