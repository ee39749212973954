"""Implicitly differentiated solvers (lax.custom_linear_solve, lax.custom_root), closure
conversion (funcgrad.closure_convert) and lax.ragged_dot.

A solver's result is differentiated through the equation it solves, not through the solver's
iterations: the reverse rule solves the transposed system once (custom_vjp), so any solver
works, including while_loop ones. The functions whose parameters matter (`matvec`, `f`) are
closure-converted: the arrays they close over become explicit inputs that get cotangents.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.core.dtypes import dtype_kind
from funcgrad.transforms.ad import vjp
from funcgrad.core import aval_of, eval_expr, trace_to_expr
from funcgrad.transforms.custom import custom_vjp
from funcgrad.tree_util import tree_flatten, tree_map, tree_unflatten


def _inexact(c) -> bool:
    return dtype_kind(np.dtype(aval_of(c).dtype)) in "fc"


def closure_convert(fun: Callable, *example_args) -> tuple[Callable, list]:
    """Trace `fun` at `example_args` and hoist the float arrays it closes over into explicit
    arguments (jax.closure_convert), for custom_vjp rules that need their cotangents.

    Returns `(converted, consts)`: `converted(*args, *consts)` computes `fun(*args)` with the
    closed-over values replaced by `consts`; values of other dtypes stay closed over.

    Example:
        >>> import funcgrad, numpy as np
        >>> w = np.array([3.0, 4.0])
        >>> f, consts = funcgrad.closure_convert(lambda x: (w * x).sum(), 2.0)
        >>> float(f(2.0, *consts)), float(f(2.0, np.ones(2))), len(consts)
        (14.0, 4.0, 1)
    """
    flat, in_tree = tree_flatten(example_args)
    out_tree = []

    def flat_fun(*xs):
        leaves, tree = tree_flatten(fun(*tree_unflatten(in_tree, list(xs))))
        out_tree.append(tree)
        return leaves

    expr, consts, _ = trace_to_expr(flat_fun, [aval_of(x) for x in flat])
    hoist = [i for i, c in enumerate(consts) if _inexact(c)]
    n_in = len(flat)

    def converted(*args):
        leaves = tree_flatten(args[:len(example_args)])[0]
        if len(leaves) != n_in:
            raise TypeError(f"closure_convert: the converted function takes {n_in} array "
                            f"leaves and {len(hoist)} consts, got {len(leaves)} leaves")
        cs = list(consts)
        for i, c in zip(hoist, args[len(example_args):]):
            cs[i] = c
        return tree_unflatten(out_tree[0], eval_expr(expr, leaves, cs))

    return converted, [consts[i] for i in hoist]


def _split_aux(out, has_aux):
    return out if has_aux else (out, None)


def custom_linear_solve(matvec: Callable, b: Any, solve: Callable,
                        transpose_solve: Callable | None = None, symmetric: bool = False,
                        has_aux: bool = False):
    """x = solve(matvec, b), differentiated as the solution of matvec(x) = b
    (lax.custom_linear_solve).

    The gradient with respect to `b` is `transpose_solve(vecmat, x_bar)` (or
    `solve(matvec, x_bar)` when `symmetric`), and the arrays `matvec` closes over get
    -(d matvec(x) / d params)^T b_bar; the solver itself is never differentiated. Reverse
    mode (grad, vjp) only: it is a custom_vjp. `has_aux`: solve returns (x, aux), aux
    undifferentiated.

    Example:
        >>> import funcgrad, numpy as np, funcgrad.numpy as fnp
        >>> from funcgrad import lax
        >>> a = np.array([[4.0, 1.0], [1.0, 3.0]])
        >>> def f(a, b):
        ...     return lax.custom_linear_solve(lambda x: a @ x, b,
        ...                                    lambda mv, r: fnp.linalg.solve(a, r),
        ...                                    symmetric=True).sum()
        >>> round(float(funcgrad.grad(f, argnums=1)(a, np.ones(2))[0]), 6)
        0.181818
    """
    mv, mv_consts = closure_convert(matvec, b)
    n_mc = len(mv_consts)
    # the solvers may close over traced values too: hoist them (they get no cotangent)
    sv, s_consts = closure_convert(lambda r: solve(matvec, r), b)
    n_sc = len(s_consts)
    if symmetric or transpose_solve is None:
        tv, t_consts = None, []
    else:
        def vecmat(u):
            return vjp(matvec, tree_map(fnp.zeros_like, b))[1](u)[0]
        tv, t_consts = closure_convert(lambda r: transpose_solve(vecmat, r), b)

    @custom_vjp
    def lin_solve(rhs, *cs):
        return _split_aux(sv(rhs, *cs[n_mc:n_mc + n_sc]), has_aux)

    def fwd(rhs, *cs):
        x, aux = lin_solve(rhs, *cs)
        return (x, aux), (x, cs)

    def bwd(res, ct):
        x, cs = res
        mc, sc, tc = cs[:n_mc], cs[n_mc:n_mc + n_sc], cs[n_mc + n_sc:]
        x_bar = ct[0]
        if symmetric:
            b_bar = _split_aux(sv(x_bar, *sc), has_aux)[0]
        elif tv is None:
            raise TypeError("custom_linear_solve: transpose_solve is required for reverse "
                            "mode unless symmetric=True")
        else:
            b_bar = _split_aux(tv(x_bar, *tc), has_aux)[0]
        c_bar = ()
        if n_mc:
            _, c_vjp = vjp(lambda *c: mv(x, *c), *mc)
            c_bar = c_vjp(tree_map(lambda t: -t, b_bar))
        return (b_bar,) + tuple(c_bar) + (None,) * (len(sc) + len(tc))

    lin_solve.defvjp(fwd, bwd)
    x, aux = lin_solve(b, *mv_consts, *s_consts, *t_consts)
    return (x, aux) if has_aux else x


def custom_root(f: Callable, initial_guess: Any, solve: Callable, tangent_solve: Callable,
                has_aux: bool = False):
    """The root x of f found by `solve(f, initial_guess)`, differentiated implicitly
    (lax.custom_root): with f(x*, params) = 0, the arrays f closes over get
    -(df/dparams)^T lambda where lambda solves (df/dx)^T lambda = x_bar by
    `tangent_solve(g, y)` (which solves the linear g(z) = y). Reverse mode only.

    Example:
        >>> import funcgrad
        >>> from funcgrad import lax
        >>> def sqrt_newton(c):
        ...     def solve(f, x):
        ...         for _ in range(30):
        ...             x = x - f(x) / (2 * x)
        ...         return x
        ...     return lax.custom_root(lambda x: x * x - c, 1.0, solve,
        ...                            lambda g, y: y / g(1.0))
        >>> round(float(funcgrad.grad(sqrt_newton)(4.0)), 6)   # 1 / (2 sqrt 4)
        0.25
    """
    fc, f_consts = closure_convert(lambda x: _split_aux(f(x), has_aux)[0], initial_guess)
    n_fc = len(f_consts)
    sv, s_consts = closure_convert(lambda x0: solve(f, x0), initial_guess)

    @custom_vjp
    def root(x0, *cs):
        return _split_aux(sv(x0, *cs[n_fc:]), has_aux)

    def fwd(x0, *cs):
        x, aux = root(x0, *cs)
        return (x, aux), (x, cs)

    def bwd(res, ct):
        x, cs = res
        fcs = cs[:n_fc]
        _, fx_vjp = vjp(lambda z: fc(z, *fcs), x)
        lam = tangent_solve(lambda u: fx_vjp(u)[0], ct[0])
        c_bar = ()
        if fcs:
            _, c_vjp = vjp(lambda *c: fc(x, *c), *fcs)
            c_bar = c_vjp(tree_map(lambda t: -t, lam))
        return (None,) + tuple(c_bar) + (None,) * len(s_consts)

    root.defvjp(fwd, bwd)
    x, aux = root(initial_guess, *f_consts, *s_consts)
    return (x, aux) if has_aux else x


def ragged_dot(lhs, rhs, group_sizes, precision=None, preferred_element_type=None,
               group_offset=None, out_sharding=None):
    """Grouped matmul (lax.ragged_dot): lhs [m, k] is cut into consecutive row groups of
    `group_sizes` [g]; group i multiplies rhs[i] ([g, k, n]), giving [m, n]. Rows past
    sum(group_sizes) are zero. A composition (one batched matmul and a select), so it
    differentiates in lhs and rhs, batches and jits.

    Example:
        >>> import numpy as np
        >>> from funcgrad import lax
        >>> lhs = np.ones((3, 2))
        >>> rhs = np.stack([np.eye(2), 2 * np.eye(2)])
        >>> lax.ragged_dot(lhs, rhs, np.array([1, 2])).tolist()
        [[1.0, 1.0], [2.0, 2.0], [2.0, 2.0]]
    """
    if group_offset is not None:
        raise NotImplementedError("ragged_dot: group_offset is not supported (nor by JAX's "
                                  "CPU lowering)")
    lhs, rhs, gs = fnp.asarray(lhs), fnp.asarray(rhs), fnp.asarray(group_sizes)
    if lhs.ndim != 2 or rhs.ndim != 3 or gs.ndim != 1 or lhs.shape[1] != rhs.shape[1] \
            or gs.shape[0] != rhs.shape[0]:
        raise ValueError(f"ragged_dot: expected lhs [m, k], rhs [g, k, n] and group_sizes [g], "
                         f"got {tuple(lhs.shape)}, {tuple(rhs.shape)} and {tuple(gs.shape)}")
    if dtype_kind(gs.dtype) not in "iu":
        raise TypeError(f"ragged_dot: group_sizes must be integers, got {gs.dtype.name}")
    m, g = lhs.shape[0], rhs.shape[0]
    ends = fnp.cumsum(gs)
    rows = fnp.arange(m, dtype=ends.dtype)
    gid = fnp.sum(rows[:, None] >= ends[None, :], axis=1)          # group of each row (g: none)
    full = fnp.einsum("mk,gkn->gmn", lhs, rhs, precision=precision)
    onehot = fnp.transpose(gid[:, None] == fnp.arange(g, dtype=gid.dtype)[None, :])
    out = fnp.sum(fnp.where(onehot[:, :, None], full, 0), axis=0)
    if preferred_element_type is not None:
        out = fnp.asarray(out, preferred_element_type)
    return out
