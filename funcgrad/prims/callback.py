"""pure_callback: a host (numpy) function called from traced code, as a primitive."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from funcgrad import prims as P
from funcgrad.core import (
    Array,
    Primitive,
    ShapedArray,
    bind,
    canonicalize_dtype,
    default_device,
    to_array,
)
from funcgrad.tree_util import tree_flatten, tree_unflatten

VMAP_METHODS = ("sequential", "expand_dims", "broadcast_all")


class _Callback:
    """What a pure_callback equation calls: the user's function, its argument tree, the
    expected results (ShapedArrays) and, after vmap, how the batch is handed to it.

    Equal records compare equal, so that jit's CSE may merge equal calls (they are pure).
    """

    def __init__(self, fn, in_tree, want_tree, avals, vmap_method, batch=None):
        self.fn, self.in_tree, self.want_tree = fn, in_tree, want_tree
        self.avals, self.vmap_method, self.batch = tuple(avals), vmap_method, batch
        self._memo = None   # (operand key, results): one host call serves every output
        self.name = getattr(fn, "__name__", None) or repr(fn)

    def _key(self):
        return (self.fn, str(self.in_tree), str(self.want_tree), self.avals, self.vmap_method,
                self.batch)

    def __eq__(self, other):
        return isinstance(other, _Callback) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"pure_callback:{self.name}"

    def flat_call(self, leaves) -> list:
        """The callback on flat numpy operands: its result leaves, checked and cast."""
        if self.batch is None:
            args, kwargs = tree_unflatten(self.in_tree, list(leaves))
            out = self.fn(*args, **kwargs)
            got, got_tree = tree_flatten(out)
            if len(got) != len(self.avals) or (
                    str(got_tree) != str(self.want_tree) and len(self.avals) != 1):
                raise TypeError(f"pure_callback({self.name}): the callback returned {got_tree} "
                                f"({len(got)} arrays), expected {self.want_tree} "
                                f"({len(self.avals)} arrays)")
            return [_check_result(self.name, i, g, w)
                    for i, (g, w) in enumerate(zip(got, self.avals))]
        kind, inner, dims = self.batch
        if kind == "expand":   # one call on the batched operands
            args, kwargs = tree_unflatten(self.in_tree, list(leaves))
            out = self.fn(*args, **kwargs)
            got = tree_flatten(out)[0]
            if len(got) != len(self.avals):
                raise TypeError(f"pure_callback({self.name}): the callback returned "
                                f"{len(got)} arrays, expected {len(self.avals)}")
            return [_check_result(self.name, i, g, w, " (vmap_method="
                                  f"{self.vmap_method!r}: results carry the batch axis first)")
                    for i, (g, w) in enumerate(zip(got, self.avals))]
        size = self.avals[0].shape[0]   # sequential: one call per batch element, stacked
        rows = [inner.flat_call([x[b] if d is not None else x for x, d in zip(leaves, dims)])
                for b in range(size)]
        return [np.stack([r[i] for r in rows]) if rows else np.zeros(a.shape, a.dtype)
                for i, a in enumerate(self.avals)]

    def run(self, leaves) -> list:
        """flat_call, memoized on the operands' bytes when there are several outputs (each
        output is its own equation; one host call serves them all)."""
        leaves = [np.asarray(x) for x in leaves]
        if len(self.avals) == 1:
            return self.flat_call(leaves)
        key = [(x.shape, x.dtype.str, x.tobytes()) for x in leaves]
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        outs = self.flat_call(leaves)
        self._memo = (key, outs)
        return outs


def _check_result(name, i, got, want: ShapedArray, note=""):
    g = np.asarray(got)
    if tuple(g.shape) != tuple(want.shape) or canonicalize_dtype(g.dtype) != want.dtype:
        raise TypeError(f"pure_callback({name}): result {i} has shape {tuple(g.shape)} and "
                        f"dtype {g.dtype.name}, expected shape {tuple(want.shape)} and dtype "
                        f"{want.dtype.name} (result_shape_dtypes){note}")
    return g.astype(want.dtype, copy=False)


def _shape(*avals, cb, index):
    return cb.avals[index]


def _impl(*args, cb, index):
    return cb.run(args)[index]


def _call(*args, cb, index):
    """Eager calls and the plans' host steps: numpy operands in, a host array out."""
    vals = [np.asarray(a) for a in args]
    return to_array(cb.run(vals)[index], "cpu")


def _no_jvp(ts, xs, *, out, cb, index):
    raise ValueError(f"pure_callback({cb.name}) cannot be differentiated (JAX semantics: pure "
                     f"callbacks do not support JVP or VJP). Wrap the function that calls it in "
                     f"funcgrad.custom_jvp or funcgrad.custom_vjp to give it a derivative.")


def _no_vjp(ct, *xs, out, cb, index):
    _no_jvp(None, xs, out=out, cb=cb, index=index)


def _batch(args, dims, *, cb, index):
    method = cb.vmap_method
    if method is None:
        raise NotImplementedError(
            f"pure_callback({cb.name}) under vmap needs a vmap_method: pass "
            f"vmap_method='sequential' (one call per batch element, results stacked), "
            f"'expand_dims' (one call; unbatched operands get a leading axis of size 1) or "
            f"'broadcast_all' (one call; every operand broadcast to the batch size)")
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    from funcgrad.transforms.batching import _move_to_front
    args = [_move_to_front(a, d) for a, d in zip(args, dims)]
    dims = tuple(0 if d is not None else None for d in dims)
    avals = [ShapedArray((size,) + tuple(a.shape), a.dtype) for a in cb.avals]
    if method == "sequential":
        new = _Callback(cb.fn, cb.in_tree, cb.want_tree, avals, method, ("seq", cb, dims))
    else:
        ops = []
        for a, d in zip(args, dims):
            if d is None:
                shape = ((size,) if method == "broadcast_all" else (1,)) + tuple(a.shape)
                a = P.broadcast_in_dim(a, shape, tuple(range(1, len(shape))))
            ops.append(a)
        args = ops
        new = _Callback(cb.fn, cb.in_tree, cb.want_tree, avals, method, ("expand", cb, dims))
    return bind(pure_callback_p, *args, cb=new, index=index), 0


pure_callback_p = Primitive("pure_callback", _shape, _impl, kind="callback")
# the plans of both backends run an equation with a call_impl on the host (numpy operands; on
# CUDA a synchronizing copy each way, so that plan runs without a CUDA graph). It is not marked
# effectful: DCE may drop an unused call and CSE may merge equal ones, as JAX allows.
pure_callback_p.call_impl = _call
pure_callback_p.jvp = _no_jvp
pure_callback_p.vjp = _no_vjp
pure_callback_p.batch = _batch


def _device_of(leaves):
    devs = [x.device for x in leaves if isinstance(x, Array)]
    return next((d for d in devs if d != "cpu"), "cpu" if devs else default_device())


def pure_callback(callback: Callable, result_shape_dtypes, *args, vmap_method=None, **kwargs):
    """Call a pure host function on numpy arrays, also inside jit and vmap (JAX semantics).

    `callback(*args, **kwargs)` receives numpy arrays and must return a pytree matching
    `result_shape_dtypes` (ShapeDtypeStructs or anything with .shape and .dtype); a result of
    another shape or dtype raises an error naming the callback. Being pure, an unused call may
    be dropped and equal calls merged under jit. Under jit the plan calls it when it runs; on
    the CUDA backend that step copies the operands to the host and the results back (a
    synchronizing copy: a plan with a host call runs without a CUDA graph).

    Args:
        callback: the host function.
        result_shape_dtypes: pytree of shapes/dtypes of the results.
        *args: operands (pytrees of arrays), passed to the callback as numpy arrays.
        vmap_method: behaviour under vmap: "sequential" (one call per batch element, results
            stacked), "expand_dims" (one call on the batched operands; unbatched operands get
            a leading axis of size 1) or "broadcast_all" (one call, every operand broadcast to
            the batch size); with the last two the callback returns results with the batch axis
            first. None (the default) makes vmap raise, as in JAX.
        **kwargs: keyword operands.

    Raises:
        ValueError: when differentiated (use custom_jvp / custom_vjp around it, as in JAX).

    Example:
        >>> import funcgrad, numpy as np
        >>> spec = funcgrad.ShapeDtypeStruct((3,), np.float32)
        >>> f = funcgrad.jit(lambda x: funcgrad.pure_callback(np.sort, spec, x) * 2.0)
        >>> f(np.array([3.0, 1.0, 2.0], np.float32)).tolist()
        [2.0, 4.0, 6.0]
    """
    if vmap_method is not None and vmap_method not in VMAP_METHODS:
        raise ValueError(f"pure_callback: vmap_method must be one of {VMAP_METHODS} or None, "
                         f"got {vmap_method!r}")
    from funcgrad.transforms.ad import _as_value
    leaves, in_tree = tree_flatten((args, kwargs))
    leaves = [_as_value(x) for x in leaves]
    want, want_tree = tree_flatten(result_shape_dtypes)
    avals = []
    for w in want:
        if not (hasattr(w, "shape") and hasattr(w, "dtype")):
            raise TypeError(f"pure_callback: result_shape_dtypes leaves need .shape and .dtype, "
                            f"got {type(w).__name__}")
        avals.append(ShapedArray(tuple(int(s) for s in w.shape), canonicalize_dtype(w.dtype)))
    cb = _Callback(callback, in_tree, want_tree, avals, vmap_method)
    outs = [bind(pure_callback_p, *leaves, cb=cb, index=i) for i in range(len(avals))]
    if all(isinstance(o, Array) for o in outs):   # eager: results where the inputs are
        dev = _device_of(leaves)
        outs = [to_array(o, dev) for o in outs]
    return tree_unflatten(want_tree, outs)
