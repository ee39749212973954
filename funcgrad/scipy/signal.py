"""funcgrad.scipy.signal: jax.scipy.signal's convolutions, correlations and detrend.

convolve / correlate (and their 2-D forms) of N-d arrays are lax.conv_general_dilated over the
full overlap, cut to scipy's "full", "same" or "valid" output; complex inputs convolve their real
and imaginary parts. fftconvolve multiplies FFTs (along `axes`, broadcasting the others).
"""
from __future__ import annotations

import itertools

import numpy as np

from funcgrad import lax
from funcgrad import numpy as jnp
from funcgrad.core.dtypes import dtype_kind

__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "detrend", "fftconvolve"]

_MODES = ("full", "same", "valid")


def _inexact(*xs):
    xs = [x if hasattr(x, "dtype") or isinstance(x, (int, float, complex)) else
          jnp.asarray(x) for x in xs]
    dt = jnp.result_type(*xs)   # Python scalars are weak: they take the arrays' dtype
    if dtype_kind(dt) not in "fc":
        dt = np.dtype(np.float32)
    arrs = [jnp.asarray(x, dt) for x in xs]
    return arrs


def _out_shape(s1, s2, mode):
    if mode == "full":
        return tuple(a + b - 1 for a, b in zip(s1, s2))
    if mode == "same":
        return tuple(s1)
    return tuple(abs(a - b) + 1 for a, b in zip(s1, s2))


def _centered(full, shape):
    """The centre `shape` block of `full` (scipy's _centered)."""
    starts = [(f - s) // 2 for f, s in zip(full.shape, shape)]
    return full[tuple(slice(a, a + s) for a, s in zip(starts, shape))]


def _conv_real(x, k, precision):
    """The full N-d convolution of real x and k (k flipped: lax convolutions correlate)."""
    pad = [(s - 1, s - 1) for s in k.shape]
    out = lax.conv_general_dilated(x[None, None], jnp.flip(k)[None, None], (1,) * x.ndim, pad,
                                   precision=precision)
    return out[0, 0]


def _conv_full(x, k, precision):
    if not (jnp.iscomplexobj(x) or jnp.iscomplexobj(k)):
        return _conv_real(x, k, precision)
    xr, xi, kr, ki = jnp.real(x), jnp.imag(x), jnp.real(k), jnp.imag(k)
    real = _conv_real(xr, kr, precision) - _conv_real(xi, ki, precision)
    imag = _conv_real(xr, ki, precision) + _conv_real(xi, kr, precision)
    return lax.complex(real, imag)


def _check(name, in1, in2, mode):
    if mode not in _MODES:
        raise ValueError(f"{name}: mode must be one of {list(_MODES)}, got {mode!r}")
    if in1.ndim != in2.ndim:
        raise ValueError(f"{name}: in1 and in2 must have the same number of dimensions")
    if in1.size == 0 or in2.size == 0:
        raise ValueError(f"{name}: zero-size arrays not supported in convolutions, got shapes "
                         f"{in1.shape} and {in2.shape}.")
    if mode == "valid":
        ge = all(a >= b for a, b in zip(in1.shape, in2.shape))
        le = all(a <= b for a, b in zip(in1.shape, in2.shape))
        if not (ge or le):
            raise ValueError(f"{name}: for 'valid' mode, one input must be at least as large as "
                             "the other in every dimension.")


def convolve(in1, in2, mode="full", method="auto", precision=None):
    """The N-d convolution of in1 and in2 (scipy.signal.convolve).

    Args:
        in1, in2: arrays of the same number of dimensions.
        mode: "full" (every overlap), "same" (in1's shape, centred) or "valid" (no padding;
            one input must be at least as large as the other along every axis).
        method: "auto" / "direct" (a convolution) or "fft" (:func:`fftconvolve`).
        precision: passed to lax.conv_general_dilated.

    Returns:
        The convolution in the promoted inexact dtype.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> signal.convolve(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 1.0, 0.5])).tolist()
        [0.0, 1.0, 2.5, 4.0, 1.5]
    """
    if method == "fft":
        return fftconvolve(in1, in2, mode=mode)
    if method not in ("auto", "direct"):
        raise ValueError(f"Got method={method!r}; expected 'auto', 'fft', or 'direct'.")
    in1, in2 = _inexact(in1, in2)
    _check("convolve", in1, in2, mode)
    full = _conv_full(in1, in2, precision)
    return _centered(full, _out_shape(in1.shape, in2.shape, mode))


def correlate(in1, in2, mode="full", method="auto", precision=None):
    """The N-d cross-correlation of in1 and in2 (scipy.signal.correlate): the convolution
    with in2 reversed and conjugated.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> signal.correlate(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 1.0, 0.5])).tolist()
        [0.5, 2.0, 3.5, 3.0, 0.0]
    """
    in1, in2 = _inexact(in1, in2)
    return convolve(in1, jnp.flip(jnp.conj(in2)), mode, method=method, precision=precision)


def _check_2d(name, in1, in2, boundary, fillvalue):
    if boundary != "fill" or fillvalue != 0:
        raise NotImplementedError(f"{name}() only supports boundary='fill', fillvalue=0")
    if np.ndim(in1) != 2 or np.ndim(in2) != 2:
        raise ValueError(f"{name}() only supports 2-dimensional inputs.")


def convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
    """The 2-D convolution (scipy.signal.convolve2d with boundary="fill", fillvalue=0).

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> signal.convolve2d(jnp.ones((2, 2)), jnp.ones((2, 2))).tolist()
        [[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]
    """
    _check_2d("convolve2d", in1, in2, boundary, fillvalue)
    return convolve(in1, in2, mode, precision=precision)


def correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0, precision=None):
    """The 2-D cross-correlation (scipy.signal.correlate2d with boundary="fill").

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> x = jnp.arange(9.0).reshape(3, 3)
        >>> signal.correlate2d(x, jnp.array([[1.0, 0.0], [0.0, -1.0]]), mode="valid").tolist()
        [[-4.0, -4.0], [-4.0, -4.0]]
    """
    _check_2d("correlate2d", in1, in2, boundary, fillvalue)
    in1, in2 = _inexact(in1, in2)
    swap = all(a <= b for a, b in zip(in1.shape, in2.shape))
    if mode == "same" or not swap or (mode == "valid" and in1.shape == in2.shape):
        # scipy's 2-D correlation centres "same" from the end (unlike correlate's "same")
        return jnp.flip(convolve(jnp.flip(in1), jnp.conj(in2), mode, precision=precision))
    out = convolve(jnp.flip(in2), jnp.conj(in1), mode, precision=precision)
    return out if mode == "valid" else jnp.conj(out)


def fftconvolve(in1, in2, mode="full", axes=None):
    """The N-d convolution computed with FFTs (scipy.signal.fftconvolve).

    Args:
        in1, in2: arrays of the same number of dimensions.
        mode: "full", "same" or "valid" along the convolved axes.
        axes: the axes to convolve over (all by default); the others broadcast.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> y = signal.fftconvolve(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 1.0, 0.5]))
        >>> [round(v, 5) for v in y.tolist()]
        [0.0, 1.0, 2.5, 4.0, 1.5]
    """
    in1, in2 = _inexact(in1, in2)
    if in1.ndim != in2.ndim:
        raise ValueError("in1 and in2 should have the same dimensionality")
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {list(_MODES)}")
    nd = in1.ndim
    axes = tuple(range(nd)) if axes is None else tuple(
        a % nd for a in ((axes,) if isinstance(axes, int) else axes))
    s1 = [in1.shape[a] for a in axes]
    s2 = [in2.shape[a] for a in axes]
    if mode == "valid":
        ge = all(a >= b for a, b in zip(s1, s2))
        le = all(a <= b for a, b in zip(s1, s2))
        if not (ge or le):
            raise ValueError("For 'valid' mode, one input must be at least as large as the "
                             "other in every dimension.")
    full = [a + b - 1 for a, b in zip(s1, s2)]
    if jnp.iscomplexobj(in1) or jnp.iscomplexobj(in2):
        prod = jnp.fft.fftn(in1, s=full, axes=axes) * jnp.fft.fftn(in2, s=full, axes=axes)
        conv = jnp.fft.ifftn(prod, s=full, axes=axes)
    else:
        prod = jnp.fft.rfftn(in1, s=full, axes=axes) * jnp.fft.rfftn(in2, s=full, axes=axes)
        conv = jnp.fft.irfftn(prod, s=full, axes=axes)
    want = _out_shape(s1, s2, mode)
    idx = [slice(None)] * conv.ndim
    for a, f, w in zip(axes, full, want):
        start = (f - w) // 2
        idx[a] = slice(start, start + w)
    return conv[tuple(idx)]


def detrend(data, axis=-1, type="linear", bp=0, overwrite_data=None):
    """Remove the mean ("constant") or a least-squares line per segment ("linear", with
    breakpoints `bp`) along `axis` (scipy.signal.detrend).

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> y = signal.detrend(jnp.array([1.0, 3.0, 5.0, 7.0]))
        >>> [round(v, 4) + 0.0 for v in y.tolist()]
        [0.0, 0.0, 0.0, 0.0]
    """
    if overwrite_data is not None:
        raise NotImplementedError("overwrite_data argument not implemented.")
    if type not in ("constant", "linear"):
        raise ValueError("Trend type must be 'linear' or 'constant'.")
    (x,) = _inexact(data)
    if type == "constant":
        return x - jnp.mean(x, axis=axis, keepdims=True)
    n = x.shape[axis]
    bps = np.sort(np.unique(np.r_[0, bp, n]))
    if bps[0] < 0 or bps[-1] > n:
        raise ValueError("Breakpoints must be non-negative and less than length of data along "
                         "given axis.")
    moved = jnp.moveaxis(x, axis, 0)
    shape = moved.shape
    flat = jnp.reshape(moved, (n, -1))
    pieces = []
    for lo, hi in itertools.pairwise(bps):
        m = int(hi - lo)
        if m == 0:
            continue
        basis = jnp.stack([jnp.ones(m, x.dtype), jnp.arange(1, m + 1, dtype=x.dtype) / m],
                          axis=1)
        seg = flat[int(lo):int(hi)]
        coef = jnp.linalg.lstsq(basis, seg)[0]
        pieces.append(seg - basis @ coef)
    out = jnp.concatenate(pieces, axis=0)
    return jnp.moveaxis(jnp.reshape(out, shape), 0, axis)
