"""lax.gather / lax.scatter* with XLA dimension numbers against loop references in numpy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad
from funcgrad import lax
from funcgrad.test_util import check_grads


def _start(shape, iv, index_map, sizes, mode):
    """(start per operand dim, in bounds) for one index vector (JAX's clip / fill rules)."""
    start, ok = [0] * len(shape), True
    for k, d in enumerate(index_map):
        s, hi = int(iv[k]), shape[d] - sizes[d]
        ok = ok and 0 <= s <= hi
        start[d] = min(max(s, 0), max(hi, 0))
    return start, ok


def ref_gather(x, idx, dn, sizes, mode, fill):
    batch = idx.shape[:-1]
    keep = [d for d in range(x.ndim) if d not in dn.collapsed_slice_dims]
    out = np.empty(batch + tuple(sizes[d] for d in keep), x.dtype)
    for b in np.ndindex(*batch):
        start, ok = _start(x.shape, idx[b], dn.start_index_map, sizes, mode)
        sl = x[tuple(slice(s, s + n) for s, n in zip(start, sizes))]
        sl = sl.reshape([sizes[d] for d in keep])
        out[b] = sl if ok or mode == "clip" else fill
    rank = len(batch) + len(keep)
    bpos = [p for p in range(rank) if p not in dn.offset_dims]
    order = [0] * rank
    for i, p in enumerate(bpos):
        order[p] = i
    for j, p in enumerate(dn.offset_dims):
        order[p] = len(batch) + j
    return np.transpose(out, order)


def ref_scatter(x, idx, u, dn, mode, op):
    out = x.copy()
    win = [d for d in range(x.ndim) if d not in dn.inserted_window_dims]
    ub = [a for a in range(u.ndim) if a not in dn.update_window_dims]
    sizes = [1] * x.ndim
    for d, a in zip(win, dn.update_window_dims):
        sizes[d] = u.shape[a]
    ut = np.transpose(u, ub + list(dn.update_window_dims)).reshape(idx.shape[:-1] + tuple(sizes))
    for b in np.ndindex(*idx.shape[:-1]):
        start, ok = _start(x.shape, idx[b], dn.scatter_dims_to_operand_dims, sizes, mode)
        if not ok and mode == "fill":
            continue
        for w in np.ndindex(*sizes):
            p = tuple(s + o for s, o in zip(start, w))
            out[p] = op(out[p], ut[b + w])
    return out


@st.composite
def cases(draw):
    nd = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=nd, max_size=nd)))
    k = draw(st.integers(1, nd))
    index_map = tuple(draw(st.permutations(range(nd)))[:k])
    collapsed = tuple(sorted(d for d in index_map if draw(st.booleans())))
    sizes = [1 if d in collapsed else draw(st.integers(0, shape[d])) for d in range(nd)]
    batch = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    seed = draw(st.integers(0, 2**16))
    rank = len(batch) + nd - len(collapsed)
    offset_dims = tuple(sorted(draw(st.permutations(range(rank)))[:nd - len(collapsed)]))
    return shape, index_map, collapsed, tuple(sizes), batch, offset_dims, seed


@settings(deadline=None)
@given(cases(), st.sampled_from(["clip", "fill"]))
def test_gather_and_scatters_match_loop_references(case, mode):
    shape, index_map, collapsed, sizes, batch, offset_dims, seed = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    idx = rng.integers(-2, max(shape) + 2, batch + (len(index_map),))
    dn = lax.GatherDimensionNumbers(offset_dims, collapsed, index_map)
    got = np.asarray(lax.gather(x, idx, dn, sizes, mode=mode))
    want = ref_gather(x, idx, dn, sizes, mode, np.nan)
    np.testing.assert_allclose(got, want, equal_nan=True)
    sdn = lax.ScatterDimensionNumbers(offset_dims, collapsed, index_map)
    u = rng.standard_normal(want.shape)
    for fn, op in [(lax.scatter_add, np.add), (lax.scatter_max, np.maximum),
                   (lax.scatter_min, np.minimum), (lax.scatter_mul, np.multiply)]:
        np.testing.assert_allclose(np.asarray(fn(x, idx, u, sdn, mode=mode)),
                                   ref_scatter(x, idx, u, sdn, mode, op), rtol=1e-12)


def test_take_rows_fill_values_jit_vmap_and_gradients():
    x = np.arange(12.0).reshape(3, 4)
    dn = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(0,),
                                    start_index_map=(0,))
    idx = np.array([[2], [0], [5]])
    out = np.asarray(lax.gather(x, idx, dn, (1, 4)))
    np.testing.assert_array_equal(out[:2], x[[2, 0]])
    assert np.isnan(out[2]).all()              # JAX's default mode: fill (NaN for floats)
    ints = np.asarray(lax.gather(x.astype(np.int32), idx, dn, (1, 4)))
    assert (ints[2] == np.iinfo(np.int32).min).all()
    np.testing.assert_array_equal(np.asarray(lax.gather(x, idx, dn, (1, 4), mode="clip"))[2],
                                  x[2])
    f = funcgrad.jit(lambda x, i: lax.gather(x, i, dn, (1, 4), mode="clip"))
    np.testing.assert_array_equal(np.asarray(f(x, idx)), np.asarray(
        lax.gather(x, idx, dn, (1, 4), mode="clip")))
    v = funcgrad.vmap(lambda i: lax.gather(x, i, dn, (1, 4)))(idx[:2, None, :])
    np.testing.assert_array_equal(np.asarray(v)[:, 0], x[[2, 0]])
    check_grads(lambda x: lax.gather(x, idx[:2], dn, (1, 4)) ** 2, (x,), order=2)
    sdn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                      scatter_dims_to_operand_dims=(0,))
    check_grads(lambda x, u: lax.scatter_add(x, idx[:2], u, sdn) ** 2,
                (x, np.ones((2, 4))), order=2)


def test_errors_are_clear():
    x = np.zeros((3, 4))
    dn = lax.GatherDimensionNumbers((), (0,), (0,), operand_batching_dims=(1,),
                                    start_indices_batching_dims=(0,))
    with pytest.raises(ValueError, match="batching dim 1 of .3, 4. has size 4"):
        lax.gather(x, np.zeros((2, 1), int), dn, (1, 1))
    dn = lax.GatherDimensionNumbers((1,), (0,), (0,))
    with pytest.raises(ValueError, match="slice_sizes"):
        lax.gather(x, np.zeros((2, 1), int), dn, (1, 5))
    with pytest.raises(ValueError, match="mode"):
        lax.gather(x, np.zeros((2, 1), int), dn, (1, 4), mode="wrap")
