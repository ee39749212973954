"""The discrete Fourier transforms of numpy.fft / the array API fft extension.

Each 1-D transform is the fft primitive (funcgrad/prims/complex.py: numpy's FFT on the CPU,
no CUDA kernel yet) along one axis, after cutting or zero-padding to n, times the norm's scale.
"""
from __future__ import annotations

import numpy as np

from funcgrad.prims import complex as PC
from funcgrad.core import bind
from funcgrad.core.dtypes import dtype_kind
from funcgrad.numpy._base import asarray, norm_axes
from funcgrad.numpy._elementwise import conjugate, real
from funcgrad.numpy._shape import concatenate, flip, pad

_NORMS = ("backward", "ortho", "forward")


def _complex_of(x):
    return np.dtype(np.complex128) if x.dtype in (np.float64, np.complex128) else np.dtype(
        np.complex64)


def _scale(n, norm, inverse):
    if norm not in _NORMS:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
    if norm == "ortho":
        return 1 / np.sqrt(n)
    return 1.0 / n if (norm == "forward") != inverse else 1.0


def _fit(x, n, axis):
    """x cut or zero-padded to length n along axis."""
    m = x.shape[axis]
    if n < 1:
        raise ValueError(f"invalid number of data points ({n}) specified")
    if n < m:
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(0, n)
        return x[tuple(idx)]
    if n > m:
        cfg = [(0, 0)] * x.ndim
        cfg[axis] = (0, n - m)
        return pad(x, cfg)
    return x


def _dft(x, n, axis, norm, inverse):
    x = asarray(x)
    (axis,) = norm_axes(axis, x.ndim, "fft")
    n = x.shape[axis] if n is None else int(n)
    x = _fit(asarray(x, _complex_of(x)), n, axis)
    out = bind(PC.fft_p, x, axis=axis, inverse=inverse)
    scale = _scale(n, norm, inverse)
    return out if scale == 1.0 else out * float(scale)


def fft(x, /, *, n=None, axis=-1, norm="backward"):
    """The 1-D discrete Fourier transform along `axis` (numpy.fft.fft).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.fft.fft(fnp.asarray([1.0, 0.0, 0.0, 0.0])).tolist()
        [(1+0j), (1+0j), (1+0j), (1+0j)]
    """
    return _dft(x, n, axis, norm, False)


def ifft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of fft."""
    return _dft(x, n, axis, norm, True)


def _axes_sizes(x, s, axes):
    x = asarray(x)
    if axes is None:
        axes = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    axes = norm_axes(axes, x.ndim, "fftn")
    s = [None] * len(axes) if s is None else [None if v == -1 else v for v in s]
    if len(s) != len(axes):
        raise ValueError("fftn: s and axes must have the same length")
    return x, axes, s


def fftn(x, /, *, s=None, axes=None, norm="backward"):
    """The n-D discrete Fourier transform over `axes`."""
    x, axes, s = _axes_sizes(x, s, axes)
    for a, n in zip(axes, s):
        x = _dft(x, n, a, norm, False)
    return x


def ifftn(x, /, *, s=None, axes=None, norm="backward"):
    """The inverse of fftn."""
    x, axes, s = _axes_sizes(x, s, axes)
    for a, n in zip(axes, s):
        x = _dft(x, n, a, norm, True)
    return x


def _half(x, axis):
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(0, x.shape[axis] // 2 + 1)
    return x[tuple(idx)]


def rfft(x, /, *, n=None, axis=-1, norm="backward"):
    """fft of a real input, the n//2 + 1 non-negative frequencies."""
    x = asarray(x)
    if dtype_kind(x.dtype) == "c":
        raise TypeError("rfft: the input must be real-valued")
    (axis,) = norm_axes(axis, x.ndim, "rfft")
    return _half(_dft(x, n, axis, norm, False), axis)


def irfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of rfft: a real signal of length n (2 (m - 1) by default)."""
    x = asarray(x)
    (axis,) = norm_axes(axis, x.ndim, "irfft")
    n = 2 * (x.shape[axis] - 1) if n is None else int(n)
    h = _fit(asarray(x, _complex_of(x)), n // 2 + 1, axis)
    idx = [slice(None)] * x.ndim
    idx[axis] = slice(1, (n + 1) // 2)
    full = concatenate([h, conjugate(flip(h[tuple(idx)], axis))], axis=axis)
    return real(_dft(full, n, axis, norm, True))


def rfftn(x, /, *, s=None, axes=None, norm="backward"):
    """rfft over the last of `axes`, then fft over the others."""
    x, axes, s = _axes_sizes(x, s, axes)
    x = rfft(x, n=s[-1], axis=axes[-1], norm=norm)
    for a, n in zip(axes[:-1], s[:-1]):
        x = _dft(x, n, a, norm, False)
    return x


def irfftn(x, /, *, s=None, axes=None, norm="backward"):
    """The inverse of rfftn."""
    x, axes, s = _axes_sizes(x, s, axes)
    for a, n in zip(axes[:-1], s[:-1]):
        x = _dft(x, n, a, norm, True)
    return irfft(x, n=s[-1], axis=axes[-1], norm=norm)


def hfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The transform of a Hermitian-symmetric signal given by its first half (real result)."""
    inv = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
    if norm not in inv:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
    return irfft(conjugate(asarray(x)), n=n, axis=axis, norm=inv[norm])


def ihfft(x, /, *, n=None, axis=-1, norm="backward"):
    """The inverse of hfft."""
    inv = {"backward": "forward", "forward": "backward", "ortho": "ortho"}
    if norm not in inv:
        raise ValueError(f"norm must be one of {_NORMS}, got {norm!r}")
    return conjugate(rfft(x, n=n, axis=axis, norm=inv[norm]))
