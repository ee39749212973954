"""Device buffers (strided views over pooled blocks) and the size-bucketed caching allocator.

A DeviceBuffer is (block, shape, strides, offset, dtype), strides and offset counted in elements,
so transpose, broadcast (stride 0), slice, reverse (negative strides) and contiguous reshapes are
views that launch nothing. Blocks come from a Pool: sizes are rounded up to a bucket (powers of
two up to 64 KiB, sixteenths of a power of two up to 32 MiB, then 2 MiB steps) and a block whose
last view dies goes back to its bucket's free list instead of to the driver, so a training loop in steady state allocates nothing new. All work
is queued on one stream (the legacy default stream), so handing a freed block to the next
allocation is ordered after every kernel that used it: the rule PyTorch's caching allocator
follows.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from funcgrad.cuda import h2d, runtime


class CudaOutOfMemoryError(MemoryError):
    """The device (or the pool's configured limit) has no room for an allocation."""


def c_strides(shape) -> tuple:
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return tuple(reversed(st))


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


class Raw:
    """One driver allocation (a uint8 device array) with typed 1-D views of all of it, cached."""
    __slots__ = ("_ptr", "dev", "nbytes", "views")

    def __init__(self, dev, nbytes):
        self.dev, self.nbytes, self.views = dev, nbytes, {}
        self._ptr = None

    def ptr(self) -> int:
        """The device address (asked of numba once: its array interface costs microseconds)."""
        if self._ptr is None:
            self._ptr = device_pointer(self.dev)
        return self._ptr

    def typed(self, dtype):
        v = self.views.get(dtype)
        if v is None:
            v = self.views[dtype] = self.dev.view(dtype)
        return v


class _DriverMemory:
    """Device memory from cuMemAlloc, freed when the last array over it dies.

    The pool allocates through the driver directly instead of numba's allocator: numba's
    device arrays reach numba-managed memory through weak proxies, and slicing an array whose
    proxy target was collected raised ReferenceError on real GPUs. Arrays made with
    from_cuda_array_interface(owner=this) hold plain references instead."""
    __slots__ = ("__weakref__", "ptr")

    def __init__(self, ptr: int):
        self.ptr = ptr

    def __del__(self):
        try:
            from cuda.bindings import driver as cb
            cb.cuMemFree(self.ptr)
        except Exception:   # interpreter shutdown: the context is gone already
            pass


def _device_alloc(cuda, nbytes: int):
    """A uint8 device array of nbytes (numba's allocator under the simulator)."""
    if runtime.SIM:
        return cuda.device_array(nbytes, dtype=np.uint8)
    from cuda.bindings import driver as cb
    cuda.current_context()  # make sure numba's (primary) context is current
    err, ptr = cb.cuMemAlloc(nbytes)
    if int(err) != 0:
        if err == cb.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            raise MemoryError(f"CUDA_ERROR_OUT_OF_MEMORY allocating {nbytes} bytes")
        raise RuntimeError(f"cuMemAlloc({nbytes}) failed: {err}")
    owner = _DriverMemory(int(ptr))
    return cuda.from_cuda_array_interface(
        {"shape": (nbytes,), "typestr": "|u1", "data": (int(ptr), False), "version": 3,
         "strides": None}, owner=owner, sync=False)


class Block:
    """A pool allocation in use; returns its Raw to the pool when the last view of it dies."""
    __slots__ = ("__weakref__", "pool", "raw")

    def __init__(self, raw, pool):
        self.raw, self.pool = raw, pool

    def typed(self, dtype):
        return self.raw.typed(dtype)

    def ptr(self) -> int:
        return self.raw.ptr()

    def __del__(self):
        try:
            self.pool.release(self.raw)
        except Exception:   # interpreter shutdown
            pass


class ExternalBlock:
    """Memory owned by someone else (DLPack / __cuda_array_interface__ imports)."""
    __slots__ = ("__weakref__", "_make", "arrays", "base_ptr", "owner")

    def __init__(self, make_typed, owner, base_ptr):
        self.arrays, self.owner, self.base_ptr = {}, owner, base_ptr
        self._make = make_typed

    def typed(self, dtype):
        v = self.arrays.get(dtype)
        if v is None:
            v = self.arrays[dtype] = self._make(dtype)
        return v

    def ptr(self) -> int:
        return self.base_ptr


def device_pointer(dev_array) -> int:
    if runtime.SIM:
        return dev_array._ary.ctypes.data
    return dev_array.__cuda_array_interface__["data"][0] or 0


class DeviceBuffer:
    """An immutable strided view of device memory (strides/offset in elements)."""
    __slots__ = ("__weakref__", "_contiguous", "block", "dtype", "offset", "shape", "strides")

    def __init__(self, block, shape, strides, offset, dtype):
        self.block, self.shape, self.strides = block, tuple(shape), tuple(strides)
        self.offset, self.dtype = int(offset), np.dtype(dtype)
        self._contiguous = None

    @classmethod
    def make(cls, block, shape: tuple, strides: tuple, offset: int, dtype, contiguous=None):
        """A view from already-normalized fields (the per-call path of graph replays)."""
        b = object.__new__(cls)
        b.block, b.shape, b.strides, b.offset, b.dtype = block, shape, strides, offset, dtype
        b._contiguous = contiguous
        return b

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        c = self._contiguous
        if c is None:
            c, acc = True, 1
            for n, s in zip(reversed(self.shape), reversed(self.strides)):
                if n != 1 and s != acc:
                    c = False
                    break
                acc *= n
            self._contiguous = c
        return c

    def arr(self):
        """The flat typed device array the offsets index into (bfloat16 and the float8 types:
        their bits, as uint16 / uint8: numba has no array type of ml_dtypes' floats)."""
        return self.block.typed(STORAGE.get(self.dtype, self.dtype))

    def view(self, shape, strides, offset) -> DeviceBuffer:
        return DeviceBuffer(self.block, shape, strides, offset, self.dtype)

    def __repr__(self):
        return (f"DeviceBuffer({self.dtype.name}{list(self.shape)}, strides={self.strides}, "
                f"offset={self.offset})")


class Pool:
    """Size-bucketed caching allocator over driver allocations."""

    def __init__(self):
        self.free: dict[int, list] = {}
        self.in_use = self.peak = self.cached = 0
        self.driver_allocs = self.driver_bytes = 0
        self.limit = None   # optional cap on driver bytes (tests, sharing a GPU)
        # Every Raw stays strongly reachable from the pool for as long as the pool holds it.
        # Otherwise a Block caught in a garbage cycle (a traceback, a traced closure) drags
        # its Raw and the driver memory into the same cyclic isolate: the collector then runs
        # the memory's finalizer (cuMemFree) even though Block.__del__ resurrects the Raw into
        # the free list, and the next user of that Raw writes freed memory.
        self.raws: dict[int, Raw] = {}

    @staticmethod
    def bucket(nbytes: int) -> int:
        """The block size for a request: powers of two up to 64 KiB, then multiples of a
        sixteenth of the next power of two (at most 12.5% over: a GPT's 2.4 MB weights took
        4 MiB blocks with power-of-two buckets), 2 MiB steps from 32 MiB."""
        if nbytes <= 1 << 16:
            return max(256, 1 << (max(nbytes, 1) - 1).bit_length())
        if nbytes <= 32 << 20:
            step = (1 << (nbytes - 1).bit_length()) // 16
        else:
            step = 2 << 20
        return -(-nbytes // step) * step

    def stats(self) -> dict:
        return {"in_use": self.in_use, "peak": self.peak, "pool": self.cached,
                "driver_allocs": self.driver_allocs, "driver_bytes": self.driver_bytes,
                "limit": self.limit,
                # the same figures under explicit names
                "in_use_bytes": self.in_use, "peak_bytes": self.peak, "pool_bytes": self.cached}

    def describe(self) -> str:
        return (f"in use {_fmt(self.in_use)}, cached in pool {_fmt(self.cached)}, peak "
                f"{_fmt(self.peak)}, held from driver {_fmt(self.driver_bytes)} in "
                f"{self.driver_allocs} allocations"
                + (f", limit {_fmt(self.limit)}" if self.limit is not None else ""))

    def alloc(self, nbytes: int) -> Block:
        b = self.bucket(nbytes)
        lst = self.free.get(b)
        if lst:
            raw = lst.pop()
            self.cached -= b
        else:
            raw = self._driver_alloc(b, nbytes)
        self.in_use += b
        self.peak = max(self.peak, self.in_use)
        return Block(raw, self)

    def release(self, raw):
        self.in_use -= raw.nbytes
        self.cached += raw.nbytes
        self.free.setdefault(raw.nbytes, []).append(raw)

    def empty_cache(self):
        """Give every cached (free) block back to the driver."""
        for lst in self.free.values():
            for raw in lst:
                self.driver_bytes -= raw.nbytes
                self.driver_allocs -= 1
                self.raws.pop(id(raw), None)
            lst.clear()
        self.cached = 0
        cuda = runtime.load()
        if not runtime.SIM:
            cuda.current_context().deallocations.clear()

    def _driver_alloc(self, b: int, requested: int) -> Raw:
        cuda = runtime.load()
        for attempt in (0, 1):
            if self.limit is not None and self.driver_bytes + b > self.limit:
                err = None
            else:
                try:
                    dev = _device_alloc(cuda, b)
                    break
                except Exception as e:  # CudaAPIError(CUDA_ERROR_OUT_OF_MEMORY) and friends
                    if "OUT_OF_MEMORY" not in str(e).upper() and not isinstance(e, MemoryError):
                        raise
                    err = e
            if attempt == 0 and self.cached:
                self.empty_cache()
                continue
            raise CudaOutOfMemoryError(
                f"CUDA out of memory: cannot allocate {_fmt(requested)} ({requested} bytes, "
                f"bucket {_fmt(b)}); pool: {self.describe()}"
                + (f"; driver said: {err}" if err is not None else "")) from None
        self.driver_allocs += 1
        self.driver_bytes += b
        raw = Raw(dev, b)
        self.raws[id(raw)] = raw
        return raw

    def empty(self, shape, dtype) -> DeviceBuffer:
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        blk = self.alloc(math.prod(shape) * dtype.itemsize)
        return DeviceBuffer(blk, shape, c_strides(shape), 0, dtype)


_pool = None
_base = None


def _storage() -> dict:
    from funcgrad.core.dtypes import STORAGE_ONLY_DTYPES, bfloat16
    return {bfloat16: np.dtype(np.uint16), **{d: np.dtype(np.uint8) for d in STORAGE_ONLY_DTYPES}}


# dtype -> the dtype of the typed view kernels index (the bits of ml_dtypes' floats)
STORAGE: dict = _storage()


def storage_dtype(dtype) -> np.dtype:
    """The numpy dtype a kernel sees for buffers of `dtype` (uint16 for bfloat16)."""
    d = np.dtype(dtype)
    return STORAGE.get(d, d)


def pool() -> Pool:
    """The pool allocations go to now (a plan's arena pool while a plan runs)."""
    global _pool, _base
    if _pool is None:
        _pool = _base = Pool()
    return _pool


def base_pool() -> Pool:
    """The process-wide pool (what pool() is outside plans)."""
    pool()
    return _base


# ---------------------------------------------------------------------------------------------
# host <-> device
# ---------------------------------------------------------------------------------------------

def from_host(a: np.ndarray) -> DeviceBuffer:
    """Copy a numpy array to the device (a broadcast array uploads only its core)."""
    a = np.asarray(a)
    if a.size and any(st == 0 and n > 1 for st, n in zip(a.strides, a.shape)):
        if all(st == 0 or n == 1 for st, n in zip(a.strides, a.shape)) and not any(
                a.reshape(-1)[:1].tobytes()):   # zeros: the cached zero constant
            c = const(0, a.dtype)
            return c.view(a.shape, (0,) * a.ndim, c.offset)
        core = from_host(a[tuple(slice(0, 1) if st == 0 else slice(None)
                                 for st in a.strides)].copy(order="C"))
        return core.view(a.shape, [0 if st == 0 else cs for st, cs in
                                   zip(a.strides, core.strides)], core.offset)
    if not a.flags.c_contiguous:
        a = a.copy(order="C")    # (np.ascontiguousarray would turn a 0-d array into 1-d)
    # a dry run (compile.py) has no memory of its own: host data goes to real memory
    buf = (base_pool() if runtime.dry_run else pool()).empty(a.shape, a.dtype)
    # small arrays go through pinned memory, not waiting for the GPU (not while capturing)
    queued = (a.size and not runtime.SIM and not runtime.dry_run and runtime._stream is None
              and h2d.put_async(runtime.load(), buf.block.ptr() + buf.offset * a.itemsize, a))
    if a.size and not queued:
        buf.arr()[:a.size].copy_to_device(a.reshape(-1).view(storage_dtype(a.dtype)))
    return buf


def to_host(buf: DeviceBuffer) -> np.ndarray:
    """Copy a contiguous buffer back to a numpy array."""
    if runtime.dry_run:   # nothing was computed (compile.dry_run): zeros, no device read
        return np.zeros(buf.shape, buf.dtype)
    out = np.empty(buf.shape, buf.dtype)
    n = buf.size
    if n and runtime.SIM:
        out.reshape(-1).view(storage_dtype(out.dtype))[...] = \
            buf.arr()[buf.offset:buf.offset + n].copy_to_host()
    elif n:   # one driver call: numba's slice + copy_to_host cost tens of microseconds
        from cuda.bindings import driver as cb
        (err,) = cb.cuMemcpyDtoH(out.ctypes.data, buf.block.ptr() + buf.offset * out.itemsize,
                                 n * out.itemsize)
        if int(err) != 0:
            raise RuntimeError(f"cuMemcpyDtoH of {n * out.itemsize} bytes failed: {err}")
    for check in runtime.after_sync:   # device checks of replayed graphs, now complete
        check()
    return out


_consts: dict = {}
_zero_blocks: weakref.WeakSet = weakref.WeakSet()   # blocks of cached constants of zero bytes


def const(value, dtype) -> DeviceBuffer:
    """A shape-() device buffer holding `value` (cached: buffers are immutable)."""
    a = np.asarray(value).astype(dtype).reshape(())
    key = (a.dtype.str, a.tobytes())
    b = _consts.get(key)
    if b is None:
        if len(_consts) >= 4096:
            _consts.clear()
            _zero_blocks.clear()   # (only blocks the cache holds stay unwritten: see zero_const)
        b = _consts[key] = from_host(a)
        if not any(key[1]):
            _zero_blocks.add(b.block)
    return b


def zero_const(buf: DeviceBuffer) -> bool:
    """Whether every element of `buf` reads one cached constant whose bytes are all zero (the
    broadcast views zeros() and zeros_like() make). A block the constant cache holds is never
    written: a plan writes a donated argument in place only when nothing else holds its block."""
    return (buf.offset == 0 and buf.block in _zero_blocks
            and all(st == 0 or n == 1 for st, n in zip(buf.strides, buf.shape)))


def zeros(shape, dtype) -> DeviceBuffer:
    """A new C-contiguous buffer of zeros, written by the driver (cuMemsetD8Async on the legacy
    stream, where eager work runs), not by a kernel."""
    if runtime.SIM:
        return from_host(np.zeros(shape, dtype))
    buf = pool().empty(shape, dtype)
    if buf.size:
        from cuda.bindings import driver as cb
        (err,) = cb.cuMemsetD8Async(buf.block.ptr(), 0, buf.size * buf.dtype.itemsize,
                                    cb.CUstream(0))
        if int(err) != 0:
            raise RuntimeError(f"cuMemsetD8Async of {buf.size * buf.dtype.itemsize} bytes "
                               f"failed: {err}")
    return buf


class using_pool:
    """Route allocations to `p` inside the block (a plan's memplan pools while it runs)."""

    def __init__(self, p: Pool):
        self.p = p

    def __enter__(self):
        global _pool
        self.prev, _pool = pool(), self.p
        return self.p

    def __exit__(self, *exc):
        global _pool
        _pool = self.prev
