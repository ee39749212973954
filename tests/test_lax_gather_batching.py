"""lax.gather / scatter with operand batching dims: loop references, jax.lax (when importable),
gradients, vmap and jit."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
from funcgrad import lax
from funcgrad.test_util import check_grads


@st.composite
def cases(draw):
    """A random gather with 0-2 operand batching dims paired with index batch dims."""
    nd = draw(st.integers(1, 4))
    shape = list(draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd)))
    perm = draw(st.permutations(range(nd)))
    n_b = draw(st.integers(0, min(2, nd)))
    op_b = tuple(sorted(perm[:n_b]))   # JAX wants them sorted
    rest = perm[n_b:]
    index_map = tuple(rest[:draw(st.integers(0, len(rest)))])
    collapsed = tuple(sorted(d for d in index_map if draw(st.booleans())))
    sizes = tuple(1 if d in collapsed or d in op_b else draw(st.integers(0, shape[d]))
                  for d in range(nd))
    extra = draw(st.lists(st.integers(0, 3), max_size=2))
    nbatch = n_b + len(extra)
    ib_pos = draw(st.permutations(range(nbatch)))
    idx_b = tuple(ib_pos[:n_b])
    batch = [0] * nbatch
    for d, b in zip(op_b, idx_b):
        batch[b] = shape[d]
    for b, n in zip(ib_pos[n_b:], extra):
        batch[b] = n
    keep = nd - len(collapsed) - n_b
    offset_dims = tuple(sorted(draw(st.permutations(range(nbatch + keep)))[:keep]))
    seed = draw(st.integers(0, 2**16))
    return (tuple(shape), index_map, collapsed, sizes, tuple(batch), offset_dims, op_b, idx_b,
            seed)


def _start(shape, iv, index_map, sizes):
    start, ok = [0] * len(shape), True
    for k, d in enumerate(index_map):
        s, hi = int(iv[k]), shape[d] - sizes[d]
        ok = ok and 0 <= s <= hi
        start[d] = min(max(s, 0), max(hi, 0))
    return start, ok


def ref_gather(x, idx, dn, sizes, mode):
    """One slice per index vector, its batching dims at the index batch coordinates."""
    batch = idx.shape[:-1]
    gone = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    keep = [d for d in range(x.ndim) if d not in gone]
    out = np.empty(batch + tuple(sizes[d] for d in keep), x.dtype)
    for b in np.ndindex(*batch):
        start, ok = _start(x.shape, idx[b], dn.start_index_map, sizes)
        for d, ib in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            start[d] = b[ib]
        sl = x[tuple(slice(s, s + n) for s, n in zip(start, sizes))]
        out[b] = sl.reshape([sizes[d] for d in keep]) if ok or mode == "clip" else np.nan
    rank = len(batch) + len(keep)
    bpos = [p for p in range(rank) if p not in dn.offset_dims]
    order = [0] * rank
    for i, p in enumerate(bpos):
        order[p] = i
    for j, p in enumerate(dn.offset_dims):
        order[p] = len(batch) + j
    return np.transpose(out, order)


def ref_scatter_add(x, idx, u, dn, mode):
    out = x.copy()
    gone = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
    win = [d for d in range(x.ndim) if d not in gone]
    ub = [a for a in range(u.ndim) if a not in dn.update_window_dims]
    sizes = [1] * x.ndim
    for d, a in zip(win, dn.update_window_dims):
        sizes[d] = u.shape[a]
    ut = np.transpose(u, ub + list(dn.update_window_dims)).reshape(idx.shape[:-1] + tuple(sizes))
    for b in np.ndindex(*idx.shape[:-1]):
        start, ok = _start(x.shape, idx[b], dn.scatter_dims_to_operand_dims, sizes)
        for d, ib in zip(dn.operand_batching_dims, dn.scatter_indices_batching_dims):
            start[d] = b[ib]
        if not ok and mode == "fill":
            continue
        for w in np.ndindex(*sizes):
            p = tuple(s + o for s, o in zip(start, w))
            out[p] += ut[b + w]
    return out


def _dns(case, mod):
    _, index_map, collapsed, _, _, offset_dims, op_b, idx_b, _ = case
    g = mod.GatherDimensionNumbers(offset_dims, collapsed, index_map, op_b, idx_b)
    s = mod.ScatterDimensionNumbers(offset_dims, collapsed, index_map, op_b, idx_b)
    return g, s


def _data(case):
    shape, index_map, _, _, batch, _, _, _, seed = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    idx = rng.integers(-1, max(shape) + 1, batch + (len(index_map),))
    return rng, x, idx


@settings(deadline=None)
@given(cases(), st.sampled_from(["clip", "fill"]))
def test_batching_dims_match_loop_references(case, mode):
    sizes = case[3]
    rng, x, idx = _data(case)
    dn, sdn = _dns(case, lax)
    got = np.asarray(lax.gather(x, idx, dn, sizes, mode=mode))
    want = ref_gather(x, idx, dn, sizes, mode)
    np.testing.assert_allclose(got, want, equal_nan=True)
    u = rng.standard_normal(want.shape)
    np.testing.assert_allclose(np.asarray(lax.scatter_add(x, idx, u, sdn, mode=mode)),
                               ref_scatter_add(x, idx, u, sdn, mode), rtol=1e-12)


@settings(deadline=None, max_examples=25)
@given(cases(), st.sampled_from(["clip", "fill"]))
def test_batching_dims_match_jax(case, mode):
    jax = pytest.importorskip("jax")
    sizes = case[3]
    rng, x, idx = _data(case)
    dn, sdn = _dns(case, lax)
    jdn, jsdn = _dns(case, jax.lax)
    want = np.asarray(jax.lax.gather(x.astype(np.float32), idx.astype(np.int32), jdn, sizes,
                                     mode=mode))
    got = np.asarray(lax.gather(x.astype(np.float32), idx.astype(np.int32), dn, sizes,
                                mode=mode))
    np.testing.assert_allclose(got, want, equal_nan=True)
    u = rng.standard_normal(want.shape).astype(np.float32)
    for name in ("scatter", "scatter_add", "scatter_max"):
        if name == "scatter" and mode == "fill" and idx.size:
            continue   # repeated positions keep an unspecified update
        a = getattr(lax, name)(x.astype(np.float32), idx.astype(np.int32), u, sdn, mode=mode)
        b = getattr(jax.lax, name)(x.astype(np.float32), idx.astype(np.int32), u, jsdn,
                                   mode=mode)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


def _take_rows():
    """A per-example row gather: x (B, N, D), idx (B, K, 1) -> (B, K, D)."""
    dn = lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1,),
                                    start_index_map=(1,), operand_batching_dims=(0,),
                                    start_indices_batching_dims=(0,))
    sdn = lax.ScatterDimensionNumbers(update_window_dims=(2,), inserted_window_dims=(1,),
                                      scatter_dims_to_operand_dims=(1,),
                                      operand_batching_dims=(0,),
                                      scatter_indices_batching_dims=(0,))
    return dn, sdn


def test_batching_dims_gradients_vmap_and_jit(rng):
    dn, sdn = _take_rows()
    x = rng.standard_normal((3, 5, 4))
    idx = np.array([[[1], [4]], [[0], [0]], [[3], [2]]])
    want = np.stack([x[b, idx[b, :, 0]] for b in range(3)])
    np.testing.assert_allclose(np.asarray(lax.gather(x, idx, dn, (1, 1, 4))), want)
    f = funcgrad.jit(lambda x, i: lax.gather(x, i, dn, (1, 1, 4)))
    np.testing.assert_allclose(np.asarray(f(x, idx)), want)
    v = funcgrad.vmap(lambda x, i: lax.gather(x, i, dn, (1, 1, 4)))(x[None], idx[None])
    np.testing.assert_allclose(np.asarray(v)[0], want)
    check_grads(lambda x: lax.gather(x, idx, dn, (1, 1, 4)) ** 2, (x,), order=2)
    u = rng.standard_normal((3, 2, 4))
    check_grads(lambda x, u: lax.scatter_add(x, idx, u, sdn) ** 2, (x, u), order=2)
    g = funcgrad.grad(lambda x: lax.gather(x, idx, dn, (1, 1, 4)).sum())(x)
    np.testing.assert_allclose(np.asarray(g), ref_scatter_add(np.zeros_like(x), idx,
                                                              np.ones((3, 2, 4)), sdn, "fill"))


def test_batching_dims_errors_name_the_shapes():
    dn, _ = _take_rows()
    with pytest.raises(ValueError, match=r"batching dim 0 of \(2, 5, 4\) has size 2"):
        lax.gather(np.zeros((2, 5, 4)), np.zeros((3, 2, 1), int), dn, (1, 1, 4))
    bad = dn._replace(start_indices_batching_dims=(0, 1))
    with pytest.raises(ValueError, match="same length"):
        lax.gather(np.zeros((3, 5, 4)), np.zeros((3, 2, 1), int), bad, (1, 1, 4))
    bad = dn._replace(operand_batching_dims=(1,))
    with pytest.raises(ValueError, match="outside the index map"):
        lax.gather(np.zeros((3, 3, 4)), np.zeros((3, 2, 1), int), bad, (1, 1, 4))
