"""pmap: map a function over devices, as one jitted program batched over the device axis."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from funcgrad import core
from funcgrad.transforms.batching import _prefix_leaves, vmap
from funcgrad.prims.collectives import anonymous_axis
from funcgrad.core import aval_of, user_frame_src
from funcgrad.compile.jit import jit
from funcgrad.tree_util import tree_flatten


def _as_tuple(x) -> tuple:
    return (x,) if isinstance(x, int) else tuple(x)


class _Spec:
    """An in_axes specification as a static jit argument (dict prefixes are not hashable)."""

    def __init__(self, spec):
        self.spec, self.key = spec, repr(spec)

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, _Spec) and self.key == other.key


def _leaf_axes(spec, args, kwargs):
    """One in_axes entry per leaf of (args, kwargs); keyword arguments map over axis 0."""
    try:
        axes = _prefix_leaves(spec, tuple(args), "in_axes") if isinstance(spec, tuple) else \
            _prefix_leaves(spec, args, "in_axes")
    except ValueError as e:
        raise ValueError(str(e).replace("vmap ", "pmap ", 1)) from None
    return axes + [0] * len(tree_flatten(kwargs)[0])


def _mapped_size(leaves, axes, axis_size):
    """The size of the mapped axis; ValueError naming every mapped shape if they disagree."""
    seen = []
    for x, a in zip(leaves, axes):
        if a is None:
            continue
        shape = tuple(aval_of(x).shape)
        if not -len(shape) <= a < len(shape):
            raise ValueError(f"pmap: in_axes {a} is out of range for an argument of shape "
                             f"{shape}\n  at {user_frame_src()}")
        seen.append((shape, a % len(shape)))
    sizes = {s[a] for s, a in seen} | ({axis_size} if axis_size is not None else set())
    if len(sizes) > 1:
        shown = ", ".join(f"{s} (axis {a})" for s, a in seen)
        extra = f" and axis_size={axis_size}" if axis_size is not None else ""
        raise ValueError(f"pmap got mapped axes of different sizes: {shown}{extra}; every "
                         f"mapped argument needs the same size along its in_axes\n  at "
                         f"{user_frame_src()}")
    if not sizes:
        raise ValueError("pmap needs at least one mapped argument (an in_axes entry that is "
                         f"not None) or axis_size\n  at {user_frame_src()}")
    return sizes.pop(), [s for s, _ in seen]


def _platform_and_count(devices, backend):
    from funcgrad.api.device_objects import platform_devices
    if devices is not None:
        devs = list(devices)
        kinds = {str(d) for d in devs}
        if not devs or len(kinds) != 1:
            raise ValueError(f"pmap: devices must be a non-empty list of one platform's "
                             f"devices, got {devs!r}\n  at {user_frame_src()}")
        platform = kinds.pop()
        available = len(platform_devices(platform))
        if len(devs) > available:
            raise ValueError(f"pmap: {len(devs)} {platform} devices were given but only "
                             f"{available} exist\n  at {user_frame_src()}")
        return platform, len(devs), True
    from funcgrad.api.devices import default_backend
    platform = backend or default_backend()
    return platform, len(platform_devices(platform)), False


def pmap(fun: Callable, axis_name: Any = None, *, in_axes: Any = 0, out_axes: Any = 0,
         static_broadcasted_argnums=(), devices=None, backend: str | None = None,
         axis_size: int | None = None) -> Callable:
    """Map `fun` over a leading axis of its inputs, one slice per device, as JAX's pmap.

    Inside `fun`, collectives over `axis_name` (funcgrad.lax.psum, pmean, pmax, pmin,
    all_gather, psum_scatter, ppermute, axis_index) combine the devices' values, with JAX's
    gradients. The whole call is one jitted program batched over the device axis (each
    collective rewritten as ordinary ops over that axis), so `grad`, `vmap` and `jit` compose
    with it either way round.

    Devices: on the CPU, `funcgrad.config.num_cpu_devices` virtual devices (set
    FUNCGRAD_NUM_CPU_DEVICES=N before import, or `funcgrad.config.update("num_cpu_devices",
    N)`; 1 by default), as JAX's host device count. On CUDA, pmap runs over one GPU only:
    executing across several GPUs through NCCL is not built yet, so a
    mapped size above 1 on "cuda" raises rather than pretending.

    As in JAX, the mapped axis may be smaller than the number of devices (the first ones are
    used) unless `devices` is given, when it must equal len(devices).

    Args:
        fun: a function of pytrees of arrays.
        axis_name: the name collectives inside `fun` use for the device axis.
        in_axes: int, None or a tuple (one entry per positional argument) of pytree prefixes:
            the mapped axis of each input (None: broadcast to every device). Keyword arguments
            are mapped over axis 0.
        out_axes: where the device axis goes in each output (None: the output must be the same
            on every device, and is returned once).
        static_broadcasted_argnums: positional arguments passed to every device as Python
            values (hashable; a new value traces again).
        devices: the devices to map over (e.g. funcgrad.devices("cpu")[:2]).
        backend: "cpu" or "cuda" when `devices` is not given (default: the default backend).
        axis_size: the mapped size when no argument is mapped.

    Returns:
        A function returning Arrays whose `out_axes` axis is the device axis. JAX returns an
        array sharded over the devices; funcgrad returns a plain Array on the backend's device
        (all virtual CPU devices share the host's memory).

    Example:
        >>> import funcgrad, numpy as np
        >>> from funcgrad import lax
        >>> n = funcgrad.local_device_count()
        >>> f = funcgrad.pmap(lambda x: x / lax.psum(x, "i"), axis_name="i")
        >>> float(f(np.ones(n)).sum())
        1.0
    """
    static = _as_tuple(static_broadcasted_argnums)
    name = axis_name if axis_name is not None else anonymous_axis()
    fname = getattr(fun, "__name__", "fun")

    def body(st, dyn, kwargs, dyn_spec):
        stat = dict(st)

        def call(dyn_args, kw):
            it = iter(dyn_args)
            full = [stat[i] if i in stat else next(it) for i in range(len(stat) + len(dyn))]
            return fun(*full, **kw)
        mapped = vmap(call, in_axes=(dyn_spec.spec, 0), out_axes=out_axes, axis_name=name)
        return mapped(dyn, kwargs)

    program = jit(body, static_argnums=(0, 3))

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        for i in static:
            if not -len(args) <= i < len(args):
                raise ValueError(f"pmap({fname}): static_broadcasted_argnums={i} but only "
                                 f"{len(args)} positional arguments were given\n  at "
                                 f"{user_frame_src()}")
        stat_idx = {i % len(args) for i in static}
        st = tuple((i, args[i]) for i in sorted(stat_idx))
        for i, v in st:
            try:
                hash(v)
            except TypeError:
                raise TypeError(f"pmap({fname}): static broadcasted argument {i} must be "
                                f"hashable, got {type(v).__name__}\n  at {user_frame_src()}"
                                ) from None
        dyn = tuple(a for i, a in enumerate(args) if i not in stat_idx)
        spec = list(in_axes) if isinstance(in_axes, (tuple, list)) else in_axes
        if isinstance(spec, list):
            if len(spec) != len(args):
                raise ValueError(f"pmap in_axes has {len(spec)} entries but the function got "
                                 f"{len(args)} positional arguments\n  at {user_frame_src()}")
            spec = tuple(s for i, s in enumerate(spec) if i not in stat_idx)
        leaves = tree_flatten((dyn, kwargs))[0]
        size, shapes = _mapped_size(leaves, _leaf_axes(spec, dyn, kwargs), axis_size)
        platform, count, exact = _platform_and_count(devices, backend)
        if (size != count) if exact else (size > count or size < 1):
            want = f"exactly {count}" if exact else f"1 to {count}"
            raise ValueError(
                f"pmap({fname}): the mapped axis has size {size} (argument shapes {shapes}) but "
                f"{want} {platform} device(s) are available; on the CPU set "
                "FUNCGRAD_NUM_CPU_DEVICES=N before import or funcgrad.config.update("
                f"'num_cpu_devices', N)\n  at {user_frame_src()}")
        if platform == "cuda" and size > 1:
            raise NotImplementedError(
                f"pmap({fname}) over {size} GPUs: running across several GPUs (NCCL) is not "
                "built yet; map over one GPU, or over the CPU's virtual devices"
                f"\n  at {user_frame_src()}")
        if core.current_builder() is None:   # place the inputs on the mapped backend
            from funcgrad.api.devices import device_put
            dyn, kwargs = device_put((dyn, kwargs), platform)
        return program(st, dyn, kwargs, _Spec(spec))

    return wrapped
