"""jit: a 16-bit product widened to float32 and nothing else is one GEMM writing float32.

`convert_element_type(dot_general(x, y), float32)` with bfloat16 / float16 operands, where the
product feeds only the convert (an LM head's `(h @ wte.T).astype(float32)`), becomes one cuBLAS
call whose C is float32: the fp32 accumulator is stored as it is, never rounded to 16 bits and
widened again, and the 16-bit logits are never written (S1: 824 MB and a 2.5 GB pass fewer).
That is XLA's algebraic simplification of convert(dot) into a dot of the wider result type; the
values are the unrounded ones (closer to the exact product). FUNCGRAD_CAST_GEMM=0: off.
"""
from __future__ import annotations

import os

import numpy as np

from funcgrad import prims as P
from funcgrad.core import ShapedArray, Var
from funcgrad.cuda import matmul
from funcgrad.cuda.epilogue import _readers

ENABLED = os.environ.get("FUNCGRAD_CAST_GEMM", "1") != "0"
HALF = ("bfloat16", "float16")


class CastGemm:
    """A plan step: the dot_general eqn `dot` and the convert `conv` of its result to float32,
    as one product written in float32."""

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
    made one ("rows", CastGemm) step at the cluster's place."""
    if not ENABLED:
        return steps
    readers = _readers(steps)
    outs = {o for o in expr.outs if isinstance(o, Var)}
    drop, put = set(), {}
    for i, (kind, s) in enumerate(steps):
        if (kind != "eqn" or s.prim is not P.dot_general_p or s.out in outs
                or s.out.aval.dtype.name not in HALF
                or any(x.aval.dtype != s.out.aval.dtype for x in s.inputs)):
            continue
        rd = readers.get(s.out, set())
        if len(rd) != 1:
            continue
        j = next(iter(rd))
        if steps[j][0] != "fused" or j in put:
            continue
        conv = _widening(steps[j][1], s.out)
        if conv is not None:
            drop.add(i)
            put[j] = ("rows", CastGemm(s, conv))
    return [put.get(i, st) for i, st in enumerate(steps) if i not in drop]
