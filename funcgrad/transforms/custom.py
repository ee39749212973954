"""custom_vjp, custom_jvp and checkpoint (remat): call primitives carrying user rules.

A call with k outputs binds k equations `custom_*_call[rec, index=i]` sharing one record `rec`
(the traced body and the rules). Eager evaluation and jit run the body once (memoized per
record), reverse mode treats the group as one node (ad.py), so each record is one call.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import prims
from funcgrad.core import (
    FuncgradError,
    Primitive,
    ShapedArray,
    Tracer,
    aval_of,
    bind,
    eqn_tag,
    eval_expr,
    trace_to_expr,
    user_frame_src,
)
from funcgrad.tree_util import tree_flatten, tree_map, tree_unflatten


class _Rec:
    """A traced call: flat body plus (for custom_vjp) fwd/bwd or (for custom_jvp) jvp."""

    def __init__(self, kind, name, fun_flat, in_avals, fwd=None, bwd=None, jvp=None):
        self.kind, self.name = kind, name
        self.fun_flat, self.fwd, self.bwd, self.jvp = fun_flat, fwd, bwd, jvp
        self.in_avals = list(in_avals)
        self.expr, self.consts, _ = trace_to_expr(fun_flat, self.in_avals)
        self.out_avals = [v.aval for v in self.expr.outs]
        self._memo = None
        self._batched = {}

    def __repr__(self):
        return f"{self.kind}:{self.name}"

    def outputs(self, args):
        """The body's outputs for these argument objects (evaluated once per argument set)."""
        key = tuple(id(a) for a in args)
        if self._memo is not None and self._memo[0] == key:
            return self._memo[2]
        outs = eval_expr(self.expr, list(args), self.consts)
        self._memo = (key, list(args), outs)  # keep args alive so ids stay unique
        return outs


def _call_shape(*avals, rec, index):
    if [tuple(a.shape) for a in avals] != [a.shape for a in rec.in_avals]:
        raise TypeError(f"{rec.name}: called with {avals}, traced for {rec.in_avals}")
    return rec.out_avals[index]


def _call_impl(*args, rec, index):
    from funcgrad.core import to_array
    outs = rec.outputs([to_array(a) for a in args])
    return np.asarray(outs[index])


def _call(*args, rec, index):
    return rec.outputs(args)[index]


def _body_jvp(ts, xs, *, out, rec, index):
    from funcgrad.transforms.ad import jvp_expr_eval
    return jvp_expr_eval(rec.expr, rec.consts, list(xs), list(ts))[1][index]


def _batched_rec(rec, dims):
    from funcgrad.transforms.batching import vmap
    key = tuple(dims)
    hit = rec._batched.get(key)
    if hit is not None:
        return hit
    fun_b = vmap(rec.fun_flat, in_axes=tuple(dims))
    if rec.kind == "custom_jvp":
        def jvp_b(primals, tangents):
            return vmap(lambda p, t: rec.jvp(p, t), in_axes=(tuple(dims), tuple(dims)))(
                list(primals), list(tangents))
        new = ("jvp", jvp_b)
    else:
        def fwd_b(*xs):
            return vmap(rec.fwd, in_axes=tuple(dims))(*xs)

        def bwd_b(res, cts):
            cts_in = vmap(rec.bwd)(res, cts)
            return [c if d is not None or c is None else prims.reduce_sum(c, (0,))
                    for c, d in zip(cts_in, dims)]
        new = ("vjp", fwd_b, bwd_b)
    hit = rec._batched[key] = (fun_b, new)
    return hit


def _call_batch(prim):
    def rule(args, dims, *, rec, index):
        size = next(a.shape[0] for a, d in zip(args, dims) if d is not None)
        fun_b, new = _batched_rec(rec, dims)
        avals = [ShapedArray(((size,) if d is not None else ()) + tuple(a.shape[1:] if d
                                                                        is not None else a.shape),
                             a.dtype) for a, d in zip(args, dims)]
        key = ("rec", tuple(avals))
        brec = rec._batched.get(key)
        if brec is None:
            if new[0] == "jvp":
                brec = _Rec(rec.kind, rec.name, fun_b, avals, jvp=new[1])
            else:
                brec = _Rec(rec.kind, rec.name, fun_b, avals, fwd=new[1], bwd=new[2])
            rec._batched[key] = brec
        return bind(prim, *args, rec=brec, index=index), 0
    return rule


def _make_call_prim(name):
    p = Primitive(name, _call_shape, _call_impl, kind="call")
    p.call_impl = _call
    p.inline = _call
    p.batch = _call_batch(p)
    return p


custom_vjp_call_p = _make_call_prim("custom_vjp_call")
custom_vjp_call_p.vjp_group = True   # ad.py applies the user's fwd/bwd rules
custom_vjp_call_p.jvp = _body_jvp
# reverse mode handles the whole group in ad.py (it needs fwd's residuals)
custom_vjp_call_p.vjp = None
custom_jvp_call_p = _make_call_prim("custom_jvp_call")


def _custom_jvp_jvp(ts, xs, *, out, rec, index):
    from funcgrad import prims
    n_closed = getattr(rec, "n_closed", 0)
    if n_closed and any(t is not None for t in ts[len(ts) - n_closed:]):
        raise _closed_over_error("custom_jvp", rec.name)
    ts = [t if t is not None else prims.zeros_like(x) for t, x in zip(ts, xs)]
    return _rec_jvp(rec, xs, ts)[1][index]


def _rec_jvp(rec, xs, ts):
    outs, touts = rec.jvp(list(xs), list(ts))
    return outs, touts


def _custom_jvp_vjp(ct, *xs, out, rec, index):
    # the jvp rule is linear in the tangents: its vjp at zero tangents is the transpose
    from funcgrad import prims
    from funcgrad.transforms.ad import vjp
    from funcgrad.core import is_complex, is_float
    n_args = len(xs) - getattr(rec, "n_closed", 0)   # closed-over operands: ad.check_active
    # real and complex operands are differentiated (complex ones were dropped: zero grads)
    diff = [i for i, x in enumerate(xs[:n_args]) if is_float(x.dtype) or is_complex(x.dtype)]
    zeros = [prims.zeros_like(xs[i]) for i in diff]

    def tangent_out(*ts):
        full = [prims.zeros_like(x) for x in xs]
        for i, t in zip(diff, ts):
            full[i] = t
        return _rec_jvp(rec, xs, full)[1][index]

    cts = vjp(tangent_out, *zeros)[1](ct)
    res = [None] * len(xs)
    for i, c in zip(diff, cts):
        res[i] = c
    return tuple(res)


custom_jvp_call_p.jvp = _custom_jvp_jvp
custom_jvp_call_p.vjp = _custom_jvp_vjp

CALL_PRIMS = (custom_vjp_call_p, custom_jvp_call_p)


def _check_like(what, name, got, want_tree, want_avals, allow_none=False):
    leaves, tree = tree_flatten(got)
    if tree != want_tree:
        raise TypeError(f"{name}: {what} has structure {tree}, expected {want_tree}"
                        f"\n  at {user_frame_src()}")
    for g, w in zip(leaves, want_avals):
        if g is None and allow_none:
            continue
        a = aval_of(g)
        if tuple(a.shape) != tuple(w.shape):
            raise TypeError(f"{name}: {what} has a leaf of shape {a.shape}, expected "
                            f"{w.str_short()}\n  at {user_frame_src()}")
    return leaves


def _closure_converted(rec, leaves, make):
    """rec, or (when its traced body closes over values of an enclosing trace) a record made by
    `make(fun, avals)` whose body takes those values as operands after `leaves`; returns
    (rec, leaves, n_closed)."""
    closed = [i for i, c in enumerate(rec.consts) if isinstance(c, Tracer)]
    if not closed:
        return rec, leaves, 0
    expr, consts, n = rec.expr, rec.consts, len(leaves)

    def fun_closed(*xs):
        cs = list(consts)
        for j, i in enumerate(closed):
            cs[i] = xs[n + j]
        return eval_expr(expr, list(xs[:n]), cs)
    leaves = list(leaves) + [consts[i] for i in closed]
    return make(fun_closed, [aval_of(x) for x in leaves]), leaves, len(closed)


def _closed_over_error(kind, name):
    return FuncgradError(
        f"{name}: detected differentiation of a {kind} function with respect to a value it "
        f"closes over. The custom {'VJP' if kind == 'custom_vjp' else 'JVP'} rule only says "
        "how to differentiate with respect to the function's explicit arguments: pass the "
        f"value as an argument and extend the rule.\n  at {user_frame_src()}")


def _bind_group(prim, rec, leaves, out_tree):
    outs = [bind(prim, *leaves, rec=rec, index=i) for i in range(len(rec.out_avals))]
    return tree_unflatten(out_tree, outs)


def _split_call(rule, args):
    """Separate nondiff arguments from the differentiable leaves of a custom_* call:
    (nondiff {pos: value}, diff args, leaves, their tree, full(diff) -> all args,
    fun over flat leaves, store that receives the output tree)."""
    from funcgrad.transforms.ad import _as_value
    nd = {i: args[i] for i in rule.nondiff_argnums}
    dyn = tuple(a for i, a in enumerate(args) if i not in nd)
    leaves, in_tree = tree_flatten(dyn)
    leaves = [_as_value(x) for x in leaves]
    store = {}

    def full(d):
        it = iter(d)
        return [nd[i] if i in nd else next(it) for i in range(len(args))]

    def fun_flat(*xs):
        ol, store["out_tree"] = tree_flatten(rule.fun(*full(tree_unflatten(in_tree, list(xs)))))
        return [_as_value(o) for o in ol]

    return nd, dyn, leaves, in_tree, full, fun_flat, store


class custom_vjp:
    """A function with a user-defined reverse-mode rule (JAX semantics).

    The function may close over traced values (the arguments of an enclosing jit or vmap): they
    become operands of the call. Differentiating with respect to one raises, as in JAX, since
    the rule says how to differentiate with respect to the explicit arguments only.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> @funcgrad.custom_vjp
        ... def clip_grad(x):
        ...     return x
        >>> clip_grad.defvjp(lambda x: (x, None), lambda res, g: (fnp.clip(g, -1.0, 1.0),))
        >>> float(funcgrad.grad(lambda x: 5.0 * clip_grad(x))(2.0))
        1.0
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun, self.nondiff_argnums = fun, tuple(nondiff_argnums)
        self.fwd = self.bwd = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        """fwd(*args) -> (out, residuals); bwd(*nondiff_args, residuals, ct_out) -> tuple of
        cotangents, one per differentiable argument (None for zero)."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        name = getattr(self.fun, "__name__", "custom_vjp")
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function {name} using defvjp.")
        from funcgrad.transforms.ad import _as_value
        nd, dyn, leaves, in_tree, full, fun_flat, store = _split_call(self, args)
        in_avals = [aval_of(x) for x in leaves]

        def fwd_flat(*xs):
            res = self.fwd(*full(tree_unflatten(in_tree, list(xs))))
            if not (isinstance(res, tuple) and len(res) == 2):
                raise TypeError(f"{name}: the fwd rule must return a pair (output, residuals)"
                                f"\n  at {user_frame_src()}")
            out, r = res
            ol = _check_like("fwd output", name, out, store["out_tree"], rec.out_avals)
            rl, store["res_tree"] = tree_flatten(r)
            return [_as_value(o) for o in ol], rl

        def bwd_flat(res_leaves, cts):
            r = tree_unflatten(store["res_tree"], list(res_leaves))
            ct = tree_unflatten(store["out_tree"], list(cts))
            got = self.bwd(*[nd[i] for i in self.nondiff_argnums], r, ct)
            if not isinstance(got, (tuple, list)) or len(got) != len(dyn):
                raise TypeError(f"{name}: the bwd rule must return a tuple of {len(dyn)} "
                                f"cotangent(s) (one per differentiable argument), got "
                                f"{type(got).__name__}"
                                + (f" of length {len(got)}" if isinstance(got, (tuple, list))
                                   else "") + f"\n  at {user_frame_src()}")
            out = []
            for g, a in zip(got, dyn):
                a_leaves, a_tree = tree_flatten(a)
                if g is None:
                    out.extend([None] * len(a_leaves))
                    continue
                out.extend(_check_like("bwd cotangent", name, g, a_tree,
                                       [aval_of(_as_value(x)) for x in a_leaves], True))
            return out

        n_args = len(leaves)
        rec = _Rec("custom_vjp", name, fun_flat, in_avals, fwd=fwd_flat, bwd=bwd_flat)
        rec, leaves, n_closed = _closure_converted(
            rec, leaves, lambda f, avals: _Rec("custom_vjp", name, f, avals))
        if n_closed:   # fun closes over traced values: operands the rules do not see
            def fwd_closed(*xs, active=None):
                if active is not None and any(active[n_args:]):
                    raise _closed_over_error("custom_vjp", name)
                return fwd_flat(*xs[:n_args])

            def bwd_closed(res_leaves, cts):
                return bwd_flat(res_leaves, cts) + [None] * n_closed
            rec.fwd, rec.bwd, rec.wants_active = fwd_closed, bwd_closed, True
        return _bind_group(custom_vjp_call_p, rec, leaves, store["out_tree"])


class custom_jvp:
    """A function with a user-defined forward-mode rule; reverse mode transposes it.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> @funcgrad.custom_jvp
        ... def f(x):
        ...     return fnp.sin(x)
        >>> @f.defjvp
        ... def f_jvp(primals, tangents):
        ...     (x,), (t,) = primals, tangents
        ...     return f(x), 2.0 * t
        >>> float(funcgrad.grad(f)(0.5))
        2.0
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        functools.update_wrapper(self, fun)
        self.fun, self.nondiff_argnums = fun, tuple(nondiff_argnums)
        self.jvp_rule = None

    def defjvp(self, jvp: Callable) -> Callable:
        """jvp(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)."""
        self.jvp_rule = jvp
        return jvp

    def defjvps(self, *jvps: Callable | None) -> None:
        """Define the jvp one argument at a time, as JAX's defjvps: jvps[i](t_i, ans, *primals)
        is the output tangent from argument i's tangent t_i (None: the output does not depend
        on argument i); the output tangent is their sum.

        Example:
            >>> import funcgrad, funcgrad.numpy as fnp
            >>> f = funcgrad.custom_jvp(lambda x, y: x * fnp.sin(y))
            >>> f.defjvps(lambda tx, ans, x, y: tx * fnp.sin(y),
            ...           lambda ty, ans, x, y: ty * x * fnp.cos(y))
            >>> float(funcgrad.grad(f, argnums=1)(2.0, 0.0))
            2.0
        """
        if self.nondiff_argnums:
            raise TypeError("Can't use ``defjvps`` with ``nondiff_argnums``.")

        def jvp(primals, tangents):
            if len(jvps) != len(primals):
                raise TypeError(f"defjvps got {len(jvps)} rules for {len(primals)} arguments")
            ans = self(*primals)
            terms = [rule(t, ans, *primals) for rule, t in zip(jvps, tangents)
                     if rule is not None]
            if not terms:
                return ans, tree_map(lambda a: a * 0, ans)
            total = terms[0]
            for term in terms[1:]:
                total = tree_map(lambda a, b: a + b, total, term)
            return ans, total

        self.defjvp(jvp)

    def __call__(self, *args):
        name = getattr(self.fun, "__name__", "custom_jvp")
        if self.jvp_rule is None:
            raise AttributeError(f"No JVP defined for custom_jvp function {name} using defjvp.")
        from funcgrad.transforms.ad import _as_value
        nd, dyn, leaves, in_tree, full, fun_flat, store = _split_call(self, args)

        def jvp_flat(primals, tangents):
            p = tree_unflatten(in_tree, list(primals))
            t = tree_unflatten(in_tree, list(tangents))
            res = self.jvp_rule(*[nd[i] for i in self.nondiff_argnums], tuple(p), tuple(t))
            if not (isinstance(res, tuple) and len(res) == 2):
                raise TypeError(f"{name}: the jvp rule must return (primal_out, tangent_out)"
                                f"\n  at {user_frame_src()}")
            out, tout = res
            ol = _check_like("jvp primal output", name, out, store["out_tree"], rec.out_avals)
            tl = _check_like("jvp tangent output", name, tout, store["out_tree"], rec.out_avals)
            return [_as_value(o) for o in ol], [_as_value(t) for t in tl]

        n_args = len(leaves)
        rec = _Rec("custom_jvp", name, fun_flat, [aval_of(x) for x in leaves], jvp=jvp_flat)
        rec, leaves, n_closed = _closure_converted(
            rec, leaves, lambda f, avals: _Rec("custom_jvp", name, f, avals))
        if n_closed:   # fun closes over traced values: operands the rule does not see
            def jvp_closed(primals, tangents):
                return jvp_flat(list(primals)[:n_args], list(tangents)[:n_args])

            def check_active(active):
                if any(active[n_args:]):
                    raise _closed_over_error("custom_jvp", name)
            rec.jvp, rec.n_closed, rec.check_active = jvp_closed, n_closed, check_active
        return _bind_group(custom_jvp_call_p, rec, leaves, store["out_tree"])


def checkpoint(fun: Callable, prevent_cse: bool = True, policy: Callable | None = None,
               static_argnums=()) -> Callable:
    """Rematerialize: fun's intermediates are recomputed in the backward pass, not stored.

    Reverse mode saves only fun's inputs; the backward pass re-runs fun (kept apart from the
    forward copy so jit's CSE does not merge them) and differentiates it. With a `policy`
    (funcgrad.checkpoint_policies, JAX's semantics) the forward also saves the values the
    policy allows, `policy(prim, *input_avals, **params) -> bool` per equation of fun, and the
    backward recomputes only the rest. Gradients are the same for every policy.

    Args:
        fun: the function to rematerialize.
        prevent_cse: keep the recomputation apart from the forward (jit's CSE would merge them).
        policy: which equations' outputs may be saved; None saves only the inputs.
        static_argnums: arguments that are not arrays (passed through unchanged).

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> layer = funcgrad.checkpoint(lambda x: fnp.tanh(fnp.tanh(x)))
        >>> round(float(funcgrad.grad(layer)(0.3)), 4)
        0.8417
        >>> dots = funcgrad.checkpoint(lambda w: fnp.tanh(w @ w).sum(),
        ...                            policy=funcgrad.checkpoint_policies.dots_saveable)
        >>> float(funcgrad.grad(dots)(fnp.zeros((2, 2))).sum())
        0.0
    """
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    counter = [0]

    @functools.wraps(fun)
    def wrapped(*args):
        st = {i: args[i] for i in static}
        dyn = tuple(a for i, a in enumerate(args) if i not in st)
        from funcgrad.transforms.ad import _as_value, vjp
        leaves, in_tree = tree_flatten(dyn)
        leaves = [_as_value(x) for x in leaves]
        store = {}

        def call(d):
            it = iter(tree_unflatten(in_tree, list(d)))
            return fun(*[st[i] if i in st else next(it) for i in range(len(args))])

        def fun_flat(*xs):
            ol, store["out_tree"] = tree_flatten(call(xs))
            return [_as_value(o) for o in ol]

        def fwd_flat(*xs):
            return rec.outputs(xs), list(xs)

        def bwd_flat(res, cts):
            counter[0] += 1
            with eqn_tag(("remat", id(rec), counter[0]) if prevent_cse else None):
                _, f_vjp = vjp(lambda *xs: rec.fun_flat(*xs), *res)
                return list(f_vjp(list(cts)))

        name = getattr(fun, "__name__", "checkpoint")
        rec = _Rec("checkpoint", name, fun_flat, [aval_of(x) for x in leaves],
                   fwd=fwd_flat, bwd=bwd_flat)
        # values of an enclosing trace that fun closes over become operands (differentiated)
        rec, leaves, _ = _closure_converted(rec, leaves, lambda f, avals: _Rec(
            "checkpoint", name, f, avals, fwd=fwd_flat, bwd=bwd_flat))
        if policy is not None:   # save what the policy allows, recompute the rest
            from funcgrad.ad_checkpoint import PolicyRemat
            rules = PolicyRemat(rec, policy, prevent_cse)
            rec.fwd, rec.bwd = rules.fwd, rules.bwd
        return _bind_group(custom_vjp_call_p, rec, leaves, store["out_tree"])

    return wrapped


remat = checkpoint


def custom_gradient(fun: Callable) -> Callable:
    """JAX's custom_gradient: `fun(*args)` returns `(value, vjp_fn)`; reverse mode uses
    `vjp_fn(cotangent)`, which returns one cotangent per positional argument (a tuple).

    Built on custom_vjp (forward-mode of the result differentiates `fun`'s value).

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> @funcgrad.custom_gradient
        ... def clipped(x):
        ...     return fnp.sin(x), lambda ct: (fnp.clip(ct, -1.0, 1.0),)
        >>> float(funcgrad.grad(lambda x: 5.0 * clipped(x))(0.3))
        1.0
    """
    @custom_vjp
    def f(*args):
        return fun(*args)[0]

    def fwd(*args):
        return fun(*args)

    def bwd(vjp_fn, ct):
        cts = vjp_fn(ct)
        return tuple(cts) if isinstance(cts, (tuple, list)) else (cts,)

    f.defvjp(fwd, bwd)
    return f

