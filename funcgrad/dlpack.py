"""DLPack interop: funcgrad arrays go to and come from PyTorch, CuPy, JAX and numpy without a copy.

    >>> import numpy as np, funcgrad
    >>> from funcgrad.dlpack import from_dlpack
    >>> from_dlpack(np.arange(3.0)).tolist()
    [0.0, 1.0, 2.0]

Export (`Array.__dlpack__`) builds a legacy "dltensor" capsule around the array's memory and keeps
the array's buffer alive until the consumer calls the deleter. Import reads a producer's capsule
(or its `__cuda_array_interface__`) and wraps the memory as a funcgrad buffer that keeps the
producer's tensor alive. Device memory is synchronized at the hand-over (funcgrad queues its work
on the legacy default stream).
"""
from __future__ import annotations

import ctypes

import numpy as np

from funcgrad.core import Array, ShapedArray, get_backend
from funcgrad.core.dtypes import bfloat16, dtype_kind

kDLCPU, kDLCUDA, kDLCUDAManaged = 1, 2, 13
_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}
kDLBfloat = 4   # DLPack's code of bfloat16 (its kind "f" would say float16)
_KINDS = {0: "i", 1: "u", 2: "f", 6: "b"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _Deleter)]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]

_NAME, _USED = b"dltensor", b"used_dltensor"
_live: dict[int, tuple] = {}    # address of an exported DLManagedTensor -> what it keeps alive


@_Deleter
def _delete(ptr):
    _live.pop(ctypes.addressof(ptr.contents), None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule_ptr):
    # an unconsumed capsule frees its tensor; a consumed one was renamed and is the consumer's
    cap = ctypes.cast(capsule_ptr, ctypes.py_object)
    if _api.PyCapsule_IsValid(cap, _NAME):
        addr = _api.PyCapsule_GetPointer(cap, _NAME)
        _live.pop(addr, None)


def _capsule(ptr: int, shape, strides, dtype: np.dtype, device: tuple, keep) -> object:
    m = DLManagedTensor()
    nd = len(shape)
    shp = (ctypes.c_int64 * max(nd, 1))(*shape)
    st = (ctypes.c_int64 * max(nd, 1))(*strides)
    m.dl_tensor.data = ptr or None
    m.dl_tensor.device = DLDevice(*device)
    m.dl_tensor.ndim = nd
    code = kDLBfloat if dtype == bfloat16 else _CODES.get(dtype_kind(dtype))
    if code is None:
        raise BufferError(f"dtype {dtype.name} has no DLPack type code")
    m.dl_tensor.dtype = DLDataType(code, dtype.itemsize * 8, 1)
    m.dl_tensor.shape = ctypes.cast(shp, ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.strides = ctypes.cast(st, ctypes.POINTER(ctypes.c_int64))
    m.dl_tensor.byte_offset = 0
    m.deleter = _delete
    addr = ctypes.addressof(m)
    _live[addr] = (m, shp, st, keep)
    return _api.PyCapsule_New(addr, _NAME, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def dlpack_device(x: Array) -> tuple[int, int]:
    if x.device == "cpu":
        return (kDLCPU, 0)
    return get_backend(x.device).dlpack_device()


def to_dlpack(x: Array, *, stream=None, max_version=None, dl_device=None, copy=None):
    """A DLPack capsule of x's memory (the protocol behind `Array.__dlpack__`)."""
    if dl_device is not None and tuple(dl_device) != dlpack_device(x):
        raise BufferError(f"cannot export a {x.device} array to DLPack device {dl_device}")
    if copy:
        raise BufferError("funcgrad exports DLPack without copying (copy=True unsupported)")
    if x.device == "cpu":
        a = np.asarray(x)
        if not a.flags.writeable:   # legacy DLPack cannot signal read-only memory
            a = a.copy()
        return a.__dlpack__()
    backend = get_backend(x.device)
    buf = backend.export(x.buf)          # contiguous and synchronized
    ptr = backend.pointer(buf) if buf.size else 0
    return _capsule(ptr, buf.shape, buf.strides, buf.dtype, backend.dlpack_device(), buf)


class _Imported:
    """Owns a consumed DLManagedTensor: calls the producer's deleter when funcgrad is done."""

    def __init__(self, addr, capsule):
        self.addr, self.capsule = addr, capsule

    def __del__(self):
        m = DLManagedTensor.from_address(self.addr)
        if m.deleter:
            m.deleter(ctypes.pointer(m))


def _dtype(dt: DLDataType) -> np.dtype:
    if (dt.code, dt.bits, dt.lanes) == (kDLBfloat, 16, 1):
        return bfloat16
    if dt.lanes != 1 or dt.code not in _KINDS:
        raise BufferError(f"unsupported DLPack dtype (code {dt.code}, bits {dt.bits}, "
                          f"lanes {dt.lanes})")
    if dt.code == 6:
        return np.dtype(np.bool_)
    return np.dtype(f"{_KINDS[dt.code]}{dt.bits // 8}")


def from_dlpack(x, device: str | None = None) -> Array:
    """A funcgrad Array sharing the memory of `x` (anything with `__dlpack__` or
    `__cuda_array_interface__`: torch/CuPy/JAX/numpy arrays); no copy is made.

    CPU memory becomes a "cpu" array, GPU memory a "cuda" array. Pass `device` to copy instead
    when the memory lives elsewhere.
    """
    if isinstance(x, Array):
        return x if device is None or device == x.device else _copy_to(x, device)
    if hasattr(x, "__dlpack_device__"):
        dev_type, dev_id = x.__dlpack_device__()
        if dev_type == kDLCPU:
            a = np.from_dlpack(x)
            v = a.view()
            v.flags.writeable = False
            arr = Array(v, ShapedArray(v.shape, v.dtype), "cpu")
            return arr if device in (None, "cpu") else _copy_to(arr, device)
        if dev_type in (kDLCUDA, kDLCUDAManaged):
            try:
                cap = x.__dlpack__(stream=1)       # 1: the legacy default stream (ours)
            except TypeError:
                cap = x.__dlpack__()
            return _from_capsule(cap)
        raise BufferError(f"DLPack device type {dev_type} is not supported")
    if hasattr(x, "__cuda_array_interface__"):
        return _from_cai(x)
    if hasattr(x, "__dlpack__"):
        return _from_capsule(x.__dlpack__())
    raise TypeError(f"{type(x).__name__} supports neither DLPack nor the CUDA array interface")


def _copy_to(arr: Array, device: str) -> Array:
    from funcgrad.core import to_array
    return to_array(arr, device)


def _from_capsule(cap) -> Array:
    addr = _api.PyCapsule_GetPointer(cap, _NAME)
    m = DLManagedTensor.from_address(addr)
    t = m.dl_tensor
    if t.device.device_type not in (kDLCUDA, kDLCUDAManaged):
        raise BufferError("expected a CUDA DLPack tensor")
    dtype = _dtype(t.dtype)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    _api.PyCapsule_SetName(cap, _USED)
    owner = _Imported(addr, cap)
    ptr = (t.data or 0) + t.byte_offset
    backend = get_backend("cuda")
    buf = backend.wrap_external(ptr, shape, strides, dtype, owner)
    return Array(buf, ShapedArray(shape, dtype), "cuda")


def _from_cai(x) -> Array:
    d = x.__cuda_array_interface__
    dtype = np.dtype(d["typestr"])
    shape = tuple(d["shape"])
    strides = d.get("strides")
    if strides is not None:
        strides = tuple(s // dtype.itemsize for s in strides)
    backend = get_backend("cuda")
    if d.get("stream") is not None:
        backend.synchronize()
    buf = backend.wrap_external(d["data"][0] or 0, shape, strides, dtype, x)
    return Array(buf, ShapedArray(shape, dtype), "cuda")


def _array_dlpack(self, *, stream=None, max_version=None, dl_device=None, copy=None):
    return to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device,
                     copy=copy)


Array.__dlpack__ = _array_dlpack
Array.__dlpack_device__ = dlpack_device
