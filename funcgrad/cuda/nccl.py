"""NCCL collectives on funcgrad CUDA buffers, through CuPy's `cupy.cuda.nccl` (imported lazily).

Every call is issued on `runtime.stream()`, the stream funcgrad launches on: outside a capture
that is the legacy default stream (ordered after the kernels that produced the operands and
before those that read the results, with no host synchronization), and while a jit plan or a
test captures a CUDA graph it is the capture stream, so the collective becomes a graph node
(NCCL supports stream capture since 2.9). Operands are contiguous `DeviceBuffer`s; results are
new pool buffers, or `out=` (which may be the operand: in place).

NVLink multicast (NVLS) stays off: `NCCL_NVLS_ENABLE=0` is set (unless already set) before a
communicator is created; the SHARP-style multicast reductions it enables are not used here.

The binding: `pip install 'funcgrad[nccl]'` (cupy-cuda13x; cupy-cuda12x for a CUDA 12 driver),
which brings NCCL through the nvidia-nccl wheel. NVIDIA's nccl4py would serve as well; this
module uses the one small surface (get_unique_id, NcclCommunicator and its allReduce,
allGather, reduceScatter, broadcast, abort, destroy) so that a second binding is one adapter.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool

INSTALL = ("NCCL collectives need CuPy's NCCL binding: pip install 'funcgrad[nccl]' (that is "
           "cupy-cuda13x, or cupy-cuda12x for CUDA 12; NCCL comes with the nvidia-nccl wheel)")
_nccl = None
_DTYPES = {"int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32",
           "uint32": "NCCL_UINT32", "int64": "NCCL_INT64", "uint64": "NCCL_UINT64",
           "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
           "bfloat16": "NCCL_BFLOAT16"}
_DTYPE_CODES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
                "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}   # ncclDataType_t
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "mean": 4}   # ncclRedOp_t (ncclAvg = 4)


def binding():
    """The `cupy.cuda.nccl` module; ImportError saying what to install when it is missing."""
    global _nccl
    if _nccl is None:
        if runtime.sim_requested():
            raise ImportError("NCCL does not run under numba's CUDA simulator "
                              "(NUMBA_ENABLE_CUDASIM=1): cross-process collectives need a GPU")
        try:
            with warnings.catch_warnings():   # CuPy's import-time notices are not ours to raise
                warnings.simplefilter("ignore")
                from cupy.cuda import nccl
        except Exception as e:   # noqa: BLE001 - ImportError, or CuPy failing to load libnccl
            raise ImportError(f"{INSTALL} ({type(e).__name__}: {e})") from None
        if not getattr(nccl, "available", True):
            raise ImportError(f"{INSTALL} (CuPy is installed but was built without NCCL)")
        _nccl = nccl
    return _nccl


def available() -> tuple[bool, str]:
    """(True, NCCL version) when a binding loads, else (False, why)."""
    try:
        nccl = binding()
        v = nccl.get_version()
    except ImportError as e:
        return False, str(e)
    return True, f"NCCL {v // 10000}.{v // 100 % 100}.{v % 100}"


def unique_id() -> list:
    """A new NCCL unique id as 128 ints in [0, 256) (JSON-able for the rendezvous). CuPy 14
    returns bytes, older CuPy a tuple of C chars (signed)."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    return [int(c) & 0xFF for c in binding().get_unique_id()]


def _dtype_code(dtype) -> int:
    name = np.dtype(dtype).name
    if name == "bool":
        name = "uint8"
    if name not in _DTYPE_CODES:
        raise TypeError(f"NCCL has no {name} type; collectives take (u)int8/32/64, float16, "
                        "bfloat16, float32 and float64 arrays")
    return getattr(_nccl, _DTYPES[name], _DTYPE_CODES[name])


def _ptr(buf: DeviceBuffer) -> int:
    if not buf.is_contiguous():
        raise ValueError(f"NCCL needs a contiguous buffer, got {buf}")
    return buf.block.ptr() + buf.offset * buf.dtype.itemsize


def stream_handle() -> int:
    """The raw handle of the stream funcgrad launches on now (0: the legacy default stream)."""
    s = runtime.stream()
    return 0 if isinstance(s, int) else int(s.handle)


class Communicator:
    """One rank of an NCCL communicator on this process's GPU.

    Example (one process, on a GPU with CuPy installed):
        >>> from funcgrad.cuda import arrays, nccl                       # doctest: +SKIP
        >>> comm = nccl.Communicator(nccl.unique_id(), nranks=1, rank=0)  # doctest: +SKIP
        >>> x = arrays.from_host(np.ones(4, np.float32))                  # doctest: +SKIP
        >>> arrays.to_host(comm.all_reduce(x, "mean"))                    # doctest: +SKIP
        array([1., 1., 1., 1.], dtype=float32)
    """

    def __init__(self, uid, nranks: int, rank: int):
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")   # before the communicator exists
        runtime.load()   # numba's context first: CuPy and NCCL then share the primary context
        nccl = binding()
        self.nranks, self.rank = int(nranks), int(rank)
        try:   # CuPy 14 takes the id as bytes
            self._comm = nccl.NcclCommunicator(self.nranks, bytes(uid), self.rank)
        except TypeError:   # older CuPy: a tuple of C chars
            self._comm = nccl.NcclCommunicator(
                self.nranks, tuple(c - 256 if c > 127 else c for c in uid), self.rank)
        self.aborted = False

    def _out(self, out, shape, dtype):
        if out is None:
            return pool().empty(shape, dtype)
        if tuple(out.shape) != tuple(shape) or out.dtype != np.dtype(dtype):
            raise ValueError(f"out= must be {np.dtype(dtype).name}{list(shape)}, got {out}")
        return out

    def _check(self):
        if self.aborted:
            raise RuntimeError("this NCCL communicator was aborted (a process of the job "
                               "failed)")

    def all_reduce(self, x: DeviceBuffer, op: str = "sum", out=None) -> DeviceBuffer:
        """Elementwise reduction over the ranks ("sum", "mean", "max", "min", "prod")."""
        self._check()
        if op not in OPS:
            raise ValueError(f"unknown reduction {op!r}; expected one of {sorted(OPS)}")
        out = self._out(out, x.shape, x.dtype)
        if x.size and not runtime.dry_run:
            self._comm.allReduce(_ptr(x), _ptr(out), x.size, _dtype_code(x.dtype), OPS[op],
                                 stream_handle())
        return out

    def all_gather(self, x: DeviceBuffer, out=None) -> DeviceBuffer:
        """Every rank's x stacked along a new leading axis of size nranks."""
        self._check()
        out = self._out(out, (self.nranks,) + tuple(x.shape), x.dtype)
        if x.size and not runtime.dry_run:
            self._comm.allGather(_ptr(x), _ptr(out), x.size, _dtype_code(x.dtype),
                                 stream_handle())
        return out

    def reduce_scatter(self, x: DeviceBuffer, op: str = "sum", out=None) -> DeviceBuffer:
        """Reduce over the ranks, rank r keeping block r of the leading axis (which must be
        divisible by nranks)."""
        self._check()
        if op not in OPS:
            raise ValueError(f"unknown reduction {op!r}; expected one of {sorted(OPS)}")
        if not x.shape or x.shape[0] % self.nranks:
            raise ValueError(f"reduce_scatter needs a leading axis divisible by the "
                             f"{self.nranks} processes, got shape {x.shape}")
        shape = (x.shape[0] // self.nranks,) + tuple(x.shape[1:])
        out = self._out(out, shape, x.dtype)
        if out.size and not runtime.dry_run:
            self._comm.reduceScatter(_ptr(x), _ptr(out), out.size, _dtype_code(x.dtype),
                                     OPS[op], stream_handle())
        return out

    def broadcast(self, x: DeviceBuffer, root: int = 0, out=None) -> DeviceBuffer:
        """Rank root's x on every rank."""
        self._check()
        if not 0 <= root < self.nranks:
            raise ValueError(f"root {root} is out of range for {self.nranks} processes")
        out = self._out(out, x.shape, x.dtype)
        if x.size and not runtime.dry_run:
            self._comm.broadcast(_ptr(x), _ptr(out), x.size, _dtype_code(x.dtype), root,
                                 stream_handle())
        return out

    def abort(self):
        """Abort every operation in flight (a peer failed); the communicator is then unusable."""
        self.aborted = True
        self._comm.abort()

    def destroy(self):
        if not self.aborted:
            self._comm.destroy()


def copy_into(dst: DeviceBuffer, dst_offset: int, src: DeviceBuffer):
    """Copy contiguous src into dst's elements [dst_offset, dst_offset + src.size) on the launch
    stream (one cuMemcpyDtoDAsync: capturable, no host synchronization)."""
    n = src.size * src.dtype.itemsize
    if not n or runtime.dry_run:
        return
    if runtime.SIM:
        d = dst.arr()
        d[dst.offset + dst_offset:dst.offset + dst_offset + src.size] = \
            src.arr()[src.offset:src.offset + src.size]
        return
    err = runtime.memcpy_dtod_async()(_ptr(dst) + dst_offset * dst.dtype.itemsize, _ptr(src), n,
                                      stream_handle())
    if err:
        raise RuntimeError(f"cuMemcpyDtoDAsync of {n} bytes failed (CUresult {err})")
