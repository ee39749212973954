"""optax's remaining transformations, wrappers and numerics against numpy formulas: each one
runs a few steps on the quadratic (tests/optim_refs.py) or is checked on small inputs."""
import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import optim

import optim_refs as R
from optim_refs import QP0, quad_fg, run_funcgrad, run_numpy, to_fg


class Fn(R.Ref):
    """A reference from a function ``f(g, p, value, state_dict, t) -> u``."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def step(self, g, p, value):
        return self.f(g, p, value, self.s, self.t)


def compare(opt, f, steps=4, extra=None, rtol=1e-7):
    got = run_funcgrad(opt, "quadratic", steps, extra)
    want = run_numpy(Fn(f), "quadratic", steps)
    for i, (a, b) in enumerate(zip(got, want)):
        for k in b:
            np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=1e-12,
                                       err_msg=f"step {i + 1}, leaf {k}")


def sc(t, lr=0.1):
    return optim.chain(t, optim.scale(-lr))


def lr_only(lr=0.1):
    return lambda g, p, v, s, t: R.tmap(lambda a: -lr * a, g)


# ---------------------------------------------------------------------------------------------
# stateless scalings and clippings
# ---------------------------------------------------------------------------------------------

def test_scale_identity_chain_and_extra_args():
    compare(optim.chain(optim.identity(), optim.scale(-0.1)), lr_only())
    compare(optim.chain(optim.stateless(lambda u, p: u), optim.scale(-0.1)), lr_only())
    compare(optim.chain(optim.stateless_with_tree_map(lambda g, p: 2 * g), optim.scale(-0.05)),
            lr_only())
    compare(optim.with_extra_args_support(optim.sgd(0.1)), lr_only())
    assert optim.init_empty_state(None) == optim.EmptyState()
    t = optim.set_to_zero()
    assert t.update(fnp.ones(2), t.init(None))[0].tolist() == [0.0, 0.0]


def test_scale_by_schedule_and_learning_rate():
    sched = optim.linear_schedule(0.1, 0.0, 10)
    compare(optim.chain(optim.scale_by_schedule(sched), optim.scale(-1.0)),
            lambda g, p, v, s, t: R.tmap(lambda a: -(0.1 - 0.01 * (t - 1)) * a, g), rtol=1e-6)
    compare(optim.scale_by_learning_rate(sched),
            lambda g, p, v, s, t: R.tmap(lambda a: -(0.1 - 0.01 * (t - 1)) * a, g), rtol=1e-6)
    compare(optim.scale_by_learning_rate(0.1, flip_sign=False),
            lambda g, p, v, s, t: R.tmap(lambda a: 0.1 * a, g))


def test_add_decayed_weights_constant_and_scheduled():
    compare(optim.chain(optim.add_decayed_weights(0.5), optim.scale(-0.1)),
            lambda g, p, v, s, t: R.tmap(lambda a, b: -0.1 * (a + 0.5 * b), g, p))
    compare(optim.chain(optim.add_decayed_weights(lambda c: 0.5 * (c + 1)), optim.scale(-0.1)),
            lambda g, p, v, s, t: R.tmap(lambda a, b: -0.1 * (a + 0.5 * t * b), g, p))


def test_clip_and_clip_by_global_norm():
    compare(sc(optim.clip(0.5)), lambda g, p, v, s, t: R.tmap(lambda a: -0.1 * np.clip(a, -.5, .5),
                                                              g))

    def ref(g, p, v, s, t):
        n = R.gnorm(g)
        return R.tmap(lambda a: -0.1 * (a if n < 1.0 else a / n), g)
    compare(sc(optim.clip_by_global_norm(1.0)), ref)
    assert float(optim.global_norm({"a": fnp.asarray([3.0]), "b": fnp.asarray([4.0])})) == 5.0


def test_clip_by_block_rms():
    compare(sc(optim.clip_by_block_rms(0.5)), lambda g, p, v, s, t: R.tmap(
        lambda a: -0.1 * a / max(1.0, np.sqrt(np.mean(a ** 2)) / 0.5), g))


def test_adaptive_grad_clip():
    def ref(g, p, v, s, t):
        def one(a, b):
            ax = None if a.ndim == 1 else 0
            gn = np.sqrt(np.sum(a * a, axis=ax, keepdims=True))
            pn = np.sqrt(np.sum(b * b, axis=ax, keepdims=True))
            mx = 0.1 * np.maximum(pn, 1e-3)
            return -0.1 * np.where(gn < mx, a, a * mx / np.maximum(gn, 1e-6))
        return R.tmap(one, g, p)
    compare(sc(optim.adaptive_grad_clip(0.1)), ref)


def test_centralize_normalize_trust_ratio_block_scales():
    compare(sc(optim.centralize()), lambda g, p, v, s, t: R.tmap(
        lambda a: -0.1 * (a - a.mean(axis=1, keepdims=True) if a.ndim > 1 else a), g))
    compare(sc(optim.normalize_by_update_norm(2.0)), lambda g, p, v, s, t: R.tmap(
        lambda a: -0.1 * a / ((R.gnorm(g) + 1e-6) / 2.0), g))
    compare(sc(optim.scale_by_trust_ratio(trust_coefficient=0.5)), lambda g, p, v, s, t: R.tmap(
        lambda a, b: -0.1 * a * 0.5 * R.leaf_norm(b) / R.leaf_norm(a), g, p))
    compare(sc(optim.scale_by_param_block_norm()), lambda g, p, v, s, t: R.tmap(
        lambda a, b: -0.1 * a * max(R.leaf_norm(b), 1e-3), g, p))
    compare(sc(optim.scale_by_param_block_rms()), lambda g, p, v, s, t: R.tmap(
        lambda a, b: -0.1 * a * max(np.sqrt(np.mean(b * b)), 1e-3), g, p))


def test_scale_by_stddev():
    def ref(g, p, v, s, t):
        s["mu"] = R.tmap(lambda a, b: 0.9 * b + 0.1 * a, g, s.get("mu", R.tmap(np.zeros_like, g)))
        s["nu"] = R.tmap(lambda a, b: 0.9 * b + 0.1 * a * a, g,
                         s.get("nu", R.tmap(np.zeros_like, g)))
        return R.tmap(lambda a, m, n: -0.1 * a / np.sqrt(n - m * m + 1e-8), g, s["mu"], s["nu"])
    compare(sc(optim.scale_by_stddev()), ref)


def test_scale_by_rms_and_stddev_with_bias_correction():
    # bias_correction=True divides the moving averages by 1 - 0.9**t
    def rms(g, p, v, s, t):
        s["nu"] = R.tmap(lambda a, b: 0.9 * b + 0.1 * a * a, g,
                         s.get("nu", R.tmap(np.zeros_like, g)))
        return R.tmap(lambda a, n: -0.1 * a / np.sqrt(n / (1 - 0.9 ** t) + 1e-8), g, s["nu"])
    compare(sc(optim.scale_by_rms(bias_correction=True)), rms)

    def stddev(g, p, v, s, t):
        s["mu"] = R.tmap(lambda a, b: 0.9 * b + 0.1 * a, g, s.get("mu", R.tmap(np.zeros_like, g)))
        s["nu"] = R.tmap(lambda a, b: 0.9 * b + 0.1 * a * a, g,
                         s.get("nu", R.tmap(np.zeros_like, g)))
        c = 1 - 0.9 ** t
        return R.tmap(lambda a, m, n: -0.1 * a / np.sqrt(n / c - (m / c) ** 2 + 1e-8),
                      g, s["mu"], s["nu"])
    compare(sc(optim.scale_by_stddev(bias_correction=True)), stddev, rtol=1e-6)


def test_scale_by_distance_over_gradients():
    def ref(g, p, v, s, t):
        if t == 1:
            s["p0"] = {k: x.copy() for k, x in p.items()}
            s["d"] = {k: 1e-6 * (1 + R.leaf_norm(x)) for k, x in p.items()}
            s["g2"] = {k: 0.0 for k in p}
        out = {}
        for k in g:
            s["d"][k] = max(s["d"][k], R.leaf_norm(p[k] - s["p0"][k]))
            s["g2"][k] += float(np.sum(g[k] ** 2))
            out[k] = -0.1 * s["d"][k] / np.sqrt(s["g2"][k] + 1e-8) * g[k]
        return out
    compare(sc(optim.scale_by_distance_over_gradients(param_dtype=fnp.float64), 100.0),
            lambda g, p, v, s, t: R.tmap(lambda u: 1000.0 * u, ref(g, p, v, s, t)), rtol=1e-6)


def test_scale_by_factored_rms_direct():
    ref = R.Adafactor(0.1, min_dim=2, clip=np.inf)
    got = run_funcgrad(optim.chain(optim.scale_by_factored_rms(min_dim_size_to_factor=2),
                                   optim.scale(-0.1)), "quadratic", 4)

    def no_param_scale(g, p, v, s, t):
        ones = R.tmap(np.ones_like, p)
        return ref(g, ones, v)
    want = run_numpy(Fn(no_param_scale), "quadratic", 4)
    np.testing.assert_allclose(got[-1]["m"], want[-1]["m"], rtol=1e-7)
    assert isinstance(optim.scale_by_factored_rms().init(to_fg(QP0)), optim.FactoredState)


def test_ema_apply_every_and_keep_nonnegative():
    def ema_ref(g, p, v, s, t):
        s["e"] = R.tmap(lambda a, b: 0.8 * b + 0.2 * a, g, s.get("e", R.tmap(np.zeros_like, g)))
        return R.tmap(lambda e: -0.1 * e / (1 - 0.8 ** t), s["e"])
    compare(sc(optim.ema(0.8)), ema_ref)

    def every_ref(g, p, v, s, t):
        acc = R.tmap(lambda a, b: a + (b if (t - 1) % 3 else 0.0), g,
                     s.get("acc", R.tmap(np.zeros_like, g)))
        s["acc"] = acc
        return R.tmap(lambda a: -0.1 * a * (t % 3 == 0), acc)
    compare(sc(optim.apply_every(3)), every_ref, steps=6)
    compare(optim.chain(optim.sgd(2.0), optim.keep_params_nonnegative()),
            lambda g, p, v, s, t: R.tmap(lambda a, b: np.where(b - 2 * a < 0, -b, -2 * a), g, p))


def test_zero_nans_and_add_noise_state():
    t = optim.zero_nans()
    u, s = t.update({"a": fnp.asarray([np.nan, 2.0]), "b": fnp.ones(1)},
                    t.init({"a": fnp.zeros(2), "b": fnp.zeros(1)}))
    assert u["a"].tolist() == [0.0, 2.0] and bool(s.found_nan["a"]) and not bool(s.found_nan["b"])
    assert isinstance(s, optim.ZeroNansState)
    noise = optim.add_noise(0.1, 0.55, key=3)
    st = noise.init(fnp.zeros(2))
    assert isinstance(st, optim.AddNoiseState) and int(st.count) == 0


def test_per_example_clipping():
    g = {"a": np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]]), "b": np.array([[0.0], [0.0], [2.0]])}
    total, n = optim.per_example_global_norm_clip(to_fg(g), 1.0)
    norms = np.sqrt((g["a"] ** 2).sum(1) + (g["b"] ** 2).sum(1))
    mult = np.minimum(1.0 / norms, 1.0)
    np.testing.assert_allclose(np.asarray(total["a"]), mult @ g["a"])
    assert int(n) == 2
    sums, counts = optim.per_example_layer_norm_clip(to_fg(g), 1.0)
    clip = 1.0 / np.sqrt(2)
    mult_a = np.minimum(clip / np.where((g["a"] ** 2).sum(1) > 0, np.sqrt((g["a"] ** 2).sum(1)),
                                        np.nan), 1.0)
    mult_a = np.where(np.isnan(mult_a), 1.0, mult_a)
    np.testing.assert_allclose(np.asarray(sums["a"]), mult_a @ g["a"])
    assert int(counts["b"]) == 1


# ---------------------------------------------------------------------------------------------
# wrappers
# ---------------------------------------------------------------------------------------------

def test_partition_multi_transform_named_chain_flatten():
    labels = {"w": "fast", "m": "slow"}
    opt = optim.partition({"fast": optim.sgd(0.2), "slow": optim.adam(0.1)}, labels)
    adam = R.Adam(0.1)

    def ref(g, p, v, s, t):
        adam.t = t
        return {"w": -0.2 * g["w"], "m": adam.direction({"m": g["m"]})["m"] * -0.1}
    compare(opt, ref)
    assert optim.multi_transform is optim.partition
    assert isinstance(opt.init(to_fg(QP0)), optim.MultiTransformState)
    compare(optim.named_chain(("clip", optim.clip(10.0)), ("sgd", optim.sgd(0.1))), lr_only())
    compare(optim.flatten(optim.adam(0.1)), lambda g, p, v, s, t: R.Adam.step(
        _bind(s, R.Adam(0.1), t), g, p, v))


def _bind(store, ref, t):
    """Keeps a reference's state inside a Fn's state dict across calls."""
    ref.s, ref.t = store.setdefault("inner", {}), t
    return ref


def test_masked_freeze_selective_transform():
    mask = {"w": True, "m": False}
    compare(optim.chain(optim.masked(optim.scale(3.0), mask), optim.scale(-0.1)),
            lambda g, p, v, s, t: {"w": -0.3 * g["w"], "m": -0.1 * g["m"]})
    compare(optim.chain(optim.sgd(0.1), optim.freeze(mask)),
            lambda g, p, v, s, t: {"w": 0 * g["w"], "m": -0.1 * g["m"]})
    compare(optim.selective_transform(optim.sgd(0.1), freeze_mask=mask),
            lambda g, p, v, s, t: {"w": 0 * g["w"], "m": -0.1 * g["m"]})


def test_conditionally_transform_and_mask():
    compare(optim.conditionally_transform(optim.sgd(0.1), lambda step: step % 2 == 1),
            lambda g, p, v, s, t: R.tmap(lambda a: -0.1 * a if t % 2 == 0 else a, g))
    compare(optim.conditionally_mask(optim.sgd(0.1), lambda step: step >= 2),
            lambda g, p, v, s, t: R.tmap(lambda a: -0.1 * a if t >= 3 else 0 * a, g))
    st = optim.conditionally_mask(optim.sgd(0.1), lambda step: True).init(fnp.zeros(1))
    assert isinstance(st, optim.ConditionallyMaskState)
    st = optim.conditionally_transform(optim.sgd(0.1), lambda step: True).init(fnp.zeros(1))
    assert isinstance(st, optim.ConditionallyTransformState)


def test_lookahead_against_the_two_speed_rule():
    opt = optim.lookahead(optim.sgd(0.1), sync_period=2, slow_step_size=0.5)
    params = optim.LookaheadParams.init_synced(to_fg(QP0))
    state = opt.init(params)
    fast = {k: v.copy() for k, v in QP0.items()}
    slow = {k: v.copy() for k, v in QP0.items()}
    for t in range(1, 7):
        grads = funcgrad.grad(quad_fg)(params.fast)
        updates, state = opt.update(grads, state, params)
        params = optim.apply_updates(params, updates)
        fast = {k: fast[k] - 0.1 * R.QC[k] * (fast[k] - R.QT[k]) for k in fast}
        if t % 2 == 0:
            slow = {k: slow[k] + 0.5 * (fast[k] - slow[k]) for k in slow}
            fast = {k: slow[k].copy() for k in slow}
        for k in fast:
            np.testing.assert_allclose(np.asarray(params.fast[k]), fast[k], rtol=1e-12)
            np.testing.assert_allclose(np.asarray(params.slow[k]), slow[k], rtol=1e-12)
    assert isinstance(state, optim.LookaheadState)


def test_multisteps_with_skip_functions():
    opt = optim.MultiSteps(optim.sgd(0.1), every_k_schedule=2,
                           should_skip_update_fn=optim.skip_not_finite)
    state = opt.init(fnp.zeros(2))
    u, state = opt.update(fnp.asarray([1.0, 3.0]), state)
    u, state = opt.update(fnp.asarray([np.nan, 0.0]), state)  # skipped
    assert u.tolist() == [0.0, 0.0] and int(state.skip_state["num_not_finite"]) == 1
    u, state = opt.update(fnp.asarray([3.0, 1.0]), state)
    np.testing.assert_allclose(u.tolist(), [-0.2, -0.2])
    skip, info = optim.skip_large_updates(fnp.asarray([3.0, 4.0]), 0, None, 26.0)
    assert not bool(skip) and float(info["norm_squared"]) == 25.0
    assert isinstance(state, optim.MultiStepsState)


def test_apply_if_finite_and_inject_hyperparams_forward_extra_args():
    opt = optim.apply_if_finite(optim.polyak_sgd(max_learning_rate=0.1), 2)
    compare(opt, lambda g, p, v, s, t: R.Polyak(0.1).step(g, p, v),
            extra=lambda value, loss: {"value": value})
    inj = optim.inject_hyperparams(optim.polyak_sgd)(max_learning_rate=0.1)
    compare(inj, lambda g, p, v, s, t: R.Polyak(0.1).step(g, p, v),
            extra=lambda value, loss: {"value": value})
    with pytest.warns(DeprecationWarning):
        inj2 = optim.inject_stateful_hyperparams(optim.sgd)(learning_rate=lambda c: 0.1)
    compare(inj2, lr_only())
    w = optim.WrappedSchedule(lambda c: c * 2)
    assert int(w(w.update(w.update(w.init())))) == 4


def test_monitor_snapshot_measure_with_ema():
    t = optim.monitor({"norm": lambda u: fnp.sum(u ** 2),
                       "avg": optim.measure_with_ema(lambda u: fnp.sum(u), 0.5)})
    s = t.init(fnp.zeros(2))
    u, s = t.update(fnp.asarray([1.0, 2.0]), s)
    assert u.tolist() == [1.0, 2.0] and float(s.measurements["norm"]) == 5.0
    assert float(s.measurements["avg"]) == 3.0  # debiased EMA of one value is the value
    u, s = t.update(fnp.asarray([3.0, 4.0]), s)
    np.testing.assert_allclose(float(s.measurements["avg"]), (0.25 * 3 + 0.5 * 7) / 0.75)
    assert isinstance(s, optim.MonitorState)
    snap = optim.snapshot("max", lambda u: fnp.max(u))
    _, st = snap.update(fnp.asarray([1.0, 5.0]), snap.init(fnp.zeros(2)))
    assert float(st.measurement["max"]) == 5.0 and isinstance(st, optim.SnapshotState)


def test_backtracking_linesearch_steps():
    f = R.PROBLEMS["quadratic"][0]
    opt = optim.chain(optim.sgd(1.0), optim.scale_by_backtracking_linesearch(
        max_backtracking_steps=15, store_grad=True))
    params = to_fg(QP0)
    state = opt.init(params)
    p = {k: v.copy() for k, v in QP0.items()}
    prev = 1.0
    for _ in range(4):
        value, grad = optim.value_and_grad_from_state(f)(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=f)
        params = optim.apply_updates(params, updates)
        g, v0 = R.quad_grad(p), R.quad_np(p)
        a = min(1.5 * prev, 1.0)
        for i in range(16):
            if i:
                a *= 0.8
            trial = {k: p[k] - a * g[k] for k in p}
            if R.quad_np(trial) - v0 + a * 1e-4 * R.vdot(g, g) <= 0:
                break
        prev, p = a, trial
        for k in p:
            np.testing.assert_allclose(np.asarray(params[k]), p[k], rtol=1e-10)
        np.testing.assert_allclose(float(state[1].value), R.quad_np(p), rtol=1e-10)
    assert isinstance(state[1], optim.ScaleByBacktrackingLinesearchState)


def test_zoom_linesearch_on_gradient_steps_keeps_its_step():
    f = R.PROBLEMS["rosenbrock"][0]
    opt = optim.chain(optim.scale(-1.0), optim.scale_by_zoom_linesearch(
        max_linesearch_steps=15))  # initial_guess_strategy="keep"
    params = to_fg(R.RP0)
    state = opt.init(params)
    p = {k: v.copy() for k, v in R.RP0.items()}
    prev = 1.0
    for _ in range(4):
        value, grad = optim.value_and_grad_from_state(f)(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=f)
        params = optim.apply_updates(params, updates)
        g = R.rosen_grad(p)
        d = {k: -v for k, v in g.items()}

        def phi(a, p=p, d=d):
            trial = {k: p[k] + a * d[k] for k in p}
            gt = R.rosen_grad(trial)
            return R.rosen_np(trial), R.vdot(gt, d), gt
        prev, _, _ = R.zoom_linesearch(phi, R.rosen_np(p), R.vdot(g, d), g, prev, 15)
        p = {k: p[k] + prev * d[k] for k in p}
        np.testing.assert_allclose(np.asarray(params["xy"]), p["xy"], rtol=1e-9)
        np.testing.assert_allclose(float(state[1].learning_rate), prev, rtol=1e-9)
    assert isinstance(state[1], optim.ScaleByZoomLinesearchState)
    assert isinstance(state[1].info, optim.ZoomLinesearchInfo)


# ---------------------------------------------------------------------------------------------
# numerics
# ---------------------------------------------------------------------------------------------

def test_numerics_helpers():
    x = fnp.asarray([3.0, 4.0])
    assert float(optim.safe_norm(x, 1.0)) == 5.0 and float(optim.safe_norm(x * 0, 2.0)) == 2.0
    g = funcgrad.grad(lambda v: optim.safe_norm(v, 1.0))(fnp.zeros(2))
    assert np.isfinite(np.asarray(g)).all()
    np.testing.assert_allclose(float(optim.safe_root_mean_squares(x, 0.1)), np.sqrt(12.5))
    assert int(optim.safe_increment(fnp.asarray(np.iinfo(np.int32).max, fnp.int32))) == \
        np.iinfo(np.int32).max
    assert optim.safe_int32_increment is optim.safe_increment
    np.testing.assert_allclose(optim.incremental_update(x, x * 0, 0.25).tolist(), [0.75, 1.0])
    assert optim.periodic_update(x, x * 0, 3, 2).tolist() == [0.0, 0.0]
    m = optim.update_moment(x, x * 0, 0.5, 2)
    assert m.tolist() == [4.5, 8.0]
    assert optim.update_moment_per_elem_norm(-x, x * 0, 0.5, 2).tolist() == [4.5, 8.0]
    assert optim.update_infinity_moment(-x, fnp.asarray([10.0, 1.0]), 0.5, 0.0).tolist() == \
        [5.0, 4.0]
    np.testing.assert_allclose(optim.bias_correction(x, 0.5, 2).tolist(), [4.0, 16 / 3])
    val, vec = optim.power_iteration(fnp.asarray(np.diag([3.0, 1.0])), num_iters=200)
    np.testing.assert_allclose(float(val), 3.0, rtol=1e-5)
    grad = funcgrad.grad(lambda v: fnp.sum(optim.scale_gradient(v, 0.25) ** 2))(x)
    np.testing.assert_allclose(np.asarray(grad), 0.25 * 2 * np.asarray(x))
    state = optim.adam(0.1).init({"a": fnp.ones(2)})
    mapped = optim.tree_map_params(optim.adam(0.1), lambda v: v + 2.0, state)
    assert mapped[0].nu["a"].tolist() == [2.0, 2.0] and int(mapped[0].count) == 0


def test_nnls_and_multi_normal():
    scipy_optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(3)
    A, b = rng.normal(size=(6, 3)), rng.normal(size=6)
    want, _ = scipy_optimize.nnls(A, b)
    got = np.asarray(optim.nnls(fnp.asarray(A), fnp.asarray(b), 3000))
    np.testing.assert_allclose(got, want, atol=1e-6)
    loc, log_scale = np.array([0.5, -1.0]), np.array([0.1, -0.3])
    d = optim.multi_normal(fnp.asarray(loc), fnp.asarray(log_scale))
    x = np.array([[0.2, 0.0], [1.0, -2.0]])
    sd = np.exp(log_scale)
    want = (-0.5 * ((x - loc) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)).sum(-1)
    np.testing.assert_allclose(np.asarray(d.log_prob(fnp.asarray(x))), want, rtol=1e-12)
    samples = np.asarray(d.sample((4000,), funcgrad.random.PRNGKey(0)))
    assert samples.shape == (4000, 2)
    np.testing.assert_allclose(samples.mean(0), loc, atol=0.1)
    np.testing.assert_allclose(samples.std(0), sd, rtol=0.1)


def test_dpsgd_clips_sums_noises_and_averages():
    rng = np.random.default_rng(5)
    grads = {"a": rng.normal(size=(4, 3)), "b": rng.normal(size=(4, 2, 2))}
    clip, mult, lr = 1.5, 0.7, 0.1
    opt = optim.dpsgd(lr, clip, mult, key=11, momentum=0.9)
    state = opt.init({"a": fnp.zeros(3), "b": fnp.zeros((2, 2))})
    key = funcgrad.random.PRNGKey(11)
    trace = {k: 0.0 for k in grads}
    for _ in range(2):
        updates, state = opt.update(to_fg(grads), state)
        norms = np.sqrt(sum((g.reshape(4, -1) ** 2).sum(1) for g in grads.values()))
        mult_i = np.minimum(clip / norms, 1.0)
        keys = funcgrad.random.split(key, 3)
        key = keys[0]
        for i, k in enumerate(("a", "b")):  # leaves in flattening order
            noise = np.asarray(funcgrad.random.normal(keys[i + 1], grads[k].shape[1:],
                                                      fnp.float64))
            agg = (np.tensordot(mult_i, grads[k], axes=1) + clip * mult * noise) / 4
            trace[k] = agg + 0.9 * trace[k]
            np.testing.assert_allclose(np.asarray(updates[k]), -lr * trace[k], rtol=1e-10)
    assert isinstance(state[0], optim.DifferentiallyPrivateAggregateState)
    assert optim.differentially_private_aggregate(1.0, 1.0, key=0).init(None).rng_key.shape \
        == (2,)
