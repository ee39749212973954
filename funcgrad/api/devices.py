"""Public entry points that are not transformations of their own: make_jaxpr, devices."""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from funcgrad import core
from funcgrad.core import Array, ClosedExpr, aval_of, trace_to_expr
from funcgrad.compile.passes import dce
from funcgrad.tree_util import tree_flatten, tree_unflatten


def make_jaxpr(fun: Callable, static_argnums=()) -> Callable:
    """Trace `fun` and return its expression (printable like a jaxpr, with call sites).

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> print(funcgrad.make_jaxpr(lambda x: fnp.sin(x) * 2.0)(1.0))  # doctest: +SKIP
        { lambda a:f32[]. let
            b:f32[] = sin a                  # <stdin>:1
            c:f32[] = mul b 2.0              # <stdin>:1
          in (c,) }
    """
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        dyn = [a for i, a in enumerate(args) if i not in static]
        leaves, in_tree = tree_flatten(tuple(dyn))
        from funcgrad.transforms.ad import _as_value
        leaves = [_as_value(x) for x in leaves]
        store = [None]

        def flat(*xs):
            rebuilt = iter(tree_unflatten(in_tree, list(xs)))
            full = [a if i in static else next(rebuilt) for i, a in enumerate(args)]
            out_leaves, out_tree = tree_flatten(fun(*full, **kwargs))
            store[0] = out_tree
            return [_as_value(o) for o in out_leaves]

        expr, consts, _ = trace_to_expr(flat, [aval_of(x) for x in leaves])
        # drop backward equations nobody needs (cotangents of literals); the forward stays
        expr, consts = dce(expr, consts, removable=lambda e: "(backward of " in e.src)
        return ClosedExpr(expr, consts, in_tree, store[0])

    return wrapped


def devices(backend: str | None = None) -> list:
    """The available devices: one "cuda" Device per usable GPU, then the CPU's (one, or
    config "num_cpu_devices" / FUNCGRAD_NUM_CPU_DEVICES virtual ones for pmap). A Device
    equals its platform's name ("cpu", "cuda") and has JAX's `.id` and `.platform`.

    Example:
        >>> import funcgrad
        >>> funcgrad.devices("cpu")[0] == "cpu"
        True
    """
    from funcgrad.api.device_objects import platform_devices
    if backend is not None:
        if backend == "cuda" and not cuda_available():
            raise RuntimeError("no usable CUDA GPU: " + _cuda_reason())
        return platform_devices(backend)
    return (platform_devices("cuda") if cuda_available() else []) + platform_devices("cpu")


def default_backend() -> str:
    """"cuda" when a GPU is usable (and funcgrad.config has not pinned "cpu"), else "cpu"."""
    return core.default_device()


def cuda_available() -> bool:
    try:
        from funcgrad import cuda as fcuda
    except ImportError:
        return False
    return fcuda.is_available()


def _cuda_reason() -> str:
    try:
        from funcgrad import cuda as fcuda
    except ImportError as e:
        return str(e)
    return fcuda.unavailable_reason()


def _cuda_sim() -> bool:
    """numba's CUDA simulator is active: "cuda" is never the default but may be asked for."""
    try:
        from funcgrad import cuda as fcuda
    except ImportError:
        return False
    return fcuda.simulator_active()


def device_put(x, device: str | None = None):
    """Copy every leaf of a pytree to `device` ("cpu" or "cuda"; default: the default device).

    Example:
        >>> import funcgrad
        >>> funcgrad.device_put([1.0, 2.0], "cpu").device
        'cpu'
    """
    dev = device or core.default_device()
    if dev not in ("cpu",) and dev not in devices() and not (dev == "cuda" and _cuda_sim()):
        raise RuntimeError(f"device {dev!r} is not available: " + _cuda_reason())
    leaves, tree = tree_flatten(x)
    out = []
    for leaf in leaves:
        if isinstance(leaf, Array) and leaf.device == dev:
            out.append(leaf)
        else:
            from funcgrad.numpy import asarray
            arr = asarray(leaf) if not isinstance(leaf, Array) else leaf
            out.append(core.to_array(np.asarray(arr), dev))
    return tree_unflatten(tree, out)


def device_get(x):
    """Every leaf of a pytree as a numpy array."""
    leaves, tree = tree_flatten(x)
    return tree_unflatten(tree, [np.asarray(v) for v in leaves])
