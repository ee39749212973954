"""CPU engine: fused plans equal the numpy interpreter, planned buffers, kernel cache, threads."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import jit, nn, optim
from funcgrad.api.config_states import check_indices
from funcgrad.tree_util import tree_leaves


def _mlp_step(sizes, batch, rng):
    params = [{"w": (rng.standard_normal((a, b)) * 0.3).astype(np.float32),
               "b": np.zeros(b, np.float32)} for a, b in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], batch).astype(np.int32)
    opt = optim.adam(1e-2)

    def loss(p):
        h = x
        for i, layer in enumerate(p):
            h = h @ layer["w"] + layer["b"]
            if i < len(p) - 1:
                h = nn.relu(h)
        return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(h, y))

    def step(p, s):
        val, g = funcgrad.value_and_grad(loss)(p)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, val
    return step, params, opt.init(params)


def _run(step, p, s, n):
    for _ in range(n):
        p, s, v = step(p, s)
    return tree_leaves((p, s, v))


def test_fused_adam_steps_equal_numpy_plan_bit_for_bit(monkeypatch, rng):
    step, p, s = _mlp_step([6, 8, 8, 3], 5, rng)
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE", "0")
    plain = jit(step)
    want = _run(plain, p, s, 4)
    assert not plain.lower(p, s).compile().fused
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE", "1")
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    fused = jit(step)
    got = _run(fused, p, s, 4)
    plan = fused.lower(p, s).compile()
    assert plan.fused and plan.program.kernels >= 3
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_plan_fuses_after_its_second_call(monkeypatch, rng):
    monkeypatch.delenv("FUNCGRAD_CPU_FUSE_AFTER", raising=False)
    f = jit(lambda x: fnp.maximum(x * 2.0 + 1.0, 0.0))
    x = rng.standard_normal((3, 4)).astype(np.float32)
    plan = f.lower(x).compile()
    outs = [np.asarray(f(x)) for _ in range(3)]
    assert plan.fused and plan.calls == 3
    for o in outs:
        np.testing.assert_array_equal(o, np.maximum(x * 2 + 1, 0))


def test_arena_reuses_space_by_liveness(monkeypatch, rng):
    # a chain of products: each intermediate dies after the next product reads it, so the
    # arena holds two of them at a time, not all of them
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    ws = [rng.standard_normal((32, 32)).astype(np.float32) for _ in range(6)]
    x = rng.standard_normal((16, 32)).astype(np.float32)

    def f(x, ws):
        for w in ws:
            x = fnp.tanh(x @ w)
        return x

    plan = jit(f).lower(x, ws).compile()
    one = 16 * 32 * 4
    assert plan.program.memory.peak <= 2 * one
    want = x
    for w in ws:
        want = np.tanh(want @ w)
    np.testing.assert_allclose(np.asarray(jit(f)(x, ws)), want, rtol=1e-5, atol=1e-6)


def test_results_are_never_arena_memory(monkeypatch, rng):
    # a result that is a view of an intermediate (a reshape) is copied out; results of one
    # call survive the next call, and two plans called in turn keep their own buffers
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")

    def f(a, b):
        h = (a @ b) * 2.0
        return fnp.reshape(h, (-1,)), h.sum()

    def g(a, b):
        return (a @ b) + 1.0

    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    jf, jg = jit(f), jit(g)
    first = np.asarray(jf(a, b)[0]).copy()
    r1 = jf(a, b)[0]
    gr = jg(a, b)
    jf(a * 2, b)
    jg(a * 3, b)
    np.testing.assert_array_equal(np.asarray(r1), first)
    np.testing.assert_array_equal(np.asarray(gr), (a @ b) + 1)
    arena = jf.lower(a, b).compile()._bufs[-1]
    assert not np.may_share_memory(np.asarray(r1), arena)


def test_concurrent_calls_do_not_share_buffers(monkeypatch, rng):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    w = rng.standard_normal((64, 64)).astype(np.float32)
    f = jit(lambda x: fnp.maximum(x @ w * 0.5 + 1.0, 0.0) @ w)
    xs = [rng.standard_normal((32, 64)).astype(np.float32) for _ in range(4)]
    want = [np.asarray(f(x)) for x in xs]
    errors = []

    def work(k):
        for _ in range(30):
            got = np.asarray(f(xs[k]))
            if not np.array_equal(got, want[k]):
                errors.append(k)

    from funcgrad.backends.cpu import blas as cpu_blas
    one = cpu_blas.one_thread()
    before = one.getn() if one is not None else None
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    if one is not None:   # small products ran on one BLAS thread; the pool size is restored
        assert one.getn() == before and one.depth == 0


def test_errors_still_name_the_users_line(monkeypatch):
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    f = jit(lambda x, i: x[i] * 2.0 + 1.0)
    with check_indices(), pytest.raises(IndexError, match="test_cpu_engine.py"):
        f(np.ones(3, np.float32), np.int32(7))   # (JAX clamps by default)


def test_identical_layers_share_one_kernel_and_a_new_process_loads_it(tmp_path):
    # the kernel of a cluster is keyed by its source, not its place or sizes: four layers of
    # different widths run one bias+relu kernel; a second process compiles nothing
    code = """
import numpy as np, funcgrad, funcgrad.numpy as fnp
from funcgrad import nn
funcgrad.config.update("default_device", "cpu")
rng = np.random.default_rng(0)
ws = [rng.standard_normal((a, b)).astype(np.float32) for a, b in [(3, 8), (8, 5), (5, 9)]]
bs = [np.ones(w.shape[1], np.float32) for w in ws]
def f(x, ws, bs):
    for w, b in zip(ws, bs):
        x = nn.relu(x @ w + b)
    return x
x = rng.standard_normal((4, 3)).astype(np.float32)
f = funcgrad.jit(f)
f(x, ws, bs)
plan = f.lower(x, ws, bs).compile()
ks = {id(s.fn) for s in plan.program.steps if s.kind == "kernel"}
hits = sum(sum(s.fn.stats.cache_hits.values()) for s in plan.program.steps if s.kind == "kernel")
miss = sum(sum(s.fn.stats.cache_misses.values()) for s in plan.program.steps
           if s.kind == "kernel")
print(plan.program.kernels, len(ks), hits > 0, miss)
"""
    env = dict(os.environ, FUNCGRAD_CACHE_DIR=str(tmp_path), FUNCGRAD_CPU_FUSE_AFTER="0")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, check=True).stdout.split() for _ in range(2)]
    assert runs[0][:2] == ["3", "1"] and runs[0][3] != "0"     # compiled once, used thrice
    assert runs[1][:4] == ["3", "1", "True", "0"]              # loaded from disk
    files = list((tmp_path / "cpu_kernels").glob("fgc_*.py"))
    assert len(files) == 1 and oct(os.stat(tmp_path / "cpu_kernels").st_mode)[-3:] == "700"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
def test_sums_over_leading_axes_run_in_numpys_order(monkeypatch, rng, dtype):
    # bias gradients: an njit kernel adds the rows in order, as numpy does, bit for bit
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    x = (rng.standard_normal((37, 3, 19)) * 100).astype(dtype)

    def f(x):
        return (fnp.sum(x, 0), fnp.sum(x, (0, 1)), fnp.sum(x * 2, 0),
                fnp.sum(x[:, :1, :1], 0))

    plan = jit(f).lower(x).compile()
    assert sum(s.kind == "into" and s.eqn.prim.name == "reduce_sum"
               for s in plan.program.steps) == 3
    for g, w in zip(jit(f)(x), f(funcgrad.device_put(x))):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
        assert np.asarray(g).dtype == np.asarray(w).dtype


def test_kernels_split_over_two_threads_equal_unsplit(monkeypatch, rng):
    # kernels run in chunks on two threads when asked (FUNCGRAD_CPU_SPLIT_WORK): same bits
    step, p, s = _mlp_step([6, 40, 36, 3], 34, rng)
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    monkeypatch.delenv("FUNCGRAD_CPU_SPLIT_WORK", raising=False)
    want = _run(jit(step), p, s, 3)
    monkeypatch.setenv("FUNCGRAD_CPU_SPLIT_WORK", "1")
    split = jit(step)
    got = _run(split, p, s, 3)
    plan = split.lower(p, s).compile()
    assert any(getattr(st.fn, "__name__", "") == "run" for st in plan.program.steps
               if st.kind == "kernel")
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _adaptive(cost):
    """An Adaptive choosing between two ways whose calls cost cost[k] (a list the test may
    change) on a fake clock; returns it and the list of the ways it ran."""
    from funcgrad.backends.cpu.blas import Adaptive
    now, used = [0.0], []

    def way(k):
        def run():
            used.append(k)
            now[0] += cost[k]
        return run

    return Adaptive((way(0), way(1)), clock=lambda: now[0]), used


def test_adaptive_runs_the_way_that_was_faster_lately():
    cost = [5.0, 1.0]
    ad, used = _adaptive(cost)
    for _ in range(40):
        ad()
    assert used[:2] == [0, 1] and used[-30:].count(1) >= 28   # 1 wins, 0 is retried rarely
    cost[:] = [1.0, 50.0]   # way 1 stalls (a busy core): the next call switches back
    ad()
    for _ in range(20):
        ad()
    assert used[-20:].count(0) >= 19


def test_adaptive_looks_back_soon_after_a_single_stall():
    cost = [1.0, 2.0]
    ad, used = _adaptive(cost)
    for _ in range(200):   # way 0 wins; way 1 is retried ever more rarely
        ad()
    assert ad.best == 0 and ad.explore > 8
    cost[0] = 50.0          # one preempted run of way 0 ...
    ad()
    cost[0] = 1.0           # ... and it is fast again
    used.clear()
    for _ in range(12):
        ad()
    # way 1 runs until way 0 is retried (within 8 calls), which wins back at once
    assert used[0] == 1 and 0 in used[:9] and used[-3:] == [0, 0, 0]
    assert ad.best == 0


def test_adaptive_looks_back_soon_after_a_few_slow_runs():
    # runs 2-4x slower (no single stall) blended into the best way's average switch to the
    # other way; the first way is retried within 8 calls, not after its long-grown interval
    cost = [1.0, 2.0]
    ad, used = _adaptive(cost)
    for _ in range(600):
        ad()
    assert ad.best == 0 and ad.explore >= 128
    cost[0] = 3.5
    while ad.best == 0:
        ad()
    cost[0] = 1.0
    used.clear()
    for _ in range(12):
        ad()
    assert 0 in used[:9] and used[-3:] == [0, 0, 0] and ad.best == 0


def test_a_costly_lost_try_waits_in_proportion_to_its_cost():
    # way 0 (the pool) stalls at 10x the time of way 1 (one thread): after its first lost
    # try it is retried only after ~REGRET * 9 calls, not after the doubling's 16
    from funcgrad.backends.cpu.blas import REGRET
    cost = [10.0, 1.0]
    ad, used = _adaptive(cost)
    for _ in range(2000):
        ad()
    tries = used.count(0)
    assert ad.best == 1 and ad.explore >= REGRET * 9
    assert tries * (cost[0] - cost[1]) <= 2000 * cost[1] / REGRET * 4   # exploring stays cheap


def test_a_cheap_lost_try_keeps_the_doubling_interval():
    cost = [1.0, 1.25]   # an idle machine: one thread 25% slower than the pool
    ad, used = _adaptive(cost)
    for _ in range(40):
        ad()
    assert ad.best == 0 and used.count(1) >= 2 and ad.explore <= 64


def test_chunks_run_once_each_without_waiting_for_a_late_helper_and_raise():
    import os as _os
    from funcgrad.backends.cpu.parallel import Pair, bounds
    pair, seen = Pair(), []
    for k in range(100):
        pair.run([lambda k=k, j=j: seen.append((j, k)) for j in range(4)])
    assert sorted(seen) == sorted((j, k) for k in range(100) for j in range(4))
    with pytest.raises(ZeroDivisionError):
        pair.run([lambda: None, lambda: 1 / 0, lambda: None])
    late, ran = Pair(), []
    late._pid = _os.getpid()   # a helper that never runs: the caller does every chunk
    late.run([lambda j=j: ran.append(j) for j in range(3)])
    assert ran == [0, 1, 2]
    assert bounds(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)] and bounds(2, 4) == [(0, 1), (1, 2)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3, 10, 17, 130, 3001])
def test_softmax_xent_twins_equal_the_numpy_impls(monkeypatch, rng, dtype, n):
    # njit twins of softmax_xent and its backward (exp/log left to numpy, numpy's pairwise
    # row sums replicated) give the impls' bits, NaN and infinite logits included
    from funcgrad.prims import rows as fused, rows_bwd as fused_bwd
    from funcgrad.backends.cpu import rows as cpu_rows
    from funcgrad.core import ShapedArray
    x = (rng.standard_normal((2, 9, n)) * 30).astype(dtype)
    x[0, 0, 0], x[0, 1, -1], x[1, 2, 0] = np.nan, np.inf, -np.inf
    labels = rng.integers(0, n, (2, 9)).astype(np.int32)
    ct = rng.standard_normal((2, 9)).astype(dtype)
    aval = ShapedArray(x.shape, np.dtype(dtype))
    out = np.empty((2, 9), dtype)
    cpu_rows.xent_into(aval)(x, labels, out)
    with np.errstate(all="ignore"):
        want = fused._xent_impl(x, labels)
        want_bwd = fused_bwd._xent_bwd_impl(x, labels, ct)
    np.testing.assert_array_equal(out, want)
    grad = np.empty_like(x)
    cpu_rows.xent_bwd_into(aval)(x, labels, ct, grad)
    np.testing.assert_array_equal(grad, want_bwd)
    labels[1, 3] = n
    with pytest.raises(IndexError, match=f"label {n} is out of range"):
        cpu_rows.xent_into(aval)(x, labels, out)


def _data(a):
    return np.asarray(a).__array_interface__["data"][0]


def test_donated_step_writes_its_results_into_the_arguments(monkeypatch, rng):
    # donate_argnums on the CPU: the Adam kernels write the new parameters and optimizer
    # state into the donated arguments' memory (each result into its argument's), with the
    # bits of the step without donation; the donated Arrays can no longer be read
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    step, p, s = _mlp_step([6, 8, 8, 3], 5, rng)
    want = _run(jit(step), p, s, 4)
    donated = jit(step, donate_argnums=(0, 1))
    p, s = funcgrad.device_put(p), funcgrad.device_put(s)
    p, s, _ = first = donated(p, s)     # the first fused run works on copies of its arguments
    gone = tree_leaves(first[:2])
    for _ in range(3):
        before = [_data(a) for a in tree_leaves((p, s))]
        p1, s1, v = donated(p, s)
        assert [_data(a) for a in tree_leaves((p1, s1))] == before
        assert all(a.is_deleted() for a in tree_leaves((p, s)))
        p, s = p1, s1
    for a, b in zip(tree_leaves((p, s, v)), want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    plan = donated.lower(p, s).compile()
    assert sorted(plan.program.in_place.values()) == list(range(len(tree_leaves((p, s)))))
    with pytest.raises(RuntimeError, match=r"donated to jit\(step\)"):
        np.asarray(gone[1])


def test_donated_memory_seen_elsewhere_is_not_written(monkeypatch, rng):
    # an argument whose memory something else can see (np.asarray of it, the same Array
    # passed twice, a view) is copied before the call, not written; an argument read after
    # the kernel that could overwrite it, or returned as it is, is not written either
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    w = rng.standard_normal((4, 4)).astype(np.float32)
    x0 = rng.standard_normal((4, 4)).astype(np.float32)

    def f(x, y):
        return x * 2.0 + y, y * 3.0

    jf = jit(f, donate_argnums=(0, 1))
    x, y = funcgrad.device_put(x0), funcgrad.device_put(x0 + 1)
    jf(funcgrad.device_put(x0), funcgrad.device_put(x0))   # compiled; now the steady state
    held = np.asarray(x)
    a, b = jf(x, y)
    np.testing.assert_array_equal(held, x0)
    np.testing.assert_array_equal(np.asarray(a), x0 * 2 + (x0 + 1))
    np.testing.assert_array_equal(np.asarray(b), (x0 + 1) * 3)
    z = funcgrad.device_put(x0)
    a, b = jit(f, donate_argnums=(0, 1))(z, z)
    np.testing.assert_array_equal(np.asarray(a), x0 * 3)
    np.testing.assert_array_equal(np.asarray(b), x0 * 3)
    flat = funcgrad.device_put(x0.reshape(-1))
    view = fnp.reshape(flat, (4, 4))
    a, _ = jf(view, funcgrad.device_put(x0))
    np.testing.assert_array_equal(np.asarray(flat), x0.reshape(-1))
    np.testing.assert_array_equal(np.asarray(a), x0 * 3)

    def g(x, y):
        a = x * 2.0
        return a, (a @ w) + x, y

    jg = jit(g, donate_argnums=(0, 1))
    plan = jg.lower(x0, x0).compile()
    outs = plan.expr.outs   # x * 2 is not written into x (read later); a @ w + x is
    assert plan.program.in_place == {outs[1]: 0}
    a, b, c = jg(funcgrad.device_put(x0), funcgrad.device_put(x0 + 1))
    np.testing.assert_array_equal(np.asarray(a), x0 * 2)
    np.testing.assert_allclose(np.asarray(b), (x0 * 2) @ w + x0, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(c), x0 + 1)


def test_a_donated_call_that_raises_deletes_the_arguments_it_wrote(monkeypatch):
    # the kernel has written y into x's memory when the gather raises: x is deleted, with
    # a message that says why, and the error still names the user's line
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")

    def f(x, i):
        y = x * 2.0 + 1.0
        return y, y[i]

    jf = jit(f, donate_argnums=(0,))
    with check_indices():   # the gather raises (JAX's default clamps the index)
        jf(funcgrad.device_put(np.ones(4, np.float32)), np.int32(1))
        x = funcgrad.device_put(np.ones(4, np.float32))
        with pytest.raises(IndexError, match="test_cpu_engine.py"):
            jf(x, np.int32(7))
    with pytest.raises(RuntimeError, match="donated to a jitted call .* that raised"):
        np.asarray(x)


def test_large_products_give_the_same_bits_on_every_run(rng, monkeypatch):
    # row blocks over the caller and the helper give one thread's bits; the runner takes them
    # or the pool, whichever ran faster, only where the pool's bits are the same (k = 784:
    # they are not, so the pool alone; k = 128: they are)
    from funcgrad.backends.cpu import blas
    if blas.one_thread() is None or not blas.split_rows():
        pytest.skip("numpy's BLAS is not a loaded OpenBLAS, or one CPU")
    monkeypatch.setenv("FUNCGRAD_CPU_BLAS_SERIAL", "1")
    for m, k, n in [(1024, 784, 64), (1024, 128, 96)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        serial = np.empty((m, n), np.float32)
        with blas.one_thread():
            np.matmul(a, b, out=serial)
        rows = np.full((m, n), np.nan, np.float32)
        blas._rows_split(blas.one_thread(), m)(a, b, rows)
        np.testing.assert_array_equal(rows, serial)
        rows_t = np.full((m, n), np.nan, np.float32)
        blas._rows_split(blas.one_thread(), m)(a.T.copy().T, b, rows_t)   # x^T row views
        np.testing.assert_array_equal(rows_t, serial)
        pool = a @ b
        run = blas.matmul_into(m, n, k)
        for _ in range(20):   # Adaptive tries both ways in its first calls
            got = np.full((m, n), np.nan, np.float32)
            run(a, b, got)
            np.testing.assert_array_equal(got, pool)
