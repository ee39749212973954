"""The core: avals, expressions, primitives and their registry, arrays, tracing (bind).

Its parts: dtypes.py (dtypes, ShapedArray), source.py (call sites, errors), expr.py
(Var, Lit, Eqn, Expr, ClosedExpr, the printer); this module holds primitives, arrays and
tracers, the backend registry and tracing, which refer to one another.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from funcgrad.core.dtypes import (  # noqa: F401
    SUPPORTED_DTYPES,
    ShapedArray,
    _NARROW,
    _SHORT,
    _X64,
    _set_x64,
    canonicalize_dtype,
    compute_dtype,
    dtype_kind,
    is_complex,
    is_float,
    is_half,
    is_inexact,
    is_int,
    real_dtype,
)
from funcgrad.core.source import (  # noqa: F401
    FuncgradError,
    ShapeError,
    _PKG_DIR,
    _fmt_src,
    _src_override,
    _state,
    current_tag,
    eqn_tag,
    source_info,
    type_error,
    user_frame,
    user_frame_src,
)
from funcgrad.core.expr import (  # noqa: F401
    ClosedExpr,
    Eqn,
    Expr,
    Lit,
    Var,
    _fmt_param,
    _names,
    pp_expr,
)
# ---------------------------------------------------------------------------------------------
# primitives
# ---------------------------------------------------------------------------------------------

class Primitive:
    """A primitive operation with all of its rules kept together.

    shape(*avals, **params) -> ShapedArray; impl(*np_arrays, **params) -> np.ndarray;
    vjp(ct, *xs, out, **params) -> tuple aligned with xs (None = zero / not differentiable);
    jvp(tangents, xs, out, **params) -> tangent or None (tangents hold None for zeros);
    batch(args, dims, **params) -> (out, out_dim) with every dim 0 or None.
    """

    def __init__(self, name, shape, impl, vjp=None, jvp=None, batch=None, kind="other"):
        self.name, self.shape, self.impl = name, shape, impl
        self.vjp, self.jvp, self.batch, self.kind = vjp, jvp, batch, kind
        self.call_impl = None  # call-like primitives: run the body eagerly
        self.inline = None  # call-like primitives: jit inlines the body
        self.effectful = False  # never removed or merged by jit's passes
        self.vjp_group = False  # custom_vjp, scan, cond calls: ad runs the group's fwd/bwd

    def __repr__(self):
        return self.name

    def bind(self, *args, **params):
        return bind(self, *args, **params)


PRIMITIVES: dict[str, Primitive] = {}


def defprim(name, shape, impl, vjp=None, jvp=None, batch=None, kind="other") -> Primitive:
    """Define a primitive and register it."""
    p = Primitive(name, shape, impl, vjp, jvp, batch, kind)
    PRIMITIVES[name] = p
    return p


def aval_of(x) -> ShapedArray:
    """The abstract value of an Array, tracer, numpy array or Python scalar."""
    if isinstance(x, ArrayBase):
        return x.aval
    if isinstance(x, (np.ndarray, np.generic)):
        dt = x.dtype if _X64[0] else _NARROW.get(x.dtype, x.dtype)
        return ShapedArray(x.shape, dt)
    if isinstance(x, bool):
        return ShapedArray((), np.bool_)
    if isinstance(x, int):
        return ShapedArray((), np.int32)
    if isinstance(x, float):
        return ShapedArray((), np.float32)
    if isinstance(x, complex):
        return ShapedArray((), np.complex64)
    raise TypeError(f"{type(x).__name__} is not a valid funcgrad array type: {x!r}")


# ---------------------------------------------------------------------------------------------
# arrays and tracers
# ---------------------------------------------------------------------------------------------

_numpy_api = None  # funcgrad.numpy, set when it is imported (it supplies operator methods)


def set_numpy_api(module):
    global _numpy_api
    _numpy_api = module


class ArrayBase:
    """Operators and methods shared by concrete Arrays and tracers."""
    __slots__ = ()
    __array_priority__ = 100

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: len(self.aval.shape))
    size = property(lambda self: self.aval.size)
    T = property(lambda self: _numpy_api.transpose(self))
    at = property(lambda self: _numpy_api._IndexUpdateHelper(self))
    real = property(lambda self: _numpy_api.real(self))
    imag = property(lambda self: _numpy_api.imag(self))
    mT = property(lambda self: _numpy_api.swapaxes(self, -1, -2))

    def __len__(self):
        if not self.aval.shape:
            raise TypeError("len() of unsized object (a 0-d array)")
        return self.aval.shape[0]

    def __iter__(self):
        if not self.aval.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.aval.shape[0]))

    def __getitem__(self, idx):
        return _numpy_api._getitem(self, idx)

    def __setitem__(self, idx, val):
        raise TypeError("funcgrad arrays are immutable; use x.at[idx].set(value) instead")

    def __neg__(self): return _numpy_api.negative(self)
    def __pos__(self): return self
    def __abs__(self): return _numpy_api.abs(self)
    def __invert__(self): return _numpy_api.invert(self)
    def __add__(self, o): return _numpy_api.add(self, o)
    def __radd__(self, o): return _numpy_api.add(o, self)
    def __sub__(self, o): return _numpy_api.subtract(self, o)
    def __rsub__(self, o): return _numpy_api.subtract(o, self)
    def __mul__(self, o): return _numpy_api.multiply(self, o)
    def __rmul__(self, o): return _numpy_api.multiply(o, self)
    def __truediv__(self, o): return _numpy_api.divide(self, o)
    def __rtruediv__(self, o): return _numpy_api.divide(o, self)
    def __floordiv__(self, o): return _numpy_api.floor_divide(self, o)
    def __rfloordiv__(self, o): return _numpy_api.floor_divide(o, self)
    def __mod__(self, o): return _numpy_api.remainder(self, o)
    def __rmod__(self, o): return _numpy_api.remainder(o, self)
    def __pow__(self, o): return _numpy_api.power(self, o)
    def __rpow__(self, o): return _numpy_api.power(o, self)
    def __matmul__(self, o): return _numpy_api.matmul(self, o)
    def __rmatmul__(self, o): return _numpy_api.matmul(o, self)
    def __lt__(self, o): return _numpy_api.less(self, o)
    def __le__(self, o): return _numpy_api.less_equal(self, o)
    def __gt__(self, o): return _numpy_api.greater(self, o)
    def __ge__(self, o): return _numpy_api.greater_equal(self, o)
    def __eq__(self, o): return _numpy_api.equal(self, o)
    def __ne__(self, o): return _numpy_api.not_equal(self, o)
    def __and__(self, o): return _numpy_api.bitwise_and(self, o)
    def __rand__(self, o): return _numpy_api.bitwise_and(o, self)
    def __or__(self, o): return _numpy_api.bitwise_or(self, o)
    def __ror__(self, o): return _numpy_api.bitwise_or(o, self)
    def __xor__(self, o): return _numpy_api.bitwise_xor(self, o)
    def __rxor__(self, o): return _numpy_api.bitwise_xor(o, self)
    def __lshift__(self, o): return _numpy_api.left_shift(self, o)
    def __rshift__(self, o): return _numpy_api.right_shift(self, o)
    __hash__ = None

    # in-place operators rebind (arrays are immutable, as in JAX); the array API forbids an
    # in-place result whose dtype or shape differs from the left operand's: that raises
    def _inplace(self, op, o, sym):
        out = getattr(self, op)(o)
        if out.shape != self.shape or out.dtype != self.dtype:
            raise TypeError(
                f"x {sym}= y would change x from {self.aval.str_short()} to "
                f"{out.aval.str_short()}: funcgrad arrays are immutable, so an in-place operator "
                f"rebinds x to x {sym} y, which must keep x's dtype and shape "
                f"(write x = x {sym} y instead)\n  at {user_frame_src()}")
        return out

    def __iadd__(self, o): return self._inplace("__add__", o, "+")
    def __isub__(self, o): return self._inplace("__sub__", o, "-")
    def __imul__(self, o): return self._inplace("__mul__", o, "*")
    def __itruediv__(self, o): return self._inplace("__truediv__", o, "/")
    def __ifloordiv__(self, o): return self._inplace("__floordiv__", o, "//")
    def __imod__(self, o): return self._inplace("__mod__", o, "%")
    def __ipow__(self, o): return self._inplace("__pow__", o, "**")
    def __imatmul__(self, o): return self._inplace("__matmul__", o, "@")
    def __iand__(self, o): return self._inplace("__and__", o, "&")
    def __ior__(self, o): return self._inplace("__or__", o, "|")
    def __ixor__(self, o): return self._inplace("__xor__", o, "^")
    def __ilshift__(self, o): return self._inplace("__lshift__", o, "<<")
    def __irshift__(self, o): return self._inplace("__rshift__", o, ">>")

    def __array_namespace__(self, *, api_version=None):
        """funcgrad.numpy, the array API standard namespace of this array."""
        if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12", "2025.12"):
            raise ValueError(f"unsupported array API version {api_version!r}")
        return _numpy_api

    def astype(self, dtype): return _numpy_api.asarray(self, dtype=dtype)
    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return _numpy_api.reshape(self, shape, order=order)
    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = axes[0]
        return _numpy_api.transpose(self, axes or None)
    def sum(self, axis=None, dtype=None, keepdims=False):
        return _numpy_api.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)
    def mean(self, axis=None, dtype=None, keepdims=False):
        return _numpy_api.mean(self, axis=axis, dtype=dtype, keepdims=keepdims)
    def max(self, axis=None, keepdims=False): return _numpy_api.max(self, axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return _numpy_api.min(self, axis, keepdims=keepdims)
    def prod(self, axis=None, keepdims=False):
        return _numpy_api.prod(self, axis, keepdims=keepdims)
    def var(self, axis=None, ddof=0, keepdims=False):
        return _numpy_api.var(self, axis, ddof=ddof, keepdims=keepdims)
    def std(self, axis=None, ddof=0, keepdims=False):
        return _numpy_api.std(self, axis, ddof=ddof, keepdims=keepdims)
    def argmax(self, axis=None, keepdims=False):
        return _numpy_api.argmax(self, axis, keepdims=keepdims)
    def argmin(self, axis=None, keepdims=False):
        return _numpy_api.argmin(self, axis, keepdims=keepdims)
    def all(self, axis=None, keepdims=False): return _numpy_api.all(self, axis, keepdims=keepdims)
    def any(self, axis=None, keepdims=False): return _numpy_api.any(self, axis, keepdims=keepdims)
    def repeat(self, repeats, axis=None): return _numpy_api.repeat(self, repeats, axis)
    def squeeze(self, axis=None): return _numpy_api.squeeze(self, axis)
    def flatten(self): return _numpy_api.ravel(self)
    def ravel(self): return _numpy_api.ravel(self)
    def clip(self, min=None, max=None): return _numpy_api.clip(self, min, max)
    def swapaxes(self, a, b): return _numpy_api.swapaxes(self, a, b)
    def dot(self, other): return _numpy_api.dot(self, other)
    def conj(self): return _numpy_api.conjugate(self)
    def conjugate(self): return _numpy_api.conjugate(self)
    def take(self, indices, axis=None, out=None, mode=None, unique_indices=False,
             indices_are_sorted=False, fill_value=None):
        return _numpy_api.take(self, indices, axis, out, mode, unique_indices,
                               indices_are_sorted, fill_value)
    def round(self, decimals=0): return _numpy_api.round(self, decimals)


class DeletedBuffer:
    """Stands in for the buffer of an Array that was donated (or deleted): any use raises.

    `made` counts them: an Array's buffer is replaced only by one of these (Array.delete,
    jit's donation), so a count unchanged since some moment means no Array was deleted since.
    """
    __slots__ = ("_why",)
    made = 0

    def __init__(self, why):
        self._why = why     # a str, or (jit's name, user_frame()) of a donation
        DeletedBuffer.made += 1

    @property
    def why(self) -> str:
        w = self._why
        if isinstance(w, str):
            return w
        name, where = w
        return f"it was donated to jit({name}) (donate_argnums) at {_fmt_src(where)}"

    def __getattr__(self, name):
        self.raise_error()

    def raise_error(self):
        raise RuntimeError(f"this Array was deleted: {self.why}; it can no longer be read "
                           "(use the function's results instead)")


class Array(ArrayBase):
    """A concrete array living on a device (numpy memory for "cpu", GPU memory for "cuda")."""
    __slots__ = ("__weakref__", "aval", "buf", "device")

    def __init__(self, buf, aval: ShapedArray, device: str = "cpu"):
        self.buf, self.aval, self.device = buf, aval, device

    def is_deleted(self) -> bool:
        """True once the array was donated to a jitted call (donate_argnums) or deleted."""
        return type(self.buf) is DeletedBuffer

    def delete(self):
        """Free this array's buffer now (later reads raise), as jax.Array.delete."""
        self.buf = DeletedBuffer("Array.delete() was called")

    def __array__(self, dtype=None, copy=None):
        if type(self.buf) is DeletedBuffer:
            self.buf.raise_error()
        a = get_backend(self.device).to_numpy(self.buf)
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        body = np.array2string(np.asarray(self), separator=", ", prefix="Array(")
        return f"Array({body}, dtype={self.dtype.name})"

    def __str__(self):
        """The values as numpy prints them (no ``Array(...)``), as jax.Array's str."""
        return str(np.asarray(self))

    def __format__(self, format_spec):
        """format() / f-strings: a 0-d array formats as its scalar (``f"{loss:.4f}"``), any
        other array as numpy's ndarray does (an empty spec gives str(); numpy rejects others),
        as jax.Array."""
        value = np.asarray(self)
        return format(value if value.ndim else value[()], format_spec)

    def _scalar(self, cast):
        if self.aval.size != 1:
            raise TypeError(f"only size-1 arrays can be converted to Python scalars, "
                            f"got {self.aval.str_short()}")
        return cast(np.asarray(self).reshape(()))

    def __bool__(self): return self._scalar(bool)
    def __float__(self): return self._scalar(float)
    def __int__(self): return self._scalar(int)
    def __complex__(self): return self._scalar(complex)
    def __index__(self):
        if not is_int(self.dtype):
            raise TypeError(f"only integer arrays can be used as an index, got {self.dtype}")
        return self._scalar(int)
    def item(self): return np.asarray(self).item()
    def tolist(self): return np.asarray(self).tolist()

    def to_device(self, device, /, *, stream=None):
        """This array on `device` ("cpu" or "cuda"), as the array API's to_device."""
        return to_array(self, device)

    def block_until_ready(self):
        get_backend(self.device).synchronize()
        return self

    @property
    def __cuda_array_interface__(self):
        """CUDA array interface (v3) of a "cuda" array, zero-copy (CuPy, numba, PyTorch)."""
        if self.device == "cpu":
            raise AttributeError("a cpu Array has no __cuda_array_interface__")
        # a strided view is swapped for an equal contiguous buffer that this Array then owns
        self.buf, cai = get_backend(self.device).cuda_array_interface(self.buf)
        return cai

    # __dlpack__ and __dlpack_device__ are attached by funcgrad.dlpack (which imports core),
    # sharding and devices() by funcgrad.sharding


class ConcretizationError(FuncgradError, TypeError):
    """A traced value was used where Python needs a concrete value (JAX's
    ConcretizationTypeError)."""


class TracerBoolConversionError(ConcretizationError):
    """bool() of a traced array: an ``if`` or ``while`` on a value inside jit."""


class TracerIntegerConversionError(ConcretizationError):
    """int() of a traced array, or one used as a Python index (a shape, a slice bound)."""


class TracerArrayConversionError(ConcretizationError):
    """numpy.asarray() or .tolist() of a traced array."""


class UnexpectedTracerError(FuncgradError, TypeError):
    """A traced value used outside the transformation that made it (a leaked tracer)."""


class NonConcreteBooleanIndexError(FuncgradError, IndexError):
    """Boolean-mask indexing with a traced mask: the result's shape would depend on data."""


class Tracer(ArrayBase):
    """A value being staged into an expression by a Builder.

    A tracer of a concrete builder (grad / vjp / jvp outside jit and vmap, as JAX's eager
    autodiff) also has a concrete value, computed when first asked for: bool(), int(),
    operator.index() and .item() read it, so that Python control flow on values works there.
    float() and complex() raise as in JAX (they would silently drop the derivative), and so do
    numpy.asarray() and .tolist().
    """
    __slots__ = ("builder", "var")

    def __init__(self, builder, var):
        self.builder, self.var = builder, var

    aval = property(lambda self: self.var.aval)

    def to_concrete_value(self):
        """This value as a concrete Array when its trace is concrete (eager autodiff), else
        None (inside jit, vmap or another abstract trace)."""
        b = self.builder
        return b.concrete_value(self.var) if b.concrete else None

    def _concrete(self, what, error=ConcretizationError):
        raise error(
            f"{what} needs a concrete value, but got a traced array {self.aval.str_short()} "
            f"(inside jit/grad/vmap tracing).\n  at {user_frame_src()}\n"
            "Use funcgrad.numpy.where(...) for value-dependent choices, or mark the argument "
            "static with jit(..., static_argnums=...).")

    def _value(self, what, error=ConcretizationError):
        v = self.to_concrete_value()
        if v is None:
            self._concrete(what, error)
        return v

    def _no_scalar(self, what):
        if self.to_concrete_value() is None:
            self._concrete(what)
        raise ConcretizationError(
            f"{what} of a traced array {self.aval.str_short()} being differentiated is refused "
            f"(as in JAX): its value is known here, but a Python number would drop its "
            f"derivative.\n  at {user_frame_src()}\nKeep it an array (funcgrad.numpy.where(...) "
            "for value-dependent choices), or use .item() where a Python value is really "
            "wanted.")

    def __bool__(self):
        return bool(self._value("bool() / an if-statement", TracerBoolConversionError))

    def __int__(self): return int(self._value("int()", TracerIntegerConversionError))

    def __index__(self):
        return self._value("using an array as a Python index",
                           TracerIntegerConversionError).__index__()

    def __float__(self): self._no_scalar("float()")
    def __complex__(self): self._no_scalar("complex()")
    def __array__(self, dtype=None, copy=None):
        self._concrete("numpy.asarray()", TracerArrayConversionError)

    def item(self): return self._value(".item()").item()
    def tolist(self): self._concrete(".tolist()", TracerArrayConversionError)

    def __repr__(self):
        # eager autodiff knows the value (as JAX's GradTracer shows its primal)
        text = f"Traced<{self.aval.str_short()}>"
        if self.builder.concrete:
            try:
                return f"{text}(primal={self.to_concrete_value()})"
            except Exception:   # noqa: BLE001 - repr never raises: the type alone
                return text
        return text


# ---------------------------------------------------------------------------------------------
# backends (cpu always; cuda loaded lazily by funcgrad.devices)
# ---------------------------------------------------------------------------------------------

_backends: dict[str, Any] = {}
_backend_factories: dict[str, Callable[[], Any]] = {}


_backend_probes: dict[str, Callable[[], bool]] = {}


def register_backend(name: str, factory: Callable[[], Any], available=None):
    """Make device `name` known: `factory()` builds its backend on first use; `available()`
    (optional) says, without building it, whether it should be the default device."""
    _backend_factories[name] = factory
    if available is not None:
        _backend_probes[name] = available


def get_backend(name: str):
    b = _backends.get(name)
    if b is None:
        if name not in _backend_factories:
            raise ValueError(f"unknown device {name!r}; known: {sorted(_backend_factories)}")
        b = _backends[name] = _backend_factories[name]()
    return b


def to_array(x, device: str | None = None) -> Array:
    """A concrete Array from an Array, numpy array or Python scalar (on `device` if given)."""
    if isinstance(x, Array):
        if device is None or x.device == device:
            return x
        return Array(get_backend(device).from_numpy(np.asarray(x)), x.aval, device)
    if isinstance(x, Tracer):
        raise TypeError("to_array got a tracer")
    aval = aval_of(x)
    arr = np.asarray(x, dtype=aval.dtype)
    dev = device or default_device()
    return Array(get_backend(dev).from_numpy(arr), aval, dev)


_default_device = [None]


def default_device() -> str:
    """The device of new arrays: config's "default_device", else "cuda" when a real GPU is
    usable (never the simulator), else "cpu"."""
    from funcgrad.config import config
    if config.default_device:
        return config.default_device
    if _default_device[0] is None:
        _default_device[0] = "cuda" if _cuda_usable() else "cpu"
    return _default_device[0]


def _cuda_usable() -> bool:
    probe = _backend_probes.get("cuda")
    if probe is None:
        return False
    try:
        return bool(probe())
    except (ImportError, AttributeError):
        return False


# ---------------------------------------------------------------------------------------------
# tracing: builders stage equations; bind dispatches to the innermost one or runs eagerly
# ---------------------------------------------------------------------------------------------

class Builder:
    """Collects the equations of one trace (one level of the trace stack).

    A concrete builder (eager autodiff) also knows the values of its inputs; the value of any
    of its variables is computed on demand (concrete_value) from the equations staged so far,
    so that tracing costs nothing more until Python asks for a value.
    """

    def __init__(self, level: int, concrete: bool = False):
        self.level = level
        self.eqns: list[Eqn] = []
        self.consts: dict[int, tuple[Var, Any]] = {}
        self.keep: list = []    # the numpy arrays whose copies are constants
        self.concrete = concrete
        if concrete:
            self._defs: dict[Var, Eqn] = {}       # each staged variable's equation
            self._known: dict[Var, Any] = {}      # computed values (None: not concrete)
            self._sources: dict[Var, Any] = {}    # inputs' and constants' values
            self._consts_seen = 0

    def new_arg(self, aval: ShapedArray, value=None) -> Tracer:
        t = Tracer(self, Var(aval))
        if self.concrete:
            self._sources[t.var] = value
        return t

    def concrete_value(self, var):
        """The concrete Array (or numpy value) of `var`, evaluating the equations it depends
        on outside every trace; None when it depends on a value that is not concrete."""
        known = self._known
        hit = known.get(var, known)
        if hit is not known:
            return hit
        if self._consts_seen != len(self.consts):   # constants lifted since the last call
            for v, x in self.consts.values():
                self._sources.setdefault(v, x)
            self._consts_seen = len(self.consts)
        todo = [var]
        while todo:
            v = todo[-1]
            if v in known:
                todo.pop()
                continue
            e = self._defs.get(v)
            if e is None:
                todo.pop()
                known[v] = _source_value(self._sources.get(v))
                continue
            missing = [x for x in e.inputs if isinstance(x, Var) and x not in known]
            if missing:
                todo.extend(missing)
                continue
            todo.pop()
            vals = [x.val if isinstance(x, Lit) else known[x] for x in e.inputs]
            known[v] = None if any(x is None for x in vals) else _eval_detached(e, vals)
        return known[var]

    def concrete_values(self) -> dict:
        """The values computed so far by concrete_value, by variable (None entries dropped)."""
        return {v: x for v, x in self._known.items() if x is not None} if self.concrete else {}

    def lift(self, x) -> Any:
        """The Var or Lit standing for `x` in this builder's expression."""
        if isinstance(x, Tracer) and x.builder is self:
            return x.var
        if isinstance(x, Lit):
            return x
        if not isinstance(x, ArrayBase):
            aval = aval_of(x)
            if aval.ndim == 0:   # np.array copies: a 0-d numpy array may change later
                return Lit(np.array(x, dtype=aval.dtype))
        key = id(x)
        hit = self.consts.get(key)
        if hit is None:
            val = x
            if isinstance(x, np.ndarray):   # the value at trace time, as JAX captures it:
                self.keep.append(x)          # a later x[0] = ... must not reach a compiled
                val = x.copy()               # function (x stays alive: consts key on id)
            hit = self.consts[key] = (Var(aval_of(x)), val)
        return hit[0]

    def add_eqn(self, prim, inputs, params, aval, src) -> Tracer:
        out = Var(aval)
        e = Eqn(prim, inputs, params, out, src, current_tag())
        self.eqns.append(e)
        if self.concrete:
            self._defs[out] = e
        return Tracer(self, out)

    def build(self, in_tracers, out_vals) -> tuple[Expr, list]:
        outs = [self.lift(o) for o in out_vals]
        outs = [self._materialize(o) for o in outs]
        const_vars = [v for v, _ in self.consts.values()]
        const_vals = [x for _, x in self.consts.values()]
        ins = const_vars + [t.var for t in in_tracers]
        return Expr(ins, self.eqns, outs, n_consts=len(const_vars)), const_vals

    def _materialize(self, o):
        # outputs must be variables: a literal output becomes a constant input
        if isinstance(o, Lit):
            v = Var(o.aval)
            self.consts[id(v)] = (v, o.val)
            return v
        return o


def _stack():
    s = getattr(_state, "stack", None)
    if s is None:
        s = _state.stack = []
    return s


def _source_value(x):
    """The concrete value of a builder's input or constant: itself, or a tracer's concrete
    value (None if it has none)."""
    if isinstance(x, Tracer):
        return x.to_concrete_value()
    return x if x is None or isinstance(x, Array) else to_array(x)


def _eval_detached(e: Eqn, vals):
    """Run equation `e` on concrete values outside every trace (a concrete builder computing
    a value that Python asked for)."""
    prev = _stack()
    _state.stack = []
    try:
        with source_info(e.src), eqn_tag(e.tag):
            return eval_prim(e.prim, vals, e.params)
    finally:
        _state.stack = prev


def has_concrete_value(x) -> bool:
    """Whether x has a value Python may read: a non-tracer, or a tracer of a concrete
    trace (eager autodiff; its value may still turn out to depend on an abstract one)."""
    return not isinstance(x, Tracer) or x.builder.concrete


@contextlib.contextmanager
def new_builder(concrete: bool = False):
    """Push a new innermost trace; every op bound inside is staged into it. A concrete one
    (eager autodiff) can compute its values on demand (Builder.concrete_value)."""
    stack = _stack()
    b = Builder(len(stack) + 1, concrete)
    stack.append(b)
    try:
        yield b
    finally:
        stack.pop()


def current_builder() -> Builder | None:
    s = _stack()
    return s[-1] if s else None


def bind(prim: Primitive, *args, **params):
    """Apply a primitive: staged into the innermost trace, or run on a backend."""
    stack = _stack()
    if stack:
        b = stack[-1]
        for a in args:
            if isinstance(a, Tracer) and a.builder.level > b.level:
                raise UnexpectedTracerError(
                    f"{prim.name}: a traced value escaped its transformation (leaked tracer "
                    f"{a.aval.str_short()}); return it from the transformed function instead."
                    f"\n  at {user_frame_src()}")
        ins = [b.lift(a) for a in args]
        avals = [v.aval for v in ins]
        src = user_frame_src()
        aval = _check(prim, avals, params)
        return b.add_eqn(prim, ins, params, aval, src)
    return eval_prim(prim, args, params)


def _check(prim, avals, params) -> ShapedArray:
    return prim.shape(*avals, **params)


_eval_hooks: list = []


def eval_prim(prim: Primitive, args, params):
    """Run a primitive on concrete values on the device of its array inputs."""
    device = None
    on_cpu = False
    for a in args:
        if isinstance(a, Tracer):
            raise UnexpectedTracerError(
                f"{prim.name}: a traced value escaped its transformation (leaked tracer "
                f"{a.aval.str_short()}).\n  at {user_frame_src()}")
        if isinstance(a, Array):
            if a.device != "cpu":
                device = a.device
            else:
                on_cpu = True
    # a GPU array puts the op on the GPU; arrays placed on the CPU keep it there (as jit does);
    # only numpy values and Python numbers go to the default device
    device = device or ("cpu" if on_cpu else default_device())
    if prim.call_impl is not None:  # call-like primitives run their body op by op
        return prim.call_impl(*args, **params)
    avals = [aval_of(a) for a in args]
    aval = _check(prim, avals, params)
    backend = get_backend(device)
    bufs = [a.buf if isinstance(a, Array) and a.device == device else
            backend.from_value(np.asarray(a.buf if isinstance(a, Array) else a, dtype=av.dtype))
            for a, av in zip(args, avals)]
    out = Array(backend.apply(prim, bufs, params, aval), aval, device)
    for hook in _eval_hooks:
        hook(prim, params, out)
    return out


def trace_to_expr(f: Callable, avals: list[ShapedArray], values=None
                  ) -> tuple[Expr, list, Any]:
    """Trace f(*tracers) -> list of outputs into an Expr (plus its constants' values).

    `values` (the inputs' values, for eager autodiff) makes the trace concrete when they all
    have values (see Builder: not tracers of jit, vmap or another abstract trace; JAX's
    eager autodiff); the third result is then the builder, else None.
    """
    concrete = values is not None and all(has_concrete_value(v) for v in values)
    with new_builder(concrete) as b:
        ins = ([b.new_arg(a, v) for a, v in zip(avals, values)] if concrete
               else [b.new_arg(a) for a in avals])
        outs = f(*ins)
        expr, consts = b.build(ins, list(outs))
    return expr, consts, (b if concrete else None)


def eval_expr(expr: Expr, args: list, consts: list = ()) -> list:
    """Evaluate an expression by binding each equation (so it composes with outer traces)."""
    env: dict[Var, Any] = {}
    vals = list(consts) + list(args)
    if len(vals) != len(expr.in_binders):
        raise TypeError(f"expression expects {len(expr.in_binders)} inputs, got {len(vals)}")
    for v, x in zip(expr.in_binders, vals):
        env[v] = x

    def read(x):
        return x.val if isinstance(x, Lit) else env[x]

    for e in expr.eqns:
        with source_info(e.src), eqn_tag(e.tag):
            env[e.out] = bind(e.prim, *[read(x) for x in e.inputs], **e.params)
    return [read(o) for o in expr.outs]


def typecheck_expr(expr: Expr) -> None:
    """Re-run every shape rule over an expression; raise if any binder's type disagrees."""
    env = set(expr.in_binders)
    for e in expr.eqns:
        for x in e.inputs:
            if isinstance(x, Var) and x not in env:
                raise TypeError(f"{e.prim.name}: input used before it is bound ({e.src})")
        aval = e.prim.shape(*[x.aval for x in e.inputs], **e.params)
        if aval != e.out.aval:
            raise TypeError(f"{e.prim.name}: binder type {e.out.aval} != rule {aval} ({e.src})")
        env.add(e.out)
    for o in expr.outs:
        if isinstance(o, Var) and o not in env:
            raise TypeError("expression output is not bound")
