"""More jax.numpy names built from existing ones: matvec, vecmat, 2-D FFTs, polyfit, aliases."""
from __future__ import annotations

import numpy as np

from funcgrad.core.dtypes import dtype_kind
from funcgrad.numpy import _fft_complex as _fft
from funcgrad.numpy._base import asarray
from funcgrad.numpy._linalg import matmul
from funcgrad.numpy._shape import expand_dims, squeeze

complex_ = np.dtype(np.complex128)   # numpy's/JAX's names for the complex dtypes
csingle = np.dtype(np.complex64)
cdouble = np.dtype(np.complex128)


def matvec(x1, x2, /):
    """Matrix-vector product over the last axes (JAX/numpy 2.2): (..., M, N) x (..., N) ->
    (..., M), batch dims broadcast.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.matvec(fnp.eye(2) * 2.0, fnp.ones(2)).tolist()
        [2.0, 2.0]
    """
    return squeeze(matmul(asarray(x1), expand_dims(asarray(x2), -1)), -1)


def vecmat(x1, x2, /):
    """Vector-matrix product conj(x1) @ x2 over the last axes: (..., N) x (..., N, M) ->
    (..., M), batch dims broadcast (numpy 2.2 / JAX)."""
    x1 = asarray(x1)
    if dtype_kind(x1.dtype) == "c":
        from funcgrad.prims import complex as PC
        x1 = PC.conj(x1)
    return squeeze(matmul(expand_dims(x1, -2), asarray(x2)), -2)


def fft2(a, s=None, axes=(-2, -1), norm=None):
    """The 2-D discrete Fourier transform (fftn over two axes)."""
    return _fft.fftn(a, s=s, axes=axes, norm=norm or "backward")


def ifft2(a, s=None, axes=(-2, -1), norm=None):
    """The inverse 2-D discrete Fourier transform."""
    return _fft.ifftn(a, s=s, axes=axes, norm=norm or "backward")


def rfft2(a, s=None, axes=(-2, -1), norm=None):
    """The 2-D FFT of a real array (rfftn over two axes)."""
    return _fft.rfftn(a, s=s, axes=axes, norm=norm or "backward")


def irfft2(a, s=None, axes=(-2, -1), norm=None):
    """The inverse of rfft2."""
    return _fft.irfftn(a, s=s, axes=axes, norm=norm or "backward")


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    """Least-squares polynomial fit (numpy.polyfit; highest power first), differentiable.

    `full` and `cov` are not supported (they raise); `w` weights the residuals as numpy's.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> [round(c, 4) for c in fnp.polyfit(fnp.arange(4.0), 2 * fnp.arange(4.0) + 1, 1).tolist()]
        [2.0, 1.0]
    """
    from funcgrad.numpy import linalg
    if full or cov:
        raise NotImplementedError("funcgrad.numpy.polyfit: full=True and cov=True are not "
                                  "supported")
    deg = int(deg)
    if deg < 0:
        raise ValueError(f"polyfit: deg must be >= 0, got {deg}")
    x, y = asarray(x), asarray(y)
    if x.ndim != 1 or y.ndim not in (1, 2) or y.shape[0] != x.shape[0]:
        raise ValueError(f"polyfit: expected x of shape (M,) and y of shape (M,) or (M, K), "
                         f"got {x.shape} and {y.shape}")
    powers = np.arange(deg, -1, -1)
    van = x[:, None] ** asarray(powers.astype(x.dtype))
    if w is not None:
        w = asarray(w)
        van = van * w[:, None]
        y = y * (w if y.ndim == 1 else w[:, None])
    coef, *_ = linalg.lstsq(van, y, rcond=rcond)
    return coef
