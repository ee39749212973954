"""optimizers: JAX's example_libraries.optimizers (init_fun, update_fun, get_params) triples.

An optimizer is a triple of functions over pytrees of parameters:

* ``init_fun(params) -> opt_state``
* ``update_fun(step, grads, opt_state) -> opt_state``
* ``get_params(opt_state) -> params``

``opt_state`` is an :class:`OptimizerState`, a pytree (it passes through jit, and
``get_params(init_fun(params))`` gives ``params`` back). The update rules, their defaults and
the step-size schedules are JAX's, so programs written for ``jax.example_libraries.optimizers``
compute the same numbers. (optax-style gradient transformations are in ``funcgrad.optim``.)

Example:
    >>> import funcgrad, funcgrad.numpy as jnp
    >>> from funcgrad.example_libraries import optimizers
    >>> opt_init, opt_update, get_params = optimizers.sgd(0.1)
    >>> state = opt_init({"w": jnp.array([1.0, -2.0])})
    >>> grads = funcgrad.grad(lambda p: (p["w"] ** 2).sum())(get_params(state))
    >>> get_params(opt_update(0, grads, state))["w"].tolist()
    [0.800000011920929, -1.600000023841858]
"""
from __future__ import annotations

import functools
import warnings
from collections import namedtuple
from collections.abc import Callable
from typing import Any, NamedTuple

from funcgrad import numpy as jnp
from funcgrad.tree_util import register_pytree_node, tree_flatten, tree_map, tree_unflatten

__all__ = [
    "JoinPoint", "Optimizer", "OptimizerState", "adagrad", "adam", "adamax", "clip_grads",
    "constant", "exponential_decay", "inverse_time_decay", "l2_norm", "make_schedule",
    "momentum", "nesterov", "optimizer", "pack_optimizer_state", "piecewise_constant",
    "polynomial_decay", "rmsprop", "rmsprop_momentum", "sgd", "sm3", "unpack_optimizer_state",
]

OptimizerState = namedtuple("OptimizerState", ["packed_state", "tree_def", "subtree_defs"])
OptimizerState.__doc__ = """The state of a pytree optimizer: each parameter leaf's flattened
state (the pytree's children), the parameters' tree structure and each leaf state's
structure (static auxiliary data)."""
with warnings.catch_warnings():   # optree notes that it overrides the namedtuple's flattening
    warnings.simplefilter("ignore", UserWarning)
    register_pytree_node(
        OptimizerState,
        lambda s: ((s.packed_state,), (s.tree_def, s.subtree_defs)),
        lambda aux, children: OptimizerState(children[0], aux[0], aux[1]))

Params = Any
Schedule = Callable[[Any], Any]


class Optimizer(NamedTuple):
    """An (init_fn, update_fn, params_fn) triple; unpacks as (init, update, get_params)."""
    init_fn: Callable
    update_fn: Callable
    params_fn: Callable


def _unzip2(pairs):
    """([a...], (b...)) from (a, b) pairs: the second, structures, as a hashable tuple."""
    pairs = list(pairs)
    return [a for a, _ in pairs], tuple(b for _, b in pairs)


def optimizer(opt_maker: Callable) -> Callable[..., Optimizer]:
    """Lift an optimizer written for single arrays to one over pytrees of parameters.

    Args:
        opt_maker: a function returning ``(init, update, get_params)`` that work on one
            array: ``init(x0) -> state`` (any pytree of arrays), ``update(i, g, state) ->
            state`` (same structure) and ``get_params(state) -> x``.

    Returns:
        A function with opt_maker's arguments returning an :class:`Optimizer` whose
        functions take parameter pytrees; update_fun raises TypeError when the gradient tree
        does not match the parameters' tree or an update changes a state's structure.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> @optimizers.optimizer
        ... def halve():
        ...     return (lambda x: x), (lambda i, g, x: x / 2), (lambda x: x)
        >>> init, update, get = halve()
        >>> get(update(0, [jnp.ones(2)], init([jnp.ones(2)])))[0].tolist()
        [0.5, 0.5]
    """
    @functools.wraps(opt_maker)
    def tree_opt_maker(*args, **kwargs):
        init, update, get_params = opt_maker(*args, **kwargs)

        @functools.wraps(init)
        def tree_init(x0_tree):
            x0_flat, tree = tree_flatten(x0_tree)
            states_flat, subtrees = _unzip2(tree_flatten(init(x0)) for x0 in x0_flat)
            return OptimizerState(states_flat, tree, subtrees)

        @functools.wraps(update)
        def tree_update(i, grad_tree, opt_state):
            states_flat, tree, subtrees = opt_state
            grad_flat, tree2 = tree_flatten(grad_tree)
            if tree2 != tree:
                raise TypeError(
                    "optimizer update function was passed a gradient tree that did not match "
                    f"the parameter tree structure with which it was initialized: parameter "
                    f"tree {tree} and grad tree {tree2}.")
            states = [tree_unflatten(s, f) for s, f in zip(subtrees, states_flat)]
            new_flat, subtrees2 = _unzip2(tree_flatten(update(i, g, s))
                                          for g, s in zip(grad_flat, states))
            for s1, s2 in zip(subtrees, subtrees2):
                if s1 != s2:
                    raise TypeError(
                        "optimizer update function produced an output structure that did not "
                        f"match its input structure: input {s1} and output {s2}.")
            return OptimizerState(new_flat, tree, subtrees)

        @functools.wraps(get_params)
        def tree_get_params(opt_state):
            states_flat, tree, subtrees = opt_state
            return tree_unflatten(tree, [get_params(tree_unflatten(s, f))
                                         for s, f in zip(subtrees, states_flat)])

        return Optimizer(tree_init, tree_update, tree_get_params)

    return tree_opt_maker


# ---------------------------------------------------------------------------------------------
# optimizers
# ---------------------------------------------------------------------------------------------

@optimizer
def sgd(step_size):
    """Stochastic gradient descent: ``x - step_size(i) * g``.

    Args:
        step_size: a positive scalar, or a schedule mapping the step index to one.

    Returns:
        An (init_fun, update_fun, get_params) triple.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, update, get = optimizers.sgd(0.5)
        >>> get(update(0, jnp.array(2.0), init(jnp.array(1.0)))).item()
        0.0
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0

    def update(i, g, x):
        return x - step_size(i) * g

    def get_params(x):
        return x

    return init, update, get_params


@optimizer
def momentum(step_size: Schedule, mass: float):
    """SGD with momentum: ``v = mass * v + g; x = x - step_size(i) * v``.

    Args:
        step_size: a positive scalar, or a schedule mapping the step index to one.
        mass: the momentum coefficient.

    Returns:
        An (init_fun, update_fun, get_params) triple.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, update, get = optimizers.momentum(0.1, mass=0.9)
        >>> s = update(1, jnp.array(1.0), update(0, jnp.array(1.0), init(jnp.array(0.0))))
        >>> round(get(s).item(), 6)
        -0.29
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * velocity, velocity

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def nesterov(step_size: Schedule, mass: float):
    """SGD with Nesterov momentum: ``v = mass * v + g; x = x - step_size(i) * (mass * v + g)``.

    Args:
        step_size: a positive scalar, or a schedule mapping the step index to one.
        mass: the momentum coefficient.

    Returns:
        An (init_fun, update_fun, get_params) triple.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, update, get = optimizers.nesterov(0.1, mass=0.9)
        >>> round(get(update(0, jnp.array(1.0), init(jnp.array(0.0)))).item(), 6)
        -0.19
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        return x - step_size(i) * (mass * velocity + g), velocity

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def adagrad(step_size, momentum=0.9):
    """Adagrad (Duchi et al., 2011) with momentum on the scaled gradient, as JAX's.

    Args:
        step_size: a positive scalar, or a schedule mapping the step index to one.
        momentum: the momentum coefficient of the scaled gradient.

    Returns:
        An (init_fun, update_fun, get_params) triple.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, update, get = optimizers.adagrad(1.0)
        >>> round(get(update(0, jnp.array(2.0), init(jnp.array(0.0)))).item(), 6)
        -0.1
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, g_sq, m = state
        g_sq = g_sq + jnp.square(g)
        g_sq_inv_sqrt = jnp.where(g_sq > 0, 1.0 / jnp.sqrt(g_sq), 0.0)
        m = (1.0 - momentum) * (g * g_sq_inv_sqrt) + momentum * m
        return x - step_size(i) * m, g_sq, m

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def rmsprop(step_size, gamma=0.9, eps=1e-8):
    """RMSProp: divide the gradient by a running root mean square of past gradients.

    Args:
        step_size: a positive scalar, or a schedule mapping the step index to one.
        gamma: the decay of the running average of squared gradients.
        eps: added to the average before the square root.

    Returns:
        An (init_fun, update_fun, get_params) triple.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, update, get = optimizers.rmsprop(0.1)
        >>> round(get(update(0, jnp.array(1.0), init(jnp.array(0.0)))).item(), 4)
        -0.3162
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq_grad = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1.0 - gamma)
        return x - step_size(i) * g / jnp.sqrt(avg_sq_grad + eps), avg_sq_grad

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def rmsprop_momentum(step_size, gamma=0.9, eps=1e-8, momentum=0.9):
    """RMSProp with momentum on the scaled step.

    Args:
        step_size: a positive scalar, or a schedule mapping the step index to one.
        gamma: the decay of the running average of squared gradients.
        eps: added to the average before the square root.
        momentum: the momentum coefficient.

    Returns:
        An (init_fun, update_fun, get_params) triple.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, update, get = optimizers.rmsprop_momentum(0.1)
        >>> round(get(update(0, jnp.array(1.0), init(jnp.array(0.0)))).item(), 4)
        -0.3162
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq_grad, mom = state
        avg_sq_grad = avg_sq_grad * gamma + jnp.square(g) * (1.0 - gamma)
        mom = momentum * mom + step_size(i) * g / jnp.sqrt(avg_sq_grad + eps)
        return x - mom, avg_sq_grad, mom

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def adam(step_size, b1=0.9, b2=0.999, eps=1e-8):
    """Adam (Kingma and Ba, 2015) with bias-corrected moment estimates.

    Args:
        step_size: a positive scalar, or a schedule mapping the step index to one.
        b1: the decay rate of the first moment estimate.
        b2: the decay rate of the second moment estimate.
        eps: added to the square root of the second moment.

    Returns:
        An (init_fun, update_fun, get_params) triple.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, update, get = optimizers.adam(0.1)
        >>> round(get(update(0, jnp.array(3.0), init(jnp.array(0.0)))).item(), 4)
        -0.1
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, m, v = state
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * jnp.square(g) + b2 * v
        mhat = m / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))
        vhat = v / (1 - jnp.asarray(b2, m.dtype) ** (i + 1))
        return x - step_size(i) * mhat / (jnp.sqrt(vhat) + eps), m, v

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def adamax(step_size, b1=0.9, b2=0.999, eps=1e-8):
    """AdaMax: Adam with the infinity norm in place of the second moment.

    Args:
        step_size: a positive scalar, or a schedule mapping the step index to one.
        b1: the decay rate of the first moment estimate.
        b2: the decay of the exponentially weighted infinity norm.
        eps: added to the norm.

    Returns:
        An (init_fun, update_fun, get_params) triple.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, update, get = optimizers.adamax(0.1)
        >>> round(get(update(0, jnp.array(3.0), init(jnp.array(0.0)))).item(), 4)
        -0.1
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, m, u = state
        m = (1 - b1) * g + b1 * m
        u = jnp.maximum(b2 * u, jnp.abs(g))
        x = x - (step_size(i) / (1 - jnp.asarray(b1, m.dtype) ** (i + 1))) * m / (u + eps)
        return x, m, u

    def get_params(state):
        return state[0]

    return init, update, get_params


@optimizer
def sm3(step_size, momentum=0.9):
    """SM3 (Anil et al., 2019): one accumulator per axis slice instead of per entry.

    Args:
        step_size: a positive scalar, or a schedule mapping the step index to one.
        momentum: the momentum coefficient of the scaled gradient.

    Returns:
        An (init_fun, update_fun, get_params) triple.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, update, get = optimizers.sm3(1.0)
        >>> x = get(update(0, jnp.full((2, 2), 2.0), init(jnp.zeros((2, 2)))))
        >>> [round(v, 4) for v in x.ravel().tolist()]
        [-0.1, -0.1, -0.1, -0.1]
    """
    step_size = make_schedule(step_size)

    def splice(seq, i, x):
        lst = list(seq)
        lst[i:i + 1] = x
        return lst

    def broadcast_into(ndim, x, axis):
        return x[tuple(splice([None] * ndim, axis, [slice(None)]))]

    def init(x0):
        x_shape = x0.shape
        x0 = jnp.atleast_1d(x0)
        vs = [jnp.zeros(sz, dtype=x0.dtype) for sz in x0.shape]
        return x0, jnp.zeros_like(x0), vs, x_shape

    def update(i, g, state):
        x, m, vs, x_shape = state
        vs = [broadcast_into(g.ndim, v, ax) for ax, v in enumerate(vs)]
        accum = functools.reduce(jnp.minimum, vs) + jnp.square(g)
        accum_inv_sqrt = jnp.where(accum > 0, 1.0 / jnp.sqrt(accum), 0)
        m = (1.0 - momentum) * (g * accum_inv_sqrt) + momentum * m
        x = x - step_size(i) * m
        vs = [accum.max(tuple(splice(range(x.ndim), j, []))) for j in range(x.ndim)]
        return x, m, vs, x_shape

    def get_params(state):
        x, _, _, x_shape = state
        return x.reshape(x_shape)

    return init, update, get_params


# ---------------------------------------------------------------------------------------------
# step-size schedules
# ---------------------------------------------------------------------------------------------

def constant(step_size) -> Schedule:
    """The schedule returning `step_size` at every step.

    Example:
        >>> from funcgrad.example_libraries import optimizers
        >>> optimizers.constant(0.1)(100)
        0.1
    """
    def schedule(i):
        return step_size

    return schedule


def exponential_decay(step_size, decay_steps, decay_rate) -> Schedule:
    """``step_size * decay_rate ** (i / decay_steps)``.

    Example:
        >>> from funcgrad.example_libraries import optimizers
        >>> optimizers.exponential_decay(1.0, 10, 0.5)(20)
        0.25
    """
    def schedule(i):
        return step_size * decay_rate ** (i / decay_steps)

    return schedule


def inverse_time_decay(step_size, decay_steps, decay_rate, staircase=False) -> Schedule:
    """``step_size / (1 + decay_rate * i / decay_steps)`` (``floor(i / decay_steps)`` with
    staircase).

    Example:
        >>> from funcgrad.example_libraries import optimizers
        >>> optimizers.inverse_time_decay(1.0, 10, 1.0)(10)
        0.5
    """
    if staircase:
        def schedule(i):
            return step_size / (1 + decay_rate * jnp.floor(i / decay_steps))
    else:
        def schedule(i):
            return step_size / (1 + decay_rate * i / decay_steps)
    return schedule


def polynomial_decay(step_size, decay_steps, final_step_size, power=1.0) -> Schedule:
    """From step_size to final_step_size over decay_steps as ``(1 - i / decay_steps) **
    power``, then constant.

    Example:
        >>> from funcgrad.example_libraries import optimizers
        >>> float(optimizers.polynomial_decay(1.0, 10, 0.0)(5))
        0.5
    """
    def schedule(step_num):
        step_num = jnp.minimum(step_num, decay_steps)
        step_mult = (1 - step_num / decay_steps) ** power
        return step_mult * (step_size - final_step_size) + final_step_size

    return schedule


def piecewise_constant(boundaries: Any, values: Any) -> Schedule:
    """``values[k]`` where k counts the boundaries below the step (len(values) ==
    len(boundaries) + 1).

    Example:
        >>> from funcgrad.example_libraries import optimizers
        >>> s = optimizers.piecewise_constant([10, 20], [1.0, 0.5, 0.1])
        >>> [float(s(i)) for i in (0, 15, 30)]
        [1.0, 0.5, 0.10000000149011612]
    """
    boundaries = jnp.array(boundaries)
    values = jnp.array(values)
    if not boundaries.ndim == values.ndim == 1:
        raise ValueError("boundaries and values must be sequences")
    if not boundaries.shape[0] == values.shape[0] - 1:
        raise ValueError("boundaries length must be one shorter than values length")

    def schedule(i):
        return values[jnp.sum(i > boundaries)]

    return schedule


def make_schedule(scalar_or_schedule) -> Schedule:
    """A schedule from a schedule (returned as is) or a scalar (:func:`constant`).

    Example:
        >>> from funcgrad.example_libraries import optimizers
        >>> optimizers.make_schedule(0.3)(7)
        0.3
    """
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if jnp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(type(scalar_or_schedule))


# ---------------------------------------------------------------------------------------------
# utilities
# ---------------------------------------------------------------------------------------------

def l2_norm(tree):
    """The l2 norm of all the leaves of a pytree together.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> float(optimizers.l2_norm([jnp.array([3.0]), jnp.array([4.0])]))
        5.0
    """
    leaves, _ = tree_flatten(tree)
    return jnp.sqrt(sum(jnp.vdot(x, x) for x in leaves))


def clip_grads(grad_tree, max_norm):
    """Scale a gradient pytree down to l2 norm `max_norm` when its norm is larger.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> optimizers.clip_grads([jnp.array([3.0, 4.0])], 1.0)[0].tolist()
        [0.6000000238418579, 0.800000011920929]
    """
    norm = l2_norm(grad_tree)
    return tree_map(lambda g: jnp.where(norm < max_norm, g, g * (max_norm / norm)), grad_tree)


class JoinPoint:
    """Marks where an outer pytree (the parameters') holds an inner one (a leaf's state)."""

    def __init__(self, subtree):
        self.subtree = subtree

    def __iter__(self):
        yield self.subtree


def unpack_optimizer_state(opt_state):
    """An OptimizerState as the parameters' pytree with a JoinPoint per leaf holding that
    leaf's state (for serializing; :func:`pack_optimizer_state` inverts it).

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, _, _ = optimizers.momentum(0.1, 0.9)
        >>> marked = optimizers.unpack_optimizer_state(init({"w": jnp.ones(2)}))
        >>> [a.tolist() for a in marked["w"].subtree]
        [[1.0, 1.0], [0.0, 0.0]]
    """
    states_flat, tree_def, subtree_defs = opt_state
    subtrees = [tree_unflatten(s, f) for s, f in zip(subtree_defs, states_flat)]
    return tree_unflatten(tree_def, [JoinPoint(s) for s in subtrees])


def pack_optimizer_state(marked_pytree):
    """The OptimizerState of a pytree made by :func:`unpack_optimizer_state`.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import optimizers
        >>> init, _, get = optimizers.adam(0.1)
        >>> s = init([jnp.ones(3)])
        >>> s2 = optimizers.pack_optimizer_state(optimizers.unpack_optimizer_state(s))
        >>> get(s2)[0].tolist()
        [1.0, 1.0, 1.0]
    """
    sentinels, tree_def = tree_flatten(marked_pytree, is_leaf=lambda x: isinstance(x, JoinPoint))
    if not all(isinstance(s, JoinPoint) for s in sentinels):
        raise TypeError("pack_optimizer_state expects a pytree whose leaves are JoinPoints "
                        "(as unpack_optimizer_state returns)")
    states_flat, subtree_defs = _unzip2(tree_flatten(s.subtree) for s in sentinels)
    return OptimizerState(states_flat, tree_def, subtree_defs)
