"""JAX's top-level staging and shape API: eval_shape and ShapeDtypeStruct, block_until_ready,
device counts, linear_transpose, named_scope, pure_callback (from callback.py), typeof, jacobian.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np

from funcgrad.api.devices import default_backend, devices
from funcgrad.prims.callback import pure_callback  # noqa: F401  (re-exported)
from funcgrad.core import ArrayBase, ShapedArray, aval_of, trace_to_expr
from funcgrad.tree_util import tree_flatten, tree_map, tree_unflatten


class ShapeDtypeStruct:
    """A shape and a dtype standing in for an array (what eval_shape returns and accepts).

    Example:
        >>> import funcgrad, numpy as np
        >>> funcgrad.ShapeDtypeStruct((2, 3), np.float32).size
        6
    """
    __slots__ = ("dtype", "shape", "sharding")

    def __init__(self, shape, dtype, sharding=None):
        self.shape, self.dtype, self.sharding = tuple(int(s) for s in shape), np.dtype(dtype), \
            sharding

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    def __repr__(self):
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name})"

    def __eq__(self, other):
        return (isinstance(other, ShapeDtypeStruct) and self.shape == other.shape
                and self.dtype == other.dtype)

    def __hash__(self):
        return hash((self.shape, self.dtype))


def _aval(x):
    if isinstance(x, ShapeDtypeStruct) or (hasattr(x, "shape") and hasattr(x, "dtype")
                                            and not isinstance(x, (ArrayBase, np.ndarray,
                                                                   np.generic))):
        return ShapedArray(x.shape, x.dtype)
    return aval_of(x)


def eval_shape(fun: Callable, *args, **kwargs):
    """The shapes and dtypes of fun(*args) as ShapeDtypeStructs, without computing anything.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp, numpy as np
        >>> x = funcgrad.ShapeDtypeStruct((4, 3), np.float32)
        >>> funcgrad.eval_shape(lambda a: fnp.sum(a, axis=0), x)
        ShapeDtypeStruct(shape=(3,), dtype=float32)
    """
    leaves, tree = tree_flatten((args, kwargs))
    store = {}

    def flat(*xs):
        a, k = tree_unflatten(tree, list(xs))
        out_leaves, store["tree"] = tree_flatten(fun(*a, **k))
        from funcgrad.numpy import asarray
        return [asarray(o) for o in out_leaves]

    expr, _, _ = trace_to_expr(flat, [_aval(x) for x in leaves])
    return tree_unflatten(store["tree"], [ShapeDtypeStruct(v.aval.shape, v.aval.dtype)
                                          for v in expr.outs])


def block_until_ready(x):
    """Wait for every array leaf of x to be computed; returns x."""
    for leaf in tree_flatten(x)[0]:
        if hasattr(leaf, "block_until_ready"):
            leaf.block_until_ready()
    return x


def device_count(backend: str | None = None) -> int:
    """Number of devices of the default (or given) backend: the GPUs, or the CPU's virtual
    devices (config "num_cpu_devices", FUNCGRAD_NUM_CPU_DEVICES at import; 1 by default).

    Example:
        >>> import funcgrad
        >>> funcgrad.device_count("cpu") == funcgrad.config.num_cpu_devices
        True
    """
    return len(devices(backend or default_backend()))


local_device_count = device_count


def local_devices(process_index: int | None = None, backend: str | None = None) -> list:
    """The devices of the default (or given) backend in this process (funcgrad runs one)."""
    from funcgrad.distributed.process import process_index as this_process
    if process_index not in (None, this_process()):
        raise ValueError(f"local_devices: process_index {process_index} is not this process "
                         f"({this_process()}); funcgrad sees only its own process's devices")
    return devices(backend or default_backend())


def process_count() -> int:
    """The number of processes in the job (1 unless funcgrad.distributed.initialize ran).

    Example:
        >>> import funcgrad
        >>> funcgrad.process_count()
        1
    """
    from funcgrad.distributed.process import process_count
    return process_count()


def process_index() -> int:
    """This process's index in the job, 0 to process_count() - 1 (JAX's process_index).

    Example:
        >>> import funcgrad
        >>> funcgrad.process_index()
        0
    """
    from funcgrad.distributed.process import process_index
    return process_index()


def linear_transpose(fun: Callable, *primals) -> Callable:
    """The transpose of a linear function at primals' shapes: ct -> cotangents of the inputs.

    Example:
        >>> import funcgrad, numpy as np
        >>> t = funcgrad.linear_transpose(lambda x: 3.0 * x, np.float64(1.0))
        >>> float(t(np.float64(2.0))[0])
        6.0
    """
    from funcgrad.transforms.ad import vjp
    zeros = tree_map(lambda p: np.zeros(np.shape(p), _aval(p).dtype), primals)
    _, f_vjp = vjp(fun, *zeros)

    def transposed(ct):
        return f_vjp(ct)
    return transposed


@contextlib.contextmanager
def named_scope(name: str):
    """Name a region of a program (accepted for compatibility; funcgrad's printer shows call
    sites instead)."""
    if not isinstance(name, str):
        raise TypeError(f"named_scope: name must be a str, got {type(name).__name__}")
    yield


@contextlib.contextmanager
def ensure_compile_time_eval():
    """Compatibility context: funcgrad already evaluates concrete values eagerly."""
    yield


def typeof(x):
    """The abstract value (shape and dtype) of x."""
    return aval_of(x)
