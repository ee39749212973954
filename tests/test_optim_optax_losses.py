"""funcgrad.optim.losses and the schedules against numpy formulas (small random inputs), the
losses' gradients against finite differences, and CTC against a brute-force path sum."""
import itertools
import math

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import optim
from funcgrad.optim import losses as L

RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 4))
Y = RNG.normal(size=(3, 4))
P = np.exp(Y) / np.exp(Y).sum(-1, keepdims=True)  # target probabilities
B = (RNG.uniform(size=(3, 4)) > 0.5).astype(np.float64)


def f(x):
    return fnp.asarray(np.asarray(x, np.float64))


def log_softmax(x, axis=-1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def log_sigmoid(x):
    return -np.logaddexp(0, -x)


LOSS_CASES = {
    "sigmoid_binary_cross_entropy": (lambda: L.sigmoid_binary_cross_entropy(f(X), f(B)),
                                     -B * log_sigmoid(X) - (1 - B) * log_sigmoid(-X)),
    "hinge_loss": (lambda: L.hinge_loss(f(X), f(2 * B - 1)), np.maximum(0, 1 - X * (2 * B - 1))),
    "perceptron_loss": (lambda: L.perceptron_loss(f(X), f(2 * B - 1)),
                        np.maximum(0, -X * (2 * B - 1))),
    "sparsemax_loss": (lambda: L.sparsemax_loss(f(X), f(B)), np.where(
        np.where(B > 0, -X, X) <= -1, 0, np.where(np.where(B > 0, -X, X) >= 1,
                                                  np.where(B > 0, -X, X),
                                                  (np.where(B > 0, -X, X) + 1) ** 2 / 4))),
    "softmax_cross_entropy": (lambda: L.softmax_cross_entropy(f(X), f(P)),
                              -(P * log_softmax(X)).sum(-1)),
    "safe_softmax_cross_entropy": (lambda: L.safe_softmax_cross_entropy(f(X), f(P)),
                                   -(P * log_softmax(X)).sum(-1)),
    "softmax_cross_entropy_with_integer_labels": (
        lambda: L.softmax_cross_entropy_with_integer_labels(f(X), fnp.asarray([0, 3, 1])),
        -log_softmax(X)[np.arange(3), [0, 3, 1]]),
    "multiclass_hinge_loss": (lambda: L.multiclass_hinge_loss(f(X), fnp.asarray([0, 3, 1])),
                              (X + 1 - np.eye(4)[[0, 3, 1]]).max(-1) - X[np.arange(3), [0, 3, 1]]),
    "multiclass_perceptron_loss": (
        lambda: L.multiclass_perceptron_loss(f(X), fnp.asarray([0, 3, 1])),
        X.max(-1) - X[np.arange(3), [0, 3, 1]]),
    "poly_loss_cross_entropy": (
        lambda: L.poly_loss_cross_entropy(f(X), f(P), epsilon=1.5),
        -(P * log_softmax(X)).sum(-1) + 1.5 * (P * (1 - np.exp(log_softmax(X)))).sum(-1)),
    "kl_divergence": (lambda: L.kl_divergence(f(log_softmax(X)), f(P)),
                      (P * (np.log(P) - log_softmax(X))).sum(-1)),
    "kl_divergence_with_log_targets": (
        lambda: L.kl_divergence_with_log_targets(f(log_softmax(X)), f(np.log(P))),
        (P * (np.log(P) - log_softmax(X))).sum(-1)),
    "generalized_kl_divergence": (
        lambda: L.generalized_kl_divergence(f(X), f(P)),
        (P * (np.log(P) - X)).sum(-1) + (np.exp(X) - P).sum(-1)),
    "convex_kl_divergence": (lambda: L.convex_kl_divergence(f(X), f(P)),
                             (P * (np.log(P) - X)).sum(-1) + (np.exp(X) - P).sum(-1)),
    "sigmoid_focal_loss": (
        lambda: L.sigmoid_focal_loss(f(X), f(B), alpha=0.25, gamma=2.0),
        (0.25 * B + 0.75 * (1 - B)) * (-B * log_sigmoid(X) - (1 - B) * log_sigmoid(-X))
        * (1 - (B / (1 + np.exp(-X)) + (1 - B) / (1 + np.exp(X)))) ** 2),
    "squared_error": (lambda: L.squared_error(f(X), f(Y)), (X - Y) ** 2),
    "l2_loss": (lambda: L.l2_loss(f(X), f(Y)), 0.5 * (X - Y) ** 2),
    "huber_loss": (lambda: L.huber_loss(f(X), f(Y), delta=0.7), np.where(
        np.abs(X - Y) <= 0.7, 0.5 * (X - Y) ** 2, 0.7 * (np.abs(X - Y) - 0.35))),
    "log_cosh": (lambda: L.log_cosh(f(X), f(Y)), np.log(np.cosh(X - Y))),
    "cosine_similarity": (lambda: L.cosine_similarity(f(X), f(Y)), (X * Y).sum(-1) / (
        np.linalg.norm(X, axis=-1) * np.linalg.norm(Y, axis=-1))),
    "cosine_distance": (lambda: L.cosine_distance(f(X), f(Y)), 1 - (X * Y).sum(-1) / (
        np.linalg.norm(X, axis=-1) * np.linalg.norm(Y, axis=-1))),
    "smooth_labels": (lambda: L.smooth_labels(f(P), 0.2), 0.8 * P + 0.2 / 4),
    "triplet_margin_loss": (
        lambda: L.triplet_margin_loss(f(X), f(Y), f(P), margin=0.5),
        np.maximum(np.sqrt(((X - Y) ** 2).sum(-1) + 1e-6)
                   - np.sqrt(((X - P) ** 2).sum(-1) + 1e-6) + 0.5, 0)),
}


@pytest.mark.parametrize("name", sorted(LOSS_CASES))
def test_loss_values(name):
    fn, want = LOSS_CASES[name]
    np.testing.assert_allclose(np.asarray(fn()), want, rtol=1e-10, atol=1e-12)


def test_top_level_loss_aliases_are_the_losses():
    for name in ("softmax_cross_entropy", "sigmoid_binary_cross_entropy", "ctc_loss", "l2_loss",
                 "huber_loss", "kl_divergence", "ntxent", "sigmoid_focal_loss", "squared_error",
                 "smooth_labels", "log_cosh", "hinge_loss", "cosine_similarity",
                 "cosine_distance", "convex_kl_divergence", "generalized_kl_divergence",
                 "ctc_loss_with_forward_probs", "safe_softmax_cross_entropy",
                 "softmax_cross_entropy_with_integer_labels"):
        assert getattr(optim, name) is getattr(L, name)


def test_masked_cross_entropy_and_integer_labels_where():
    where = np.array([[True, True, False, True]] * 3)
    got = L.softmax_cross_entropy(f(X), f(P * where), where=fnp.asarray(where))
    xm = np.where(where, X, -np.inf)
    lsm = xm - np.log(np.exp(xm).sum(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(got), -np.where(where, P * lsm, 0).sum(-1), rtol=1e-10)
    got = L.softmax_cross_entropy_with_integer_labels(f(X), fnp.asarray([0, 3, 1]),
                                                      where=fnp.asarray(where))
    np.testing.assert_allclose(np.asarray(got), -lsm[np.arange(3), [0, 3, 1]], rtol=1e-10)


@pytest.mark.parametrize("name", ["sigmoid_binary_cross_entropy", "softmax_cross_entropy",
                                  "huber_loss", "log_cosh", "cosine_similarity",
                                  "sigmoid_focal_loss", "poly_loss_cross_entropy"])
def test_loss_gradients_match_finite_differences(name):
    second = {"sigmoid_binary_cross_entropy": B, "softmax_cross_entropy": P,
              "huber_loss": Y, "log_cosh": Y, "cosine_similarity": Y, "sigmoid_focal_loss": B,
              "poly_loss_cross_entropy": P}[name]
    fn = getattr(L, name)

    def total(x):
        return fnp.sum(fn(x, f(second)))
    g = np.asarray(funcgrad.grad(total)(f(X)))
    eps = 1e-6
    for idx in [(0, 0), (1, 2), (2, 3)]:
        xp, xm = X.copy(), X.copy()
        xp[idx] += eps
        xm[idx] -= eps
        fd = (float(total(f(xp))) - float(total(f(xm)))) / (2 * eps)
        np.testing.assert_allclose(g[idx], fd, rtol=1e-5, atol=1e-8)


def test_ctc_matches_brute_force_path_sum():
    rng = np.random.default_rng(1)
    T, K = 4, 3
    logits = rng.normal(size=(2, T, K))
    labels = np.array([[1, 2], [2, 2]])
    label_pad = np.array([[0.0, 0.0], [0.0, 1.0]])  # the second sequence is just [2]
    logit_pad = np.array([[0.0] * T, [0.0, 0.0, 0.0, 1.0]])  # the second has 3 frames
    got = np.asarray(optim.ctc_loss(f(logits), f(logit_pad), fnp.asarray(labels), f(label_pad)))

    def brute(lg, target):
        lp = log_softmax(lg)
        total = -np.inf
        for path in itertools.product(range(K), repeat=len(lg)):
            collapsed = [c for i, c in enumerate(path) if i == 0 or c != path[i - 1]]
            if [c for c in collapsed if c != 0] == target:
                total = np.logaddexp(total, sum(lp[t, c] for t, c in enumerate(path)))
        return -total
    np.testing.assert_allclose(got, [brute(logits[0], [1, 2]), brute(logits[1][:3], [2])],
                               rtol=1e-6)
    loss, phi, emit = optim.ctc_loss_with_forward_probs(f(logits), f(logit_pad),
                                                        fnp.asarray(labels), f(label_pad))
    assert phi.shape == (T, 2, 3) and emit.shape == (T, 2, 2)


def test_ntxent_against_numpy():
    e = RNG.normal(size=(4, 3))
    labels = np.array([0, 0, 1, 1])
    u = e / np.linalg.norm(e, axis=1, keepdims=True)
    sim = u @ u.T / 0.07
    total, count = 0.0, 0
    for i in range(4):
        for j in range(4):
            if i != j and labels[i] == labels[j]:
                neg = [np.exp(sim[i, k]) for k in range(4) if labels[k] != labels[i]]
                total += -(sim[i, j] - np.log(np.exp(sim[i, j]) + sum(neg)))
                count += 1
    np.testing.assert_allclose(float(L.ntxent(f(e), fnp.asarray(labels))), total / count,
                               rtol=1e-8)


# ---------------------------------------------------------------------------------------------
# schedules
# ---------------------------------------------------------------------------------------------

def cos_interp(a, b, pct):
    return b + (a - b) / 2 * (math.cos(math.pi * pct) + 1)


def piecewise(kind, init, bs, c):
    bounds = [0] + sorted(bs)
    vals = [init]
    for b in sorted(bs):
        vals.append(vals[-1] * bs[b])
    if c >= bounds[-1]:
        return vals[-1]
    i = max(j for j in range(len(bounds) - 1) if bounds[j] <= c)
    pct = (c - bounds[i]) / max(bounds[i + 1] - bounds[i], 1)
    if kind == "linear":
        return vals[i] + (vals[i + 1] - vals[i]) * pct
    return cos_interp(vals[i], vals[i + 1], pct)


def warmup_cos(init, peak, warm, decay, end, c):
    if c < warm:
        return init + (peak - init) * c / warm
    t = min(c - warm, decay - warm)
    return (peak - end) * 0.5 * (1 + math.cos(math.pi * t / (decay - warm))) + end


SCHEDULE_CASES = {
    "constant_schedule": (optim.constant_schedule(0.3), lambda c: 0.3),
    "linear_schedule": (optim.linear_schedule(1.0, 0.2, 10, 3),
                        lambda c: 1.0 + (0.2 - 1.0) * min(max(c - 3, 0), 10) / 10),
    "polynomial_schedule": (optim.polynomial_schedule(1.0, 0.1, 2, 10),
                            lambda c: 0.9 * (1 - min(c, 10) / 10) ** 2 + 0.1),
    "cosine_decay_schedule": (optim.cosine_decay_schedule(1.0, 20, alpha=0.1),
                              lambda c: 0.9 * 0.5 * (1 + math.cos(math.pi * min(c, 20) / 20))
                              + 0.1),
    "exponential_decay": (optim.exponential_decay(1.0, 5, 0.5, transition_begin=2),
                          lambda c: 1.0 if c <= 2 else 0.5 ** ((c - 2) / 5)),
    "piecewise_constant_schedule": (optim.piecewise_constant_schedule(1.0, {5: 0.5, 15: 0.1}),
                                    lambda c: 1.0 * (0.5 if c >= 5 else 1) * (0.1 if c >= 15
                                                                              else 1)),
    "piecewise_interpolate_schedule": (
        optim.piecewise_interpolate_schedule("cosine", 2.0, {4: 0.5, 12: 3.0}),
        lambda c: piecewise("cosine", 2.0, {4: 0.5, 12: 3.0}, c)),
    "linear_onecycle_schedule": (
        optim.linear_onecycle_schedule(20, 1.0),
        lambda c: piecewise("linear", 1 / 25, {6: 25.0, 17: 1 / 25, 20: 1e-4}, c)),
    "cosine_onecycle_schedule": (
        optim.cosine_onecycle_schedule(20, 1.0),
        lambda c: piecewise("cosine", 1 / 25, {6: 25.0, 20: 1 / (25 * 1e4)}, c)),
    "warmup_constant_schedule": (optim.warmup_constant_schedule(0.0, 1.0, 8),
                                 lambda c: min(c, 8) / 8),
    "warmup_cosine_decay_schedule": (optim.warmup_cosine_decay_schedule(0.1, 1.0, 5, 25, 0.05),
                                     lambda c: warmup_cos(0.1, 1.0, 5, 25, 0.05, c)),
    "warmup_exponential_decay_schedule": (
        optim.warmup_exponential_decay_schedule(0.0, 1.0, 5, 4, 0.5, staircase=True),
        lambda c: c / 5 if c < 5 else 0.5 ** math.floor((c - 5) / 4)),
    "sgdr_schedule": (
        optim.sgdr_schedule([dict(init_value=0.0, peak_value=1.0, warmup_steps=2,
                                  decay_steps=10)] * 3),
        lambda c: warmup_cos(0.0, 1.0, 2, 10, 0.0, c - 10 * min(c // 10, 2))),
    "join_schedules": (optim.join_schedules([optim.constant_schedule(1.0),
                                             optim.linear_schedule(1.0, 0.0, 10)], [5]),
                       lambda c: 1.0 if c < 5 else 1.0 - min(c - 5, 10) / 10),
}


@pytest.mark.parametrize("name", sorted(SCHEDULE_CASES))
def test_schedule_values(name):
    sched, want = SCHEDULE_CASES[name]
    got = [float(sched(fnp.asarray(c, fnp.int32))) for c in range(0, 33)]
    np.testing.assert_allclose(got, [want(c) for c in range(0, 33)], rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# tree_utils
# ---------------------------------------------------------------------------------------------

def test_tree_utils():
    from funcgrad.optim import tree_utils as T
    a = {"x": f([1.0, -2.0]), "y": f([[3.0]])}
    b = {"x": f([0.5, 4.0]), "y": f([[-1.0]])}
    assert T.tree_add(a, b)["x"].tolist() == [1.5, 2.0]
    assert T.tree_sub(a, b)["y"].tolist() == [[4.0]]
    assert T.tree_mul(a, b)["x"].tolist() == [0.5, -8.0]
    assert T.tree_div(a, b)["x"].tolist() == [2.0, -0.5]
    assert T.tree_scale(2.0, a)["y"].tolist() == [[6.0]]
    assert T.tree_add_scale(a, 2.0, b)["x"].tolist() == [2.0, 6.0]
    assert float(T.tree_vdot(a, b)) == 0.5 - 8.0 - 3.0
    assert float(T.tree_sum(a)) == 2.0 and float(T.tree_max(a)) == 3.0
    assert float(T.tree_min(a)) == -2.0 and T.tree_size(a) == 3
    np.testing.assert_allclose(float(T.tree_norm(a)), np.sqrt(14.0))
    assert float(T.tree_norm(a, ord=1)) == 6.0 and float(T.tree_norm(a, ord="inf")) == 3.0
    assert T.tree_zeros_like(a)["y"].tolist() == [[0.0]]
    assert T.tree_ones_like(a)["x"].tolist() == [1.0, 1.0]
    assert T.tree_full_like(a, 7.0)["x"].tolist() == [7.0, 7.0]
    assert T.tree_clip(a, -1.0, 1.0)["x"].tolist() == [1.0, -1.0]
    assert T.tree_where(fnp.asarray(False), a, b)["x"].tolist() == [0.5, 4.0]
    assert T.tree_cast(a, fnp.float32)["x"].dtype == fnp.float32
    keys = T.tree_split_key_like(funcgrad.random.PRNGKey(0), a)
    assert set(keys) == {"x", "y"}
    r = T.tree_random_like(funcgrad.random.PRNGKey(0), a)
    assert r["y"].shape == (1, 1)
    assert int(T.tree_get(optim.adam(0.1).init(a), "count")) == 0
    assert T.tree_update_moment(a, b, 0.5, 1)["x"].tolist() == [0.75, 1.0]
    np.testing.assert_allclose(T.tree_bias_correction(a, 0.5, 1)["x"].tolist(), [2.0, -4.0])
    assert T.tree_update_infinity_moment(a, b, 0.5, 0.0)["x"].tolist() == [1.0, 2.0]
    assert T.tree_update_moment_per_elem_norm(a, b, 0.5, 2)["x"].tolist() == [0.75, 4.0]
    assert T.tree_map_params is optim.tree_map_params


def test_tree_short_names():
    from funcgrad.optim import tree, tree_utils
    for name in tree.__all__:
        assert getattr(tree, name) is getattr(tree_utils, "tree_" + name)
    assert float(tree.norm({"a": f([3.0]), "b": f([4.0])})) == 5.0
