"""Expressions: variables, literals, equations, (closed) expressions and their printer."""
from __future__ import annotations

import itertools

import numpy as np

from funcgrad.core.dtypes import ShapedArray

# ---------------------------------------------------------------------------------------------
# expressions
# ---------------------------------------------------------------------------------------------

class Var:
    """A variable bound once in an expression."""
    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval


class Lit:
    """A scalar literal inlined in an equation."""
    __slots__ = ("aval", "val")

    def __init__(self, val):
        self.val = np.asarray(val)
        self.aval = ShapedArray((), self.val.dtype)


class Eqn:
    """One primitive application: out = prim(*inputs, **params), bound at `src`."""
    __slots__ = ("inputs", "out", "params", "prim", "src", "tag")

    def __init__(self, prim, inputs, params, out, src, tag=None):
        self.prim, self.inputs, self.params, self.out, self.src = prim, inputs, params, out, src
        self.tag = tag  # set on rematerialized equations so that CSE keeps them apart


class Expr:
    """A jaxpr-like expression: in_binders (the first n_consts are constants), eqns, outs."""

    def __init__(self, in_binders, eqns, outs, n_consts=0):
        self.in_binders, self.eqns, self.outs, self.n_consts = in_binders, eqns, outs, n_consts

    def __str__(self):
        return pp_expr(self)

    __repr__ = __str__


class ClosedExpr:
    """An expression with the values of its constants; what `make_jaxpr` returns."""

    def __init__(self, expr: Expr, consts: list, in_tree=None, out_tree=None):
        self.expr, self.consts, self.in_tree, self.out_tree = expr, consts, in_tree, out_tree

    eqns = property(lambda self: self.expr.eqns)
    in_avals = property(lambda self: [v.aval for v in self.expr.in_binders[self.expr.n_consts:]])
    out_avals = property(lambda self: [v.aval for v in self.expr.outs])

    def __str__(self):
        return pp_expr(self.expr)

    __repr__ = __str__


def _names():
    for n in itertools.count():
        s = ""
        n += 1
        while n:
            n, r = divmod(n - 1, 26)
            s = chr(97 + r) + s
        yield s


def _fmt_param(v):
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, (Expr, ClosedExpr)):
        return "{...}"
    if callable(v) and hasattr(v, "__name__"):
        return v.__name__
    return repr(v)


def pp_expr(expr: Expr, show_src: bool = True) -> str:
    """Render an expression the way JAX prints a jaxpr, with each equation's call site."""
    names = {}
    gen = _names()

    def name(v):
        if isinstance(v, Lit):
            return repr(v.val.item())
        if v not in names:
            names[v] = next(gen)
        return names[v]

    def binder(v):
        return f"{name(v)}:{v.aval.str_short()}"

    consts = " ".join(binder(v) for v in expr.in_binders[:expr.n_consts])
    args = " ".join(binder(v) for v in expr.in_binders[expr.n_consts:])
    lines = ["{ lambda " + (consts + "; " if consts else "") + args + ". let"]
    rows = []
    for e in expr.eqns:
        params = " ".join(f"{k}={_fmt_param(v)}" for k, v in e.params.items())
        rhs = e.prim.name + (f"[{params}]" if params else "") + " " + " ".join(
            name(x) for x in e.inputs)
        rows.append((f"    {binder(e.out)} = {rhs}", e.src))
    width = max((len(r[0]) for r in rows), default=0)
    for text, src in rows:
        lines.append(text.ljust(width) + (f"    # {src}" if show_src and src else ""))
    outs = ", ".join(name(v) for v in expr.outs)
    lines.append(f"  in ({outs},) }}" if len(expr.outs) == 1 else f"  in ({outs}) }}")
    return "\n".join(lines)
