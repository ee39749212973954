"""More of JAX's top-level names: placement context managers, host/process queries (one
process), named_call, replicated/sharded device_put for pmap, print_environment_info."""
from __future__ import annotations

import contextlib
import functools
import platform
import sys
from collections.abc import Callable

from funcgrad.config import config


@contextlib.contextmanager
def default_device(device):
    """Inside the block, new arrays and eager ops with no placed operand go to `device`
    ("cpu", "cuda" or a Device), as jax.default_device.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> with funcgrad.default_device("cpu"):
        ...     fnp.ones(2).device
        'cpu'
    """
    prev = config.default_device
    config.update("default_device", None if device is None else str(device))
    try:
        yield
    finally:
        config.update("default_device", prev)


@contextlib.contextmanager
def default_matmul_precision(precision):
    """Inside the block, matmuls whose precision is unset use `precision` ("float32",
    "tensorfloat32", "bfloat16", ...), as jax.default_matmul_precision."""
    prev = config.default_matmul_precision
    config.update("default_matmul_precision", precision)
    try:
        yield
    finally:
        config.update("default_matmul_precision", prev)


def host_count() -> int:
    """Processes in the computation (JAX's older name of process_count)."""
    from funcgrad.distributed.process import process_count
    return process_count()


def host_id() -> int:
    """This process's index (JAX's older name of process_index)."""
    from funcgrad.distributed.process import process_index
    return process_index()


def host_ids() -> list:
    """Every process's index."""
    return list(range(host_count()))


def process_indices() -> list:
    """Every process's index: [0, ..., process_count() - 1]."""
    return list(range(host_count()))


def named_call(fun: Callable, *, name: str | None = None) -> Callable:
    """fun under a name (JAX uses it for profiles and HLO); funcgrad keeps the call as is."""
    @functools.wraps(fun)
    def call(*args, **kwargs):
        return fun(*args, **kwargs)
    call.__name__ = name or getattr(fun, "__name__", "fun")
    return call


def device_put_replicated(x, devices: list):
    """x stacked once per device along a new leading axis (what pmap maps over), on
    devices[0]'s platform."""
    from funcgrad import numpy as fnp
    from funcgrad.api.devices import device_put
    from funcgrad.tree_util import tree_map
    if not devices:
        raise ValueError("device_put_replicated: devices must not be empty")
    return tree_map(lambda a: device_put(fnp.stack([fnp.asarray(a)] * len(devices)),
                                         str(devices[0])), x)


def device_put_sharded(shards: list, devices: list):
    """The shards (one pytree per device, same structure and shapes) stacked along a new
    leading axis, on devices[0]'s platform."""
    from funcgrad import numpy as fnp
    from funcgrad.api.devices import device_put
    from funcgrad.tree_util import tree_map
    if len(shards) != len(devices) or not devices:
        raise ValueError(f"device_put_sharded: {len(shards)} shards for {len(devices)} devices")
    return tree_map(lambda *xs: device_put(fnp.stack([fnp.asarray(a) for a in xs]),
                                           str(devices[0])), *shards)


def print_environment_info(return_string: bool = False):
    """funcgrad's, Python's and the main dependencies' versions, and the devices."""
    import numpy as np

    __version__ = sys.modules["funcgrad"].__version__   # the package, already imported
    from funcgrad.api import devices as api
    lines = [f"funcgrad: {__version__}", f"numpy:    {np.__version__}",
             f"python:   {sys.version.split()[0]}", f"platform: {platform.platform()}"]
    try:
        import numba
        lines.append(f"numba:    {numba.__version__}")
    except ImportError:
        lines.append("numba:    not installed")
    lines.append(f"devices:  {[str(d) for d in api.devices()]}")
    text = "\n".join(lines)
    if return_string:
        return text
    print(text)
