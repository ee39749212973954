"""dtypes and abstract values (ShapedArray): the dtypes funcgrad supports and their rules."""
from __future__ import annotations

import numpy as np

# ---------------------------------------------------------------------------------------------
# dtypes and abstract values
# ---------------------------------------------------------------------------------------------

_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "int32": "i32", "int64": "i64",
          "uint32": "u32", "uint8": "u8", "int8": "i8", "bool": "bool", "int16": "i16",
          "uint16": "u16", "uint64": "u64", "complex64": "c64", "complex128": "c128"}
SUPPORTED_DTYPES = tuple(np.dtype(d) for d in
                         ("float16", "float32", "float64", "int8", "uint8", "int32", "int64",
                          "uint32", "bool", "int16", "uint16", "uint64", "complex64",
                          "complex128"))


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def is_int(dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def is_complex(dtype) -> bool:
    return np.dtype(dtype).kind == "c"


def real_dtype(dtype) -> np.dtype:
    """The real dtype of a complex dtype (complex64 -> float32); other dtypes unchanged."""
    d = np.dtype(dtype)
    return np.dtype(f"f{d.itemsize // 2}") if d.kind == "c" else d


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
