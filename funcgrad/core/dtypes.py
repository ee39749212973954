"""dtypes and abstract values (ShapedArray): the dtypes funcgrad supports and their rules."""
from __future__ import annotations

import ml_dtypes
import numpy as np

# ---------------------------------------------------------------------------------------------
# dtypes and abstract values
# ---------------------------------------------------------------------------------------------

# bfloat16 is ml_dtypes' numpy dtype, as in JAX (host arrays of it are numpy arrays). Its numpy
# kind is "V" (a user-defined type), so every kind test in funcgrad goes through `kind` below.
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
HALF_DTYPES = (float16, bfloat16)   # 16-bit floats: stored in 16 bits, computed in float32

# ml_dtypes' narrow floats other than bfloat16: arrays of them can be made, converted, moved and
# stored (JAX's float8 storage types), but no compute kernel takes them: the primitives' dtype
# rules reject them by name (their `kind` stays numpy's "V").
STORAGE_ONLY_DTYPES = tuple(np.dtype(getattr(ml_dtypes, n)) for n in (
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz")
    if hasattr(ml_dtypes, n))

_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "int32": "i32", "int64": "i64",
          "uint32": "u32", "uint8": "u8", "int8": "i8", "bool": "bool", "int16": "i16",
          "uint16": "u16", "uint64": "u64", "complex64": "c64", "complex128": "c128",
          "bfloat16": "bf16"}
SUPPORTED_DTYPES = tuple(np.dtype(d) for d in
                         ("float16", "float32", "float64", "int8", "uint8", "int32", "int64",
                          "uint32", "bool", "int16", "uint16", "uint64", "complex64",
                          "complex128")) + (bfloat16,) + STORAGE_ONLY_DTYPES

# ml_dtypes gives float8_e5m2 numpy's kind "f": the storage-only types all say "V" here
_KIND = {bfloat16: "f", **{d: "V" for d in STORAGE_ONLY_DTYPES}}
_FLOATING = frozenset((bfloat16,) + STORAGE_ONLY_DTYPES)


def dtype_kind(dtype) -> str:
    """numpy's dtype.kind ("b", "i", "u", "f", "c"), with "f" for bfloat16 (numpy says "V").

    Use it for every kind test: `dtype_kind(x.dtype) == "f"` holds for float16/bfloat16/float32/
    float64. The float8 storage types say "V": no kernel computes on them.

    Example:
        >>> from funcgrad.core.dtypes import dtype_kind, bfloat16
        >>> dtype_kind(bfloat16)
        'f'
    """
    d = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    return _KIND.get(d) or d.kind


def is_float(dtype) -> bool:
    """Whether `dtype` is a real floating dtype that kernels compute on (bfloat16 included)."""
    return dtype_kind(dtype) == "f"


def is_int(dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def is_complex(dtype) -> bool:
    return np.dtype(dtype).kind == "c"


def is_inexact(dtype) -> bool:
    """Float or complex (the dtypes that carry gradients); bfloat16 included."""
    return dtype_kind(dtype) in "fc"


def is_half(dtype) -> bool:
    """float16 or bfloat16: 16-bit storage whose arithmetic is done in float32."""
    return np.dtype(dtype) in HALF_DTYPES


def compute_dtype(dtype) -> np.dtype:
    """The dtype arithmetic on `dtype` accumulates in: float32 for float16/bfloat16 (as XLA's
    sums, matmuls and normalizations do), the dtype itself otherwise."""
    d = np.dtype(dtype)
    return float32 if d in HALF_DTYPES else d


def is_floating(dtype) -> bool:
    """jnp.issubdtype(dtype, jnp.floating): real floats, bfloat16 and the float8 types."""
    d = np.dtype(dtype)
    return d.kind == "f" or d in _FLOATING


def real_dtype(dtype) -> np.dtype:
    """The real dtype of a complex dtype (complex64 -> float32); other dtypes unchanged."""
    d = np.dtype(dtype)
    return np.dtype(f"f{d.itemsize // 2}") if d.kind == "c" else d


def finfo(dtype):
    """Machine limits of a floating dtype (numpy's finfo; ml_dtypes' for bfloat16 and float8).

    Example:
        >>> from funcgrad.core.dtypes import finfo, bfloat16
        >>> float(finfo(bfloat16).eps)
        0.0078125
    """
    d = np.dtype(dtype)
    return ml_dtypes.finfo(d) if d in _FLOATING else np.finfo(d)


class ShapedArray:
    """The abstract value of an array: its shape and dtype."""
    __slots__ = ("_hash", "dtype", "shape")

    def __init__(self, shape, dtype):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self._hash = None

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))

    def __eq__(self, other):
        return self is other or (isinstance(other, ShapedArray) and self.shape == other.shape
                                 and self.dtype == other.dtype)

    def __hash__(self):   # cached: jit hashes every argument's aval on every call
        h = self._hash
        if h is None:
            h = self._hash = hash((self.shape, self.dtype))
        return h

    def str_short(self) -> str:
        return f"{_SHORT.get(self.dtype.name, self.dtype.name)}[{','.join(map(str, self.shape))}]"

    __repr__ = str_short


_X64 = [True]   # config "enable_x64" (kept here: aval_of is on every call's path)
_NARROW = {np.dtype(a): np.dtype(b) for a, b in (("float64", "float32"), ("int64", "int32"),
                                                 ("uint64", "uint32"),
                                                 ("complex128", "complex64"))}


def canonicalize_dtype(dtype) -> np.dtype:
    """dtype, or its 32-bit counterpart when 64-bit types are off (config "enable_x64")."""
    dtype = np.dtype(dtype)
    return dtype if _X64[0] else _NARROW.get(dtype, dtype)


def _set_x64(flag):
    _X64[0] = bool(flag)


def _register_config_hooks():
    from funcgrad.config import config, on_update
    on_update("enable_x64", _set_x64)
    _set_x64(config.enable_x64)


_register_config_hooks()
