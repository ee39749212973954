"""dtypes, JAX-style promotion with weak Python scalars, broadcasting, array creation."""
from __future__ import annotations

import builtins

import numpy as np

from funcgrad import prims
from funcgrad.core import (
    SUPPORTED_DTYPES,
    ArrayBase,
    ShapeError,
    aval_of,
    bind,
    canonicalize_dtype,
    to_array,
    type_error,
    user_frame_src,
)
from funcgrad.core import dtypes as _dt
from funcgrad.core.dtypes import dtype_kind

# ---------------------------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------------------------


class _ScalarType:
    """A dtype usable as a constructor (`fnp.float32(3)`) and as `dtype=`."""

    def __init__(self, name):
        self.dtype = np.dtype(name)
        self.__name__ = name

    def __call__(self, x):
        return asarray(x, dtype=self.dtype)

    def __repr__(self):
        return f"funcgrad.numpy.{self.__name__}"

    def __eq__(self, other):
        try:
            return self.dtype == np.dtype(other)
        except Exception:   # noqa: BLE001  (the array API: dtype == anything never raises)
            return False

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self.dtype)


float16, float32, float64 = _ScalarType("float16"), _ScalarType("float32"), _ScalarType("float64")
int8, uint8 = _ScalarType("int8"), _ScalarType("uint8")
int32, int64, uint32 = _ScalarType("int32"), _ScalarType("int64"), _ScalarType("uint32")
bool_ = _ScalarType("bool")
int16, uint16, uint64 = _ScalarType("int16"), _ScalarType("uint16"), _ScalarType("uint64")
complex64, complex128 = _ScalarType("complex64"), _ScalarType("complex128")
bfloat16 = _ScalarType("bfloat16")   # ml_dtypes.bfloat16's numpy dtype, as jnp.bfloat16

_PY_DTYPES = {builtins.bool: np.dtype(np.bool_), builtins.int: np.dtype(np.int32),
              builtins.float: np.dtype(np.float32), builtins.complex: np.dtype(np.complex64)}


def canonical_dtype(dtype):
    """np.dtype for a dtype-like; Python bool/int/float map to bool/int32/float32 (like JAX)."""
    if dtype is None:
        return None
    if dtype in _PY_DTYPES:
        return _PY_DTYPES[dtype]
    dt = canonicalize_dtype(dtype)
    if dt not in SUPPORTED_DTYPES:
        raise TypeError(f"funcgrad does not support dtype {dt.name} (supported: "
                        + ", ".join(d.name for d in SUPPORTED_DTYPES) + ")"
                        f"\n  at {user_frame_src()}")
    return dt


def _is_weak(x):
    return isinstance(x, (builtins.bool, builtins.int, builtins.float, builtins.complex)
                      ) and not isinstance(x, np.generic)


# JAX's lattice among the floats: float16 and bfloat16 side by side under float32 (their join)
_FLOAT_RANK = {np.dtype(np.float16): 0, _dt.bfloat16: 0, np.dtype(np.float32): 1,
               np.dtype(np.float64): 2}
_COMPLEX_OF = {2: np.dtype(np.complex64), 4: np.dtype(np.complex64),
               8: np.dtype(np.complex128)}   # float itemsize -> the complex type holding it


def result_type(*args):
    """JAX-style promotion: bool < int < float; Python scalars are weak and adopt the type of
    the arrays they meet (int32/float32 on their own).

    Among floats: float16, bfloat16 < float32 < float64, with float16 + bfloat16 -> float32;
    any integer + bfloat16 -> bfloat16, and a Python float keeps bfloat16 (JAX's lattice).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.result_type(fnp.bfloat16, fnp.float16)
        dtype('float32')
    """
    strong = [aval_of(a).dtype if not isinstance(a, (np.dtype, _ScalarType, type)) else
              canonical_dtype(a) for a in args if not _is_weak(a)]
    weak = [a for a in args if _is_weak(a)]
    narrow = [d for d in strong if d in _dt.STORAGE_ONLY_DTYPES]
    if narrow:   # float8: no implicit promotion but with itself and weak scalars (JAX)
        if builtins.any(d != narrow[0] for d in strong):
            raise TypeError("input dtypes " + ", ".join(sorted({d.name for d in strong}))
                            + " have no implicit promotion path: 8-bit floats are promoted "
                            "only explicitly (x.astype('float32')), as in JAX"
                            f"\n  at {user_frame_src()}")
        return narrow[0]
    floats = [d for d in strong if dtype_kind(d) == "f"]
    ints = [d for d in strong if dtype_kind(d) in "iu"]
    cplx = [d for d in strong if dtype_kind(d) == "c"]
    if cplx:   # float32 + complex64 -> complex64; float64 + complex64 -> complex128 (JAX)
        res = builtins.max(cplx + [_COMPLEX_OF[d.itemsize] for d in floats],
                           key=lambda d: d.itemsize)
    elif floats:   # float16 + bfloat16 -> float32 (neither holds the other), as JAX
        res = builtins.max(floats, key=_FLOAT_RANK.__getitem__)
        if _FLOAT_RANK[res] == 0 and builtins.any(d != res for d in floats):
            res = np.dtype(np.float32)
    elif ints:
        res = np.result_type(*ints)
    elif strong:
        res = np.dtype(np.bool_)
    else:
        res = None
    if any(isinstance(w, builtins.complex) for w in weak):
        if res is None or dtype_kind(res) in "biu":
            res = np.dtype(np.complex64)
        elif dtype_kind(res) == "f":
            res = _COMPLEX_OF[res.itemsize]
    elif any(isinstance(w, builtins.float) for w in weak):
        if res is None or dtype_kind(res) in "biu":
            res = np.dtype(np.float32)
    elif any(isinstance(w, builtins.int) and not isinstance(w, builtins.bool) for w in weak):
        if res is None or dtype_kind(res) == "b":
            res = np.dtype(np.int32)
    elif weak and res is None:
        res = np.dtype(np.bool_)
    return res


# ---------------------------------------------------------------------------------------------
# conversion and broadcasting
# ---------------------------------------------------------------------------------------------

def check_int_fits(x, dtype):
    """OverflowError, as JAX raises it, when the Python int `x` does not fit the integer
    `dtype` it is converted to (numpy's astype would wrap it silently)."""
    if dtype_kind(dtype) in "iu":
        info = np.iinfo(dtype)
        if not info.min <= x <= info.max:
            raise OverflowError(f"Python int {x} too large to convert to {dtype}"
                                f"\n  at {user_frame_src()}")


def _is_py_int(x):
    return isinstance(x, builtins.int) and not isinstance(x, (builtins.bool, np.generic))


def _from_python(x, dtype):
    if dtype is not None and _is_py_int(x):
        check_int_fits(x, dtype)
    arr = np.asarray(x)
    if dtype is None:
        if arr.dtype == np.float64 and not isinstance(x, (np.ndarray, np.generic)):
            arr = arr.astype(np.float32)  # Python floats default to float32 (numpy's keep f64)
        elif arr.dtype == np.complex128 and not isinstance(x, (np.ndarray, np.generic)):
            arr = arr.astype(np.complex64)  # Python complex numbers default to complex64
        elif arr.dtype == np.int64 and not isinstance(x, (np.ndarray, np.generic)):
            if arr.size and (arr.max() > 2**31 - 1 or arr.min() < -2**31):
                raise OverflowError(f"Python int {arr.max() if arr.max() > 0 else arr.min()} "
                                    "too large to convert to int32")
            arr = arr.astype(np.int32)  # Python ints default to int32
    else:
        if (dtype_kind(dtype) in "iu" and dtype_kind(arr.dtype) in "iuO" and arr.size
                and not isinstance(x, (np.ndarray, np.generic))):   # a list of Python ints
            for v in (arr.min(), arr.max()):
                check_int_fits(builtins.int(v), dtype)
        arr = arr.astype(dtype)
    canonical_dtype(arr.dtype)
    return arr


def _on(out, device):
    """out placed on `device` when one is given (a concrete array; traced values stay put)."""
    if device is None or not hasattr(out, "device") or getattr(out, "device", None) == device:
        return out
    return to_array(out, device)


def asarray(x, dtype=None, copy=None, *, device=None):
    """Convert to a funcgrad array (numpy arrays keep their dtype; Python floats are float32).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.asarray([1.0, 2.0]).dtype
        dtype('float32')
    """
    if device is not None:
        return _on(asarray(x, dtype, copy), device)
    dtype = canonical_dtype(dtype)
    if isinstance(x, ArrayBase):
        if dtype is None or x.dtype == dtype:
            return x
        return prims.convert(x, dtype)
    if isinstance(x, (list, tuple)) and any(isinstance(e, ArrayBase) for e in _flat_seq(x)):
        return _stack_rows(x, dtype)
    return to_array(_from_python(x, dtype))


def _stack_rows(x, dtype):
    """A nested sequence holding arrays as one array (numpy.asarray's stacking)."""
    rows = [asarray(e, dtype) for e in x]
    dt = dtype or result_type(*rows)
    rows = [asarray(r, dt) for r in rows]
    if any(r.shape != rows[0].shape for r in rows):
        raise type_error("asarray", "the sequence's elements have different shapes "
                         + ", ".join(str(tuple(r.shape)) for r in rows))
    return bind(prims.concatenate_p, *[prims.reshape(r, (1,) + tuple(r.shape)) for r in rows],
                dimension=0)


def _flat_seq(x):
    for e in x:
        if isinstance(e, (list, tuple)):
            yield from _flat_seq(e)
        else:
            yield e


def array(x, dtype=None, copy=True, ndmin=0):
    """Like asarray (arrays are immutable, so a copy is never observable)."""
    out = asarray(x, dtype)
    while out.ndim < ndmin:
        out = reshape(out, (1,) + tuple(out.shape))
    return out


def _value(x, dtype):
    """x as an array of `dtype`: Python scalars become numpy scalars (literals when traced)."""
    if isinstance(x, ArrayBase):
        return x if x.dtype == dtype else prims.convert(x, dtype)
    if _is_py_int(x):
        check_int_fits(x, dtype)
    arr = np.asarray(x)
    if arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr


class ShapeValueError(ShapeError, ValueError, IndexError):
    """A shape or axis error that numpy and JAX raise as ValueError (numpy's AxisError is also an
    IndexError); still a ShapeError (and so a TypeError) for funcgrad's own callers."""


def value_error(op: str, msg: str, avals=()) -> ShapeValueError:
    return ShapeValueError(str(type_error(op, msg, avals)))


def broadcast_shapes(*shapes, op="broadcast"):
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise value_error(op, "shapes " + " and ".join(str(tuple(s)) for s in shapes)
                         + " cannot be broadcast together") from None


def broadcast_to(x, shape):
    """Broadcast x to `shape` following numpy's rules (an explicit broadcast_in_dim)."""
    x = x if isinstance(x, (ArrayBase, np.ndarray, np.generic)) else asarray(x)
    shape = tuple(int(s) for s in shape)
    xs = tuple(np.shape(x)) if not isinstance(x, ArrayBase) else tuple(x.shape)
    if xs == shape:
        return x
    nd = len(shape)
    if len(xs) > nd or any(a not in (1, b) for a, b in zip(xs, shape[nd - len(xs):])):
        raise value_error("broadcast_to", f"cannot broadcast shape {xs} to {shape}")
    return prims.broadcast_in_dim(x, shape, range(nd - len(xs), nd))


def promote_args(op, *args, dtype=None):
    """Promote to a common dtype and broadcast to a common shape (numpy semantics)."""
    dt = dtype or result_type(*args)
    vals = [_value(a, dt) for a in args]
    shape = broadcast_shapes(*[np.shape(v) if not isinstance(v, ArrayBase) else v.shape
                               for v in vals], op=op)
    return [broadcast_to(v, shape) for v in vals]


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    """numpy.reshape (one -1 inferred); only C order (newshape: numpy's older name)."""
    newshape = shape if shape is not None else newshape
    if order != "C":
        raise NotImplementedError("funcgrad.numpy.reshape supports order='C' only")
    a = asarray(a)
    if isinstance(newshape, (int, np.integer)):
        newshape = (int(newshape),)
    newshape = [int(s) for s in newshape]
    if newshape.count(-1) > 1:
        raise type_error("reshape", f"can only specify one unknown dimension: {tuple(newshape)}",
                         (a.aval,))
    if -1 in newshape:
        known = int(np.prod([s for s in newshape if s != -1]))
        if known == 0 or a.size % known:
            raise type_error("reshape", f"cannot reshape array of size {a.size} into shape "
                             f"{tuple(newshape)}", (a.aval,))
        newshape[newshape.index(-1)] = a.size // known
    if tuple(newshape) == tuple(a.shape):
        return a
    if int(np.prod(newshape)) != a.size:
        raise type_error("reshape", f"cannot reshape array of size {a.size} into shape "
                         f"{tuple(newshape)}", (a.aval,))
    return prims.reshape(a, newshape)


def _norm_axis(axis, ndim, op):
    a = int(axis)
    if not -ndim <= a < ndim:
        raise value_error(op, f"axis {axis} is out of bounds for an array of rank {ndim}")
    return a % ndim if ndim else 0


def norm_axes(axis, ndim, op):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(_norm_axis(a, ndim, op) for a in axis)
        if len(set(axes)) != len(axes):
            raise value_error(op, f"repeated axis in {tuple(axis)}")
        return axes
    return (_norm_axis(axis, ndim, op),)


# ---------------------------------------------------------------------------------------------
# creation
# ---------------------------------------------------------------------------------------------

def _shape_tuple(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def full(shape, fill_value, dtype=None, *, device=None):
    """numpy.full (dtype from fill_value when not given; Python floats give float32)."""
    dtype = canonical_dtype(dtype) or result_type(fill_value)
    if isinstance(fill_value, ArrayBase):
        return _on(broadcast_to(asarray(fill_value, dtype), _shape_tuple(shape)), device)
    return _on(prims.broadcast_in_dim(np.asarray(fill_value, dtype), _shape_tuple(shape), ()),
               device)


def zeros(shape, dtype=None, *, device=None):
    """numpy.zeros, float32 by default."""
    return full(shape, 0, canonical_dtype(dtype) or np.float32, device=device)


def ones(shape, dtype=None, *, device=None):
    """numpy.ones, float32 by default."""
    return full(shape, 1, canonical_dtype(dtype) or np.float32, device=device)


def empty(shape, dtype=None, *, device=None):
    return zeros(shape, dtype, device=device)


def _like(a):
    return a if isinstance(a, ArrayBase) else asarray(a)


def full_like(a, fill_value, dtype=None, shape=None, *, device=None):
    a = _like(a)
    return full(a.shape if shape is None else shape, fill_value,
                canonical_dtype(dtype) or a.dtype, device=device)


def zeros_like(a, dtype=None, shape=None, *, device=None):
    return full_like(a, 0, dtype, shape, device=device)


def ones_like(a, dtype=None, shape=None, *, device=None):
    return full_like(a, 1, dtype, shape, device=device)


def arange(start, stop=None, step=None, dtype=None, *, device=None):
    """numpy.arange with static bounds (int32 for ints, float32 for floats by default)."""
    vals = [v for v in (start, stop, step) if v is not None]
    dt = canonical_dtype(dtype) or result_type(*[_static_scalar(v) for v in vals])
    if stop is None:
        start, stop = 0, start
    r = np.arange(_static_scalar(start), _static_scalar(stop),
                  1 if step is None else _static_scalar(step))
    return asarray(r.astype(dt), device=device)


def _static_scalar(v):
    if isinstance(v, ArrayBase):
        return v.item()
    return v


def linspace(start, stop, num=50, endpoint=True, dtype=None, *, device=None):
    """numpy.linspace with static bounds, float32 by default (complex64 for complex bounds)."""
    dt = canonical_dtype(dtype) or np.dtype(
        np.complex64 if isinstance(start, complex) or isinstance(stop, complex) else np.float32)
    return asarray(np.linspace(start, stop, num, endpoint=endpoint).astype(dt), device=device)


def eye(N, M=None, k=0, dtype=None, *, device=None):
    """numpy.eye, float32 by default."""
    dt = canonical_dtype(dtype) or np.dtype(np.float32)
    return asarray(np.eye(N, M, k, dtype=dt), device=device)


def identity(n, dtype=None):
    return eye(n, dtype=dtype)


def _tri_mask(shape, k, lower):
    r = bind(prims.iota_p, dtype=np.dtype(np.int32), shape=shape, dimension=0)
    c = bind(prims.iota_p, dtype=np.dtype(np.int32), shape=shape, dimension=1)
    d = prims.sub(c, r)
    kk = prims.full_like(d, k)
    return bind(prims.le_p if lower else prims.ge_p, d, kk)


def _tri(m, k, lower):
    m = asarray(m)
    if m.ndim < 2:
        raise type_error("tril" if lower else "triu", "input must be at least 2-D", (m.aval,))
    mask = broadcast_to(_tri_mask(tuple(m.shape[-2:]), k, lower), m.shape)
    return prims.select(mask, m, prims.zeros_like(m))


def tril(m, k=0):
    """Lower triangle of the last two axes (numpy.tril)."""
    return _tri(m, k, True)


def triu(m, k=0):
    """Upper triangle of the last two axes (numpy.triu)."""
    return _tri(m, k, False)


def shape(a):
    return tuple(np.shape(a)) if not isinstance(a, ArrayBase) else tuple(a.shape)


def ndim(a):
    return len(shape(a))


def size(a):
    return int(np.prod(shape(a)))


