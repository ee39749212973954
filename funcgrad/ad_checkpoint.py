"""Checkpoint policies (which values a checkpoint saves for the backward pass) and names."""
from __future__ import annotations

import types
from collections.abc import Callable

from funcgrad import prims as P
from funcgrad.transforms.ad import FORWARD_REWRITES, _forward, backward_pass
from funcgrad.core import Expr, Primitive, bind, eval_expr

# ---------------------------------------------------------------------------------------------
# checkpoint_name: an identity primitive that tags a value (jit inlines it away)
# ---------------------------------------------------------------------------------------------


def _name_identity(x, *, name):
    return x


name_p = Primitive("name", lambda x, *, name: x, _name_identity)
name_p.call_impl = _name_identity   # eagerly the value itself, on any backend
name_p.inline = _name_identity      # jit's passes replace it by its operand
name_p.vjp = lambda ct, x, *, out, name: (ct,)
name_p.jvp = lambda ts, xs, *, out, name: ts[0]
name_p.batch = lambda args, dims, *, name: (bind(name_p, args[0], name=name), dims[0])


def checkpoint_name(x, name: str):
    """Name a value so that a checkpoint policy (save_only_these_names, ...) can refer to it.

    The identity function otherwise.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> from funcgrad.ad_checkpoint import checkpoint_name
        >>> policy = funcgrad.checkpoint_policies.save_only_these_names("h")
        >>> f = funcgrad.checkpoint(lambda x: fnp.sin(checkpoint_name(x * 2.0, "h")),
        ...                         policy=policy)
        >>> round(float(funcgrad.grad(f)(0.0)), 4)
        2.0
    """
    from funcgrad.transforms.ad import _as_value
    return bind(name_p, _as_value(x), name=str(name))


# ---------------------------------------------------------------------------------------------
# policies: (prim, *input avals, **params) -> may this equation's output be saved?
# ---------------------------------------------------------------------------------------------

def everything_saveable(*_, **__) -> bool:
    """Save every intermediate value: the backward pass recomputes nothing."""
    return True


def nothing_saveable(*_, **__) -> bool:
    """Save only the checkpoint's inputs: the backward pass recomputes everything."""
    return False


def dots_saveable(prim, *_, **__) -> bool:
    """Save the results of matrix products (dot_general); recompute the rest."""
    return prim is P.dot_general_p


def dots_with_no_batch_dims_saveable(prim, *_, **params) -> bool:
    """Save the results of dot_generals without batch dimensions; recompute the rest."""
    if prim is not P.dot_general_p:
        return False
    (_, _), (lb, rb) = params["dimension_numbers"]
    return not lb and not rb


def save_only_these_names(*names: str) -> Callable:
    """A policy saving only the values named (checkpoint_name) with one of `names`."""
    keep = frozenset(names)

    def policy(prim, *_, **params):
        return prim is name_p and params["name"] in keep
    return policy


def save_any_names_but_these(*names: str) -> Callable:
    """A policy saving every named value (checkpoint_name) except those named in `names`."""
    skip = frozenset(names)

    def policy(prim, *_, **params):
        return prim is name_p and params["name"] not in skip
    return policy


checkpoint_policies = types.SimpleNamespace(
    everything_saveable=everything_saveable,
    nothing_saveable=nothing_saveable,
    dots_saveable=dots_saveable,
    checkpoint_dots=dots_saveable,
    dots_with_no_batch_dims_saveable=dots_with_no_batch_dims_saveable,
    checkpoint_dots_with_no_batch_dims=dots_with_no_batch_dims_saveable,
    save_only_these_names=save_only_these_names,
    save_any_names_but_these=save_any_names_but_these,
)


# ---------------------------------------------------------------------------------------------
# a checkpoint with a policy: fwd saves the inputs and the policy's values, bwd recomputes the
# rest (kept apart from the forward by an equation tag) and walks the body backwards
# ---------------------------------------------------------------------------------------------

class PolicyRemat:
    """fwd/bwd rules of checkpoint(fun, policy=...) over the traced body of `rec`."""

    def __init__(self, rec, policy: Callable, prevent_cse: bool):
        self.rec, self.policy, self.prevent_cse = rec, policy, prevent_cse
        self.counter = 0
        self._body = None

    def body(self):
        """(expr, consts, saved variables): the body as reverse mode sees it (rewritten) and
        the outputs of the equations that the policy saves, in equation order."""
        if self._body is None:
            expr, consts = self.rec.expr, self.rec.consts
            for rewrite in FORWARD_REWRITES:
                expr, consts = rewrite(expr, consts)
            saved = [e.out for e in expr.eqns if not e.prim.vjp_group
                     and self.policy(e.prim, *[x.aval for x in e.inputs], **e.params)]
            self._body = (expr, consts, saved)
        return self._body

    def fwd(self, *xs):
        expr, consts, saved = self.body()
        both = Expr(expr.in_binders, expr.eqns, list(expr.outs) + saved, expr.n_consts)
        vals = eval_expr(both, list(xs), list(consts))
        n = len(expr.outs)
        return vals[:n], list(xs) + vals[n:]

    def bwd(self, res, cts):
        expr, consts, saved = self.body()
        n = len(expr.in_binders) - expr.n_consts
        xs, kept = list(res[:n]), dict(zip(saved, res[n:]))
        self.counter += 1
        tag = ("remat", id(self.rec), self.counter) if self.prevent_cse else None
        # recompute what the policy did not save
        env, active, read = _forward(expr, consts, xs, kept=kept, tag=tag)
        return list(backward_pass(expr, env, active, read, list(cts)))
