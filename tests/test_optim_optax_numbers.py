"""optax's optimizers and scale_by_* transforms against their published update rules: a few
steps on a quadratic (a vector and a matrix leaf) and on Rosenbrock, funcgrad in float64 vs
plain-numpy references (tests/optim_refs.py); plus each step under jit equals the eager one."""
import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import optim
from funcgrad.tree_util import tree_map

import optim_refs as R
from optim_refs import PROBLEMS, QP0, quad_fg, run_funcgrad, run_numpy, to_fg


def value_kw(value, loss):
    return {"value": value}


def sc(t, lr):
    """A scale_by_* transform turned into a descent step of size lr."""
    return optim.chain(t, optim.scale(-lr))


LR = 0.05
# name -> (funcgrad optimizer factory, numpy reference factory(problem), steps, extra kwargs)
CASES = {
    "sgd": (lambda: optim.sgd(LR), lambda pb: R.Sgd(LR), 5, None),
    "sgd_momentum": (lambda: optim.sgd(LR, momentum=0.9), lambda pb: R.Sgd(LR, 0.9), 5, None),
    "sgd_nesterov": (lambda: optim.sgd(LR, 0.9, nesterov=True),
                     lambda pb: R.Sgd(LR, 0.9, True), 5, None),
    "trace": (lambda: sc(optim.trace(0.9), LR), lambda pb: R.Sgd(LR, 0.9), 5, None),
    "adam": (lambda: optim.adam(LR), lambda pb: R.Adam(LR), 5, None),
    "scale_by_adam": (lambda: sc(optim.scale_by_adam(), LR), lambda pb: R.Adam(LR), 5, None),
    "adamw": (lambda: optim.adamw(LR, weight_decay=0.1), lambda pb: R.Adam(LR, 0.1), 5, None),
    "nadam": (lambda: optim.nadam(LR), lambda pb: R.Adam(LR, nesterov=True), 5, None),
    "nadamw": (lambda: optim.nadamw(LR, weight_decay=0.1),
               lambda pb: R.Adam(LR, 0.1, nesterov=True), 5, None),
    "lamb": (lambda: optim.lamb(LR, weight_decay=0.01), lambda pb: R.Lamb(LR, 0.01), 5, None),
    "adamax": (lambda: optim.adamax(LR), lambda pb: R.Adamax(LR), 5, None),
    "scale_by_adamax": (lambda: sc(optim.scale_by_adamax(), LR), lambda pb: R.Adamax(LR), 5,
                        None),
    "adamaxw": (lambda: optim.adamaxw(LR, weight_decay=0.1),
                lambda pb: R.Adamax(LR, weight_decay=0.1), 5, None),
    "amsgrad": (lambda: optim.amsgrad(LR), lambda pb: R.Amsgrad(LR), 5, None),
    "scale_by_amsgrad": (lambda: sc(optim.scale_by_amsgrad(), LR), lambda pb: R.Amsgrad(LR), 5,
                         None),
    "adabelief": (lambda: optim.adabelief(LR), lambda pb: R.AdaBelief(LR), 5, None),
    "scale_by_belief": (lambda: sc(optim.scale_by_belief(), LR), lambda pb: R.AdaBelief(LR), 5,
                        None),
    "yogi": (lambda: optim.yogi(LR), lambda pb: R.Yogi(LR), 5, None),
    "scale_by_yogi": (lambda: sc(optim.scale_by_yogi(), LR), lambda pb: R.Yogi(LR), 5, None),
    "radam": (lambda: optim.radam(1e-3), lambda pb: R.RAdam(1e-3), 8, None),
    "scale_by_radam": (lambda: sc(optim.scale_by_radam(), 1e-3), lambda pb: R.RAdam(1e-3), 8,
                       None),
    "adagrad": (lambda: optim.adagrad(0.1), lambda pb: R.Adagrad(0.1), 5, None),
    "scale_by_rss": (lambda: sc(optim.scale_by_rss(), 0.1), lambda pb: R.Adagrad(0.1), 5, None),
    "adadelta": (lambda: optim.adadelta(1.0, weight_decay=0.01),
                 lambda pb: R.Adadelta(1.0, weight_decay=0.01), 5, None),
    "scale_by_adadelta": (lambda: sc(optim.scale_by_adadelta(), 1.0),
                          lambda pb: R.Adadelta(1.0), 5, None),
    "adan": (lambda: optim.adan(LR, weight_decay=0.01),
             lambda pb: R.Adan(LR, weight_decay=0.01), 5, None),
    "scale_by_adan": (lambda: sc(optim.scale_by_adan(eps_root=1e-8), LR),
                      lambda pb: R.Adan(LR), 5, None),
    "novograd": (lambda: optim.novograd(LR, weight_decay=0.01),
                 lambda pb: R.Novograd(LR, weight_decay=0.01), 5, None),
    "scale_by_novograd": (lambda: sc(optim.scale_by_novograd(eps=1e-6), LR),
                          lambda pb: R.Novograd(LR), 5, None),
    "lion": (lambda: optim.lion(LR), lambda pb: R.Lion(LR), 5, None),
    "scale_by_lion": (lambda: sc(optim.scale_by_lion(), LR),
                      lambda pb: R.Lion(LR, weight_decay=0.0), 5, None),
    "rmsprop": (lambda: optim.rmsprop(LR), lambda pb: R.Rmsprop(LR), 5, None),
    "scale_by_rms": (lambda: sc(optim.scale_by_rms(), LR), lambda pb: R.Rmsprop(LR), 5, None),
    "rprop": (lambda: optim.rprop(0.1), lambda pb: R.Rprop(0.1), 6, None),
    "scale_by_rprop": (lambda: optim.chain(optim.scale_by_rprop(0.1), optim.scale(-1.0)),
                       lambda pb: R.Rprop(0.1), 6, None),
    "sign_sgd": (lambda: optim.sign_sgd(LR), lambda pb: R.SignSgd(LR), 5, None),
    "scale_by_sign": (lambda: sc(optim.scale_by_sign(), LR), lambda pb: R.SignSgd(LR), 5, None),
    "signum": (lambda: optim.signum(LR), lambda pb: R.SignSgd(LR, 0.9), 5, None),
    "sm3": (lambda: optim.sm3(0.1), lambda pb: R.Sm3(0.1), 5, None),
    "scale_by_sm3": (lambda: sc(optim.scale_by_sm3(), 0.1), lambda pb: R.Sm3(0.1), 5, None),
    "fromage": (lambda: optim.fromage(0.1), lambda pb: R.Fromage(0.1), 5, None),
    "fromage_schedule": (lambda: optim.fromage(optim.constant_schedule(0.1)),
                         lambda pb: R.Fromage(0.1), 5, None),
    "lars": (lambda: optim.lars(0.5, weight_decay=0.01),
             lambda pb: R.Lars(0.5, weight_decay=0.01), 5, None),
    "polyak_sgd": (lambda: optim.polyak_sgd(max_learning_rate=0.1), lambda pb: R.Polyak(0.1),
                   5, value_kw),
    "scale_by_polyak": (lambda: optim.chain(optim.scale(-1.0), optim.scale_by_polyak(
        max_learning_rate=0.1)), lambda pb: R.Polyak(0.1), 5, value_kw),
    "optimistic_gradient_descent": (lambda: optim.optimistic_gradient_descent(LR, 1.0, 0.5),
                                    lambda pb: R.Optimistic(LR, 1.0, 0.5), 5, None),
    "scale_by_optimistic_gradient": (
        lambda: sc(optim.scale_by_optimistic_gradient(1.0, 0.5), LR),
        lambda pb: R.Optimistic(LR, 1.0, 0.5), 5, None),
    "optimistic_adam_v2": (lambda: optim.optimistic_adam_v2(LR),
                           lambda pb: R.Optimistic(LR, inner=R.AdamDir(nesterov=True)), 5,
                           None),
    "adafactor": (lambda: optim.adafactor(LR), lambda pb: R.Adafactor(LR), 5, None),
    "adafactor_factored": (lambda: optim.adafactor(LR, min_dim_size_to_factor=2),
                           lambda pb: R.Adafactor(LR, min_dim=2), 5, None),
    "lbfgs_fixed_step": (lambda: optim.lbfgs(0.1, linesearch=None),
                         lambda pb: R.Lbfgs(PROBLEMS[pb][1], lr=0.1, linesearch=False), 5,
                         None),
    "scale_by_lbfgs_memory2": (lambda: sc(optim.scale_by_lbfgs(memory_size=2), 0.1),
                               lambda pb: R.Lbfgs(PROBLEMS[pb][1], memory=2, lr=0.1,
                                                  linesearch=False), 5, None),
}


@pytest.mark.parametrize("problem", ["quadratic", "rosenbrock"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_against_published_rule(name, problem):
    make_opt, make_ref, steps, extra = CASES[name]
    got = run_funcgrad(make_opt(), problem, steps, extra)
    want = run_numpy(make_ref(problem), problem, steps)
    # float64 throughout, except Adafactor's decay, which optax computes in float32 (its pow
    # may differ from numpy's by an ulp)
    rtol = 1e-6 if name.startswith("adafactor") else 1e-10
    for i, (g, w) in enumerate(zip(got, want)):
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=rtol, atol=1e-12,
                                       err_msg=f"{name} on {problem}, step {i + 1}, leaf {k}")


def test_optimistic_adam_deprecated_alias():
    with pytest.warns(DeprecationWarning):
        opt = optim.optimistic_adam(LR, optimism=0.02)
    got = run_funcgrad(opt, "quadratic", 4)
    ref = R.Optimistic(1.0, alpha=LR, beta=0.02, inner=R.AdamDir(nesterov=True))
    want = run_numpy(ref, "quadratic", 4)
    np.testing.assert_allclose(got[-1]["m"], want[-1]["m"], rtol=2e-6)


def run_linesearch_opt(opt, problem, steps, jit=False):
    loss_fg = PROBLEMS[problem][0]
    params = to_fg(PROBLEMS[problem][3])
    state = opt.init(params)
    vg = optim.value_and_grad_from_state(loss_fg)

    def step(params, state):
        value, grad = vg(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad,
                                    value_fn=loss_fg)
        return optim.apply_updates(params, updates), state
    if jit:
        step = funcgrad.jit(step)
    got = []
    for _ in range(steps):
        params, state = step(params, state)
        got.append({k: np.asarray(v) for k, v in params.items()})
    return got


@pytest.mark.parametrize("problem", ["quadratic", "rosenbrock"])
@pytest.mark.parametrize("search", ["zoom", "backtracking"])
def test_lbfgs_with_line_search(problem, search):
    _, loss_np, grad_np, p0 = PROBLEMS[problem]
    if search == "zoom":  # optax's default
        opt, ref = optim.lbfgs(), R.Lbfgs(loss_np, linesearch="zoom", grad_fn=grad_np)
    else:
        opt = optim.lbfgs(linesearch=optim.scale_by_backtracking_linesearch(
            max_backtracking_steps=20, store_grad=True))
        ref = R.Lbfgs(loss_np)
    got = run_linesearch_opt(opt, problem, 10)
    want = run_numpy(ref, problem, 10)
    for i, (g, w) in enumerate(zip(got, want)):
        for k in w:
            np.testing.assert_allclose(g[k], w[k], rtol=1e-9, atol=1e-12, err_msg=f"step {i + 1}")
    assert loss_np(got[-1]) < loss_np(p0)


def test_lbfgs_zoom_converges_on_rosenbrock_and_jits():
    got = run_linesearch_opt(optim.lbfgs(), "rosenbrock", 40)
    np.testing.assert_allclose(got[-1]["xy"], [1.0, 1.0], atol=1e-6)
    eager = run_linesearch_opt(optim.lbfgs(), "quadratic", 2)
    jitted = run_linesearch_opt(optim.lbfgs(), "quadratic", 2, jit=True)
    for e, j in zip(eager, jitted):
        for k in e:
            np.testing.assert_allclose(j[k], e[k], rtol=1e-12, atol=1e-14)


def test_noisy_sgd_noise_follows_the_annealing_rule():
    eta, gamma, lr = 0.3, 0.55, 0.1
    opt = optim.noisy_sgd(lr, eta=eta, gamma=gamma, key=7)
    params = to_fg(QP0)
    state = opt.init(params)
    key = funcgrad.random.PRNGKey(7)
    for t in range(1, 4):
        grads = funcgrad.grad(quad_fg)(params)
        updates, state = opt.update(grads, state, params)
        key, sample = funcgrad.random.split(key)
        keys = funcgrad.random.split(sample, 2)  # one per leaf, in flattening order ("m", "w")
        for k, leaf_key in zip(("m", "w"), keys):
            noise = np.asarray(funcgrad.random.normal(leaf_key, QP0[k].shape, fnp.float64))
            want = -lr * (np.asarray(grads[k]) + np.sqrt(eta / t ** gamma) * noise)
            np.testing.assert_allclose(np.asarray(updates[k]), want, rtol=1e-6)
        params = optim.apply_updates(params, updates)


JIT_CASES = ["adam", "adamw", "nadam", "lamb", "adamax", "amsgrad", "adabelief", "yogi", "radam",
             "adagrad", "adadelta", "adan", "novograd", "lion", "rprop", "sign_sgd", "signum",
             "sm3", "fromage", "lars", "polyak_sgd", "optimistic_gradient_descent",
             "adafactor_factored", "lbfgs_fixed_step"]


@pytest.mark.parametrize("name", JIT_CASES)
def test_step_jits_to_the_same_numbers(name):
    make_opt, _, steps, extra = CASES[name]
    eager = run_funcgrad(make_opt(), "quadratic", 3, extra)
    jitted = run_funcgrad(make_opt(), "quadratic", 3, extra, jit=True)
    for e, j in zip(eager, jitted):
        for k in e:
            np.testing.assert_allclose(j[k], e[k], rtol=1e-12, atol=1e-14)


def test_float32_params_keep_their_dtype():
    for name in ("adam", "yogi", "sm3", "novograd", "adafactor_factored"):
        opt = CASES[name][0]()
        params = tree_map(lambda x: fnp.asarray(x, fnp.float32), to_fg(QP0))
        state = opt.init(params)
        grads = funcgrad.grad(lambda p: quad_fg(p))(params)
        updates, _ = opt.update(grads, state, params)
        new = optim.apply_updates(params, updates)
        assert all(v.dtype == fnp.float32 for v in new.values()), name
