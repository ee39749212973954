"""The warp-per-row kernels of funcgrad/cuda/rows.py called directly: the vector layout (runs of
4 or 2 contiguous elements a lane) and the scalar one picked by alignment, against the numpy
impls, on odd and aligned row lengths, operands at offset 0 and 1, R = 0 and 1, several rows a
warp, and the backward's accumulated dx rows (`acc`)."""
from __future__ import annotations


import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
from funcgrad.prims import rows as F
from funcgrad.prims import rows_bwd as FB

SIM = fcuda.simulator_active()
pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator")]

EPS = 1e-5
IMPLS = {"layer_norm": lambda x, s, b: F.layer_norm_p.impl(x, s, b, eps=EPS),
         "rms_norm": lambda x, s: F.rms_norm_p.impl(x, s, eps=EPS),
         "softmax": F.softmax_p.impl, "log_softmax": F.log_softmax_p.impl,
         "softmax_bwd": FB.softmax_bwd_p.impl, "log_softmax_bwd": FB.log_softmax_bwd_p.impl,
         "softmax_xent_bwd": FB.softmax_xent_bwd_p.impl,
         "layer_norm_bwd": lambda x, s, c: FB.layer_norm_bwd_p.impl(x, s, c, eps=EPS),
         "rms_norm_bwd": lambda x, s, c: FB.rms_norm_bwd_p.impl(x, s, c, eps=EPS)}


@pytest.fixture(scope="module", autouse=True)
def _fast_barriers(fast_barriers):
    """The simulator's short GIL slices (conftest) for every test here."""


def _dev(a, offset):
    """A device buffer equal to `a` whose first element sits `offset` elements into its block."""
    flat = np.concatenate([np.zeros(offset, a.dtype), a.ravel()])
    buf = funcgrad.device_put(flat, "cuda").buf
    strides = tuple(int(np.prod(a.shape[d + 1:])) for d in range(a.ndim))
    return buf.view(a.shape, strides, offset)


def _args(kind, R, N, dtype, rng):
    x = rng.standard_normal((R, N)).astype(dtype)
    col = (rng.standard_normal(N) + 1.5).astype(dtype)
    c = rng.standard_normal((R, N)).astype(dtype)
    if kind in ("softmax_bwd", "log_softmax_bwd"):
        y = F.softmax_p.impl(x) if kind == "softmax_bwd" else F.log_softmax_p.impl(x)
        return [y, c]
    if kind == "softmax_xent_bwd":
        return [x, rng.integers(0, max(N, 1), R).astype(np.int32),
                rng.standard_normal(R).astype(dtype)]
    return {"layer_norm": [x, col, rng.standard_normal(N).astype(dtype)], "rms_norm": [x, col],
            "layer_norm_bwd": [x, col, c], "rms_norm_bwd": [x, col, c]}.get(kind, [x])


def _check(kind, R, N, dtype, offset, acc=False, seed=0):
    from funcgrad.cuda import rows
    from funcgrad.cuda.arrays import to_host
    rng = np.random.default_rng(seed)
    args = _args(kind, R, N, dtype, rng)
    want = IMPLS[kind](*args)
    r = None
    if acc:
        r = rng.standard_normal((R, N)).astype(dtype)
        want = want.copy()
        want[:R] = (want[:R].astype(dtype) + r).astype(dtype)
    bufs = [_dev(a, offset) for a in args]
    got = rows.run(kind, bufs, want.shape, dtype, EPS if "norm" in kind else None,
                   acc=None if r is None else _dev(r, offset))
    tol = 1e-4 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(to_host(got), want, rtol=tol, atol=tol,
                               err_msg=f"{kind} R={R} N={N} {np.dtype(dtype).name} "
                                       f"offset={offset} acc={acc}")


# (R, N, offset): N multiple of 4 at offset 0 takes the vector layout, offset 1 and N not a
# multiple of 4 the scalar one. Each kind compiles two kernels (a kernel is keyed by its slots
# a lane, C): in the simulator (4 lanes a group) C = 4 and 1 or 2; on a GPU (32 lanes) the
# vector rows take 2 runs of 4 (C = 8, N in 228..256) and the scalar ones 8 slots, and R = 2100
# gives the norm backward 2 rows a warp (the last block partial; the simulator covers the prefetch).
CASES = ([(5, 8, 0), (5, 8, 1), (5, 7, 0), (1, 12, 0), (3, 6, 0), (2, 1, 0), (5, 20, 0)] if SIM
         else [(5, 232, 0), (5, 232, 1), (5, 231, 0), (1, 240, 0), (3, 230, 0), (2, 229, 0),
               (5, 256, 0), (2100, 244, 0)])


@pytest.mark.parametrize("kind", sorted(IMPLS))
def test_vector_and_scalar_layouts(kind):
    """Both layouts against the numpy impl; several rows a warp (R = 5 in the simulator: 2
    rows a group, the last group partial)."""
    from funcgrad.cuda import rows
    for R, N, off in CASES:
        _check(kind, R, N, np.float32, off)
    assert rows.vector_width(np.float32, 8, [_dev(np.zeros((2, 8), np.float32), 0)]) == 4
    assert rows.vector_width(np.float32, 8, [_dev(np.zeros((2, 8), np.float32), 1)]) == 1
    assert rows.vector_width(np.float32, 7, [_dev(np.zeros((2, 7), np.float32), 0)]) == 1


@pytest.mark.parametrize("kind", ["layer_norm_bwd", "softmax_xent_bwd"])
def test_float64_pairs_and_empty_rows(kind):
    """float64 runs of 2 (N even), odd N; R = 0 gives zero column sums (rms_norm_bwd is the
    same generated code less the centring: its float64 kernels are left out, two compiles
    fewer on a GPU)."""
    for R, N, off in [(3, 6, 0), (3, 6, 1), (4, 5, 0), (0, 4, 0)]:
        _check(kind, R, N, np.float64, off)


@pytest.mark.parametrize("kind, R, N, off", [("layer_norm_bwd", 5, 8, 0),
                                             ("rms_norm_bwd", 3, 7, 1)])
def test_accumulated_dx_rows(kind, R, N, off):
    """acc: the dx rows stored are out(dx) + r, the column sums below them unchanged; the
    vector layout on layer_norm_bwd, the scalar one on rms_norm_bwd (a kernel each)."""
    _check(kind, R, N, np.float32, off, acc=True)
