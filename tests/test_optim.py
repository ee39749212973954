"""funcgrad.optim: optax's numbers (first steps by hand), convergence, compositions, schedules,
clipping and the wrappers (apply_if_finite, MultiSteps, inject_hyperparams, masked)."""
import math

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import optim
from funcgrad.tree_util import tree_leaves, tree_map

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

P0 = np.array([1.0, -2.0, 0.5], np.float32)
GRADS = [np.array(g, np.float32) for g in
         ([0.5, -1.0, 2.0], [0.25, 0.5, -1.5], [-1.0, 0.75, 0.1], [0.3, -0.2, 0.6])]


def run_updates(opt, grads=GRADS, params=P0):
    """The updates an optimizer returns for a sequence of gradients (params move along)."""
    params = fnp.asarray(params)
    state = opt.init(params)
    out = []
    for g in grads:
        u, state = opt.update(fnp.asarray(g), state, params)
        params = optim.apply_updates(params, u)
        out.append(np.asarray(u, np.float64))
    return out, state


def np_run(update_fn, grads=GRADS, params=P0):
    """The same loop for a float64 numpy reference ``update_fn(g, p, t) -> update``."""
    p = params.astype(np.float64)
    out = []
    for t, g in enumerate(grads, start=1):
        u = update_fn(g.astype(np.float64), p, t)
        p = p + u
        out.append(u)
    return out


def assert_updates_close(got, want, rtol=2e-5, atol=1e-7):
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"step {i + 1}")


# ---------------------------------------------------------------------------------------------
# first steps against hand-computed values
# ---------------------------------------------------------------------------------------------

def test_sgd_first_step_by_hand():
    (u1, *_), _ = run_updates(optim.sgd(0.1), GRADS[:1])
    np.testing.assert_allclose(u1, [-0.05, 0.1, -0.2], rtol=1e-6)


def test_sgd_momentum_by_hand():
    (u1, u2), _ = run_updates(optim.sgd(0.1, momentum=0.9), GRADS[:2])
    np.testing.assert_allclose(u1, [-0.05, 0.1, -0.2], rtol=1e-6)
    # trace = g2 + 0.9 * g1 = [0.7, -0.4, 0.3]
    np.testing.assert_allclose(u2, [-0.07, 0.04, -0.03], rtol=1e-5)


def test_sgd_nesterov_by_hand():
    (u1, u2), _ = run_updates(optim.sgd(0.1, momentum=0.9, nesterov=True), GRADS[:2])
    # t1 = g1; update = g1 + 0.9 t1 = 1.9 g1
    np.testing.assert_allclose(u1, [-0.095, 0.19, -0.38], rtol=1e-6)
    # t2 = g2 + 0.9 g1 = [0.7, -0.4, 0.3]; update = g2 + 0.9 t2 = [0.88, 0.14, -1.23]
    np.testing.assert_allclose(u2, [-0.088, -0.014, 0.123], rtol=1e-5)


def test_sgd_matches_reference():
    state = {}

    def ref(g, p, t):
        state["m"] = g + 0.5 * state.get("m", 0.0)
        return -0.05 * state["m"]
    assert_updates_close(run_updates(optim.sgd(0.05, momentum=0.5))[0], np_run(ref))


def test_adam_first_step_by_hand():
    # m_hat = g and v_hat = g**2 on the first step: the update is -lr * g / (|g| + eps)
    (u1,), state = run_updates(optim.adam(0.1), GRADS[:1])
    np.testing.assert_allclose(u1, -0.1 * np.sign(GRADS[0]), rtol=2e-5)
    adam_state = state[0]
    assert isinstance(adam_state, optim.ScaleByAdamState)
    assert int(adam_state.count) == 1
    np.testing.assert_allclose(np.asarray(adam_state.mu), 0.1 * GRADS[0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adam_state.nu), 0.001 * GRADS[0] ** 2, rtol=1e-5)


def _adam_ref(lr, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0, wd=0.0):
    s = {"m": 0.0, "v": 0.0}

    def ref(g, p, t):
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        m_hat, v_hat = s["m"] / (1 - b1 ** t), s["v"] / (1 - b2 ** t)
        return -lr * (m_hat / (np.sqrt(v_hat + eps_root) + eps) + wd * p)
    return ref


def test_adam_matches_reference():
    opt = optim.adam(0.01, b1=0.8, b2=0.99, eps=1e-3, eps_root=1e-4)
    assert_updates_close(run_updates(opt)[0], np_run(_adam_ref(0.01, 0.8, 0.99, 1e-3, 1e-4)))


def test_adamw_matches_reference():
    opt = optim.adamw(0.01, weight_decay=0.1)
    assert_updates_close(run_updates(opt)[0], np_run(_adam_ref(0.01, wd=0.1)))


def test_adamw_first_step_by_hand():
    (u1,), _ = run_updates(optim.adamw(0.1, weight_decay=0.5), GRADS[:1])
    np.testing.assert_allclose(u1, -0.1 * (np.sign(GRADS[0]) + 0.5 * P0), rtol=2e-5)


def test_nadam_matches_reference():
    s = {"m": 0.0, "v": 0.0}
    b1, b2, eps = 0.9, 0.999, 1e-8

    def ref(g, p, t):
        s["m"] = b1 * s["m"] + (1 - b1) * g
        s["v"] = b2 * s["v"] + (1 - b2) * g * g
        m_hat = b1 * s["m"] / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1 ** t)
        return -0.01 * m_hat / (np.sqrt(s["v"] / (1 - b2 ** t)) + eps)
    assert_updates_close(run_updates(optim.adam(0.01, nesterov=True))[0], np_run(ref))


def test_rmsprop_first_step_by_hand():
    (u1,), _ = run_updates(optim.rmsprop(0.01), GRADS[:1])
    # nu = 0.1 g**2, update = -lr g / sqrt(nu + eps) ~ -lr sign(g) / sqrt(0.1)
    np.testing.assert_allclose(u1, -0.01 * np.sign(GRADS[0]) / math.sqrt(0.1), rtol=1e-5)


def test_rmsprop_matches_reference():
    s = {"v": 0.0, "mu": 0.0, "m": 0.0}

    def ref(g, p, t):
        s["v"] = 0.8 * s["v"] + 0.2 * g * g
        s["m"] = -0.01 * g / np.sqrt(s["v"] + 1e-6) + 0.5 * s["m"]
        return s["m"]
    opt = optim.rmsprop(0.01, decay=0.8, eps=1e-6, momentum=0.5)
    assert_updates_close(run_updates(opt)[0], np_run(ref))


def test_rmsprop_centered_matches_reference():
    s = {"v": 0.0, "mu": 0.0}

    def ref(g, p, t):
        s["v"] = 0.9 * s["v"] + 0.1 * g * g
        s["mu"] = 0.9 * s["mu"] + 0.1 * g
        return -0.01 * g / np.sqrt(s["v"] - s["mu"] ** 2 + 1e-8)
    assert_updates_close(run_updates(optim.rmsprop(0.01, centered=True))[0], np_run(ref),
                         rtol=1e-4)


def test_lion_matches_reference_and_hand():
    (u1, *_), _ = run_updates(optim.lion(0.01, weight_decay=0.1), GRADS[:1])
    np.testing.assert_allclose(u1, -0.01 * (np.sign(GRADS[0]) + 0.1 * P0), rtol=1e-6)
    s = {"m": 0.0}

    def ref(g, p, t):
        d = np.sign(0.9 * s["m"] + 0.1 * g)
        s["m"] = 0.99 * s["m"] + 0.01 * g
        return -0.01 * (d + 0.1 * p)
    assert_updates_close(run_updates(optim.lion(0.01, weight_decay=0.1))[0], np_run(ref))


def test_updates_keep_param_dtype():
    params = {"a": fnp.ones(3, fnp.float64), "b": fnp.ones(2, fnp.float32)}
    grads = tree_map(lambda p: p * 0.5, params)
    for opt in (optim.adam(0.1), optim.sgd(0.1, 0.9), optim.rmsprop(0.1), optim.lion(0.1)):
        state = opt.init(params)
        for _ in range(2):
            u, state = opt.update(grads, state, params)
            new = optim.apply_updates(params, u)
        assert new["a"].dtype == np.float64 and new["b"].dtype == np.float32
        assert u["a"].dtype == np.float64 and u["b"].dtype == np.float32


def test_none_leaves_pass_through():
    params = {"w": fnp.ones(2), "frozen": None}
    opt = optim.adamw(0.1)
    state = opt.init(params)
    u, state = opt.update({"w": fnp.ones(2), "frozen": None}, state, params)
    assert u["frozen"] is None
    assert optim.apply_updates(params, u)["frozen"] is None


# ---------------------------------------------------------------------------------------------
# every alias minimizes a parabola and the Rosenbrock function
# ---------------------------------------------------------------------------------------------

def _minimize(opt, f, x0, steps):
    params = fnp.asarray(np.asarray(x0, np.float32))
    state = opt.init(params)

    @funcgrad.jit
    def step(params, state):
        g = funcgrad.grad(f)(params)
        u, state = opt.update(g, state, params)
        return optim.apply_updates(params, u), state

    for _ in range(steps):
        params, state = step(params, state)
    return np.asarray(params)


def _parabola(p):
    return fnp.sum((p - fnp.asarray([3.0, -1.0])) ** 2)


def _rosenbrock(p):
    x, y = p[0], p[1]
    return (1 - x) ** 2 + 100 * (y - x ** 2) ** 2


ALIASES = {
    "sgd": (optim.sgd(0.1), optim.sgd(1e-3, momentum=0.9)),
    "sgd_nesterov": (optim.sgd(0.05, momentum=0.5, nesterov=True),
                     optim.sgd(1e-3, momentum=0.9, nesterov=True)),
    "adam": (optim.adam(0.1), optim.adam(0.02)),
    "adamw": (optim.adamw(0.1, weight_decay=1e-4), optim.adamw(0.02, weight_decay=1e-4)),
    "rmsprop": (optim.rmsprop(optim.cosine_decay_schedule(0.1, 300, 0.001)),
                optim.rmsprop(optim.cosine_decay_schedule(1e-3, 2000, 0.01), momentum=0.9)),
    "lion": (optim.lion(optim.cosine_decay_schedule(0.1, 300, 0.001), weight_decay=0.0),
             optim.lion(optim.cosine_decay_schedule(0.02, 2000), weight_decay=0.0)),
}


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_alias_minimizes_parabola(name):
    x = _minimize(ALIASES[name][0], _parabola, [0.0, 0.0], 300)
    np.testing.assert_allclose(x, [3.0, -1.0], atol=1e-2)


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_alias_minimizes_rosenbrock(name):
    x = _minimize(ALIASES[name][1], _rosenbrock, [-1.0, 1.0], 2000)
    np.testing.assert_allclose(x, [1.0, 1.0], atol=2e-2)


# ---------------------------------------------------------------------------------------------
# equivalent compositions agree
# ---------------------------------------------------------------------------------------------

def _same_updates(a, b, grads=GRADS, rtol=0.0, atol=0.0):
    ua, _ = run_updates(a, grads)
    ub, _ = run_updates(b, grads)
    for x, y in zip(ua, ub):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def test_adam_is_its_chain():
    _same_updates(optim.adam(0.01),
                  optim.chain(optim.scale_by_adam(), optim.scale_by_learning_rate(0.01)))


def test_adamw_is_its_chain():
    _same_updates(optim.adamw(0.01, weight_decay=0.1),
                  optim.chain(optim.scale_by_adam(), optim.add_decayed_weights(0.1),
                              optim.scale(-0.01)))


def test_sgd_momentum_is_its_chain():
    _same_updates(optim.sgd(0.01, momentum=0.9),
                  optim.chain(optim.trace(0.9), optim.scale_by_learning_rate(0.01)))


def test_learning_rate_schedule_is_scale_by_schedule():
    sched = optim.exponential_decay(0.1, 2, 0.5)
    _same_updates(optim.sgd(sched),
                  optim.chain(optim.identity(), optim.scale_by_schedule(lambda c: -sched(c))))


def test_constant_schedule_equals_float_rate():
    _same_updates(optim.adam(optim.constant_schedule(0.01)), optim.adam(0.01))


def test_chain_of_nothing_is_identity():
    _same_updates(optim.chain(), optim.identity())


def test_multi_steps_k1_is_inner():
    _same_updates(optim.MultiSteps(optim.adam(0.01), 1).gradient_transformation(),
                  optim.adam(0.01))


def test_inject_hyperparams_is_inner():
    # the injected hyperparameters are float32 arrays (1 - b2 rounds differently than with a
    # Python float), so the two agree to float32 rounding rather than bit for bit
    _same_updates(optim.inject_hyperparams(optim.adamw)(0.01, weight_decay=0.1),
                  optim.adamw(0.01, weight_decay=0.1), rtol=2e-5, atol=1e-7)


def test_adamw_mask():
    params = {"w": fnp.ones(2), "b": fnp.ones(2)}
    grads = {"w": fnp.zeros(2), "b": fnp.zeros(2)}
    for mask in ({"w": True, "b": False}, lambda p: {"w": True, "b": False}):
        opt = optim.adamw(0.1, weight_decay=0.5, mask=mask)
        u, _ = opt.update(grads, opt.init(params), params)
        np.testing.assert_allclose(np.asarray(u["w"]), [-0.05, -0.05], rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(u["b"]), [0.0, 0.0])


def test_masked_keeps_state_only_for_unmasked_leaves():
    params = {"w": fnp.ones(2), "b": fnp.ones(3)}
    opt = optim.masked(optim.scale_by_adam(), {"w": True, "b": False})
    state = opt.init(params)
    assert [leaf.shape for leaf in tree_leaves(state.inner_state.mu)] == [(2,)]
    grads = {"w": fnp.full(2, 2.0), "b": fnp.full(3, 7.0)}
    u, _ = opt.update(grads, state, params)
    np.testing.assert_array_equal(np.asarray(u["b"]), [7.0, 7.0, 7.0])
    np.testing.assert_allclose(np.asarray(u["w"]), [1.0, 1.0], rtol=2e-5)


# ---------------------------------------------------------------------------------------------
# schedules against closed forms
# ---------------------------------------------------------------------------------------------

COUNTS = [0, 1, 5, 9, 10, 11, 37, 100, 250]


def _check_schedule(sched, closed_form, counts=COUNTS):
    for c in counts:
        np.testing.assert_allclose(float(sched(c)), closed_form(c), rtol=1e-5, atol=1e-7,
                                   err_msg=f"count {c}")
        # the same value for a traced int32 count
        np.testing.assert_allclose(float(sched(fnp.asarray(c, fnp.int32))), closed_form(c),
                                   rtol=1e-5, atol=1e-7)


def test_constant_schedule():
    _check_schedule(optim.constant_schedule(0.3), lambda c: 0.3)


def test_linear_schedule():
    _check_schedule(optim.linear_schedule(1.0, 0.1, 100, transition_begin=10),
                    lambda c: 1.0 + (0.1 - 1.0) * min(max(c - 10, 0), 100) / 100)


def test_polynomial_schedule():
    _check_schedule(optim.polynomial_schedule(2.0, 0.5, 3, 50, transition_begin=5),
                    lambda c: (2.0 - 0.5) * (1 - min(max(c - 5, 0), 50) / 50) ** 3 + 0.5)


def test_cosine_decay_schedule():
    _check_schedule(optim.cosine_decay_schedule(0.5, 200, alpha=0.1, exponent=2.0),
                    lambda c: 0.5 * (0.9 * (0.5 * (1 + math.cos(math.pi * min(c, 200) / 200)))
                                     ** 2 + 0.1))


def test_exponential_decay():
    _check_schedule(optim.exponential_decay(1.0, 10, 0.5, transition_begin=5),
                    lambda c: 1.0 if c <= 5 else 0.5 ** ((c - 5) / 10))
    _check_schedule(optim.exponential_decay(1.0, 10, 0.5, staircase=True, end_value=0.02),
                    lambda c: max(0.5 ** math.floor(c / 10), 0.02))
    _check_schedule(optim.exponential_decay(1.0, 10, 2.0, end_value=3.0),
                    lambda c: min(2.0 ** (c / 10), 3.0))


def test_warmup_cosine_decay_schedule():
    def closed(c):
        if c < 10:
            return 0.01 + (1.0 - 0.01) * c / 10
        t = min(c - 10, 90)
        return 1.0 * ((1 - 0.05) * 0.5 * (1 + math.cos(math.pi * t / 90)) + 0.05)
    _check_schedule(optim.warmup_cosine_decay_schedule(0.01, 1.0, 10, 100, end_value=0.05),
                    closed)


def test_join_and_piecewise_schedules():
    s = optim.join_schedules([optim.constant_schedule(1.0), optim.linear_schedule(1.0, 0.0, 10),
                              optim.constant_schedule(0.5)], [5, 20])
    _check_schedule(s, lambda c: 1.0 if c < 5 else (max(0.0, 1 - (c - 5) / 10) if c < 20
                                                    else 0.5))
    _check_schedule(optim.piecewise_constant_schedule(1.0, {10: 0.5, 100: 0.1}),
                    lambda c: 1.0 * (0.5 if c >= 10 else 1) * (0.1 if c >= 100 else 1))


# ---------------------------------------------------------------------------------------------
# clipping
# ---------------------------------------------------------------------------------------------

def test_clip_by_global_norm():
    t = optim.clip_by_global_norm(1.0)
    g = {"a": fnp.asarray([3.0, 0.0]), "b": fnp.asarray([[4.0]])}  # norm 5
    u, _ = t.update(g, t.init(g))
    np.testing.assert_allclose(np.asarray(u["a"]), [0.6, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(u["b"]), [[0.8]], rtol=1e-6)
    np.testing.assert_allclose(float(optim.global_norm(u)), 1.0, rtol=1e-6)
    small = {"a": fnp.asarray([0.3, 0.0]), "b": fnp.asarray([[0.4]])}
    u, _ = t.update(small, t.init(small))
    np.testing.assert_array_equal(np.asarray(u["a"]), np.float32([0.3, 0.0]))
    zero = {"a": fnp.zeros(2)}  # a zero gradient stays zero (no 0/0)
    np.testing.assert_array_equal(np.asarray(t.update(zero, t.init(zero))[0]["a"]), [0, 0])


def test_clip():
    t = optim.clip(0.5)
    u, _ = t.update(fnp.asarray([-2.0, 0.1, 3.0]), t.init(None))
    np.testing.assert_array_equal(np.asarray(u), np.float32([-0.5, 0.1, 0.5]))


# ---------------------------------------------------------------------------------------------
# apply_if_finite
# ---------------------------------------------------------------------------------------------

def test_apply_if_finite_skips_nan_updates():
    opt = optim.apply_if_finite(optim.adam(0.1), max_consecutive_errors=2)
    params = fnp.ones(2)
    state = opt.init(params)
    u, state = opt.update(fnp.asarray([1.0, 1.0]), state, params)
    good_inner = state.inner_state
    assert bool(state.last_finite) and int(state.notfinite_count) == 0
    bad = fnp.asarray([np.nan, 1.0])
    for i in range(2):  # skipped: zero update, inner state untouched
        u, state = opt.update(bad, state, params)
        np.testing.assert_array_equal(np.asarray(u), [0.0, 0.0])
        for a, b in zip(tree_leaves(state.inner_state), tree_leaves(good_inner)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        assert not bool(state.last_finite)
        assert int(state.notfinite_count) == i + 1 and int(state.total_notfinite) == i + 1
    u, state = opt.update(bad, state, params)  # the third in a row goes through
    assert np.isnan(np.asarray(u)).any()
    u, state = opt.update(fnp.asarray([1.0, 1.0]), state, params)
    assert int(state.notfinite_count) == 0 and int(state.total_notfinite) == 3
    inf = fnp.asarray([np.inf, 0.0])
    u, state = opt.update(inf, state, params)
    np.testing.assert_array_equal(np.asarray(u), [0.0, 0.0])


# ---------------------------------------------------------------------------------------------
# MultiSteps
# ---------------------------------------------------------------------------------------------

def test_multi_steps_k4_equals_one_step_on_the_mean_gradient():
    inner = optim.adam(0.1)
    ms = optim.MultiSteps(inner, every_k_schedule=4)
    params = {"w": fnp.asarray(P0)}
    ms_params, ms_state = params, ms.init(params)
    ref_params, ref_state = params, inner.init(params)
    for cycle in range(2):
        grads = GRADS if cycle == 0 else GRADS[::-1]
        for i, g in enumerate(grads):
            u, ms_state = ms.update({"w": fnp.asarray(g)}, ms_state, ms_params)
            ms_params = optim.apply_updates(ms_params, u)
            assert bool(ms.has_updated(ms_state)) == (i == 3)
            if i < 3:
                np.testing.assert_array_equal(np.asarray(u["w"]), np.zeros(3))
        mean = {"w": fnp.asarray(np.mean(grads, axis=0))}
        u, ref_state = inner.update(mean, ref_state, ref_params)
        ref_params = optim.apply_updates(ref_params, u)
        np.testing.assert_allclose(np.asarray(ms_params["w"]), np.asarray(ref_params["w"]),
                                   rtol=1e-6, atol=1e-7)
        assert int(ms_state.gradient_step) == cycle + 1 and int(ms_state.mini_step) == 0


def test_multi_steps_sum_and_schedule():
    ms = optim.MultiSteps(optim.sgd(1.0), every_k_schedule=lambda step: 2,
                          use_grad_mean=False)
    state = ms.init(fnp.zeros(1))
    u, state = ms.update(fnp.ones(1), state)
    u, state = ms.update(fnp.full(1, 3.0), state)
    np.testing.assert_array_equal(np.asarray(u), [-4.0])


# ---------------------------------------------------------------------------------------------
# inject_hyperparams
# ---------------------------------------------------------------------------------------------

def test_inject_hyperparams_changes_the_learning_rate():
    opt = optim.inject_hyperparams(optim.sgd)(learning_rate=0.1, momentum=0.9)
    params = fnp.zeros(2)
    state = opt.init(params)
    assert set(state.hyperparams) == {"learning_rate", "momentum"}
    assert state.hyperparams["learning_rate"].dtype == np.float32
    u, state = opt.update(fnp.ones(2), state, params)
    np.testing.assert_allclose(np.asarray(u), [-0.1, -0.1], rtol=1e-6)
    state.hyperparams["learning_rate"] = fnp.asarray(0.01)
    u, state = opt.update(fnp.ones(2), state, params)
    np.testing.assert_allclose(np.asarray(u), [-0.019, -0.019], rtol=1e-5)  # trace = 1.9
    assert float(state.hyperparams["learning_rate"]) == pytest.approx(0.01)


def test_inject_hyperparams_without_retracing():
    opt = optim.inject_hyperparams(optim.adam)(learning_rate=0.1)
    params = fnp.ones(3)

    @funcgrad.jit
    def step(params, state):
        u, state = opt.update(params * 2.0, state, params)
        return optim.apply_updates(params, u), state

    state = opt.init(params)
    params, state = step(params, state)
    before = np.asarray(params)
    state.hyperparams["learning_rate"] = fnp.asarray(0.0, fnp.float32)
    params, state = step(params, state)
    np.testing.assert_array_equal(np.asarray(params), before)  # a zero rate: no change
    assert step.stats()["traces"] == 1


def test_inject_hyperparams_with_schedule():
    sched = optim.linear_schedule(1.0, 0.0, 4)
    opt = optim.inject_hyperparams(optim.sgd)(learning_rate=sched)
    state = opt.init(fnp.zeros(1))
    assert float(state.hyperparams["learning_rate"]) == 1.0
    rates = []
    for _ in range(3):
        u, state = opt.update(fnp.ones(1), state)
        rates.append(-float(np.asarray(u)[0]))
        assert float(state.hyperparams["learning_rate"]) == pytest.approx(rates[-1])
    np.testing.assert_allclose(rates, [1.0, 0.75, 0.5])


# ---------------------------------------------------------------------------------------------
# a whole training step traces into one expression
# ---------------------------------------------------------------------------------------------

def test_full_step_traces_without_python_branching():
    opt = optim.MultiSteps(optim.apply_if_finite(optim.chain(
        optim.clip_by_global_norm(1.0),
        optim.adamw(optim.warmup_cosine_decay_schedule(0.0, 1e-2, 5, 50), weight_decay=0.1,
                    mask=lambda p: {"w": True, "b": False})), 3), 2)
    params = {"w": fnp.ones((3, 2)), "b": fnp.zeros(2)}

    def loss(p, x):
        return fnp.sum((x @ p["w"] + p["b"]) ** 2)

    def step(params, state, x):
        g = funcgrad.grad(loss)(params, x)
        u, state = opt.update(g, state, params)
        return optim.apply_updates(params, u), state

    x = fnp.ones((4, 3))
    state = opt.init(params)
    closed = funcgrad.make_jaxpr(step)(params, state, x)
    assert closed is not None
    jitted = funcgrad.jit(step)
    p_eager, s_eager = params, state
    p_jit, s_jit = params, state
    for _ in range(4):
        p_eager, s_eager = step(p_eager, s_eager, x)
        p_jit, s_jit = jitted(p_jit, s_jit, x)
    for a, b in zip(tree_leaves((p_eager, s_eager)), tree_leaves((p_jit, s_jit))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    assert jitted.stats()["traces"] == 1
