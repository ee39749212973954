"""funcgrad.scipy.signal: jax.scipy.signal's convolutions, detrend and spectral estimates.

convolve / correlate (and their 2-D forms) of N-d arrays are lax.conv_general_dilated over the
full overlap, cut to scipy's "full", "same" or "valid" output; complex inputs convolve their real
and imaginary parts. fftconvolve multiplies FFTs (along `axes`, broadcasting the others).
welch / csd / stft cut the signal into windowed segments with one gather and FFT them; istft
overlap-adds the inverse FFTs with one scatter-add. Windows are scipy's periodic (fftbins) ones.
"""
from __future__ import annotations

import itertools
import operator
import warnings

import numpy as np

from funcgrad import lax
from funcgrad import numpy as jnp
from funcgrad.core.dtypes import dtype_kind

__all__ = ["convolve", "convolve2d", "correlate", "correlate2d", "csd", "detrend",
           "fftconvolve", "istft", "stft", "welch"]

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


# ---------------------------------------------------------------------------------------------
# spectral analysis: welch, csd, stft, istft
# ---------------------------------------------------------------------------------------------

def _cosine_window(coefs):
    def make(m):
        fac = np.linspace(-np.pi, np.pi, m)
        return sum(c * np.cos(k * fac) for k, c in enumerate(coefs))
    return make


def _bartlett(m):
    n = np.arange(m)
    return np.where(n <= (m - 1) / 2.0, 2.0 * n / (m - 1), 2.0 - 2.0 * n / (m - 1))


def _triang(m):
    n = np.arange(1, (m + 1) // 2 + 1)
    w = (2 * n - 1.0) / m if m % 2 == 0 else 2 * n / (m + 1.0)
    return np.r_[w, w[-2::-1]] if m % 2 else np.r_[w, w[::-1]]


_WINDOWS = {
    "hann": _cosine_window([0.5, 0.5]),
    "hamming": _cosine_window([0.54, 0.46]),
    "blackman": _cosine_window([0.42, 0.50, 0.08]),
    "bartlett": _bartlett,
    "triang": _triang,
    "boxcar": np.ones,
}
_WINDOW_ALIASES = {"han": "hann", "hanning": "hann", "hamm": "hamming", "ham": "hamming",
                   "black": "blackman", "blk": "blackman", "bart": "bartlett", "brt": "bartlett",
                   "triangle": "triang", "tri": "triang", "box": "boxcar", "ones": "boxcar",
                   "rect": "boxcar", "rectangular": "boxcar"}


def _get_window(window, nperseg):
    """scipy.signal.get_window(window, nperseg) (periodic) as a float64 NumPy array."""
    name = window[0] if isinstance(window, tuple) and len(window) == 1 else window
    if isinstance(name, str):
        key = _WINDOW_ALIASES.get(name, name)
        if key in _WINDOWS:
            if nperseg == 1:
                return np.ones(1)
            return _WINDOWS[key](nperseg + 1)[:-1]   # periodic: the symmetric M+1 less its end
    try:
        from scipy.signal import get_window
    except ImportError as err:   # pragma: no cover - scipy is optional
        raise ValueError(f"window {window!r} needs scipy.signal.get_window; funcgrad computes "
                         f"{sorted(_WINDOWS)} and arrays itself") from err
    return np.asarray(get_window(window, nperseg), np.float64)


def _triage_segments(window, nperseg, input_length, dtype):
    """The window array and nperseg (scipy's _triage_segments)."""
    if isinstance(window, (str, tuple)):
        if nperseg is None:
            nperseg = 256
        if nperseg > input_length:
            warnings.warn(f"nperseg = {nperseg} is greater than input length = {input_length}, "
                          f"using nperseg = {input_length}", stacklevel=3)
            nperseg = input_length
        win = jnp.asarray(_get_window(window, nperseg), dtype)
    else:
        win = jnp.asarray(window)
        if win.ndim != 1:
            raise ValueError("window must be 1-D")
        if input_length < win.shape[-1]:
            raise ValueError("window is longer than input signal")
        if nperseg is None:
            nperseg = win.shape[0]
        elif nperseg != win.shape[0]:
            raise ValueError("value specified for nperseg is different from length of window")
        win = win.astype(dtype)
    return win, nperseg


def _edge_ext(x, n, kind):
    """x extended by n samples at both ends of its last axis (scipy's even/odd/const_ext)."""
    if n < 1:
        return x
    if kind == "zeros":
        return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(n, n)])
    if kind == "constant":
        left = jnp.repeat(x[..., :1], n, axis=-1)
        right = jnp.repeat(x[..., -1:], n, axis=-1)
        return jnp.concatenate([left, x, right], axis=-1)
    if n > x.shape[-1] - 1:
        raise ValueError(f"The extension length n ({n}) is too big. It must not exceed "
                         f"x.shape[axis]-1, which is {x.shape[-1] - 1}.")
    left = jnp.flip(x[..., 1:n + 1], axis=-1)
    right = jnp.flip(x[..., -n - 1:-1], axis=-1)
    if kind == "odd":
        left = 2 * x[..., :1] - left
        right = 2 * x[..., -1:] - right
    return jnp.concatenate([left, x, right], axis=-1)


_BOUNDARIES = ("even", "odd", "constant", "zeros", None)


def _fft_segments(x, win, detrend_func, nperseg, nstep, nfft, sides):
    """FFTs of the windowed, detrended segments of x: shape (..., nseg, nfreq)."""
    nseg = (x.shape[-1] - nperseg) // nstep + 1
    idx = np.arange(nseg)[:, None] * nstep + np.arange(nperseg)[None, :]
    segs = x[..., idx]
    segs = detrend_func(segs) * win
    if sides == "twosided":
        return jnp.fft.fft(segs, n=nfft, axis=-1)
    return jnp.fft.rfft(jnp.real(segs), n=nfft, axis=-1)


def _spectral_helper(x, y, fs, window, nperseg, noverlap, nfft, detrend_type, return_onesided,
                     scaling, axis, mode, boundary=None, padded=False):
    """scipy.signal._spectral_helper: (freqs, times, per-segment spectra)."""
    if boundary not in _BOUNDARIES:
        raise ValueError(f"Unknown boundary option '{boundary}', must be one of: "
                         f"{list(_BOUNDARIES)}")
    axis = operator.index(axis)
    same_data = y is None
    if same_data:
        (x,) = _inexact(x)
        y = x
    else:
        x, y = _inexact(x, y)
    result_dtype = jnp.result_type(x, np.complex64)
    freq_dtype = np.finfo(result_dtype).dtype
    if not same_data:
        xo = list(x.shape)
        yo = list(y.shape)
        xo.pop(axis)
        yo.pop(axis)
        try:
            outershape = np.broadcast_shapes(tuple(xo), tuple(yo))
        except ValueError as err:
            raise ValueError("x and y cannot be broadcast together.") from err
        if x.size == 0 or y.size == 0:
            shape = outershape + (min(x.shape[axis], y.shape[axis]),)
            return (jnp.zeros(0, freq_dtype), jnp.zeros(0, freq_dtype),
                    jnp.moveaxis(jnp.zeros(shape, result_dtype), -1, axis))
    elif x.size == 0:
        return jnp.zeros(0, freq_dtype), jnp.zeros(0, freq_dtype), jnp.zeros(x.shape, x.dtype)
    x = jnp.moveaxis(x, axis, -1)
    y = jnp.moveaxis(y, axis, -1) if not same_data else x
    if not same_data and x.shape[-1] != y.shape[-1]:
        n = max(x.shape[-1], y.shape[-1])
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, n - x.shape[-1])])
        y = jnp.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, n - y.shape[-1])])
    if nperseg is not None:
        nperseg = int(nperseg)
        if nperseg < 1:
            raise ValueError("nperseg must be a positive integer")
    win, nperseg = _triage_segments(window, nperseg, x.shape[-1], freq_dtype)
    noverlap = nperseg // 2 if noverlap is None else int(noverlap)
    if noverlap >= nperseg:
        raise ValueError("noverlap must be less than nperseg.")
    nstep = nperseg - noverlap
    if nfft is None:
        nfft = nperseg
    elif nfft < nperseg:
        raise ValueError("nfft must be greater than or equal to nperseg.")
    nfft = int(nfft)
    if boundary is not None:
        x = _edge_ext(x, nperseg // 2, boundary)
        if not same_data:
            y = _edge_ext(y, nperseg // 2, boundary)
    if padded:
        nadd = (-(x.shape[-1] - nperseg) % nstep) % nperseg
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, nadd)])
        if not same_data:
            y = jnp.pad(y, [(0, 0)] * (y.ndim - 1) + [(0, nadd)])
    if not detrend_type:
        def detrend_func(d):
            return d
    elif not callable(detrend_type):
        def detrend_func(d):
            return detrend(d, type=detrend_type, axis=-1)
    elif axis != -1:
        def detrend_func(d):   # hand the user's function the data's own axis order
            return jnp.moveaxis(detrend_type(jnp.moveaxis(d, -1, axis)), axis, -1)
    else:
        detrend_func = detrend_type
    if scaling == "density":
        scale = 1.0 / (fs * jnp.sum(win * win))
    elif scaling == "spectrum":
        scale = 1.0 / jnp.sum(win) ** 2
    else:
        raise ValueError(f"Unknown scaling: {scaling}")
    if mode == "stft":
        scale = jnp.sqrt(scale)
    sides = "onesided" if return_onesided else "twosided"
    if return_onesided and (jnp.iscomplexobj(x) or jnp.iscomplexobj(y)):
        sides = "twosided"
        warnings.warn("Input data is complex, switching to return_onesided=False", stacklevel=3)
    if sides == "twosided":
        freqs = jnp.asarray(np.fft.fftfreq(nfft, 1 / fs), freq_dtype)
    else:
        freqs = jnp.asarray(np.fft.rfftfreq(nfft, 1 / fs), freq_dtype)
    result = _fft_segments(x, win, detrend_func, nperseg, nstep, nfft, sides)
    if not same_data:
        result = jnp.conj(result) * _fft_segments(y, win, detrend_func, nperseg, nstep, nfft,
                                                  sides)
    elif mode == "psd":
        result = jnp.conj(result) * result
    result = result * scale
    if sides == "onesided" and mode == "psd":
        end = nfft // 2 + 1 if nfft % 2 else nfft // 2
        double = np.ones(result.shape[-1])
        double[1:end] = 2.0
        result = result * jnp.asarray(double, freq_dtype)
    time = np.arange(nperseg / 2, x.shape[-1] - nperseg / 2 + 1, nstep) / fs
    if boundary is not None:
        time = time - (nperseg / 2) / fs
    result = result.astype(result_dtype)
    if same_data and mode != "stft":
        result = jnp.real(result)
    out_axis = axis - 1 if axis < 0 else axis
    result = jnp.moveaxis(result, -1, out_axis)
    return freqs, jnp.asarray(time, freq_dtype), result


def _median_bias(n):
    ii_2 = 2 * np.arange(1, (n - 1) // 2 + 1)
    return 1 + np.sum(1.0 / (ii_2 + 1) - 1.0 / ii_2)


def csd(x, y, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
        detrend="constant", return_onesided=True, scaling="density", axis=-1, average="mean"):
    """The cross power spectral density of x and y by Welch's method (scipy.signal.csd).

    Args:
        x, y: the signals (y=None gives x's power spectral density, as :func:`welch`).
        fs: the sampling frequency.
        window: a window name (or tuple) for scipy.signal.get_window, or a 1-D array.
        nperseg: the segment length (256, or the signal's length if shorter, by default).
        noverlap: samples shared by consecutive segments (nperseg // 2 by default).
        nfft: the FFT length (nperseg by default; zero-pads when longer).
        detrend: "constant", "linear", a function of a segment, or False.
        return_onesided: the one-sided spectrum of real data.
        scaling: "density" (V**2/Hz) or "spectrum" (V**2).
        axis: the time axis.
        average: "mean" or "median" (bias corrected) over the segments.

    Returns:
        (freqs, Pxy): the sample frequencies and the complex cross spectral density.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> x = jnp.sin(jnp.arange(64.0))
        >>> f, p = signal.csd(x, x, nperseg=16)
        >>> f.shape, p.shape, p.dtype.name
        ((9,), (9,), 'complex64')
    """
    freqs, _, pxy = _spectral_helper(x, y, fs, window, nperseg, noverlap, nfft, detrend,
                                     return_onesided, scaling, axis, mode="psd")
    if y is not None:
        pxy = pxy + 0j   # complex output when x is not y
    if pxy.ndim >= 2 and pxy.size > 0:
        if pxy.shape[-1] > 1:
            if average == "median":
                bias = _median_bias(pxy.shape[-1])
                if jnp.iscomplexobj(pxy):
                    pxy = (jnp.median(jnp.real(pxy), axis=-1)
                           + 1j * jnp.median(jnp.imag(pxy), axis=-1))
                else:
                    pxy = jnp.median(pxy, axis=-1)
                pxy = pxy / jnp.asarray(bias, np.finfo(pxy.dtype).dtype)
            elif average == "mean":
                pxy = jnp.mean(pxy, axis=-1)
            else:
                raise ValueError(f'average must be "median" or "mean", got {average}')
        else:
            pxy = jnp.reshape(pxy, pxy.shape[:-1])
    return freqs, pxy


def welch(x, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None, detrend="constant",
          return_onesided=True, scaling="density", axis=-1, average="mean"):
    """The power spectral density of x by Welch's method (scipy.signal.welch): the average
    periodogram of overlapping windowed segments. The arguments are :func:`csd`'s.

    Returns:
        (freqs, Pxx): the sample frequencies and the (real) power spectral density.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> x = jnp.cos(jnp.pi / 2 * jnp.arange(256.0))   # a quarter of the sampling rate
        >>> f, p = signal.welch(x, nperseg=32)
        >>> float(f[jnp.argmax(p)])
        0.25
    """
    freqs, pxx = csd(x, None, fs=fs, window=window, nperseg=nperseg, noverlap=noverlap,
                     nfft=nfft, detrend=detrend, return_onesided=return_onesided,
                     scaling=scaling, axis=axis, average=average)
    return freqs, jnp.real(pxx)


def stft(x, fs=1.0, window="hann", nperseg=256, noverlap=None, nfft=None, detrend=False,
         return_onesided=True, boundary="zeros", padded=True, axis=-1, scaling="spectrum"):
    """The short-time Fourier transform of x (scipy.signal.stft).

    Args:
        x: the signal.
        fs, window, noverlap, nfft, detrend, return_onesided, axis: as :func:`csd`.
        nperseg: the segment length (cut to the signal's length if longer).
        boundary: extend the signal by nperseg // 2 at both ends with "zeros", "even", "odd",
            "constant" (edge values), or None, so the first and last samples centre a segment.
        padded: zero-pad the end to a whole number of segments.
        scaling: "spectrum" (each segment's FFT over the window's sum) or "psd".

    Returns:
        (freqs, times, Zxx): Zxx has the frequencies in place of `axis` and the segment times
        as a new last axis.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> f, t, z = signal.stft(jnp.ones(32), nperseg=8)
        >>> f.shape, t.shape, z.shape
        ((5,), (9,), (5, 9))
    """
    if scaling == "psd":
        scaling = "density"
    elif scaling != "spectrum":
        raise ValueError(f"Parameter {scaling=} not in ['spectrum', 'psd']!")
    return _spectral_helper(x, None, fs, window, nperseg, noverlap, nfft, detrend,
                            return_onesided, scaling, axis, mode="stft", boundary=boundary,
                            padded=padded)


def _overlap_add(frames, nstep):
    """Sum frames (..., nseg, nperseg) placed nstep apart: shape (..., (nseg-1)*nstep+nperseg)."""
    nseg, nperseg = frames.shape[-2:]
    length = (nseg - 1) * nstep + nperseg
    idx = (np.arange(nseg)[:, None] * nstep + np.arange(nperseg)[None, :]).reshape(-1)
    batch = frames.shape[:-2]
    flat = jnp.moveaxis(jnp.reshape(frames, batch + (nseg * nperseg,)), -1, 0)
    out = jnp.zeros((length,) + batch, frames.dtype).at[idx].add(flat)
    return jnp.moveaxis(out, 0, -1)


def istft(Zxx, fs=1.0, window="hann", nperseg=None, noverlap=None, nfft=None,
          input_onesided=True, boundary=True, time_axis=-1, freq_axis=-2):
    """The inverse short-time Fourier transform (scipy.signal.istft) by weighted overlap-add.

    Args:
        Zxx: the STFT, at least 2-D, frequencies along `freq_axis`, segments along `time_axis`.
        fs: the sampling frequency.
        window: the window :func:`stft` used (a name or tuple, or a 1-D array).
        nperseg: the segment length (from Zxx's frequency count by default).
        noverlap: samples shared by consecutive segments (nperseg // 2 by default).
        nfft: the FFT length (nperseg, or one more for odd one-sided lengths, by default).
        input_onesided: Zxx holds the one-sided spectrum of a real signal.
        boundary: the STFT extended the signal at both ends (those samples are cut).
        time_axis, freq_axis: Zxx's segment and frequency axes.

    Returns:
        (times, x): the sample times and the signal.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.scipy import signal
        >>> x = jnp.sin(jnp.arange(32.0))
        >>> _, _, z = signal.stft(x, nperseg=8)
        >>> t, y = signal.istft(z, nperseg=8)
        >>> bool(jnp.allclose(y, x, atol=1e-5))
        True
    """
    Zxx = jnp.asarray(Zxx)
    if Zxx.ndim < 2:
        raise ValueError("Input stft must be at least 2d!")
    freq_axis = operator.index(freq_axis) % Zxx.ndim
    time_axis = operator.index(time_axis) % Zxx.ndim
    if freq_axis == time_axis:
        raise ValueError("Must specify differing time and frequency axes!")
    nfreq = Zxx.shape[freq_axis]
    n_default = 2 * (nfreq - 1) if input_onesided else nfreq
    if nperseg is None:
        nperseg = n_default
    else:
        nperseg = int(nperseg)
        if nperseg < 1:
            raise ValueError("nperseg must be a positive integer")
    if nfft is None:
        nfft = n_default
        if input_onesided and nperseg == n_default + 1:
            nfft += 1   # odd nperseg, no FFT padding
    else:
        nfft = int(nfft)
    if nfft < nperseg:
        raise ValueError(f"FFT length ({nfft}) must be longer than nperseg ({nperseg}).")
    noverlap = nperseg // 2 if noverlap is None else int(noverlap)
    if noverlap >= nperseg:
        raise ValueError("noverlap must be less than nperseg.")
    nstep = nperseg - noverlap
    if time_axis != Zxx.ndim - 1 or freq_axis != Zxx.ndim - 2:
        outer = tuple(i for i in range(Zxx.ndim) if i not in (time_axis, freq_axis))
        Zxx = jnp.transpose(Zxx, outer + (freq_axis, time_axis))
    Zxx = jnp.swapaxes(Zxx, -1, -2)   # (..., nseg, nfreq)
    if input_onesided:
        xsubs = jnp.fft.irfft(Zxx, n=nfft, axis=-1)[..., :nperseg]
    else:
        xsubs = jnp.fft.ifft(Zxx, n=nfft, axis=-1)[..., :nperseg]
    if isinstance(window, (str, tuple)):
        win = jnp.asarray(_get_window(window, nperseg), np.finfo(xsubs.dtype).dtype)
    else:
        win = jnp.asarray(window)
        if win.ndim != 1:
            raise ValueError("window must be 1-D")
        if win.shape[0] != nperseg:
            raise ValueError(f"window must have length of {nperseg}")
    win = win.astype(xsubs.dtype)
    xsubs = xsubs * jnp.sum(win)   # undoes the "spectrum" scaling
    x = _overlap_add(xsubs * win, nstep)
    norm = _overlap_add(jnp.broadcast_to(win * win, (xsubs.shape[-2], nperseg)), nstep)
    if boundary:
        cut = nperseg // 2
        x = x[..., cut:x.shape[-1] - cut]
        norm = norm[..., cut:norm.shape[-1] - cut]
    x = x / jnp.where(norm > 1e-10, norm, 1.0)
    if x.ndim > 1 and time_axis != Zxx.ndim - 1:
        if freq_axis < time_axis:
            time_axis -= 1
        x = jnp.moveaxis(x, -1, time_axis)
    time = jnp.asarray(np.arange(x.shape[0]) / fs, np.finfo(x.dtype).dtype)
    return time, x
