"""The linalg primitives on the device: one thread per matrix (kernels in linalg_kernels.py).

Each lowering makes its operands contiguous, allocates the packed result (and any scratch) from
the pool, and launches a grid-stride kernel over the batch. Correctness over speed: the kernels
suit the many-small-matrices shapes of batched linear algebra, not one large matrix.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad.compile import switches
from funcgrad.cuda import linalg_kernels as K
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, from_host, pool, to_host
from funcgrad.cuda.elementwise import compute_t, contiguous
from funcgrad.prims import linalg as LP
from funcgrad.prims import linalg_spectral as LS

# see qr(): the kernel is exercised by the simulator; set True to run it on a real GPU
QR_KERNEL_ON_GPU = False
switches.register(__name__, "QR_KERNEL_ON_GPU")   # a change keys jit's shared cache apart


def _source(body: str, dtype) -> str:
    dt = np.dtype(dtype)
    fi = np.finfo(dt)
    fmt = dict(opts=runtime.jit_opts(), ct=compute_t(dt), eps=repr(float(fi.eps)),
               tiny=repr(float(fi.tiny) * 16))
    return K.FIX_SIGNS.format(**fmt) + "\n" + body.format(**fmt)


def _kernel(name: str, body: str, dtype):
    return runtime.kernel(("linalg", name, np.dtype(dtype).name), lambda: _source(body, dtype))


def _launch(name, body, dtype, items, args):
    """Launch over `items` threads; args() builds the arguments (not called when empty)."""
    if items:
        blocks, threads = runtime.grid_1d(items)
        _kernel(name, body, dtype)[blocks, threads, runtime.stream()](*args())


def _batch(shape) -> int:
    return math.prod(shape[:-2])


def cholesky(a: DeviceBuffer, aval) -> DeviceBuffer:
    a = contiguous(a)
    out = pool().empty(aval.shape, aval.dtype)
    _launch("cholesky", K.CHOLESKY, a.dtype, _batch(a.shape) if a.size else 0,
            lambda: (a.arr(), a.offset, out.arr(), _batch(a.shape), a.shape[-1]))
    return out


def triangular_solve(a, b, aval, lower, transpose_a, unit_diagonal) -> DeviceBuffer:
    a, b = contiguous(a), contiguous(b)
    out = pool().empty(aval.shape, aval.dtype)
    nb, m, nc = _batch(b.shape), b.shape[-2], b.shape[-1]
    _launch("trisolve", K.TRISOLVE, b.dtype, nb * nc if m else 0,
            lambda: (a.arr(), a.offset, b.arr(), b.offset, out.arr(), nb, m, nc, int(lower),
                     int(transpose_a), int(unit_diagonal)))
    return out


def lu(a: DeviceBuffer, aval) -> DeviceBuffer:
    a = contiguous(a)
    out = pool().empty(aval.shape, aval.dtype)
    _launch("lu", K.LU, a.dtype, _batch(a.shape) if a.shape[-1] else 0,
            lambda: (a.arr(), a.offset, out.arr(), _batch(a.shape), a.shape[-1]))
    return out


def qr(a: DeviceBuffer, aval, full_matrices) -> DeviceBuffer:
    a = contiguous(a)
    if not runtime.SIM and not QR_KERNEL_ON_GPU:
        # The Householder kernel below gives a wrong R (and Q R != A) on a real H200 with
        # numba-cuda 0.30.4 in every formulation tried (2026-11-24), while numba's CPU compiler
        # and the simulator run the same source right; until that is understood, real GPUs
        # take numpy's QR through the host (a synchronizing copy: no CUDA graph for such a step)
        host = LS.qr_p.impl(to_host(a), full_matrices=full_matrices)
        return from_host(np.ascontiguousarray(np.asarray(host).astype(aval.dtype)))
    m, n = a.shape[-2:]
    k = aval.shape[-1] - n
    nb = _batch(a.shape)
    out = pool().empty(aval.shape, aval.dtype)
    tau = pool().empty((max(nb * min(m, n), 1),), aval.dtype)
    _launch("qr", K.QR, a.dtype, nb if out.size else 0,
            lambda: (a.arr(), a.offset, out.arr(), tau.arr(), nb, m, n, k))
    return out


def eigh(a: DeviceBuffer, aval, lower) -> DeviceBuffer:
    a = contiguous(a)
    n, nb = a.shape[-1], _batch(a.shape)
    out = pool().empty(aval.shape, aval.dtype)
    work = pool().empty((max(nb * n * n, 1),), aval.dtype)
    _launch("eigh", K.EIGH, a.dtype, nb if n else 0,
            lambda: (a.arr(), a.offset, out.arr(), work.arr(), nb, n, int(lower)))
    return out


def svd(a: DeviceBuffer, aval) -> DeviceBuffer:
    a = contiguous(a)
    m, n = a.shape[-2:]
    nb, k = _batch(a.shape), min(m, n)
    out = pool().empty(aval.shape, aval.dtype)
    work = pool().empty((max(nb * max(m, n) * k, 1),), aval.dtype)
    acc = pool().empty((max(nb * k * k, 1),), aval.dtype)
    _launch("svd", K.SVD, a.dtype, nb if k else 0,
            lambda: (a.arr(), a.offset, out.arr(), work.arr(), acc.arr(), nb, m, n))
    return out


LOWERINGS = {
    LP.cholesky_p: lambda bufs, params, aval: cholesky(bufs[0], aval),
    LP.triangular_solve_p: lambda bufs, params, aval: triangular_solve(
        bufs[0], bufs[1], aval, params["lower"], params["transpose_a"],
        params["unit_diagonal"]),
    LP.lu_p: lambda bufs, params, aval: lu(bufs[0], aval),
    LS.qr_p: lambda bufs, params, aval: qr(bufs[0], aval, params["full_matrices"]),
    LS.eigh_p: lambda bufs, params, aval: eigh(bufs[0], aval, params["lower"]),
    LS.svd_p: lambda bufs, params, aval: svd(bufs[0], aval),
}
