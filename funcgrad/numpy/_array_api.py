"""The array API standard's (2025.12) inspection namespace: __array_namespace_info__."""
from __future__ import annotations

import numpy as np

from funcgrad.core import _backend_factories, _cuda_usable, default_device
from funcgrad.core import dtypes as _cdt

__array_api_version__ = "2025.12"

_KINDS = {
    "bool": ("bool",),
    "signed integer": ("int8", "int16", "int32", "int64"),
    "unsigned integer": ("uint8", "uint16", "uint32", "uint64"),
    "integral": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
    "real floating": ("float32", "float64"),
    "complex floating": ("complex64", "complex128"),
}
_KINDS["numeric"] = _KINDS["integral"] + _KINDS["real floating"] + _KINDS["complex floating"]


class _Info:
    """What funcgrad.numpy supports: capabilities, devices and dtypes (array API 2025.12)."""

    __module__ = "funcgrad.numpy"

    def capabilities(self) -> dict:
        """Optional features: boolean indexing needs data-dependent shapes (not traceable);
        arrays have at most 64 dimensions (numpy's limit, which the CPU backend inherits).

        Example:
            >>> import funcgrad.numpy as fnp
            >>> fnp.__array_namespace_info__().capabilities()["boolean indexing"]
            False
        """
        return {"boolean indexing": False, "data-dependent shapes": False, "max dimensions": 64}

    def default_device(self) -> str:
        """The device new arrays are placed on ("cpu" or "cuda")."""
        return default_device()

    def devices(self) -> tuple:
        """The usable devices: "cpu", and "cuda" when a GPU (or the simulator) is usable."""
        return ("cpu",) + (("cuda",) if "cuda" in _backend_factories and _cuda_usable() else ())

    def default_dtypes(self, *, device=None) -> dict:
        """The default dtypes of new arrays (JAX's 32-bit defaults)."""
        self._check_device(device)
        return {"real floating": _dt("float32"), "complex floating": _dt("complex64"),
                "integral": _dt("int32"), "indexing": _dt("int32")}

    def dtypes(self, *, device=None, kind=None) -> dict:
        """The supported dtypes by name, optionally of one kind (or a tuple of kinds).

        Example:
            >>> import funcgrad.numpy as fnp
            >>> sorted(fnp.__array_namespace_info__().dtypes(kind="complex floating"))
            ['complex128', 'complex64']
        """
        self._check_device(device)
        if kind is None:
            names = ("bool",) + _KINDS["numeric"]
        elif isinstance(kind, tuple):
            names = tuple(n for k in kind for n in self._kind(k))
        else:
            names = self._kind(kind)
        return {n: _dt(n) for n in dict.fromkeys(names)}

    @staticmethod
    def _kind(kind):
        if kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; known: {sorted(_KINDS)}")
        return _KINDS[kind]

    def _check_device(self, device):
        if device is not None and device not in _backend_factories:
            raise ValueError(f"unknown device {device!r}; known: {sorted(_backend_factories)}")


def _dt(name):
    from funcgrad.numpy import _base
    return getattr(_base, "bool_" if name == "bool" else name)


def __array_namespace_info__() -> _Info:
    """The array API inspection namespace of funcgrad.numpy.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.__array_namespace_info__().default_dtypes()["real floating"]
        funcgrad.numpy.float32
    """
    return _Info()



class finfo:  # noqa: N801  (numpy's and the standard's name)
    """Machine limits of a floating or complex dtype, as Python floats (array API finfo).

    Example:
        >>> import funcgrad.numpy as fnp
        >>> fnp.finfo(fnp.complex64).bits
        32
    """

    def __init__(self, type):   # noqa: A002  (the standard's parameter name)
        from funcgrad.numpy._base import canonical_dtype
        dt = canonical_dtype(getattr(type, "dtype", type))
        if not (_cdt.is_floating(dt) or dt.kind == "c"):
            raise ValueError(f"finfo: {dt.name} is not a floating or complex dtype")
        info = _cdt.finfo(dt)   # ml_dtypes' for bfloat16 and the float8 types
        self.dtype = np.dtype(info.dtype)
        self.bits = int(info.bits)
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.smallest_normal = float(info.smallest_normal)
        self.tiny, self.resolution = float(info.tiny), float(info.resolution)
        self.precision = int(info.precision)

    def __repr__(self):
        return f"finfo(eps={self.eps}, min={self.min}, max={self.max}, dtype={self.dtype.name})"
