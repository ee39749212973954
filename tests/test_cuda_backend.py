"""The CUDA backend against the CPU backend: every primitive (spec table shapes, strided operands,
all dtypes), gradients, determinism, memory, index errors. Runs on a real GPU, or in numba's
CUDA simulator (NUMBA_ENABLE_CUDASIM=1) on tiny shapes; FUNCGRAD_REQUIRE_GPU=1 turns a missing
GPU into failures instead of skips."""
from __future__ import annotations

import gc
import os
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prim_specs import SPECS, hypothesis_shapes

import funcgrad
import funcgrad.cuda as fcuda
import funcgrad.numpy as fnp
from funcgrad import nn, prims
from funcgrad.core import PRIMITIVES, FuncgradError, ShapedArray, bind

REQUIRE_GPU = os.environ.get("FUNCGRAD_REQUIRE_GPU", "") == "1"
SIM = fcuda.simulator_active()
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not (fcuda.usable() or REQUIRE_GPU),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]
ALL = sorted(SPECS)


@pytest.fixture(scope="module", autouse=True)
def _device_setup(fast_barriers):
    if REQUIRE_GPU:
        assert fcuda.is_available(), fcuda.unavailable_reason()


def cu(x):
    return funcgrad.device_put(np.asarray(x), "cuda")


def _on_cpu(f, *args, **kwargs):
    """f on the CPU backend: a reference (numpy operands alone go to the default device, which
    is "cuda" on a GPU host: the comparison would be CUDA against CUDA)."""
    with funcgrad.default_device("cpu"):
        return f(*args, **kwargs)


def _strided(a: np.ndarray):
    """A "cuda" array equal to `a` that is a non-contiguous (transposed) view on the device."""
    if a.ndim < 2:
        return cu(a)
    t = cu(np.ascontiguousarray(np.swapaxes(a, 0, -1)))
    perm = list(range(a.ndim))
    perm[0], perm[-1] = perm[-1], perm[0]
    out = bind(prims.transpose_p, t, permutation=tuple(perm))
    assert not out.buf.is_contiguous() or 1 in a.shape or 0 in a.shape
    return out


def _compare(spec, args, params, strided=False):
    prim = spec.prim
    aval = prim.shape(*[ShapedArray(a.shape, a.dtype) for a in args], **params)
    with np.errstate(all="ignore"):
        want = np.asarray(prim.impl(*args, **params)).astype(aval.dtype)
    ins = [(_strided(a) if strided else cu(a)) for a in args]
    got = bind(prim, *ins, **params) if ins else _bind_on_cuda(prim, params)
    assert got.device == "cuda" and got.aval == aval
    got = np.asarray(got)
    msg = f"{spec.name} {params} {[a.shape for a in args]} strided={strided}"
    if aval.dtype.kind == "f":
        rtol, atol = spec.tolerance(aval.dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=msg)
    else:
        np.testing.assert_array_equal(got, want, err_msg=msg)


def _bind_on_cuda(prim, params):
    """Primitives without operands (iota) run on the default device: pin it to cuda."""
    from funcgrad.config import config
    old = config.default_device
    config.default_device = "cuda"
    try:
        return bind(prim, **params)
    finally:
        config.default_device = old


def test_every_primitive_has_a_cuda_lowering():
    from funcgrad.cuda.lowering import CUDA
    missing = [n for n, p in PRIMITIVES.items() if p not in CUDA]
    assert not missing, f"primitives without a CUDA lowering: {missing}"


@pytest.mark.parametrize("name", ALL)
def test_primitive_matches_cpu(name):
    """Every spec shape case (scalars, size-0/1 dims, ranks 1-3) and dtype, contiguous and
    through transposed (strided) device views."""
    spec = SPECS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for shape in spec.shape_cases():
        for dtype in spec.dtypes:
            args, params = spec.make_args(rng, shape, dtype)
            _compare(spec, args, params)
            if any(np.ndim(a) >= 2 for a in args):
                _compare(spec, args, params, strided=True)


SMALL_DTYPES = ("float16", "int8", "uint8", "uint32")
SMALL_OPS = {"add": 2, "mul": 2, "max": 2, "lt": 2, "neg": 1, "abs": 1, "exp": 1, "tanh": 1,
             "reduce_sum": 1, "reduce_max": 1, "argmax": 1, "dot_general": 2,
             "convert_element_type": 1, "take": 1}


@pytest.mark.parametrize("dtype", SMALL_DTYPES)
def test_small_dtypes(dtype):
    """float16 (computed in float32), int8, uint8 and uint32 on a representative subset."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(1)
    for name in SMALL_OPS:
        spec = SPECS[name]
        if dt.kind != "f" and name in ("exp", "tanh"):
            continue
        if dt.kind == "u" and name in ("neg", "abs"):
            continue
        args, params = spec.make_args(rng, (2, 3), np.float32 if name == "take" else
                                      (np.int32 if name == "convert_element_type" and
                                       dt.kind != "f" else np.float32))
        args = [a if a.dtype.kind in "iu" and name == "take" and i == 1 else
                (np.abs(a) if dt.kind == "u" else a).astype(dt) for i, a in enumerate(args)]
        if name == "convert_element_type":
            params = {"new_dtype": dt}
            args = [args[0].astype(np.float32)]
        _compare(spec, args, params)
        _compare(spec, args, params, strided=True)


@settings(max_examples=6 if SIM else 40, deadline=None)
@given(data=st.data())
def test_broadcasting_ops_hypothesis(data):
    """funcgrad.numpy broadcasting (broadcast_in_dim views read with stride 0) on random shapes."""
    spec = SPECS["add"]
    shape = data.draw(hypothesis_shapes(spec, max_ndim=3, max_side=3))
    drop = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
    other = tuple(1 if d else n for d, n in zip(drop, shape))
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    y = rng.standard_normal(other).astype(np.float32)
    for f in (lambda a, b: a * b + 1.0, lambda a, b: fnp.maximum(a, b) - b,
              lambda a, b: fnp.where(a > b, a, b * 2.0)):
        np.testing.assert_allclose(np.asarray(f(cu(x), cu(y))), np.asarray(_on_cpu(f, x, y)),
                                   rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# gradients, determinism, memory
# ---------------------------------------------------------------------------------------------

def _mlp_params(rng, sizes):
    return [(rng.standard_normal((a, b)).astype(np.float32) / np.sqrt(a),
             np.zeros(b, np.float32)) for a, b in zip(sizes[:-1], sizes[1:])]


def _mlp_loss(params, x, y):
    h = x
    for i, (w, b) in enumerate(params):
        h = h @ w + b
        if i < len(params) - 1:
            h = nn.relu(h)
    return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(h, y))


def _gpt_like_loss(p, idx):
    x = fnp.take(p["emb"], idx, axis=0)                         # gather -> scatter_add grad
    x = nn.layer_norm(x, p["g"], p["b"])
    att = nn.softmax(x @ x.T / 2.0, axis=-1)
    h = nn.gelu(att @ x @ p["w"])
    lp = fnp.take_along_axis(nn.log_softmax(h, axis=0), idx[None, :3] % 3, axis=0)
    return fnp.sum(fnp.tanh(h) ** 2) + fnp.max(h) - fnp.min(fnp.sqrt(h * h + 1.0)) \
        + fnp.mean(lp) + fnp.sum(nn.rms_norm(h, p["s"]))


PROGRAMS = {
    "mlp": (_mlp_loss, lambda r: (_mlp_params(r, [5, 7, 3]), r.standard_normal((4, 5)).astype(
        np.float32), np.array([0, 2, 1, 2], np.int32))),
    "gpt_like": (_gpt_like_loss, lambda r: ({"emb": r.standard_normal((6, 4)).astype(np.float32),
                                             "g": np.ones(4, np.float32),
                                             "b": np.zeros(4, np.float32),
                                             "s": np.ones(3, np.float32),
                                             "w": r.standard_normal((4, 3)).astype(np.float32)},
                                            np.array([1, 5, 1, 0, 3], np.int32))),
}


@pytest.mark.parametrize("prog", sorted(PROGRAMS))
def test_grad_on_cuda_equals_cpu(prog):
    f, make = PROGRAMS[prog]
    args = make(np.random.default_rng(3))
    want = _on_cpu(funcgrad.grad(f), *args)
    got = funcgrad.grad(f)(*funcgrad.device_put(args, "cuda"))
    wl, gl = funcgrad.tree_util.tree_leaves(want), funcgrad.tree_util.tree_leaves(got)
    assert len(wl) == len(gl)
    for w, g in zip(wl, gl):
        assert g.device == "cuda"
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-4, atol=2e-5)


@settings(max_examples=6 if SIM else 25, deadline=None)
@given(ni=st.integers(1, 40 if SIM else 5000), n=st.integers(1, 30 if SIM else 3000),
       seed=st.integers(0, 2 ** 16))
def test_scatter_add_sums_in_index_order(ni, n, seed):
    """scatter_add's CSR fill (one block per chunk of positions, then a per-bucket scan over
    the chunks) keeps positions in increasing order inside each bucket: each row's sum is
    bit-identical to numpy's add.at, which adds in index order; scatter takes the last."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(-n, n, ni).astype(np.int32)
    upd = (rng.standard_normal((ni, 2)) * 10.0 ** rng.integers(-3, 4, (ni, 1))).astype(np.float32)
    x = rng.standard_normal((n, 2)).astype(np.float32)
    want = x.copy()
    np.add.at(want, idx, upd)
    got = bind(prims.scatter_add_p, cu(x), cu(idx), cu(upd), axis=0)
    assert np.asarray(got).tobytes() == want.tobytes()
    last = x.copy()
    last[idx] = upd
    got = bind(prims.scatter_p, cu(x), cu(idx), cu(upd), axis=0)
    assert np.asarray(got).tobytes() == last.tobytes()


def test_deterministic_bit_identical():
    """Reductions (chunked two-pass included), matmul, scatter-add and a full gradient give
    bit-identical results when repeated."""
    rng = np.random.default_rng(4)
    n = 300 if SIM else 1 << 22
    big = cu(rng.standard_normal(n).astype(np.float32))
    m = 16 if SIM else 512
    a = cu(rng.standard_normal((m, m)).astype(np.float32))
    idx = cu(rng.integers(0, 7, size=40 if SIM else 100000).astype(np.int32))
    upd = cu(rng.standard_normal(idx.shape + (3,)).astype(np.float32))
    f, make = PROGRAMS["mlp"]
    margs = funcgrad.device_put(make(np.random.default_rng(5)), "cuda")

    def run():
        return [np.asarray(fnp.sum(big)), np.asarray(fnp.sum(a, axis=0)), np.asarray(a @ a),
                np.asarray(fnp.zeros((7, 3)).at[idx].add(upd) if not SIM else
                           bind(prims.scatter_add_p, cu(np.zeros((7, 3), np.float32)), idx, upd,
                                axis=0)),
                *[np.asarray(g) for g in funcgrad.tree_util.tree_leaves(
                    funcgrad.grad(f)(*margs))]]
    r1, r2 = run(), run()
    for x, y in zip(r1, r2):
        assert x.tobytes() == y.tobytes()
    np.testing.assert_allclose(r1[0], np.sum(np.asarray(big), dtype=np.float64), rtol=1e-4)


def test_memory_flat_over_training_loop():
    """A small training loop: after warm-up, no new driver allocations and flat in-use bytes.

    300 steps on a GPU (1000 took 17 s of a cold `pytest -n 16` run on an H200, 2026-11-25,
    nearly all of it the eager steps): a buffer kept per step shows from the second sample
    (step 4) on, and the samples every 100 steps catch anything slower."""
    rng = np.random.default_rng(6)
    f, make = PROGRAMS["mlp"]
    params, x, y = funcgrad.device_put(make(rng), "cuda")
    grad = funcgrad.grad(f)
    steps = 20 if SIM else 300
    stats = []
    for step in range(steps):
        g = grad(params, x, y)
        params = funcgrad.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g)
        del g
        if step >= 3 and (step < 6 or step % 100 == 0 or step == steps - 1):
            gc.collect()   # buffers in cycles left by earlier tests must not move the figures
            stats.append(fcuda.memory_stats())
    assert len({s["in_use"] for s in stats}) == 1, [s["in_use"] for s in stats][:10]
    assert len({s["driver_allocs"] for s in stats}) == 1
    assert np.isfinite(np.asarray(f(params, x, y)))


def test_views_launch_nothing_and_allocate_nothing():
    x = cu(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    gc.collect()
    gc.disable()   # a collection in between could free an earlier test's buffers
    try:
        before = fcuda.memory_stats()
        v = [bind(prims.transpose_p, x, permutation=(2, 0, 1)),
             bind(prims.broadcast_in_dim_p, x, shape=(5, 2, 3, 4),
                  broadcast_dimensions=(1, 2, 3)),
             bind(prims.slice_p, x, start_indices=(0, 1, 0), limit_indices=(2, 3, 4),
                  strides=(1, 1, 2)),
             bind(prims.rev_p, x, dimensions=(0, 2)), bind(prims.reshape_p, x, new_sizes=(6, 4))]
        after = fcuda.memory_stats()
    finally:
        gc.enable()
    assert after["in_use"] == before["in_use"]
    for y in v:
        assert y.buf.block is x.buf.block
    np.testing.assert_array_equal(np.asarray(v[3]), np.arange(24).reshape(2, 3, 4)[::-1, :, ::-1])


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------

def test_out_of_range_indices_raise():
    x = cu(np.arange(12, dtype=np.float32).reshape(4, 3))
    for bad in ([0, 4], [-5], [1, 2, 9, 7]):
        idx = cu(np.array(bad, np.int32))
        with pytest.raises(IndexError, match="out of bounds for an axis of size 4"):
            bind(prims.take_p, x, idx, axis=0)
        upd = cu(np.ones((len(bad), 3), np.float32))
        with pytest.raises(IndexError, match=r"scatter_add: index .* \(\d+ of \d+ indices"):
            bind(prims.scatter_add_p, x, idx, upd, axis=0)
        with pytest.raises(IndexError, match="scatter: index"):
            bind(prims.scatter_p, x, idx, upd, axis=0)
    with pytest.raises(IndexError, match=r"take: index 9 is out of bounds .* \(2 of 4 indices"):
        bind(prims.take_p, x, cu(np.array([1, 9, 2, 9], np.int32)), axis=0)
    from funcgrad.prims.rows import softmax_xent_p
    with pytest.raises(IndexError, match="label 3 is out of range for 3 classes"):
        bind(softmax_xent_p, x, cu(np.array([0, 1, 3, 2], np.int32)))


def test_empty_reductions_raise_like_cpu():
    x = cu(np.zeros((0, 3), np.float32))
    for prim, params in ((prims.reduce_max_p, {"axes": (0,)}),
                         (prims.argmin_p, {"axis": 0, "index_dtype": np.dtype(np.int32)})):
        with pytest.raises(FuncgradError) as cuda_err:
            bind(prim, x, **params)
        with pytest.raises(FuncgradError) as cpu_err:
            _on_cpu(bind, prim, np.zeros((0, 3), np.float32), **params)
        assert str(cuda_err.value).split("\n")[0] == str(cpu_err.value).split("\n")[0]
    np.testing.assert_array_equal(np.asarray(bind(prims.reduce_sum_p, x, axes=(0,))), 0)


def test_out_of_memory_names_request_and_pool():
    try:
        fcuda.empty_cache()  # else freeing the cache on the first failure makes room
        held = fcuda.memory_stats()["driver_bytes"]
        fcuda.set_memory_limit(held + (1 << 20))
        with pytest.raises(fcuda.CudaOutOfMemoryError, match=r"cannot allocate 8\.0 MiB .*pool"):
            cu(np.zeros(1 << 21, np.float32))
    finally:
        fcuda.set_memory_limit(None)


def test_pool_keeps_blocks_alive_through_garbage_cycles():
    """A buffer caught in a reference cycle returns its block to the pool when the collector
    breaks the cycle; the block's memory must stay owned by the pool (a real GPU freed it once:
    the collector finalized the driver memory together with the cycle)."""
    import gc

    from funcgrad.cuda.arrays import pool
    p = pool()
    for _ in range(3):
        a = cu(np.arange(1000, dtype=np.float32))
        cycle = [a * 2.0]
        cycle.append(cycle)
        del a, cycle
        gc.collect()
    held = {id(r) for r in p.raws.values()}
    assert all(id(r) in held for lst in p.free.values() for r in lst)
    c = cu(np.arange(1000, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(c + 1.0), np.arange(1000) + 1.0)


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16"])
def test_matmul_split_k_and_strided_operands(dtype):
    """Long contractions run split-K (partials summed in a fixed order); transposed operands
    are read in place; ragged tile edges everywhere."""
    rng = np.random.default_rng(7)
    dt = np.dtype(dtype)
    a = (rng.standard_normal((3, 9, 37)) * 3).astype(dt)
    b = (rng.standard_normal((3, 37, 11)) * 3).astype(dt)
    want = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
    for x, y in ((cu(a), cu(b)),
                 (cu(np.ascontiguousarray(a.transpose(0, 2, 1))).transpose(0, 2, 1),
                  cu(np.ascontiguousarray(b.transpose(0, 2, 1))).transpose(0, 2, 1))):
        got = np.asarray(fnp.matmul(x, y))
        assert got.dtype == dt
        if dt.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-2 if dt == np.float16 else 1e-5,
                                       atol=0.5 if dt == np.float16 else 1e-4)
        else:
            np.testing.assert_array_equal(got, want.astype(dt))
