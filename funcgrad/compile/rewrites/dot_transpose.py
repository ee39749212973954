"""Rewrite: transpose(dot_general(a, b)) swapping the two free groups -> dot_general(b, a).

A tied LM head (`h @ wte.T`, GPT-2) differentiates to the weight's gradient as
dot_general(h, dlogits) -> [d, V] and then transpose -> [V, d]. On CUDA the transpose is a
view, so what reads it (the add of the embedding's scatter-add gradient) reads a [V, d] array
whose consecutive elements lie V apart: at GPT-2 small's 50,304 x 768 that is an uncoalesced
pass over 147 MiB. dot_general(dlogits, h) makes the [V, d] array itself, by the same GEMM
with its operands swapped (C^T = B^T A^T: the same products and sums; the GEMM library may
add them in another order).

Matched when the dot_general has no batch dimensions, its result is read by the transpose
alone and is no output, and the permutation puts b's free dims (in order) before a's. The CUDA
plan applies it to its expression (cuda/plan.py); the CPU plan has its own handling of (x . y)^T
(its line fusion computes it as y . x inside the consumer).
"""
from __future__ import annotations

from funcgrad import prims as P
from funcgrad.core import Eqn, Expr, Var


def _swaps(d, perm) -> bool:
    """Whether perm of dot_general d's result is (b's free dims, a's free dims)."""
    (lc, rc), (lb, rb) = d.params["dimension_numbers"]
    if lb or rb:
        return False
    na = len(d.inputs[0].aval.shape) - len(lc)
    nb = len(d.inputs[1].aval.shape) - len(rc)
    return tuple(perm) == tuple(range(na, na + nb)) + tuple(range(na))


def rewrite(expr: Expr, consts: list) -> tuple[Expr, list]:
    """Each matching transpose(dot_general(a, b)) -> dot_general(b, a) at the transpose."""
    made, reads = {}, {}
    for e in expr.eqns:
        made[e.out] = e
        for x in e.inputs:
            if isinstance(x, Var):
                reads[x] = reads.get(x, 0) + 1
    for o in expr.outs:
        if isinstance(o, Var):
            reads[o] = reads.get(o, 0) + 1
    swap, drop = {}, set()
    for e in expr.eqns:
        if e.prim is not P.transpose_p or not isinstance(e.inputs[0], Var):
            continue
        d = made.get(e.inputs[0])
        if (d is None or d.prim is not P.dot_general_p or reads.get(d.out) != 1
                or not _swaps(d, e.params["permutation"])):
            continue
        (lc, rc), _ = d.params["dimension_numbers"]
        params = dict(d.params, dimension_numbers=((tuple(rc), tuple(lc)), ((), ())))
        swap[e] = Eqn(P.dot_general_p, [d.inputs[1], d.inputs[0]], params, e.out, d.src,
                      d.tag)
        drop.add(d)
    if not swap:
        return expr, consts
    eqns = [swap.get(e, e) for e in expr.eqns if e not in drop]
    return Expr(expr.in_binders, eqns, expr.outs, expr.n_consts), consts
