"""Explicit-key pseudo-random numbers (jax.random's API) from the counter-based Threefry-2x32.

A key is a ``uint32[2]`` array. Every sampler is a pure function of its key: the same key gives
the same numbers eagerly, under ``jit`` and under ``vmap``, on the CPU and on the GPU, because
the generator is written with funcgrad's own uint32 primitives (add, xor, shifts), not a host
RNG. Keys are never reused implicitly: derive new ones with :func:`split` or :func:`fold_in`.

The bit streams follow JAX's default ("partitionable") Threefry scheme: element ``i`` of a
sample of any shape hashes the counter pair ``(0, i)`` with the key, and 32-bit samples are the
xor of the two output words. So ``key``, ``split``, ``fold_in``, ``bits``, ``uniform``,
``randint``, ``bernoulli``, ``gumbel``, ``categorical`` and ``permutation`` give JAX's numbers
(float32 and int32/uint32), and ``normal``/``truncated_normal`` agree with JAX's to float32
rounding (both use the inverse error function; ours is Giles' single-precision approximation,
the one XLA uses for float32).

Example:
    >>> from funcgrad import random
    >>> key = random.key(0)
    >>> key, sub = random.split(key)
    >>> x = random.normal(sub, (3,))
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from funcgrad import core, lax
from funcgrad import numpy as fnp
from funcgrad.core import Array, ArrayBase, Tracer
from funcgrad.core.dtypes import dtype_kind, finfo, is_half

__all__ = [
    "PRNGKey",
    "bernoulli",
    "bits",
    "categorical",
    "fold_in",
    "gumbel",
    "key",
    "key_data",
    "normal",
    "permutation",
    "randint",
    "split",
    "threefry2x32",
    "threefry_2x32",
    "truncated_normal",
    "uniform",
    "wrap_key_data",
]

_U32 = np.dtype(np.uint32)
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32 rotation constants
_KS_PARITY = 0x1BD11BDA                             # Skein key-schedule parity constant


# ---------------------------------------------------------------------------------------------
# the Threefry-2x32 hash (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", 2011)
# ---------------------------------------------------------------------------------------------

def _rotl(v, d: int):
    """32-bit rotate left by a static amount."""
    return (v << d) | (v >> (32 - d))


def threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds: hashes counter words ``(x1, x2)`` under key ``(k1, k2)``.

    All four inputs are uint32 arrays (scalars broadcast); the result is a pair of uint32 arrays
    of the broadcast shape. This is the block cipher JAX's default PRNG is built on.

    Example:
        >>> import numpy as np
        >>> zero = np.uint32(0)
        >>> [hex(int(w)) for w in threefry2x32(zero, zero, zero, zero)]
        ['0x6b200159', '0x99ba4efe']
    """
    words = (k1, k2, x1, x2)
    if core.current_builder() is None and not any(isinstance(v, Tracer) for v in words):
        return _threefry_host(*words)
    k1, k2, x1, x2 = (fnp.asarray(v, _U32) for v in words)
    ks = (k1, k2, k1 ^ k2 ^ _KS_PARITY)
    a, b = x1 + ks[0], x2 + ks[1]
    for i in range(5):  # 5 groups of 4 rounds, a key injection after each group
        for r in _ROTATIONS[i % 2]:
            a = a + b
            b = _rotl(b, r) ^ a
        a = a + ks[(i + 1) % 3]
        b = b + ks[(i + 2) % 3] + (i + 1)
    return a, b


def _threefry_host(*words):
    """threefry2x32 of concrete inputs (outside any trace) in numpy's uint32 arithmetic: the
    same integer operations, so the same bits, as one numpy pass instead of some 80 eager
    operations; the results go to the device of the inputs (the default one for numpy
    inputs)."""
    device = next((v.device for v in words if isinstance(v, Array)), None)
    k1, k2, x1, x2 = (np.asarray(v.astype(_U32) if isinstance(v, ArrayBase) else
                                 fnp.asarray(v, _U32)) for v in words)
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(_KS_PARITY))
    with np.errstate(over="ignore"):   # uint32 sums wrap, as the primitives' do
        a, b = np.broadcast_arrays(x1 + ks[0], x2 + ks[1])
        a, b = a.copy(), b.copy()
        for i in range(5):
            for r in _ROTATIONS[i % 2]:
                a += b
                b = ((b << np.uint32(r)) | (b >> np.uint32(32 - r))) ^ a
            a += ks[(i + 1) % 3]
            b += ks[(i + 2) % 3] + np.uint32(i + 1)
    return core.to_array(a, device), core.to_array(b, device)


def threefry_2x32(keypair, count):
    """Hashes an array of uint32 counters with a key, like JAX's ``prng.threefry_2x32``.

    The flattened counters are split into two halves (padded with a zero when odd) that are
    hashed as word pairs; the outputs are concatenated back into ``count``'s shape.

    Args:
        keypair: a ``uint32[2]`` key.
        count: a uint32 array of any shape.

    Returns:
        A uint32 array shaped like ``count``.

    Example:
        >>> threefry_2x32(key(0), fnp.arange(4, dtype=fnp.uint32)).shape
        (4,)
    """
    k1, k2 = _key_words(keypair)
    count = fnp.asarray(count, _U32)
    flat = fnp.ravel(count)
    odd = flat.size % 2
    if odd:
        flat = fnp.concatenate([flat, fnp.zeros((1,), _U32)])
    half = flat.size // 2
    a, b = threefry2x32(k1, k2, flat[:half], flat[half:])
    out = fnp.concatenate([a, b])
    return fnp.reshape(out[:-1] if odd else out, count.shape)


# ---------------------------------------------------------------------------------------------
# keys
# ---------------------------------------------------------------------------------------------

def _key_words(k):
    """The two uint32 words of a key (a uint32[2] array)."""
    k = fnp.asarray(k)
    if k.dtype != _U32 or tuple(k.shape) != (2,):
        raise TypeError(f"a PRNG key must be a uint32[2] array (from funcgrad.random.key), got "
                        f"{k.dtype.name}{list(k.shape)}; use vmap to work on a batch of keys")
    return k[0], k[1]


def PRNGKey(seed) -> ArrayBase:
    """Creates a PRNG key (a ``uint32[2]`` array) from an integer seed, as JAX does.

    Seeds in the int32 range give ``[0, seed mod 2**32]`` (JAX's default, 32-bit mode); larger
    Python ints up to 64 bits give ``[seed >> 32, seed & 0xffffffff]``. The seed may also be a
    traced integer array.

    Args:
        seed: a Python int or an integer scalar array.

    Returns:
        A ``uint32[2]`` key.

    Example:
        >>> PRNGKey(42).tolist()
        [0, 42]
    """
    if isinstance(seed, (bool, np.bool_)):
        raise TypeError("PRNGKey: the seed must be an integer, got a bool")
    if isinstance(seed, (int, np.integer)):
        seed = int(seed)
        if not -2 ** 63 <= seed < 2 ** 64:
            raise OverflowError(f"PRNGKey: seed {seed} does not fit in 64 bits")
        hi = 0 if -2 ** 31 <= seed < 2 ** 31 else (seed >> 32) & 0xFFFFFFFF
        return fnp.asarray(np.array([hi, seed & 0xFFFFFFFF], dtype=_U32))
    seed = fnp.asarray(seed)
    if seed.shape != () or dtype_kind(seed.dtype) not in "iu":
        raise TypeError(f"PRNGKey: the seed must be an integer scalar, got "
                        f"{seed.dtype.name}{list(seed.shape)}")
    if seed.dtype.itemsize == 8:
        hi = fnp.asarray(fnp.right_shift(seed, 32) & 0xFFFFFFFF, _U32)
        lo = fnp.asarray(seed & 0xFFFFFFFF, _U32)
    else:
        hi, lo = fnp.zeros((), _U32), fnp.asarray(seed, _U32)
    return fnp.stack([hi, lo])


def key(seed) -> ArrayBase:
    """Creates a PRNG key from a seed; the same as :func:`PRNGKey` (keys are raw uint32[2]).

    Example:
        >>> key(0).tolist()
        [0, 0]
    """
    return PRNGKey(seed)


def key_data(keys):
    """The raw uint32 words of a key (keys are already raw here, so this is the identity).

    Example:
        >>> key_data(key(7)).tolist()
        [0, 7]
    """
    return fnp.asarray(keys)


def wrap_key_data(key_bits):
    """A key from its raw uint32 words (the inverse of :func:`key_data`).

    Example:
        >>> wrap_key_data(key_data(key(7))).tolist()
        [0, 7]
    """
    return fnp.asarray(key_bits, _U32)


def _shape(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _iota_2x32(shape):
    """The row-major index of each element of ``shape`` as (high, low) uint32 words."""
    size = math.prod(shape)
    if size >= 2 ** 32:
        raise NotImplementedError("random arrays of 2**32 or more elements are not supported")
    lo = fnp.reshape(lax.iota(_U32, size), shape)
    return fnp.zeros(shape, _U32), lo


def _hash_counters(k, shape):
    """The two Threefry output words for counters 0..size-1 laid out in ``shape``."""
    k1, k2 = _key_words(k)
    c1, c2 = _iota_2x32(shape)
    return threefry2x32(k1, k2, c1, c2)


def split(key, num: int | Sequence[int] = 2):
    """Splits a key into ``num`` new independent keys (JAX's partitionable scheme).

    Args:
        key: a ``uint32[2]`` key.
        num: how many keys, or a shape of keys.

    Returns:
        A ``uint32[num, 2]`` array (``uint32[*num, 2]`` for a shape): one key per row.

    Example:
        >>> key, subkey = split(PRNGKey(0))
        >>> split(key, 3).shape
        (3, 2)
    """
    shape = _shape(num)
    b1, b2 = _hash_counters(key, shape)
    return fnp.stack([b1, b2], axis=len(shape))


def fold_in(key, data):
    """Folds an integer into a key, giving a new key (e.g. a step or device index).

    Args:
        key: a ``uint32[2]`` key.
        data: a Python int or integer scalar array, taken modulo 2**32.

    Returns:
        A new ``uint32[2]`` key.

    Example:
        >>> step_key = fold_in(PRNGKey(0), 17)
        >>> step_key.shape
        (2,)
    """
    k1, k2 = _key_words(key)
    if isinstance(data, (int, np.integer)) and not isinstance(data, (bool, np.bool_)):
        d = np.uint32(int(data) & 0xFFFFFFFF)
    else:
        d = fnp.asarray(data)
        if d.shape != () or dtype_kind(d.dtype) not in "iu":
            raise TypeError(f"fold_in: data must be an integer scalar, got "
                            f"{d.dtype.name}{list(d.shape)}")
        d = fnp.asarray(d, _U32)
    b1, b2 = threefry2x32(k1, k2, np.uint32(0), d)
    return fnp.stack([b1, b2])


def bits(key, shape=(), dtype=None):
    """Uniform random bits: unsigned integers covering their whole range.

    Args:
        key: a ``uint32[2]`` key.
        shape: the output shape.
        dtype: ``uint32`` (the default) or ``uint8``.

    Returns:
        An array of ``shape`` and ``dtype``.

    Example:
        >>> bits(PRNGKey(0), (2,)).dtype
        dtype('uint32')
    """
    dtype = np.dtype(fnp.canonical_dtype(dtype) or _U32)
    if dtype not in (_U32, np.dtype(np.uint8)):
        raise TypeError(f"bits: dtype must be uint32 or uint8, got {dtype.name}")
    b1, b2 = _hash_counters(key, _shape(shape))
    out = b1 ^ b2
    return out if dtype == _U32 else fnp.asarray(out & 0xFF, dtype)


# ---------------------------------------------------------------------------------------------
# continuous distributions
# ---------------------------------------------------------------------------------------------

def _float_dtype(dtype, name):
    dt = np.dtype(fnp.canonical_dtype(dtype) or np.float32)
    if dtype_kind(dt) != "f":
        raise TypeError(f"{name}: dtype must be a floating type, got {dt.name}")
    return dt


def _unit_floats(key, shape, dtype):
    """Uniform floats in [0, 1) on the grid of ``dtype``'s mantissa (JAX's bit recipe).

    JAX sets the random bits as the mantissa of a float in [1, 2) and subtracts 1; scaling the
    integer mantissa by 2**-nmant gives the same values without a bitcast.
    """
    b1, b2 = _hash_counters(key, shape)
    if dtype == np.float64:  # 52 mantissa bits from the 64-bit word (b1 << 32 | b2) >> 12
        hi = fnp.asarray(b1, np.float64) * 2.0 ** -32
        return hi + fnp.asarray(b2 >> 12, np.float64) * 2.0 ** -52
    if dtype == np.float16:  # 10 mantissa bits from a 16-bit word
        m = ((b1 ^ b2) & 0xFFFF) >> 6
        return fnp.asarray(fnp.asarray(m, np.float32) * 2.0 ** -10, np.float16)
    if is_half(dtype):  # bfloat16: 7 mantissa bits from an 8-bit word (JAX: fewer than 8 bits
        m = ((b1 ^ b2) & 0xFF) >> 1  # of mantissa draw bits(key, 8), as `bits(key, s, uint8)`)
        return fnp.asarray(fnp.asarray(m, np.float32) * 2.0 ** -7, dtype)
    return fnp.asarray((b1 ^ b2) >> 9, np.float32) * np.float32(2.0 ** -23)


def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0):
    """Uniform floats in ``[minval, maxval)``.

    Args:
        key: a ``uint32[2]`` key.
        shape: the output shape.
        dtype: a float dtype (float32 by default; float16, bfloat16 and float64 too).
        minval: lower bound (inclusive), broadcastable to ``shape``.
        maxval: upper bound (exclusive), broadcastable to ``shape``.

    Returns:
        An array of ``shape`` and ``dtype``.

    Example:
        >>> round(float(uniform(key(0))), 6)  # the number JAX gives
        0.947667
    """
    dtype = _float_dtype(dtype, "uniform")
    shape = _shape(shape)
    minval = fnp.asarray(minval, dtype)
    maxval = fnp.asarray(maxval, dtype)
    fnp.broadcast_shapes(shape, minval.shape, maxval.shape)  # raises on a mismatch
    floats = _unit_floats(key, shape, dtype)
    return fnp.maximum(minval, floats * (maxval - minval) + minval)


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011): single precision,
# the polynomial XLA uses for float32 erf_inv.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                   0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _horner(coeffs, w):
    p = coeffs[0]
    for c in coeffs[1:]:
        p = c + p * w
    return p


def _erf_inv(x):
    """Inverse error function on (-1, 1): Giles' approximation, refined by Newton in float64."""
    dt = x.dtype
    xw = fnp.asarray(x, np.float32) if is_half(dt) else x
    w = -fnp.log((1.0 - xw) * (1.0 + xw))
    central = _horner(_ERFINV_CENTRAL, w - 2.5)
    tail = _horner(_ERFINV_TAIL, fnp.sqrt(w) - 3.0)
    y = fnp.where(w < 5.0, central, tail) * xw
    if dt == np.float64:  # Newton on erf(y) = x; the float32 start is good to ~1e-7
        for _ in range(3):
            y = y - (lax.erf(y) - x) / (2.0 / math.sqrt(math.pi) * fnp.exp(-y * y))
    return fnp.asarray(y, dt)


def normal(key, shape=(), dtype=None):
    """Standard normal samples, by the inverse CDF: ``sqrt(2) * erf_inv(u)``, u uniform in
    (-1, 1) (JAX's method; float32 values agree with JAX's to rounding).

    Args:
        key: a ``uint32[2]`` key.
        shape: the output shape.
        dtype: a float dtype (float32 by default).

    Returns:
        An array of ``shape`` and ``dtype``.

    Example:
        >>> normal(key(0), (2, 3)).shape
        (2, 3)
    """
    dtype = _float_dtype(dtype, "normal")
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = uniform(key, shape, dtype, lo, 1.0)
    return np.array(np.sqrt(2.0), dtype) * _erf_inv(u)


def truncated_normal(key, lower, upper, shape=None, dtype=None):
    """Standard normal samples conditioned on ``lower < x < upper`` (inverse-CDF method).

    Args:
        key: a ``uint32[2]`` key.
        lower: lower bound, broadcastable to ``shape``.
        upper: upper bound, broadcastable to ``shape``.
        shape: the output shape (the broadcast shape of the bounds by default).
        dtype: a float dtype (float32 by default).

    Returns:
        An array of ``shape`` and ``dtype`` with values in the open interval (lower, upper).

    Example:
        >>> x = truncated_normal(key(0), -2.0, 2.0, (1000,))
        >>> bool(fnp.all(fnp.abs(x) < 2.0))
        True
    """
    dtype = _float_dtype(dtype, "truncated_normal")
    if shape is None:
        shape = fnp.broadcast_shapes(np.shape(lower), np.shape(upper))
    shape = _shape(shape)
    sqrt2 = np.array(np.sqrt(2.0), dtype)
    lower_a, upper_a = fnp.asarray(lower, dtype), fnp.asarray(upper, dtype)
    a, b = lax.erf(lower_a / sqrt2), lax.erf(upper_a / sqrt2)
    out = sqrt2 * _erf_inv(uniform(key, shape, dtype, a, b))
    # rounding (or drawing exactly a) may land on a bound: clamp into the open interval
    lo, hi = _open_bound(lower, dtype, np.inf), _open_bound(upper, dtype, -np.inf)
    return fnp.clip(out, lo, hi)


def _open_bound(v, dtype, toward):
    if isinstance(v, Tracer):
        return fnp.asarray(v, dtype)
    return fnp.asarray(np.nextafter(np.asarray(v, dtype), np.array(toward, dtype)))


def gumbel(key, shape=(), dtype=None, mode=None):
    """Standard Gumbel samples: ``-log(-log(u))`` with u uniform in (tiny, 1).

    Args:
        key: a ``uint32[2]`` key.
        shape: the output shape.
        dtype: a float dtype (float32 by default).
        mode: ``None`` or ``"low"`` (one uniform draw per sample, JAX's default), or
            ``"high"`` (two draws per sample, so that small uniforms keep their precision:
            JAX's recipe, the same numbers).

    Returns:
        An array of ``shape`` and ``dtype``.

    Example:
        >>> gumbel(key(0), (4,)).shape
        (4,)
    """
    dtype = _float_dtype(dtype, "gumbel")
    shape = _shape(shape)
    if mode in (None, "low"):
        u = uniform(key, shape, dtype, float(finfo(dtype).tiny), 1.0)
        return -fnp.log(-fnp.log(u))
    if mode == "high":
        info = finfo(dtype)
        both = uniform(key, (2,) + shape, dtype, 0.0, 1.0)
        high, low = both[0], both[1]
        x = fnp.where(high >= 0.5, high,
                      high + np.asarray(2.0 ** -info.nmant, dtype) * low
                      + np.asarray(info.tiny, dtype))
        return -fnp.log(-fnp.log1p(-x))
    raise ValueError(f"gumbel: mode must be None, 'low' or 'high', got {mode!r}")


# ---------------------------------------------------------------------------------------------
# discrete distributions
# ---------------------------------------------------------------------------------------------

def _int_bound(v, dtype):
    """A bound as an int64 array clipped into ``dtype``'s range, and whether it exceeded it."""
    info = np.iinfo(dtype)
    if isinstance(v, (int, np.integer, float, np.floating)) and not isinstance(v, ArrayBase):
        iv = int(v)
        return fnp.asarray(np.int64(min(max(iv, info.min), info.max))), iv > info.max
    a = fnp.asarray(v)
    if dtype_kind(a.dtype) not in "iu":
        a = fnp.asarray(a, np.int32)
    a = fnp.asarray(a, np.int64)
    return fnp.clip(a, int(info.min), int(info.max)), a > int(info.max)


def randint(key, shape, minval, maxval, dtype=None):
    """Uniform integers in ``[minval, maxval)`` (JAX's algorithm and, for int32, its numbers).

    Two 32-bit words per element are reduced modulo the span as JAX does, which keeps the
    modulo bias negligible for spans far below 2**32.

    Args:
        key: a ``uint32[2]`` key.
        shape: the output shape.
        minval: inclusive lower bound (int or integer array, broadcastable to ``shape``).
        maxval: exclusive upper bound; where ``maxval <= minval`` the result is ``minval``.
        dtype: an integer dtype of at most 32 bits (int32 by default).

    Returns:
        An integer array of ``shape`` and ``dtype``.

    Example:
        >>> x = randint(key(0), (100,), 0, 10)
        >>> bool(fnp.all((x >= 0) & (x < 10)))
        True
    """
    dtype = np.dtype(fnp.canonical_dtype(dtype) or np.int32)
    if dtype_kind(dtype) not in "iu" or dtype.itemsize > 4:
        raise TypeError(f"randint: dtype must be an integer type of at most 32 bits, got "
                        f"{dtype.name}")
    shape = _shape(shape)
    minval, _ = _int_bound(minval, dtype)
    maxval, out_of_range = _int_bound(maxval, dtype)
    fnp.broadcast_shapes(shape, minval.shape, maxval.shape)
    k1, k2 = split(key)
    higher, lower = bits(k1, shape), bits(k2, shape)
    span = fnp.asarray(maxval - minval, _U32)          # exact: the difference is < 2**32
    span = fnp.where(maxval <= minval, np.uint32(1), span)
    span = fnp.where(out_of_range & (maxval > minval), span + 1, span)  # maxval was clipped
    # (hi * 2**32 + lo) mod m == ((hi mod m) * (2**32 mod m) + lo mod m) mod m, in uint32
    # arithmetic as JAX does it (wrapping products included)
    mult = (np.uint32(2 ** 16) % span)
    mult = (mult * mult) % span
    offset = ((higher % span) * mult + lower % span) % span
    offset = fnp.where(span == 0, lower, offset)  # span 2**32 (full range): x mod 0 is x in XLA
    out = minval + fnp.asarray(offset, np.int64)
    return fnp.asarray(fnp.broadcast_to(out, shape), dtype)


def bernoulli(key, p=0.5, shape=None):
    """Boolean samples that are True with probability ``p``.

    Args:
        key: a ``uint32[2]`` key.
        p: probability (float or float array broadcastable to ``shape``).
        shape: the output shape (``p``'s shape by default).

    Returns:
        A bool array of ``shape``.

    Example:
        >>> bernoulli(key(0), 0.3, (5,)).dtype
        dtype('bool')
    """
    p = fnp.asarray(p)
    if dtype_kind(p.dtype) != "f":
        p = fnp.asarray(p, np.float32)
    shape = tuple(p.shape) if shape is None else _shape(shape)
    return uniform(key, shape, p.dtype) < p


def categorical(key, logits, axis: int = -1, shape=None, replace: bool = True, mode=None):
    """Samples class indices from unnormalized log-probabilities (the Gumbel-max trick).

    JAX's recipe, so the same key gives JAX's draws: with replacement, the argmax over the
    class axis of ``logits + gumbel(key, ...)`` (one Gumbel sample per class and draw);
    without, the classes of the ``k`` largest of ``logits + gumbel(key, logits.shape)``, where
    ``k`` is the number of draws per batch element. Classes whose logit is ``-inf`` are never
    drawn (while a finite one is left).

    Args:
        key: a ``uint32[2]`` key.
        logits: unnormalized log-probabilities; ``axis`` indexes the classes.
        axis: the class axis.
        shape: the output shape; it must end with the batch shape of ``logits`` (its shape
            without ``axis``), and any leading axes draw independent samples.
        replace: whether the leading axes' draws are with replacement (independent) or
            without (distinct classes, at most the number of classes of them).
        mode: the Gumbel noise's precision (see :func:`gumbel`).

    Returns:
        int32 class indices of ``shape``.

    Raises:
        ValueError: a ``shape`` that does not end with the batch shape, or more draws
            without replacement than classes.

    Example:
        >>> logits = fnp.log(fnp.asarray([0.2, 0.8]))
        >>> categorical(key(0), logits, shape=(1000,)).shape
        (1000,)
        >>> sorted(categorical(key(1), fnp.zeros(5), shape=(5,), replace=False).tolist())
        [0, 1, 2, 3, 4]
    """
    logits = fnp.asarray(logits)
    if logits.ndim == 0:
        raise ValueError("categorical: logits must have at least one axis (the classes)")
    ax = axis % logits.ndim
    batch_shape = tuple(s for i, s in enumerate(logits.shape) if i != ax)
    shape = batch_shape if shape is None else _shape(shape)
    if shape[len(shape) - len(batch_shape):] != batch_shape:
        raise ValueError(f"categorical: shape {shape} must end with the logits' batch shape "
                         f"{batch_shape}")
    prefix = shape[:len(shape) - len(batch_shape)]
    if not replace:
        k = math.prod(prefix)
        n = logits.shape[ax]
        if k > n:
            raise ValueError(f"categorical: number of samples without replacement ({k}) cannot "
                             f"exceed the number of categories ({n})")
        noisy = logits + gumbel(key, logits.shape, logits.dtype, mode)
        _, idx = lax.top_k(fnp.moveaxis(noisy, ax, -1), k)       # batch_shape + (k,)
        return fnp.reshape(fnp.moveaxis(idx, -1, 0), shape)
    sample_shape = list(shape[len(prefix):])
    sample_shape.insert(ax, logits.shape[ax])
    noise = gumbel(key, prefix + tuple(sample_shape), logits.dtype, mode)
    expanded = fnp.reshape(logits, (1,) * len(prefix) + tuple(logits.shape))
    return fnp.argmax(noise + expanded, axis=len(prefix) + ax)


_RANK_BLOCK = 1 << 22  # elements of one comparison block in _sort_by_keys


def _sort_by_keys(sort_keys, x, axis):
    """x reordered along ``axis`` by a stable sort of ``sort_keys`` (same shape), sort-free.

    Element i's rank is the number of keys below it plus the equal keys before it; the output
    at position p takes the element of rank p. Both steps compare all pairs along the axis:
    O(n**2) work and, per block of rows, O(block * n) memory.
    """
    n = x.shape[axis]
    kk = fnp.moveaxis(sort_keys, axis, -1)
    xx = fnp.moveaxis(x, axis, -1)
    idx = lax.iota(np.int32, n)
    step = max(1, _RANK_BLOCK // max(1, n * max(1, math.prod(kk.shape[:-1]))))
    ranks = []
    for s in range(0, n, step):  # rank of elements s..s+step
        ki = kk[..., s:s + step, None]
        below = (kk[..., None, :] < ki) | ((kk[..., None, :] == ki)
                                           & (idx[None, :] < idx[s:s + step, None]))
        ranks.append(fnp.sum(below, axis=-1, dtype=np.int32))
    rank = fnp.concatenate(ranks, axis=-1)
    order = []
    for s in range(0, n, step):  # which element has rank p, for p in s..s+step
        hit = rank[..., None, :] == idx[s:s + step, None]
        order.append(fnp.sum(fnp.where(hit, idx, 0), axis=-1, dtype=np.int32))
    order = fnp.concatenate(order, axis=-1)
    return fnp.moveaxis(fnp.take_along_axis(xx, order, axis=-1), -1, axis)


def _shuffle(key, x, axis):
    """JAX's shuffle: sort by random 32-bit keys, in enough rounds to make ties negligible."""
    rounds = math.ceil(3 * math.log(max(1, x.size)) / math.log(2 ** 32 - 1))
    for _ in range(rounds):
        key, subkey = split(key)
        x = _sort_by_keys(bits(subkey, x.shape), x, axis)
    return x


def permutation(key, x, axis: int = 0, independent: bool = False):
    """A random permutation of ``range(x)`` (int ``x``) or of ``x`` along ``axis``.

    funcgrad has no sort primitive, so the sort by random keys that JAX uses is done by ranking
    with pairwise comparisons: O(n**2) time for n elements along the axis (fine for n up to a
    few thousand; memory is bounded by working in blocks). The result equals JAX's.

    Args:
        key: a ``uint32[2]`` key.
        x: an int n (permute ``arange(n)``) or an array.
        axis: the axis to permute.
        independent: permute each slice along ``axis`` independently.

    Returns:
        The permuted array.

    Example:
        >>> sorted(permutation(key(0), 5).tolist())
        [0, 1, 2, 3, 4]
    """
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return _shuffle(key, fnp.arange(int(x), dtype=np.int32), 0)
    x = fnp.asarray(x)
    if x.ndim == 0:
        raise TypeError("permutation: x must be an int or an array of at least 1 dimension")
    axis = axis % x.ndim
    if independent or x.ndim == 1:
        return _shuffle(key, x, axis)
    order = _shuffle(key, fnp.arange(x.shape[axis], dtype=np.int32), 0)
    return fnp.take(x, order, axis=axis)
