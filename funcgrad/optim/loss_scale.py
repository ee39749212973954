"""Loss scaling for float16 training, with jmp's API (DeepMind's mixed-precision library).

float16 has 5 exponent bits: gradients below 2^-24 flush to zero and products above 65504
overflow. Scaling the loss by S before differentiating moves the gradients into float16's range;
unscaling divides them by S again (in the masters' dtype) before the optimizer sees them. A
`DynamicLossScale` finds S as training goes: it halves S when a step's gradients are not finite
(the step is skipped: `select_tree`) and doubles it after `period` finite steps in a row. The
scales are pytrees (their numbers are leaves, their settings static), so a jitted step takes one
as an argument and returns the adjusted one; bfloat16 has float32's exponent range and needs
none (`NoOpLossScale`).

Example:
    >>> import funcgrad, funcgrad.numpy as fnp
    >>> from funcgrad import optim
    >>> from funcgrad.optim import loss_scale as ls
    >>> scale = ls.DynamicLossScale(fnp.asarray(2.0 ** 15))
    >>> w = fnp.asarray([1e-3, 2e-3], fnp.float32)
    >>> def loss(w):
    ...     return fnp.sum((w.astype(fnp.float16) * 1e-3) ** 2).astype(fnp.float32)
    >>> grads = funcgrad.grad(lambda w: scale.scale(loss(w)))(w)
    >>> grads = scale.unscale(grads)
    >>> finite = ls.all_finite(grads)
    >>> scale = scale.adjust(finite)
    >>> bool(finite), float(scale.loss_scale)
    (True, 32768.0)
"""
from __future__ import annotations

import funcgrad.numpy as fnp
from funcgrad.tree_util import tree_leaves, tree_map
from funcgrad.tree_util_nodes import register_pytree_node


def _times(x, s):
    """x * s in x's dtype for a float leaf; other leaves (counters, masks) unchanged."""
    x = fnp.asarray(x)
    return x * s.astype(x.dtype) if fnp.issubdtype(x.dtype, fnp.floating) else x


class NoOpLossScale:
    """No scaling (bfloat16, float32): scale and unscale return the tree unchanged."""

    @property
    def loss_scale(self):
        return fnp.asarray(1.0, fnp.float32)

    def scale(self, tree):
        return tree

    def unscale(self, tree):
        return tree

    def adjust(self, grads_finite) -> NoOpLossScale:
        return self


class StaticLossScale:
    """Scales by a fixed `loss_scale`: `scale(tree)` multiplies each float leaf by it,
    `unscale(tree)` by its reciprocal, in each leaf's own dtype (other leaves pass unchanged).

    Args:
        loss_scale: the factor (a power of two keeps scaling exact).
    """

    def __init__(self, loss_scale):
        self.loss_scale = fnp.asarray(loss_scale, fnp.float32)

    def scale(self, tree):
        return tree_map(lambda x: _times(x, self.loss_scale), tree)

    def unscale(self, tree):
        inv = 1.0 / self.loss_scale
        return tree_map(lambda x: _times(x, inv), tree)

    def adjust(self, grads_finite) -> StaticLossScale:
        return self


class DynamicLossScale(StaticLossScale):
    """A loss scale adjusted by the finiteness of each step's gradients (jmp's rule).

    `adjust(grads_finite)`: finite gradients count up; at `period` finite steps in a row the
    scale is multiplied by `factor` (and the count restarts); non-finite gradients divide it by
    `factor`, not below `min_loss_scale`, and restart the count.

    Args:
        loss_scale: the initial scale (float32 scalar; 2**15 is common).
        counter: finite steps seen in a row (int32 scalar; default 0).
        period: finite steps before the scale grows.
        factor: the growth and shrink factor.
        min_loss_scale: the scale's floor.
    """

    def __init__(self, loss_scale, counter=None, period: int = 2000, factor: int = 2,
                 min_loss_scale=1.0):
        super().__init__(loss_scale)
        self.counter = fnp.zeros((), fnp.int32) if counter is None else fnp.asarray(
            counter, fnp.int32)
        self.period, self.factor = int(period), int(factor)
        self.min_loss_scale = float(min_loss_scale)

    def adjust(self, grads_finite) -> DynamicLossScale:
        finite = fnp.asarray(grads_finite)
        grown = fnp.where(self.counter == self.period - 1, self.loss_scale * self.factor,
                          self.loss_scale)
        shrunk = fnp.maximum(fnp.asarray(self.min_loss_scale, fnp.float32),
                             self.loss_scale / self.factor)
        # the count restarts at a growth (mod period) and at a non-finite step (times 0)
        counter = ((self.counter + 1) % self.period) * finite.astype(fnp.int32)
        return DynamicLossScale(fnp.where(finite, grown, shrunk), counter, self.period,
                                self.factor, self.min_loss_scale)


def _rebuild(cls, **fields):
    """An instance from its fields as they are (unflattening does no array work: its leaves may
    be tracers or placeholders)."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


register_pytree_node(NoOpLossScale, lambda s: ((), None), lambda aux, ch: NoOpLossScale())
register_pytree_node(StaticLossScale, lambda s: ((s.loss_scale,), None),
                     lambda aux, ch: _rebuild(StaticLossScale, loss_scale=ch[0]))
register_pytree_node(
    DynamicLossScale,
    lambda s: ((s.loss_scale, s.counter), (s.period, s.factor, s.min_loss_scale)),
    lambda aux, ch: _rebuild(DynamicLossScale, loss_scale=ch[0], counter=ch[1],
                             period=aux[0], factor=aux[1], min_loss_scale=aux[2]))


def all_finite(tree):
    """Whether every element of every leaf is finite (a boolean scalar array)."""
    ok = fnp.asarray(True)
    for leaf in tree_leaves(tree):
        ok = ok & fnp.all(fnp.isfinite(leaf))
    return ok


def select_tree(pred, a, b):
    """a where the scalar `pred` is true, else b, leaf by leaf (to skip a non-finite step)."""
    return tree_map(lambda x, y: fnp.where(pred, x, y), a, b)
