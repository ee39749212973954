"""The jit engine on CUDA: static memory plans, result sets fed back without copies, donation."""
import gc

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import optim

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def cuda():
    from funcgrad import cuda as fcuda
    if not fcuda.usable():
        pytest.skip("no CUDA backend (set NUMBA_ENABLE_CUDASIM=1)")
    return fcuda


def _mlp_step():
    opt = optim.adam(1e-2)

    def loss(p, x, y):
        h = fnp.tanh(x @ p["w1"] + p["b1"])
        return fnp.mean((h @ p["w2"] - y) ** 2)

    def step(p, s, x, y):
        val, g = funcgrad.value_and_grad(loss)(p, x, y)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, val

    rng = np.random.default_rng(0)
    p = {"w1": rng.standard_normal((3, 4)).astype(np.float32),
         "b1": np.zeros(4, np.float32),
         "w2": rng.standard_normal((4, 2)).astype(np.float32)}
    x = rng.standard_normal((5, 3)).astype(np.float32)
    y = rng.standard_normal((5, 2)).astype(np.float32)
    return step, opt, p, x, y


def _loop(step, opt, p, x, y, device, n):
    p = funcgrad.device_put(p, device)
    s = opt.init(p)
    x, y = funcgrad.device_put(x, device), funcgrad.device_put(y, device)
    vals = []
    for _ in range(n):
        p, s, val = step(p, s, x, y)
        vals.append(val)            # results held across calls must keep their values
    return p, [float(v) for v in vals]


def test_planned_loop_matches_cpu_and_allocates_nothing(cuda):
    step, opt, p, x, y = _mlp_step()
    want_p, want_vals = _loop(funcgrad.jit(step), opt, p, x, y, "cpu", 6)
    jstep = funcgrad.jit(step)
    got_p, got_vals = _loop(jstep, opt, p, x, y, "cuda", 6)
    np.testing.assert_allclose(got_vals, want_vals, rtol=1e-5, atol=1e-6)
    for k in want_p:
        np.testing.assert_allclose(np.asarray(got_p[k]), np.asarray(want_p[k]), rtol=1e-5,
                                   atol=1e-6)
    plan = jstep.lower(got_p, optim.adam(1e-2).init(got_p), x, y).compile()
    assert plan.layout is not None and plan.static_ok, plan.static_error
    # steady state: more steps allocate nothing new from the pool
    pool = cuda.memory_stats
    ps = funcgrad.device_put(got_p, "cuda")
    s = opt.init(ps)
    xd, yd = funcgrad.device_put(x, "cuda"), funcgrad.device_put(y, "cuda")
    for _ in range(3):
        ps, s, _ = jstep(ps, s, xd, yd)
    gc.collect()
    before = pool()
    for _ in range(4):
        ps, s, _ = jstep(ps, s, xd, yd)
    after = pool()
    assert after["driver_allocs"] == before["driver_allocs"]
    assert after["in_use"] == before["in_use"]


def test_results_alternate_between_two_sets(cuda):
    f = funcgrad.jit(lambda a: a * 2.0 + 1.0)
    a = funcgrad.device_put(np.arange(4, dtype=np.float32), "cuda")
    outs = [a]
    for _ in range(6):
        outs.append(f(outs[-1]))
    want = np.arange(4, dtype=np.float32)
    for o in outs[1:]:
        want = want * 2 + 1
    # every intermediate result kept its value although the plan reuses two result sets
    w = np.arange(4, dtype=np.float32)
    for o in outs[1:]:
        w = w * 2 + 1
        np.testing.assert_array_equal(np.asarray(o), w)
    plan = f.lower(outs[-1]).compile()
    assert plan.out_sets[0] is not None and plan.out_sets[1] is not None


def test_two_jitted_functions_interleaved(cuda):
    f = funcgrad.jit(lambda a: fnp.sin(a) + a)
    g = funcgrad.jit(lambda a: fnp.cos(a) * a)
    xs = [np.linspace(0, 1, 7, dtype=np.float32) + k for k in range(5)]
    got = []
    for x in xs:
        xd = funcgrad.device_put(x, "cuda")
        got.append((f(xd), g(xd), f(g(xd))))
    for x, (a, b, c) in zip(xs, got):
        np.testing.assert_allclose(np.asarray(a), np.sin(x) + x, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(b), np.cos(x) * x, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(c), np.sin(np.cos(x) * x) + np.cos(x) * x,
                                   rtol=1e-5)


def test_changed_shape_replans(cuda):
    f = funcgrad.jit(lambda a: (a * a).sum(axis=0))
    for n in (3, 3, 3, 5, 5, 5, 3):
        x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
        got = f(funcgrad.device_put(x, "cuda"))
        np.testing.assert_allclose(np.asarray(got), (x * x).sum(0))
    assert f.stats()["cache_size"] == 2


def test_planned_peak_is_what_the_pool_holds(cuda):
    f = funcgrad.jit(lambda a, b: fnp.tanh(a @ b).sum() + (a * 2).mean())
    a = funcgrad.device_put(np.ones((8, 6), np.float32), "cuda")
    b = funcgrad.device_put(np.ones((6, 5), np.float32), "cuda")
    low = f.lower(a, b)
    peak = low.peak_bytes()
    plan = low.compile()
    assert plan.layout is not None
    held = plan.planned_bytes()
    args = sum(-(-x.size * 4 // 256) * 256 for x in (a, b))
    consts = peak - args - held["arena"] - sum(plan.layout.out_sizes)
    assert consts >= 0
    assert held["arena"] == plan.layout.arena_bytes
    # the arena is no larger than every intermediate side by side, and no smaller than the
    # largest single intermediate
    sizes = [s for s, p in zip(plan.layout.sizes, plan.layout.places) if p[0] == "arena"]
    assert max(sizes) <= held["arena"] <= sum(-(-s // 256) * 256 for s in sizes)
    np.testing.assert_allclose(float(f(a, b)), np.tanh(6.0) * 5 * 8 + 2.0, rtol=1e-5)


def test_donated_arguments_are_deleted(cuda):
    f = funcgrad.jit(lambda p, x: p + x, donate_argnums=0)
    p = funcgrad.device_put(np.ones(3, np.float32), "cuda")
    x = funcgrad.device_put(np.ones(3, np.float32), "cuda")
    out = f(p, x)
    assert p.is_deleted() and not x.is_deleted()
    with pytest.raises(RuntimeError, match="donated to jit"):
        np.asarray(p)
    with pytest.raises(RuntimeError, match="donated to jit"):
        f(p, x)
    for _ in range(4):
        out = f(out, x)
    np.testing.assert_array_equal(np.asarray(out), np.full(3, 6.0, np.float32))


def test_donation_on_cpu_too():
    f = funcgrad.jit(lambda p: p * 2, donate_argnums=(0,))
    p = funcgrad.device_put(np.ones(2, np.float32), "cpu")
    q = f(p)
    assert p.is_deleted()
    np.testing.assert_array_equal(np.asarray(q), [2.0, 2.0])


def test_bad_label_in_a_planned_step_raises(cuda):
    from funcgrad import nn
    f = funcgrad.jit(lambda x, y: nn.softmax_cross_entropy_with_integer_labels(x, y).sum())
    x = funcgrad.device_put(np.ones((4, 3), np.float32), "cuda")
    good = funcgrad.device_put(np.array([0, 1, 2, 0], np.int32), "cuda")
    bad = funcgrad.device_put(np.array([0, 1, 5, 0], np.int32), "cuda")
    for _ in range(4):   # eager, recorded, then planned (a graph on a GPU)
        np.testing.assert_allclose(float(f(x, good)), 4 * np.log(3.0), rtol=1e-5)
    with pytest.raises(IndexError, match="label 5"):
        float(f(x, bad))
    np.testing.assert_allclose(float(f(x, good)), 4 * np.log(3.0), rtol=1e-5)


def test_donated_parameters_update_in_place(cuda):
    """With donate_argnums, a jitted Adam step writes the new parameters and optimizer state
    into the donated buffers: one set of buffers for the whole loop, and the same numbers as
    the step without donation."""
    step, opt, p, x, y = _mlp_step()
    plain = funcgrad.jit(step)
    donating = funcgrad.jit(step, donate_argnums=(0, 1))
    want_p, want_vals = _loop(plain, opt, p, x, y, "cuda", 5)
    pd = funcgrad.device_put(p, "cuda")
    sd = opt.init(pd)
    xd, yd = funcgrad.device_put(x, "cuda"), funcgrad.device_put(y, "cuda")
    vals = []
    for _ in range(5):
        addr = pd["w1"].buf.block.ptr()   # the address only: holding the block would share it
        new_p, sd, val = donating(pd, sd, xd, yd)
        assert pd["w1"].is_deleted()
        vals.append(float(val))
        pd = new_p
    np.testing.assert_allclose(vals, want_vals, rtol=1e-6)
    for k in want_p:
        np.testing.assert_allclose(np.asarray(pd[k]), np.asarray(want_p[k]), rtol=1e-6)
    plan = donating.lower(pd, sd, xd, yd).compile()
    assert plan.layout.alias, "no result was planned in place"
    assert pd["w1"].buf.block.ptr() == addr   # the last step wrote w1 where the previous one was


def test_donating_a_shared_buffer_never_writes_into_it(cuda):
    """zeros() are views of a cached device constant and an array's reshape shares its
    memory: donating them must not change the constant or the other array."""
    f = funcgrad.jit(lambda c, x: (c + 1, x * 2.0), donate_argnums=(0, 1))
    base = funcgrad.device_put(np.arange(6, dtype=np.float32), "cuda")
    for _ in range(4):
        c = fnp.zeros((), np.int32)                     # a view of the cached constant 0
        c = funcgrad.device_put(c, "cuda")
        view = base.reshape(2, 3)                       # shares base's memory
        c2, x2 = f(c, view)
        assert int(c2) == 1
        np.testing.assert_array_equal(np.asarray(x2), np.arange(6).reshape(2, 3) * 2.0)
        np.testing.assert_array_equal(np.asarray(base), np.arange(6, dtype=np.float32))
    z = funcgrad.device_put(fnp.zeros((), np.int32), "cuda")
    assert int(z) == 0 and int(funcgrad.device_put(np.int32(5), "cuda") > 0) == 1


def test_eager_ops_on_cpu_arrays_stay_on_the_cpu(cuda):
    """With "cuda" the default device, an op on a CPU array and a numpy value runs on the CPU
    (the numpy operand does not pull it onto the GPU), as jit places calls."""
    funcgrad.config.update("default_device", "cuda")
    try:
        x = funcgrad.device_put(np.array([-2, 0, 3], np.float32), "cpu")
        y = x * np.array([1, 2, 3], np.float32)
        assert y.device == "cpu"
        np.testing.assert_array_equal(np.asarray(y), [-2, 0, 9])
        z = funcgrad.device_put(np.ones(2, np.float32), "cuda") + np.ones(2, np.float32)
        assert z.device == "cuda"                       # a GPU array puts the op on the GPU
    finally:
        funcgrad.config.update("default_device", None)


def test_new_batches_every_call_reuse_few_graphs(cuda):
    # a training loop that passes new numpy batches: the pool may hand a batch the address of
    # the last one or another; the plan must not capture a graph per address (recapturing
    # every other step ran W2 at 70-95 ms instead of 14)
    step, opt, p, x, y = _mlp_step()
    jstep = funcgrad.jit(step, donate_argnums=(0, 1))
    want = funcgrad.jit(step)
    ps, s = funcgrad.device_put(p, "cuda"), opt.init(funcgrad.device_put(p, "cuda"))
    pc, sc = funcgrad.device_put(p, "cpu"), opt.init(funcgrad.device_put(p, "cpu"))
    rng = np.random.default_rng(1)
    for _ in range(14):
        xb = rng.standard_normal(x.shape).astype(np.float32)
        yb = rng.standard_normal(y.shape).astype(np.float32)
        ps, s, val = jstep(ps, s, xb, yb)
        pc, sc, want_val = want(pc, sc, *funcgrad.device_put((xb, yb), "cpu"))
        np.testing.assert_allclose(float(val), float(want_val), rtol=1e-5, atol=1e-6)
    plan = jstep.lower(ps, s, x, y).compile()
    if plan.graphs is not None:   # a real GPU: a handful of graphs, not one per call
        assert len(plan.graphs.entries) <= 3
