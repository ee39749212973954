"""jit: softmax_xent_bwd writing its dlogits over the logits it reads (plan steps "rows").

An LM head's loss step holds two arrays of [B*T, V]: the logits (the forward GEMM's result,
read by softmax_xent and by softmax_xent_bwd) and the backward's dlogits (read by the two
GEMMs of the head's gradients). The logits die at the backward, which reads each element
before it writes the same element (rows_wide.py, and the warp-per-row kernels of rows.py hold
a row in registers before they store it), so the backward may write into the logits' memory:
at GPT-2 small's V 50,304, T 1024, batch 8 that is 1,572 MiB less at the step's peak.

`fuse` makes a softmax_xent_bwd eqn such an ("rows", XentBwdInPlace) step when its logits'
memory is the plan's own and no one else can see it: the logits are made inside the plan by
a GEMM or a fused kernel (each a fresh buffer), possibly through views (reshape, transpose,
a no-op convert, ...), and no variable viewing that memory is a result of the plan or is
read by a later step. A step that read the logits earlier (the forward's softmax_xent) runs
first: in a plan run step by step because the steps run in order, in a concurrent graph
because the rewiring (concurrent.py) orders a write after every read of the same bytes.
Eager calls (no plan) never write in place. FUNCGRAD_XENT_INPLACE=0 turns the matching off.
"""
from __future__ import annotations

import os

from funcgrad import prims as P
from funcgrad.compile import switches
from funcgrad.core import Var
from funcgrad.cuda import rows
from funcgrad.cuda.inplace import VIEWS, step_reads
from funcgrad.prims import rows_bwd as FB

ENABLED = os.environ.get("FUNCGRAD_XENT_INPLACE", "1") != "0"
switches.register(__name__, "ENABLED")   # a change keys jit's shared cache apart


class XentBwdInPlace:
    """A plan step: softmax_xent_bwd eqn `eqn` storing its result over its logits operand."""

    def __init__(self, eqn):
        self.eqn = eqn
        self.outputs = [eqn.out]
        self.inputs = [x for x in eqn.inputs if isinstance(x, Var)]

    def describe(self) -> str:
        return f"softmax_xent_bwd -> {self.eqn.out.aval.str_short()} (in place over its logits)"

    def run(self, env: dict, read) -> None:
        """Launch the backward kernel with the logits' buffer as its output (a fresh one when
        that buffer is not a plain contiguous array of the result's type)."""
        e = self.eqn
        x, lab, ct = (read(v) for v in e.inputs)
        aval = e.out.aval
        inplace = x.is_contiguous() and x.dtype == aval.dtype and tuple(x.shape) == aval.shape
        if rows.fits(x.shape[-1]):
            out = rows.run("softmax_xent_bwd", [x, lab, ct], aval.shape, aval.dtype,
                           into=x if inplace else None)
        else:
            from funcgrad.cuda import rows_wide
            out = rows_wide.xent_bwd(x, lab, ct, out=x if inplace else None)
        env[e.out] = out


def _fresh(kind, s) -> bool:
    """Whether plan step (kind, s) gives each of its results memory of its own (a "rows" step
    says so: cast_gemm's products written in float32, S1's bf16 LM head)."""
    if kind == "eqn":
        return s.prim is P.dot_general_p
    if kind == "rows":
        return getattr(s, "FRESH", False)
    return kind in ("gemm", "fused")


def fuse(steps: list, expr) -> list:
    """steps with each softmax_xent_bwd eqn whose logits' memory nothing else can see (see
    the module docstring) made an ("rows", XentBwdInPlace) step."""
    if not ENABLED:
        return steps
    made, last = {}, {}
    for i, (kind, s) in enumerate(steps):
        for o in ([s.out] if kind == "eqn" else s.outputs):
            made.setdefault(o, i)
        for x in step_reads(kind, s):
            last[x] = i
    outs = {o for o in expr.outs if isinstance(o, Var)}
    root, group = {}, {}     # var -> the var whose memory it views; root -> its views
    for i, (kind, s) in enumerate(steps):
        if kind == "eqn" and s.prim.name in VIEWS and isinstance(s.inputs[0], Var):
            r = root.get(s.inputs[0], s.inputs[0])
            root[s.out] = r
            group.setdefault(r, [r]).append(s.out)
    put = {}
    for i, (kind, e) in enumerate(steps):
        if kind != "eqn" or e.prim is not FB.softmax_xent_bwd_p or not isinstance(
                e.inputs[0], Var):
            continue
        r = root.get(e.inputs[0], e.inputs[0])
        j = made.get(r)
        if j is None or not _fresh(*steps[j]):
            continue     # an argument, a constant, or memory a step may share
        views = group.get(r, [r])
        if any(v in outs or last.get(v, -1) > i for v in views):
            continue
        if any(v in e.inputs[1:] for v in views):
            continue
        put[i] = ("rows", XentBwdInPlace(e))
    return [put.get(i, st) for i, st in enumerate(steps)]
