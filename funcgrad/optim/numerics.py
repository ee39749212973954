"""Numerics and tree helpers optax exposes: safe norms, moment updates, bias correction,
incremental/periodic updates, power iteration, scale_gradient, tree_map_params."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.core.dtypes import is_half
from funcgrad import random
from funcgrad.tree_util import register_pytree_node, tree_leaves, tree_map

# ---------------------------------------------------------------------------------------------
# safe norms
# ---------------------------------------------------------------------------------------------


def abs_sq(x):
    """``|x|**2`` elementwise (real arrays: ``x * x``)."""
    x = fnp.asarray(x)
    return x * x


def safe_norm(x, min_norm, ord=None, axis=None, keepdims: bool = False):  # noqa: A002
    """``max(norm(x), min_norm)`` whose gradient stays finite where the norm is below
    ``min_norm`` (there the value is ``min_norm`` and the gradient zero).

    Args:
        x: an array.
        min_norm: the lower bound.
        ord: the norm's order (as in ``numpy.linalg.norm``; None: the 2-norm of all elements).
        axis: the axes to reduce (None: all).
        keepdims: keep the reduced axes as size 1.

    Example:
        >>> float(safe_norm(fnp.asarray([3.0, 4.0]), 1.0)), float(safe_norm(fnp.zeros(2), 1.0))
        (5.0, 1.0)
    """
    x = fnp.asarray(x)
    norm = fnp.linalg.norm(x, ord=ord, axis=axis, keepdims=True)
    x = fnp.where(norm <= min_norm, fnp.ones_like(x), x)
    norm = norm if keepdims else fnp.squeeze(norm, axis=axis)
    masked_norm = fnp.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    return fnp.where(norm <= min_norm, min_norm, masked_norm)


def safe_root_mean_squares(x, min_rms):
    """``max(sqrt(mean(x**2)), min_rms)`` with a finite gradient below ``min_rms``.

    Example:
        >>> round(float(safe_root_mean_squares(fnp.asarray([3.0, 4.0]), 0.1)) ** 2, 5)
        12.5
    """
    x = fnp.asarray(x)
    rms = fnp.sqrt(fnp.mean(abs_sq(x)))
    x = fnp.where(rms <= min_rms, fnp.ones_like(x), x)
    return fnp.where(rms <= min_rms, min_rms, fnp.sqrt(fnp.mean(abs_sq(x))))


# ---------------------------------------------------------------------------------------------
# moments (optax.tree_utils' tree_update_moment & co, exported at optax's top level)
# ---------------------------------------------------------------------------------------------

def update_moment(updates, moments, decay, order):
    """Exponential moving average of ``g**order``: ``(1 - decay) g**order + decay m``.

    Example:
        >>> update_moment(fnp.asarray([2.0]), fnp.asarray([1.0]), 0.5, 2).tolist()
        [2.5]
    """
    return tree_map(lambda g, t: None if g is None else (1 - decay) * (g ** order) + decay * t,
                    updates, moments, is_leaf=lambda x: x is None)


def update_infinity_moment(updates, moments, decay, eps):
    """Adamax's infinity norm: ``max(|g| + eps, decay m)``.

    Example:
        >>> update_infinity_moment(fnp.asarray([-2.0]), fnp.asarray([3.0]), 0.5, 0.0).tolist()
        [2.0]
    """
    return tree_map(lambda g, t: None if g is None else fnp.maximum(fnp.abs(g) + eps, decay * t),
                    updates, moments, is_leaf=lambda x: x is None)


def update_moment_per_elem_norm(updates, moments, decay, order):
    """Moving average of ``|g|**order`` (equal to :func:`update_moment` for real updates).

    Example:
        >>> update_moment_per_elem_norm(fnp.asarray([-2.0]), fnp.asarray([0.0]), 0.5, 2).tolist()
        [2.0]
    """
    def orderth_norm(g):
        return abs_sq(g) if order == 2 else fnp.abs(g) ** order
    return tree_map(lambda g, t: None if g is None else (1 - decay) * orderth_norm(g) + decay * t,
                    updates, moments, is_leaf=lambda x: x is None)


def bias_correction(moment, decay, count):
    """``moment / (1 - decay**count)``: undoes the zero initialisation of a moving average.

    Computed as ``moment * (1 / (1 - decay**count))``, the scalar reciprocal taken once in the
    moment's dtype: that is what JAX computes for optax's ``t / bias_correction`` (XLA turns a
    division by a broadcast scalar into a multiplication by its reciprocal, eagerly and under
    jit; checked bit for bit against JAX 0.10.2 on the CPU, float32 and float64), and it
    leaves Adam one division an element instead of three (C2's update, benchmarks/RESULTS.md).

    Example:
        >>> [round(x, 5) for x in bias_correction(fnp.asarray([0.1]), 0.9, 1).tolist()]
        [1.0]
    """
    def one(t):  # 1 / (1 - decay**count) in the moment's dtype (float64 moments stay exact)
        dt = fnp.asarray(t).dtype
        one_ = fnp.asarray(1, dt)
        if is_half(dt):   # optax: 1 - decay**count in float32 (0.999 is 1 in bfloat16), cast
            w = fnp.float32
            bc = fnp.asarray(1, w) - fnp.power(fnp.asarray(decay, w), fnp.asarray(count, w))
            return t * (one_ / fnp.asarray(bc, dt))
        return t * (one_ / (one_ - fnp.power(fnp.asarray(decay, dt), fnp.asarray(count, dt))))
    return tree_map(one, moment)


# ---------------------------------------------------------------------------------------------
# parameter averaging
# ---------------------------------------------------------------------------------------------

def incremental_update(new_tensors, old_tensors, step_size):
    """Polyak averaging: ``step_size * new + (1 - step_size) * old``, leaf by leaf.

    Example:
        >>> incremental_update(fnp.asarray([1.0]), fnp.asarray([0.0]), 0.25).tolist()
        [0.25]
    """
    return tree_map(lambda new, old: None if new is None else
                    step_size * new + (1.0 - step_size) * old,
                    new_tensors, old_tensors, is_leaf=lambda x: x is None)


def periodic_update(new_tensors, old_tensors, steps, update_period):
    """``new_tensors`` when ``steps % update_period == 0``, else ``old_tensors`` (traceable).

    Example:
        >>> periodic_update(fnp.asarray([1.0]), fnp.asarray([0.0]), 4, 2).tolist()
        [1.0]
    """
    take_new = fnp.mod(fnp.asarray(steps), update_period) == 0
    return tree_map(lambda n, o: fnp.where(take_new, n, o), new_tensors, old_tensors)


# ---------------------------------------------------------------------------------------------
# linear algebra and gradients
# ---------------------------------------------------------------------------------------------

def _tree_vdot(a, b):
    return sum(fnp.sum(x * y) for x, y in zip(tree_leaves(a), tree_leaves(b)))


def _normalize_tree(x):
    norm = fnp.sqrt(_tree_vdot(x, x))
    return tree_map(lambda e: e / norm, x)


def power_iteration(matrix, *, v0=None, num_iters: int = 100, error_tolerance: float = 1e-6,
                    precision=None, key=None):
    """The dominant eigenvalue of a matrix (an array, or a matrix-vector product function)
    and its eigenvector, by power iteration. The stopping test reads values, so call it
    eagerly (under jit the loop needs a concrete condition).

    Stops after ``num_iters`` iterations or when the eigenvalue estimate changes by less than
    ``error_tolerance`` relative to itself.

    Args:
        matrix: a square array, or a function ``v -> M v`` on pytrees.
        v0: the starting vector (required for a function; default uniform in [-1, 1]).
        num_iters: the most iterations.
        error_tolerance: the relative change that ends the iteration.
        precision: accepted for optax compatibility (matmuls here are exact float math).
        key: the PRNG key for the default ``v0`` (default ``PRNGKey(0)``).

    Returns:
        ``(eigenvalue, eigenvector)``.

    Example:
        >>> val, vec = power_iteration(fnp.asarray([[2.0, 0.0], [0.0, 1.0]]))
        >>> round(float(val), 4)
        2.0
    """
    del precision
    if callable(matrix):
        mvp = matrix
        if v0 is None:
            raise ValueError("power_iteration: v0 must be given when `matrix` is a function")
    else:
        matrix = fnp.asarray(matrix)
        mvp = lambda v: fnp.matmul(matrix, v)  # noqa: E731
        if v0 is None:
            key = random.PRNGKey(0) if key is None else key
            v0 = random.uniform(key, matrix.shape[-1:], matrix.dtype, -1.0, 1.0)
    v0 = _normalize_tree(v0)

    def cond(carry):
        _, _, eig, prev, i = carry
        err = fnp.abs(eig - prev) / fnp.maximum(fnp.abs(eig), 1e-30)
        return (i < num_iters) & ((i < 2) | (err > error_tolerance))

    def body(carry):
        _, z, eig, _, i = carry
        vec = _normalize_tree(z)
        z = mvp(vec)
        return vec, z, _tree_vdot(vec, z), eig, i + 1

    zero = fnp.zeros((), tree_leaves(v0)[0].dtype)
    carry = (v0, mvp(v0), zero, zero, fnp.asarray(0))
    carry = lax.while_loop(cond, body, carry)  # eager: the condition is concrete
    _, z, eig, _, _ = carry
    return eig, _normalize_tree(z)


def scale_gradient(inputs, scale):
    """The identity on the forward pass whose gradient is multiplied by ``scale``.

    Example:
        >>> import funcgrad
        >>> float(funcgrad.grad(lambda x: scale_gradient(x, 0.5) ** 2)(fnp.asarray(3.0)))
        3.0
    """
    if scale == 1.0:
        return inputs
    if scale == 0.0:
        return tree_map(lax.stop_gradient, inputs)

    def one(x):  # value x; d/dx = scale
        stopped = lax.stop_gradient(x)
        return stopped + scale * (x - stopped)
    return tree_map(one, inputs)


def nnls(A, b, iters: int, unroll=1, L=None):  # noqa: N803
    """Non-negative least squares ``argmin_{x >= 0} ||A x - b||`` by Polyak's (2015) fast
    projected gradient, ``iters`` iterations from zero.

    Args:
        A: ``(M, N)`` matrix.
        b: ``(M,)`` or ``(M, K)``.
        iters: the number of iterations.
        unroll: accepted for optax compatibility.
        L: an upper bound on the spectral radius of ``A^T A`` (default min(Frobenius, 1-norm)).

    Example:
        >>> x = nnls(fnp.asarray([[1.0, 2.0], [3.0, 4.0]]), fnp.asarray([5.0, 6.0]), 1000)
        >>> [round(v, 2) for v in x.tolist()]
        [0.0, 1.7]
    """
    del unroll
    A, b = fnp.asarray(A), fnp.asarray(b)
    if A.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != A.shape[0]:
        raise ValueError(f"nnls: expected A (M, N) and b (M,) or (M, K); got {A.shape} and "
                         f"{b.shape}")
    Q = fnp.matmul(fnp.transpose(A), A)  # noqa: N806
    q = fnp.matmul(fnp.transpose(A), b)
    if L is None:
        L = fnp.minimum(fnp.sqrt(fnp.sum(Q * Q)), fnp.max(fnp.sum(fnp.abs(Q), axis=0)))
    L = fnp.where(L == 0, 1.0, L)

    def step(carry, _):
        x, p, c = carry
        cn = (1 + fnp.sqrt(1 + 4 * c ** 2)) / 2
        xn = fnp.maximum(p - (fnp.matmul(Q, p) - q) / L, 0.0)
        return (xn, xn + (c - 1) / cn * (xn - x), cn), None
    x = fnp.zeros(A.shape[-1:] + b.shape[1:], b.dtype)
    (x, _, _), _ = lax.scan(step, (x, x, fnp.asarray(0.0, b.dtype)), length=iters)
    return x


class MultiNormalDiagFromLogScale:
    """A diagonal Gaussian parameterised by its mean and log standard deviation."""

    def __init__(self, loc, log_scale):
        self._log_scale = fnp.asarray(log_scale)
        self._scale = fnp.exp(self._log_scale)
        self._mean = fnp.asarray(loc)
        self._param_shape = fnp.broadcast_shapes(self._mean.shape, self._scale.shape)

    def sample(self, shape, key):
        """``shape + param_shape`` draws: ``normal * scale + mean``."""
        return random.normal(key, tuple(shape) + self._param_shape) * self._scale + self._mean

    def log_prob(self, x):
        """The log density, summed over the parameter axes."""
        z = (fnp.asarray(x) - self._mean) / self._scale
        lp = -0.5 * z * z - self._log_scale - 0.5 * float(np.log(2 * np.pi))
        return fnp.sum(lp, axis=tuple(-(i + 1) for i in range(len(self._param_shape))))

    @property
    def log_scale(self):
        return self._log_scale

    @property
    def params(self):
        return [self._mean, self._log_scale]


def multi_normal(loc, log_scale) -> MultiNormalDiagFromLogScale:
    """A diagonal Gaussian from its mean and log standard deviation.

    Example:
        >>> d = multi_normal(fnp.zeros(2), fnp.zeros(2))
        >>> round(float(d.log_prob(fnp.zeros(2))), 6)  # -log(2 pi)
        -1.837877
    """
    return MultiNormalDiagFromLogScale(loc, log_scale)


# ---------------------------------------------------------------------------------------------
# tree_map_params
# ---------------------------------------------------------------------------------------------

class _ParamsPlaceholder:
    """Stands in for the params while an optimizer's ``init`` lays out its state."""


register_pytree_node(_ParamsPlaceholder, lambda _: ((), None), lambda _, __: _ParamsPlaceholder())


def tree_map_params(initable: Any, f: Callable, state, /, *rest,
                    transform_non_params: Callable | None = None, is_leaf=None):
    """Applies ``f`` to every copy of the params tree inside an optimizer state (e.g. Adam's
    ``mu`` and ``nu``), leaving counters alone (or passing them to ``transform_non_params``).

    Args:
        initable: the optimizer (anything with ``init``) or its ``init`` function.
        f: ``f(leaf, *rest_leaves)`` for the leaves of param-shaped subtrees.
        state: the optimizer state to map over.
        *rest: pytrees shaped like the params, passed to ``f``.
        transform_non_params: applied to every other leaf.
        is_leaf: passed to the inner tree_map.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.adam(0.1)
        >>> state = opt.init(fnp.ones(2))
        >>> new = tree_map_params(opt, lambda p: p + 1, state)
        >>> new[0].mu.tolist(), int(new[0].count)
        ([1.0, 1.0], 0)
    """
    init = initable.init if hasattr(initable, "init") else initable
    with_placeholders = init(_ParamsPlaceholder())

    def map_params(maybe_placeholder, value):
        if isinstance(maybe_placeholder, _ParamsPlaceholder):
            return tree_map(f, value, *rest, is_leaf=is_leaf)
        if transform_non_params is not None:
            return transform_non_params(value)
        return value
    return tree_map(map_params, with_placeholders, state,
                    is_leaf=lambda v: isinstance(v, _ParamsPlaceholder))


__all__ = ["MultiNormalDiagFromLogScale", "abs_sq", "bias_correction", "incremental_update",
           "multi_normal", "nnls", "periodic_update",
           "power_iteration", "safe_norm", "safe_root_mean_squares", "scale_gradient",
           "tree_map_params", "update_infinity_moment", "update_moment",
           "update_moment_per_elem_norm"]
