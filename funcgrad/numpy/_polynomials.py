"""Polynomials, interpolation, window functions, array-creation helpers and dtype names of
funcgrad.numpy (compositions of primitives; JAX's names and semantics)."""
from __future__ import annotations

import builtins
import math

import numpy as np

from funcgrad.core import ArrayBase
from funcgrad.core.dtypes import dtype_kind
from funcgrad.numpy._base import (
    _ScalarType,
    arange,
    asarray,
    full,
    reshape,
    result_type,
    zeros,
)
from funcgrad.numpy._jax_forms import linspace
from funcgrad.numpy._shape import concatenate, flip, pad, ravel, take
from funcgrad.numpy._ufuncs import _float_dtype, clip, cos, power, where

# ---------------------------------------------------------------------------------------------
# polynomials (coefficients highest power first, as numpy.poly*)
# ---------------------------------------------------------------------------------------------


def polyval(p, x, *, unroll=16):
    """Evaluate the polynomial p (highest power first) at x by Horner's rule.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> float(fnp.polyval(fnp.array([1.0, 0.0, -1.0]), 3.0))
        8.0
    """
    p = asarray(p)
    x = asarray(x)
    dt = result_type(p, x)
    p, x = asarray(p, dt), asarray(x, dt)
    out = zeros(x.shape, dt)
    for i in range(p.shape[0]):
        out = out * x + p[i]
    return out


def polyadd(a1, a2):
    a, b = ravel(asarray(a1)), ravel(asarray(a2))
    dt = result_type(a, b)
    n = builtins.max(a.shape[0], b.shape[0])
    return pad(asarray(a, dt), (n - a.shape[0], 0)) + pad(asarray(b, dt), (n - b.shape[0], 0))


def polysub(a1, a2):
    return polyadd(a1, -asarray(a2))


def polymul(a1, a2, *, trim_leading_zeros=False):
    """Product of two polynomials (their coefficient convolution)."""
    a, b = ravel(asarray(a1)), ravel(asarray(a2))
    dt = result_type(a, b)
    a, b = asarray(a, dt), asarray(b, dt)
    m, n = a.shape[0], b.shape[0]
    if m == 0 or n == 0:
        return zeros((0,), dt)
    out = zeros((m + n - 1,), dt)
    for j in range(n):
        out = out + pad(a * b[j], (j, n - 1 - j))
    return out


def polydiv(u, v, *, trim_leading_zeros=False):
    """(quotient, remainder) of polynomial long division by v (v[0] != 0)."""
    u, v = ravel(asarray(u)), ravel(asarray(v))
    dt = _float_dtype(result_type(u, v))
    u, v = asarray(u, dt), asarray(v, dt)
    m, n = u.shape[0], v.shape[0]
    if m < n:
        return zeros((1,), dt), u
    q = []
    r = u
    for k in range(m - n + 1):
        c = r[k] / v[0]
        q.append(c)
        r = r - pad(c * v, (k, m - n - k))
    from funcgrad.numpy._shape import stack
    return stack(q), r


def polyder(p, m=1):
    """Derivative of order m."""
    p = ravel(asarray(p))
    for _ in range(m):
        n = p.shape[0]
        if n <= 1:
            return zeros((0,), p.dtype)
        p = p[:-1] * asarray(np.arange(n - 1, 0, -1), p.dtype)
    return p


def polyint(p, m=1, k=None):
    """Antiderivative of order m with integration constants k (default 0)."""
    p = ravel(asarray(p))
    p = asarray(p, _float_dtype(p))
    ks = [0.0] * m if k is None else list(np.atleast_1d(k)) * (m if np.ndim(k) == 0 else 1)
    for i in range(m):
        n = p.shape[0]
        p = concatenate([p / asarray(np.arange(n, 0, -1), p.dtype), full((1,), ks[i], p.dtype)])
    return p


def poly(seq_of_zeros):
    """Coefficients of the monic polynomial with the given (real) roots."""
    z = ravel(asarray(seq_of_zeros))
    out = asarray(np.ones(1), _float_dtype(z))
    for i in range(z.shape[0]):
        out = polymul(out, concatenate([full((1,), 1.0, out.dtype), -reshape(z[i], (1,))]))
    return out


# ---------------------------------------------------------------------------------------------
# interpolation and spacing
# ---------------------------------------------------------------------------------------------

def interp(x, xp, fp, left=None, right=None, period=None):
    """numpy.interp: piecewise-linear interpolation of (xp, fp) at x (xp increasing).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> float(fnp.interp(1.5, fnp.array([1.0, 2.0]), fnp.array([10.0, 20.0])))
        15.0
    """
    from funcgrad.numpy._sorting import searchsorted
    x, xp, fp = asarray(x), ravel(asarray(xp)), ravel(asarray(fp))
    dt = _float_dtype(result_type(x, xp, fp))
    x, xp, fp = asarray(x, dt), asarray(xp, dt), asarray(fp, dt)
    n = xp.shape[0]
    if period is not None:
        from funcgrad.numpy._sorting import argsort
        x = x % period
        xp = xp % period
        order = argsort(xp)
        xp, fp = take(xp, order), take(fp, order)
        xp = concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = concatenate([fp[-1:], fp, fp[:1]])
        n = xp.shape[0]
    i = clip(searchsorted(xp, x, side="right"), 1, n - 1)
    x0, x1 = take(xp, i - 1), take(xp, i)
    f0, f1 = take(fp, i - 1), take(fp, i)
    dx = x1 - x0
    t = (x - x0) / where(dx == 0, 1.0, dx)
    out = where(dx == 0, f0, f0 + t * (f1 - f0))
    if period is None:
        out = where(x < xp[0], fp[0] if left is None else left, out)
        out = where(x > xp[-1], fp[-1] if right is None else right, out)
    return out


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    lo, hi = np.log10(start), np.log10(stop)
    return asarray(np.geomspace(start, stop, num, endpoint).astype(
        dtype or np.float32)) if not isinstance(start, ArrayBase) else logspace(
        lo, hi, num, endpoint, dtype=dtype)


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    return power(base, linspace(start, stop, num, endpoint, dtype=dtype or np.float32))


def unwrap(p, discont=None, axis=-1, period=2 * math.pi):
    """numpy.unwrap: remove jumps larger than discont by adding multiples of period."""
    from funcgrad.numpy._cumulative import cumsum, diff
    from funcgrad.numpy._shape import moveaxis
    x = moveaxis(asarray(p, _float_dtype(asarray(p))), axis, -1)
    discont = period / 2 if discont is None else discont
    d = diff(x, axis=-1)
    half = period / 2
    dm = (d + half) % period - half
    dm = where((dm == -half) & (d > 0), half, dm)
    corr = where(abs(d) < discont, 0.0, dm - d)
    fixed = concatenate([x[..., :1], x[..., 1:] + cumsum(corr, axis=-1)], -1) \
        if x.shape[-1] else x
    return moveaxis(fixed, -1, axis)


# ---------------------------------------------------------------------------------------------
# window functions
# ---------------------------------------------------------------------------------------------

def _window(M, f):
    M = int(M)
    if M < 1:
        return zeros((0,), np.float32)
    if M == 1:
        return full((1,), 1.0, np.float32)
    n = arange(M, dtype=np.float32)
    return f(n, M)


def hanning(M):
    return _window(M, lambda n, M: 0.5 - 0.5 * cos(2 * math.pi * n / (M - 1)))


def hamming(M):
    return _window(M, lambda n, M: 0.54 - 0.46 * cos(2 * math.pi * n / (M - 1)))


def blackman(M):
    return _window(M, lambda n, M: 0.42 - 0.5 * cos(2 * math.pi * n / (M - 1))
                   + 0.08 * cos(4 * math.pi * n / (M - 1)))


def bartlett(M):
    return _window(M, lambda n, M: 1.0 - abs(2.0 * n / (M - 1) - 1.0))


def kaiser(M, beta):
    from funcgrad.numpy._elementwise import i0
    from funcgrad.numpy._ufuncs import sqrt
    return _window(M, lambda n, M: i0(beta * sqrt(1.0 - (2.0 * n / (M - 1) - 1.0) ** 2))
                   / i0(asarray(float(beta), np.float32)))


# ---------------------------------------------------------------------------------------------
# creation helpers, dtype names, printing
# ---------------------------------------------------------------------------------------------

def empty_like(prototype, dtype=None, shape=None, *, device=None):
    from funcgrad.numpy._base import zeros_like
    return zeros_like(prototype, dtype, shape, device=device)


def copy(a, order=None):
    return asarray(a)


def astype(x, dtype, /, *, copy=False, device=None):
    return asarray(x, dtype)


def fromfunction(function, shape, *, dtype=float, **kwargs):
    from funcgrad.numpy._index_tricks import indices
    return function(*[asarray(g, dtype) for g in indices(shape)], **kwargs)


def fromiter(iterable, dtype, count=-1):
    return asarray(np.fromiter(iterable, dtype, count))


def frombuffer(buffer, dtype=float, count=-1, offset=0):
    return asarray(np.frombuffer(buffer, dtype, count, offset))


def fromstring(string, dtype=float, count=-1, *, sep):
    return asarray(np.fromstring(string, dtype, count, sep=sep))


def fromfile(*args, **kwargs):
    raise NotImplementedError("funcgrad.numpy.fromfile: load with numpy.fromfile and call "
                              "funcgrad.numpy.asarray (as JAX recommends)")


def load(file, *args, **kwargs):
    out = np.load(file, *args, **kwargs)
    return asarray(out) if isinstance(out, np.ndarray) else out


def save(file, arr, allow_pickle=True):
    np.save(file, np.asarray(arr), allow_pickle=allow_pickle)


def savez(file, *args, **kwds):
    np.savez(file, *[np.asarray(a) for a in args], **{k: np.asarray(v) for k, v in kwds.items()})


def isscalar(element):
    if isinstance(element, ArrayBase):
        return element.ndim == 0
    return np.isscalar(element) or isinstance(element, (builtins.int, builtins.float,
                                                        builtins.bool))


def iterable(y):
    return np.iterable(y)


def from_dlpack(x, /, *, device=None, copy=None):
    from funcgrad.dlpack import from_dlpack as _fd
    return _fd(x)


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """numpy.vectorize via vmap over the broadcast leading axes (elementwise functions)."""
    import functools

    from funcgrad.transforms.batching import vmap
    from funcgrad.numpy._base import broadcast_arrays

    @functools.wraps(pyfunc)
    def wrapped(*args):
        arrs = broadcast_arrays(*args) if args else []
        f = pyfunc
        nd = arrs[0].ndim if arrs else 0
        for _ in range(nd):
            f = vmap(f)
        return f(*arrs)
    return wrapped


def frompyfunc(func, /, nin, nout, *, identity=None):
    return vectorize(func)


def can_cast(from_, to, casting="safe"):
    return np.can_cast(from_, to, casting)


def promote_types(a, b):
    return result_type(np.dtype(a), np.dtype(b))


def isdtype(dtype, kind):
    d = np.dtype(dtype)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    table = {"bool": "b", "signed integer": "i", "unsigned integer": "u",
             "integral": "iu", "real floating": "f", "complex floating": "c",
             "numeric": "iufc"}
    for k in kinds:
        if isinstance(k, str):
            if dtype_kind(d) in table[k]:
                return True
        elif d == np.dtype(k):
            return True
    return False


def get_printoptions():
    return np.get_printoptions()


def set_printoptions(*args, **kwargs):
    np.set_printoptions(*args, **kwargs)


printoptions = np.printoptions


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None):
    return repr(arr)


def array_str(a, max_line_width=None, precision=None, suppress_small=None):
    return np.array_str(np.asarray(a), max_line_width, precision, suppress_small)


def einsum_path(subscripts, *operands, optimize="greedy"):
    return np.einsum_path(subscripts, *[np.empty(np.shape(o)) for o in operands],
                          optimize=optimize)


def packbits(a, axis=None, bitorder="big"):
    if isinstance(a, ArrayBase) and not hasattr(a, "buf"):
        raise NotImplementedError("packbits runs on concrete arrays only")
    return asarray(np.packbits(np.asarray(a), axis=axis, bitorder=bitorder))


def unpackbits(a, axis=None, count=None, bitorder="big"):
    """Bits of uint8 values as uint8 0/1 (a composition, so it traces)."""
    x = asarray(a)
    if x.dtype != np.uint8:
        raise TypeError("unpackbits: expected an input array of unsigned byte data type")
    if axis is None:
        x, axis = ravel(x), 0
    from funcgrad.numpy._shape import moveaxis
    xm = moveaxis(x, axis, -1)
    shifts = np.arange(7, -1, -1) if bitorder == "big" else np.arange(8)
    bits = [(xm >> int(s)) & 1 for s in shifts]
    from funcgrad.numpy._shape import stack
    out = stack(bits, -1)
    out = reshape(out, tuple(xm.shape[:-1]) + (xm.shape[-1] * 8,))
    if count is not None:
        out = out[..., :count]
    return moveaxis(asarray(out, np.uint8), -1, axis)


def register_jax_array_methods():
    """A no-op: funcgrad arrays have their methods built in."""


class ComplexWarning(RuntimeWarning):
    """Raised by numpy when complex values are cast to real (kept for API parity)."""


class ufunc:
    """Placeholder type for isinstance checks (funcgrad's elementwise functions are plain
    functions)."""


euler_gamma = 0.5772156649015329
bool = _ScalarType("bool")  # noqa: A001 - jnp.bool
single, double, half = _ScalarType("float32"), _ScalarType("float64"), _ScalarType("float16")
float_ = _ScalarType("float64")
int_ = _ScalarType("int64")
generic, character, flexible, object_ = np.generic, np.character, np.flexible, np.object_
complexfloating = np.complexfloating


__all__ = [
    "polyval",
    "polyadd",
    "polysub",
    "polymul",
    "polydiv",
    "polyder",
    "polyint",
    "poly",
    "interp",
    "geomspace",
    "logspace",
    "unwrap",
    "hanning",
    "hamming",
    "blackman",
    "bartlett",
    "kaiser",
    "empty_like",
    "copy",
    "astype",
    "fromfunction",
    "fromiter",
    "frombuffer",
    "fromstring",
    "fromfile",
    "load",
    "save",
    "savez",
    "isscalar",
    "iterable",
    "from_dlpack",
    "vectorize",
    "frompyfunc",
    "can_cast",
    "promote_types",
    "isdtype",
    "get_printoptions",
    "set_printoptions",
    "printoptions",
    "array_repr",
    "array_str",
    "einsum_path",
    "packbits",
    "unpackbits",
    "register_jax_array_methods",
    "ComplexWarning",
    "ufunc",
    "euler_gamma",
    "bool",
    "single",
    "double",
    "half",
    "float_",
    "int_",
    "generic",
    "character",
    "flexible",
    "object_",
    "complexfloating",
]
