"""funcgrad.numpy.fft: the transforms (funcgrad/numpy/_fft_complex.py), frequencies, shifts."""
from __future__ import annotations

import numpy as np

from funcgrad.numpy._base import asarray, canonical_dtype, norm_axes
from funcgrad.numpy._fft_complex import (
    fft,
    fftn,
    hfft,
    ifft,
    ifftn,
    ihfft,
    irfft,
    irfftn,
    rfft,
    rfftn,
)
from funcgrad.numpy._derived import fft2, ifft2, irfft2, rfft2  # noqa: F401


def fftfreq(n, d=1.0, *, dtype=None, device=None):
    """Sample frequencies of a length-n FFT with spacing d (float32 by default).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.fft.fftfreq(4).tolist()
        [0.0, 0.25, -0.5, -0.25]
    """
    return asarray(np.fft.fftfreq(int(n), d).astype(canonical_dtype(dtype) or np.float32))


def rfftfreq(n, d=1.0, *, dtype=None, device=None):
    """Sample frequencies of a length-n real FFT (the non-negative ones)."""
    return asarray(np.fft.rfftfreq(int(n), d).astype(canonical_dtype(dtype) or np.float32))


def _shift(x, axes, sign):
    from funcgrad.numpy._index_tricks import roll
    x = asarray(x)
    axes = norm_axes(axes, x.ndim, "fftshift")
    return roll(x, [sign * (x.shape[a] // 2) if sign > 0 else -(x.shape[a] // 2)
                    for a in axes], axes) if axes else x


def fftshift(x, axes=None):
    """Move the zero-frequency term to the centre."""
    return _shift(x, axes, 1)


def ifftshift(x, axes=None):
    """The inverse of fftshift."""
    return _shift(x, axes, -1)
