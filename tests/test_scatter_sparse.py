"""scatter / scatter_add on CUDA (funcgrad/cuda/gather.py): the sparse path (few updates into a
large target: a copy, a stable sort of the indices, runs combined in position order), the dense
path's multi-block scan, their choice by sizes, and the gradients that use them (take's and
take_along_axis's VJPs, dynamic_update_slice), against numpy, bit for bit where numpy's order
is defined."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import lax, nn, prims
from funcgrad.core import bind

SIM = fcuda.simulator_active()
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not fcuda.usable(), reason="no GPU and no CUDA simulator"),
]


@pytest.fixture(scope="module", autouse=True)
def _fast(fast_barriers):
    yield


def cu(x):
    return funcgrad.device_put(np.asarray(x), "cuda")


def _gather():
    from funcgrad.cuda import gather
    return gather


@pytest.fixture(params=["rank", "radix"])
def sort(request, monkeypatch):
    """Both sorts of the sparse path: by comparison, and LSD radix (forced by a threshold 0)."""
    if request.param == "radix":
        monkeypatch.setattr(_gather(), "RANK_SORT_MAX", 0)
    return request.param


def _numpy_scatter(x, idx, upd, axis, add):
    out = x.copy()
    moved = np.moveaxis(out, axis, 0)
    u = np.moveaxis(upd.reshape(x.shape[:axis] + (idx.size,) + x.shape[axis + 1:]), axis, 0)
    if add:
        np.add.at(moved, idx.reshape(-1), u)
    else:
        moved[idx.reshape(-1)] = u
    return out


# (x shape, axis, number of indices): N > NI, so the sparse path; 0- and 1-sized dims included
SPARSE = [((40,), 0, 5), ((30, 2), 0, 20), ((3, 50, 2), 1, 9), ((50, 1), 0, 1), ((1, 60), 1, 3),
          ((200,), 0, 70), ((25, 0), 0, 4), ((0, 25), 1, 4)]


@pytest.mark.parametrize("shape,axis,ni", SPARSE)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_scatter_matches_numpy(shape, axis, ni, dtype, sort):
    n = shape[axis]
    assert _gather().path(ni, n) == "sparse"
    rng = np.random.default_rng(ni + n)
    idx = rng.integers(-n, n, ni).astype(np.int32)
    idx[: min(3, ni)] = idx[0]                      # a run of repeats
    idx[ni // 2:] = np.sort(idx[ni // 2:])[::-1]    # and equal indices far apart
    ushape = shape[:axis] + (ni,) + shape[axis + 1:]
    upd = (rng.standard_normal(ushape) * 10.0 ** rng.integers(-3, 4, ushape)).astype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    for add, prim in ((True, prims.scatter_add_p), (False, prims.scatter_p)):
        want = _numpy_scatter(x, idx, upd, axis, add)
        got = np.asarray(bind(prim, cu(x), cu(idx), cu(upd), axis=axis))
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes(), (add, got, want)


def test_sparse_scatter_into_broadcast_zeros(sort):
    """The VJP's target, zeros_like(x), is copied from its broadcast view (a fill)."""
    rng = np.random.default_rng(1)
    idx = np.array([5, 0, 5, 37, 5, 0], np.int64)
    upd = rng.standard_normal(6).astype(np.float32)
    want = np.zeros(40, np.float32)
    np.add.at(want, idx, upd)
    z = fnp.zeros_like(cu(np.ones(40, np.float32)))
    got = bind(prims.scatter_add_p, z, cu(idx), cu(upd), axis=0)
    assert np.asarray(got).tobytes() == want.tobytes()


@pytest.mark.parametrize("n,ni", [(7, 40), (1, 1), (1, 9), (30, 60), (40, 40)])
def test_dense_scatter_matches_numpy(n, ni):
    """N <= NI keeps the CSR path, whose counts scan now runs on many blocks."""
    assert _gather().path(ni, n) == "dense"
    rng = np.random.default_rng(n * ni)
    idx = rng.integers(-n, n, ni).astype(np.int32)
    upd = rng.standard_normal((ni, 2)).astype(np.float32)
    x = rng.standard_normal((n, 2)).astype(np.float32)
    for add, prim in ((True, prims.scatter_add_p), (False, prims.scatter_p)):
        want = _numpy_scatter(x, idx, upd, 0, add)
        got = np.asarray(bind(prim, cu(x), cu(idx), cu(upd), axis=0))
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 300])
def test_scan_is_exclusive_on_many_blocks(n):
    from funcgrad.cuda.arrays import from_host, to_host
    a = np.random.default_rng(n).integers(0, 50, n).astype(np.int64)
    buf = from_host(a)
    _gather().scan(buf, n)
    want = np.concatenate([[0], np.cumsum(a)[:-1]])
    np.testing.assert_array_equal(to_host(buf), want)


@pytest.mark.parametrize("bad", [[3, 40], [-41], [1, 2, 99, 7, 0, 0]])
def test_sparse_out_of_range_raises(bad, sort):
    x = cu(np.zeros((40, 2), np.float32))
    idx = cu(np.array(bad, np.int32))
    upd = cu(np.ones((len(bad), 2), np.float32))
    assert _gather().path(len(bad), 40) == "sparse"
    with pytest.raises(IndexError, match=r"scatter_add: index .* out of bounds for an axis of "
                                         r"size 40 \(\d+ of \d+ indices"):
        bind(prims.scatter_add_p, x, idx, upd, axis=0)
    with pytest.raises(IndexError, match="scatter: index .* size 40"):
        bind(prims.scatter_p, x, idx, upd, axis=0)


def test_embedding_gradient(sort):
    """take's VJP (a table of V rows, token ids with repeats) is a sparse scatter_add."""
    rng = np.random.default_rng(2)
    V, D, ids = 50, 3, np.array([[4, 4, 17, 0], [49, 4, 0, 31]], np.int32)
    w = rng.standard_normal((V, D)).astype(np.float32)
    c = rng.standard_normal((2, 4, D)).astype(np.float32)

    def loss(w, ids, c):
        return (fnp.take(w, ids, axis=0) * c).sum()
    g = funcgrad.grad(loss)(cu(w), cu(ids), cu(c))
    want = np.zeros_like(w)
    np.add.at(want, ids.reshape(-1), c.reshape(-1, D))
    assert g.device == "cuda"
    np.testing.assert_array_equal(np.asarray(g), want)


def test_take_along_axis_gradient(sort):
    """The picked-logit gradient (scatter_add into zeros of the flattened logits)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 7)).astype(np.float32)
    tgt = np.array([[1, 6], [-1, 1], [0, 0]], np.int32)
    c = rng.standard_normal((3, 2)).astype(np.float32)

    def f(x, tgt, c):
        return (fnp.take_along_axis(x, tgt[..., None], axis=-1)[..., 0] * c).sum()
    g = funcgrad.grad(f)(cu(x), cu(tgt), cu(c))
    want = np.zeros_like(x)
    np.put_along_axis(want, (tgt % 7)[..., None], c[..., None], axis=-1)
    np.testing.assert_array_equal(np.asarray(g), want)


def test_dynamic_update_slice_values_and_gradient():
    """D1's KV-cache update: a few rows set into a large cache, and its gradient."""
    rng = np.random.default_rng(4)
    cache = rng.standard_normal((2, 9, 3)).astype(np.float32)
    new = rng.standard_normal((2, 1, 3)).astype(np.float32)
    want = cache.copy()
    want[:, 5:6] = new
    got = lax.dynamic_update_slice(cu(cache), cu(new), (0, 5, 0))
    np.testing.assert_array_equal(np.asarray(got), want)
    w = rng.standard_normal(cache.shape).astype(np.float32)

    def f(cache, new):
        return (lax.dynamic_update_slice(cache, new, (0, 5, 0)) * w).sum()
    gc, gn = funcgrad.grad(f, argnums=(0, 1))(cu(cache), cu(new))
    wc = w.copy()
    wc[:, 5:6] = 0
    np.testing.assert_array_equal(np.asarray(gc), wc)
    np.testing.assert_array_equal(np.asarray(gn), w[:, 5:6])


def test_path_choice_pinned():
    """S1 / S2 / D1 sizes take the sparse path; N <= NI with a small table stays dense."""
    path = _gather().path
    assert path(8 * 1024, 8 * 1024 * 50304) == "sparse"   # S1: picked-logit gradient
    assert path(8 * 1024, 50304) == "sparse"              # S1: embedding gradient
    assert path(64 * 1024, 50304) == "sparse"             # 64k tokens: table too large
    assert path(768, 786432) == "sparse"                  # D1: KV-cache update
    assert path(100000, 7) == "dense" and path(4096, 4096) == "dense"


def test_s1_like_plan_uses_the_sparse_path(monkeypatch):
    """A tiny S1-like jitted step (embedding, logits over a vocabulary larger than the token
    count, the cross-entropy as users write it) plans the sparse scatter and no CSR kernels."""
    from funcgrad.cuda import runtime
    keys = []
    real = runtime.kernel

    def record(key, make, *a, **k):
        keys.append(key[0])
        return real(key, make, *a, **k)
    monkeypatch.setattr(runtime, "kernel", record)
    rng = np.random.default_rng(5)
    V, D, B, T = 24, 4, 2, 3
    p = {"wte": cu(rng.standard_normal((V, D)).astype(np.float32) * 0.1)}
    idx = cu(rng.integers(0, V, (B, T)).astype(np.int32))
    tgt = cu(rng.integers(0, V, (B, T)).astype(np.int32))

    def loss(p, idx, tgt):
        logits = fnp.take(p["wte"], idx, axis=0) @ p["wte"].T
        return fnp.mean(nn.logsumexp(logits, axis=-1)
                        - fnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0])
    step = funcgrad.jit(funcgrad.value_and_grad(loss))
    val, g = step(p, idx, tgt)
    assert "scatter_sparse" in keys, keys
    assert "csr_rank" not in keys and "scatter" not in keys, keys
    assert np.isfinite(float(val)) and np.asarray(g["wte"]).shape == (V, D)
