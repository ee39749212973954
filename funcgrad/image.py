"""JAX's jax.image: resize and scale_and_translate (nearest, linear, cubic, Lanczos, area).

Each resampled axis is one product with a weight matrix (input size x output size), built as
JAX builds it: the kernel evaluated at the distance from each output pixel's centre (mapped
back into the input) to each input pixel's centre, widened by the scale when downsampling with
antialiasing, normalized per output pixel. Pixels are half-centred (pixel ``i`` is at
``i + 0.5``), so the results are JAX's (and TensorFlow's and Pillow's, with antialiasing).
"""
from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Sequence

import numpy as np

import funcgrad.numpy as fnp
from funcgrad.core import is_complex, is_float, user_frame_src

__all__ = ["ResizeMethod", "resize", "scale_and_translate"]


class ResizeMethod(enum.Enum):
    """Image resize methods (JAX's names): NEAREST, LINEAR, LANCZOS3, LANCZOS5, CUBIC (Keys,
    a = -0.5), CUBIC_PYTORCH (a = -0.75 with edge padding when not antialiasing) and AREA."""

    NEAREST = 0
    LINEAR = 1
    LANCZOS3 = 2
    LANCZOS5 = 3
    CUBIC = 4
    CUBIC_PYTORCH = 5
    AREA = 6

    @staticmethod
    def from_string(s: str) -> ResizeMethod:
        """The method for one of JAX's strings ("bilinear", "lanczos3", ...)."""
        for method, names in _NAMES.items():
            if s in names:
                return method
        raise ValueError(f'Unknown resize method "{s}"; use one of '
                         f"{sorted(n for names in _NAMES.values() for n in names)}")


_NAMES = {
    ResizeMethod.NEAREST: ("nearest",),
    ResizeMethod.LINEAR: ("linear", "bilinear", "trilinear", "triangle"),
    ResizeMethod.LANCZOS3: ("lanczos3",),
    ResizeMethod.LANCZOS5: ("lanczos5",),
    ResizeMethod.CUBIC: ("cubic", "bicubic", "tricubic"),
    ResizeMethod.CUBIC_PYTORCH: ("cubic-pytorch", "bicubic-pytorch"),
    ResizeMethod.AREA: ("area",),
}


def _lanczos(radius: float) -> Callable:
    def kernel(x):
        y = radius * fnp.sin(np.pi * x) * fnp.sin(np.pi * x / radius)
        out = fnp.where(x > 1e-3, y / fnp.where(x != 0, np.pi ** 2 * x ** 2, 1), 1)
        return fnp.where(x > radius, 0.0, out)
    return kernel


def _keys_cubic(x):
    out = ((1.5 * x - 2.5) * x) * x + 1.0
    out = fnp.where(x >= 1.0, ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0, out)
    return fnp.where(x >= 2.0, 0.0, out)


def _opencv_cubic(x):
    a = -0.75
    out = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    out = fnp.where(x >= 1.0, ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a, out)
    return fnp.where(x >= 2.0, 0.0, out)


def _triangle(x):
    return fnp.maximum(0, 1 - fnp.abs(x))


_AREA = object()
_KERNELS = {
    ResizeMethod.LINEAR: (1, _triangle),
    ResizeMethod.LANCZOS3: (3, _lanczos(3.0)),
    ResizeMethod.LANCZOS5: (5, _lanczos(5.0)),
    ResizeMethod.CUBIC: (2, _keys_cubic),
    ResizeMethod.CUBIC_PYTORCH: (2, _opencv_cubic),
    ResizeMethod.AREA: (1, _AREA),
}
_TINY = 1000.0 * float(np.finfo(np.float32).eps)   # a smaller total weight gives 0


def _normalized(weights):
    total = fnp.sum(weights, axis=0, keepdims=True)
    return fnp.where(fnp.abs(total) > _TINY, weights / fnp.where(total != 0, total, 1), 0)


def _weight_mat(m: int, n: int, scale, translation, kernel, antialias: bool,
                radius: int, edge_padding: bool, dtype):
    """(m, n) weights taking an axis of m input pixels to n output pixels (JAX's
    compute_weight_mat)."""
    scale, translation = fnp.asarray(scale, dtype), fnp.asarray(translation, dtype)
    inv_scale = 1.0 / scale
    kernel_scale = fnp.maximum(inv_scale, 1.0) if antialias else 1.0
    out_pos = fnp.arange(n, dtype=dtype)
    sample = (out_pos + 0.5) * inv_scale - translation * inv_scale - 0.5
    k = radius if edge_padding else 0
    inputs = fnp.arange(-k, m + k, dtype=dtype)
    if kernel is _AREA:
        left = out_pos * inv_scale - translation * inv_scale
        weights = fnp.maximum(0.0, fnp.minimum((left + inv_scale)[None, :], inputs[:, None] + 1)
                              - fnp.maximum(left[None, :], inputs[:, None]))
    else:
        weights = kernel(fnp.abs(sample[None, :] - inputs[:, None]) / kernel_scale)
    if edge_padding:   # the weights of pixels beyond an edge move onto the edge pixel
        rows = np.clip(np.arange(-k, m + k), 0, m - 1)
        fold = np.zeros((m, m + 2 * k), np.dtype(dtype))
        fold[rows, np.arange(m + 2 * k)] = 1
        return _normalized(fnp.asarray(fold) @ weights)
    inside = (sample >= -0.5) & (sample <= m - 0.5)
    return fnp.where(inside[None, :], _normalized(weights), 0)


def _inexact(image):
    image = fnp.asarray(image)
    if is_float(image.dtype) or is_complex(image.dtype):
        return image
    return image.astype(fnp.result_type(float))


def _method(method) -> ResizeMethod:
    if isinstance(method, str):
        return ResizeMethod.from_string(method)
    if not isinstance(method, ResizeMethod):
        raise TypeError(f"method must be a string or an image.ResizeMethod, got "
                        f"{type(method).__name__}\n  at {user_frame_src()}")
    return method


def _shape(name, image, shape) -> tuple[int, ...]:
    try:
        shape = tuple(operator.index(s) for s in shape)
    except TypeError as e:
        raise TypeError(f"{name}: shape must be a sequence of Python ints, got {shape!r}"
                        f"\n  at {user_frame_src()}") from e
    if len(shape) != image.ndim or min(shape, default=0) < 0:
        raise ValueError(f"{name}: shape must have one non-negative size per dimension of the "
                         f"image; got shape {shape} for an image of shape {image.shape}"
                         f"\n  at {user_frame_src()}")
    return shape


def _resample(x, shape, dims, scales, translations, method, antialias, precision):
    if method == ResizeMethod.CUBIC_PYTORCH and antialias:
        method = ResizeMethod.CUBIC
    radius, kernel = _KERNELS[method]
    edge = method == ResizeMethod.CUBIC_PYTORCH and not antialias
    wdt = np.float64 if x.dtype in (np.float64, np.complex128) else np.float32
    for d, s, t in zip(dims, scales, translations):
        w = _weight_mat(x.shape[d], shape[d], s, t, kernel, antialias, radius, edge, wdt)
        x = fnp.moveaxis(fnp.tensordot(x, w.astype(x.dtype), axes=([d], [0]),
                                       precision=precision), -1, d)
    return x


def resize(image, shape: Sequence[int], method, antialias: bool = True,
           precision="highest"):
    """Resizes an image (every axis whose size changes), as jax.image.resize.

    Args:
        image: an array; batch and channel axes are axes whose size stays.
        shape: the output shape, one size per axis of ``image``.
        method: a :class:`ResizeMethod` or one of JAX's strings: "nearest", "linear" /
            "bilinear", "cubic" / "bicubic", "cubic-pytorch", "lanczos3", "lanczos5", "area".
        antialias: widen the kernel when downsampling (a low-pass filter), as JAX does by
            default; no effect when upsampling or for "nearest".
        precision: matmul precision of the weighted sums (JAX's default "highest").

    Returns:
        The resized image: the input's dtype for "nearest", else a floating dtype.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import image
        >>> image.resize(fnp.array([0.0, 1.0, 2.0, 3.0]), (2,), "linear", antialias=False).tolist()
        [0.5, 2.5]
        >>> image.resize(fnp.array([0.0, 1.0]), (4,), "nearest").tolist()
        [0.0, 0.0, 1.0, 1.0]
    """
    image = fnp.asarray(image)
    shape = _shape("resize", image, shape)
    method = _method(method)
    dims = [d for d in range(image.ndim) if image.shape[d] != shape[d]]
    if method == ResizeMethod.NEAREST:
        x = image
        for d in dims:
            m, n = image.shape[d], shape[d]
            at = np.floor(((np.arange(n, dtype=np.float32) + 0.5) * m / n).astype(np.float32))
            index = [slice(None)] * image.ndim
            index[d] = at.astype(np.int32)
            x = x[tuple(index)]
        return x
    x = _inexact(image)
    scales = [1.0 if shape[d] == 0 else shape[d] / image.shape[d] for d in dims]
    return _resample(x, shape, dims, scales, [0.0] * len(dims), method, antialias, precision)


def scale_and_translate(image, shape: Sequence[int], spatial_dims: Sequence[int], scale,
                        translation, method, antialias: bool = True, precision="highest"):
    """Resamples ``image`` at ``(x - translation) / scale`` along ``spatial_dims`` (JAX's).

    An input location ``x`` moves to ``x * scale + translation`` (pixel ``i`` centred at
    ``i + 0.5``); output pixels that map outside the input are 0. ``scale`` and
    ``translation`` may be traced (they are differentiable).

    Args:
        image: an array.
        shape: the output shape, one size per axis of ``image``.
        spatial_dims: the K axes resampled.
        scale, translation: K values each.
        method: as :func:`resize`'s, except "nearest".
        antialias: widen the kernel when downsampling.
        precision: matmul precision of the weighted sums.

    Returns:
        The resampled image (a floating dtype).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import image
        >>> x = fnp.array([0.0, 1.0, 2.0, 3.0])
        >>> image.scale_and_translate(x, (4,), (0,), fnp.array([1.0]), fnp.array([1.0]),
        ...                           "linear").tolist()
        [0.0, 0.0, 1.0, 2.0]
    """
    image = fnp.asarray(image)
    shape = _shape("scale_and_translate", image, shape)
    method = _method(method)
    if method == ResizeMethod.NEAREST:
        raise ValueError("Nearest neighbor resampling is not supported by scale_and_translate "
                         f"(as in JAX); use resize\n  at {user_frame_src()}")
    dims = [operator.index(d) % image.ndim for d in spatial_dims]
    scale, translation = fnp.asarray(scale), fnp.asarray(translation)
    if scale.shape != (len(dims),) or translation.shape != (len(dims),):
        raise ValueError(f"scale_and_translate: scale and translation need one value per "
                         f"spatial dim ({len(dims)}), got shapes {scale.shape} and "
                         f"{translation.shape}\n  at {user_frame_src()}")
    for d in range(image.ndim):
        if d not in dims and shape[d] != image.shape[d]:
            raise ValueError(f"scale_and_translate: axis {d} is not in spatial_dims, so its "
                             f"size must stay {image.shape[d]}, got {shape[d]}"
                             f"\n  at {user_frame_src()}")
    x = _inexact(image)
    return _resample(x, shape, dims, [scale[i] for i in range(len(dims))],
                     [translation[i] for i in range(len(dims))], method, antialias, precision)
