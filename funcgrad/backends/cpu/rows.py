"""njit twins of the row primitives' numpy impls (softmax cross-entropy forward and backward),
equal to them bit for bit: exp and log stay numpy calls, the rest (row max, shifts, numpy's
pairwise row sums, the label gather and range check, the gradient) runs in njit kernels.

Each numpy impl is ~12 small numpy calls (90 us per C1 step for the pair at 128x10); the twin
is five calls. tests/test_cpu_engine.py checks the twins against funcgrad.prims.rows's impls.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from funcgrad import prims as P
from funcgrad.prims import rows as PR, rows_bwd as PB
from funcgrad.backends.cpu import kernels as cpu_kernels

ROWS = """
@njit(cache=True, nogil=True, error_model="numpy")
def shift(x, s):
    # s = x - max(x, axis=-1) (a NaN in a row makes its max NaN, as np.max)
    rows, n = x.shape
    for r in range(rows):
        m = x[r, 0]
        for j in range(1, n):
            v = x[r, j]
            if v > m or v != v:
                if m == m:
                    m = v
        for j in range(n):
            s[r, j] = x[r, j] - m


@njit(cache=True, nogil=True, error_model="numpy")
def pw0(a, r, lo, n):
    # numpy's pairwise_sum over a[r, lo:lo + n] for n <= 128 (numpy/_core/src/umath/
    # loops_utils.h); longer runs split in the pw<k> below (numba cannot cache recursion)
    if n < 8:
        res = {ft}(0)
        for i in range(n):
            res += a[r, lo + i]
        return res
    r0 = a[r, lo]
    r1 = a[r, lo + 1]
    r2 = a[r, lo + 2]
    r3 = a[r, lo + 3]
    r4 = a[r, lo + 4]
    r5 = a[r, lo + 5]
    r6 = a[r, lo + 6]
    r7 = a[r, lo + 7]
    i = 8
    while i < n - (n % 8):
        r0 += a[r, lo + i]
        r1 += a[r, lo + i + 1]
        r2 += a[r, lo + i + 2]
        r3 += a[r, lo + i + 3]
        r4 += a[r, lo + i + 4]
        r5 += a[r, lo + i + 5]
        r6 += a[r, lo + i + 6]
        r7 += a[r, lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[r, lo + i]
        i += 1
    return res

{levels}
@njit(cache=True, nogil=True, error_model="numpy")
def row_sums(e, tot):
    rows, n = e.shape
    for r in range(rows):   # the identity, then the pairwise sum (np.add.reduce's order)
        tot[r] = {ft}(0) + pw(e, r, 0, n)


@njit(cache=True, nogil=True, error_model="numpy")
def check_labels(labels, n):
    for i in range(labels.size):
        if labels[i] < 0 or labels[i] >= n:
            return i
    return -1


@njit(cache=True, nogil=True, error_model="numpy")
def xent_finish(logtot, s, labels, out):
    for r in range(out.size):
        out[r] = logtot[r] - s[r, labels[r]]


@njit(cache=True, nogil=True, error_model="numpy")
def row_mean(a, r, n):
    # np.mean of row r: the pairwise sum, divided by the count in float64 (numpy's true_divide
    # of the float32 sum by an intp count), rounded back
    return {ft}(float64({ft}(0) + pw(a, r, 0, n)) / n)


@njit(cache=True, nogil=True, error_model="numpy")
def row_stats(x, r, n, t, e, center):
    # (mean, 1 / sqrt(mean of squares + eps)) of row r, as the numpy impls round each step
    # (mean 0 for rms_norm); t is a [1, n] scratch row
    m = row_mean(x, r, n) if center else {ft}(0)
    for j in range(n):
        c = x[r, j] - m if center else x[r, j]
        t[0, j] = c * c
    return m, {ft}(1) / np.sqrt(row_mean(t, 0, n) + e)


@njit(cache=True, nogil=True, error_model="numpy")
def norm_fwd(x, scale, bias, eps, center, out):
    # layer_norm (center) / rms_norm of the rows of x, as the numpy impls round each step
    rows, n = x.shape
    t = np.empty((1, n), x.dtype)
    e = {ft}(eps)
    for r in range(rows):
        m, rstd = row_stats(x, r, n, t, e, center)
        for j in range(n):
            c = x[r, j] - m if center else x[r, j]
            if center:
                out[r, j] = c * rstd * scale[j] + bias[j]
            else:
                out[r, j] = c * rstd * scale[j]


@njit(cache=True, nogil=True, error_model="numpy")
def norm_bwd(x, scale, ct, eps, center, out):
    # layer_norm_bwd / rms_norm_bwd's packed [dx rows; dscale; (dbias)], the column sums
    # adding rows in order (numpy's order for a sum over axis 0)
    rows, n = x.shape
    t = np.empty((1, n), x.dtype)
    xh = np.empty((1, n), x.dtype)
    gs = np.empty((1, n), x.dtype)
    e = {ft}(eps)
    for r in range(rows):
        m, rstd = row_stats(x, r, n, t, e, center)
        for j in range(n):
            c = x[r, j] - m if center else x[r, j]
            xh[0, j] = c * rstd
            gs[0, j] = ct[r, j] * scale[j]
            t[0, j] = gs[0, j] * xh[0, j]
        m2 = row_mean(t, 0, n)
        mg = row_mean(gs, 0, n) if center else {ft}(0)
        for j in range(n):
            if center:
                out[r, j] = rstd * ((gs[0, j] - mg) - xh[0, j] * m2)
            else:
                out[r, j] = rstd * (gs[0, j] - xh[0, j] * m2)
            gx = ct[r, j] * xh[0, j]
            if r == 0:
                out[rows, j] = gx
                if center:
                    out[rows + 1, j] = ct[r, j]
            else:
                out[rows, j] = out[rows, j] + gx
                if center:
                    out[rows + 1, j] = out[rows + 1, j] + ct[r, j]


@njit(cache=True, nogil=True, error_model="numpy")
def xent_grad(e, labels, ct, out):
    rows, n = e.shape
    for r in range(rows):
        tot = {ft}(0) + pw(e, r, 0, n)
        for j in range(n):
            hit = {ft}(1) if j == labels[r] else {ft}(0)
            out[r, j] = ct[r] * (e[r, j] / tot - hit)
"""


LEVELS = 6   # rows of up to ~128 * 2^6 elements; longer ones keep the numpy impl

LEVEL = """
@njit(cache=True, nogil=True, error_model="numpy")
def pw{k}(a, r, lo, n):
    if n <= 128:
        return pw0(a, r, lo, n)
    n2 = n // 2
    n2 -= n2 % 8
    return pw{j}(a, r, lo, n2) + pw{j}(a, r, lo + n2, n - n2)
"""


def _depth(n: int) -> int:
    """Split levels of numpy's pairwise sum over n elements."""
    if n <= 128:
        return 0
    n2 = n // 2 - (n // 2) % 8
    return 1 + max(_depth(n2), _depth(n - n2))


def _mod(dtype):
    """The kernels for float32 or float64 rows (typed constants keep float32 float32)."""
    levels = "".join(LEVEL.format(k=k, j=k - 1) for k in range(1, LEVELS + 1))
    levels += f"\n\npw = pw{LEVELS}\n"
    src = ROWS.replace("{levels}", levels).replace("{ft}", np.dtype(dtype).name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cpu_kernels.module_from_source(src)


def _rows_ok(aval) -> bool:
    return (aval.dtype in (np.float32, np.float64) and aval.ndim >= 1 and aval.shape[-1] > 0
            and math.prod(aval.shape[:-1]) > 0 and _depth(aval.shape[-1]) <= LEVELS)


def rows_ok(aval) -> bool:
    """Whether the row kernels take arrays of this aval (float rows numpy sums pairwise)."""
    return _rows_ok(aval)


def row_sums_kernel(dtype):
    """njit row_sums(e, tot): tot[r] = np.sum(e[r]) bit for bit (numpy's pairwise order)."""
    return _mod(dtype).row_sums


def norm_into(x_aval, center, backward, eps):
    """f(x, scale, [bias | ct], out) equal to the numpy impl of layer_norm (center) or rms_norm,
    or of their backward (the packed [dx rows; dscale; (dbias)]), bit for bit; None where the
    kernels do not apply. An x that is not C-contiguous (numpy may sum its rows in another
    order) takes the numpy impl, run into `out`."""
    n = x_aval.shape[-1] if x_aval.ndim else 0
    if not _rows_ok(x_aval) or backward and n < 2:   # a column of one: numpy sums it pairwise
        return None
    m = _mod(x_aval.dtype)
    rows = math.prod(x_aval.shape[:-1])
    kernel = m.norm_bwd if backward else m.norm_fwd
    if backward:
        prim = PB.layer_norm_bwd_p if center else PB.rms_norm_bwd_p
    else:
        prim = PR.layer_norm_p if center else PR.rms_norm_p

    def into(x, scale, *rest):
        out = rest[-1]
        if not (x.flags.c_contiguous and all(a.flags.c_contiguous for a in rest[:-1])):
            out[...] = prim.impl(x, scale, *rest[:-1], eps=eps)
            return
        other = rest[0] if len(rest) == 2 else scale
        kernel(x.reshape(rows, n), scale, other.reshape(rows, n) if backward else other, eps,
               center, out.reshape(out.shape[0], n) if backward else out.reshape(rows, n))
    return into


def xent_into(x_aval):
    """f(x, labels, out) equal to softmax_xent's numpy impl, or None where it does not apply."""
    if not _rows_ok(x_aval):
        return None
    m = _mod(x_aval.dtype)
    n = x_aval.shape[-1]
    rows = math.prod(x_aval.shape[:-1])
    dt = x_aval.dtype

    def into(x, labels, out):
        lab = labels.reshape(rows)
        bad = m.check_labels(lab, n)
        if bad >= 0:
            raise P.IndexOutOfRange(f"softmax_xent: label {lab[bad]} is out of range for {n} "
                                    "classes")
        s = np.empty((rows, n), dt)
        m.shift(x.reshape(rows, n), s)
        e = np.exp(s)
        tot = np.empty(rows, dt)
        m.row_sums(e, tot)
        np.log(tot, out=tot)
        m.xent_finish(tot, s, lab, out.reshape(rows))
    return into


def xent_bwd_into(x_aval):
    """f(x, labels, ct, out) equal to softmax_xent_bwd's numpy impl, or None."""
    if not _rows_ok(x_aval):
        return None
    m = _mod(x_aval.dtype)
    n = x_aval.shape[-1]
    rows = math.prod(x_aval.shape[:-1])
    dt = x_aval.dtype

    def into(x, labels, ct, out):
        s = np.empty((rows, n), dt)
        m.shift(x.reshape(rows, n), s)
        np.exp(s, out=s)
        m.xent_grad(s, labels.reshape(rows), ct.reshape(rows), out.reshape(rows, n))
    return into
