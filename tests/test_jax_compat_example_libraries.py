"""funcgrad.example_libraries (stax, optimizers) against JAX's documented semantics: layer
shapes and outputs against numpy, optimizer updates against numpy transcriptions of JAX's
update rules, OptimizerState as a pytree through jit, and an MNIST-style training loop."""
from __future__ import annotations

import doctest

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad import random
from funcgrad.example_libraries import optimizers, stax


def close(a, b, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


@pytest.mark.parametrize("mod", [stax, optimizers])
def test_docstring_examples(mod):
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0 and res.attempted > 10


# ---------------------------------------------------------------------------------------------
# stax
# ---------------------------------------------------------------------------------------------

def test_dense_init_and_apply(rng):
    init, apply = stax.Dense(7)
    shape, (W, b) = init(random.PRNGKey(0), (-1, 5))
    assert shape == (-1, 7) and W.shape == (5, 7) and b.shape == (7,)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    close(apply((W, b), x), x @ np.asarray(W) + np.asarray(b))


def test_dense_default_initializers_scale():
    # glorot_normal: variance 2 / (fan_in + fan_out); normal(): std 0.01
    _, (W, b) = stax.Dense(300)[0](random.PRNGKey(3), (1, 200))
    assert abs(np.asarray(W).var() / (2 / 500) - 1) < 0.1
    assert abs(np.asarray(b).std() / 0.01 - 1) < 0.3


def _np_conv_nhwc(x, w, stride, pad):
    """x: NHWC, w: HWIO, explicit padding ((lo, hi), (lo, hi))."""
    x = np.pad(x, ((0, 0), pad[0], pad[1], (0, 0)))
    kh, kw, _, o = w.shape
    n, h, wd, _ = x.shape
    oh, ow = (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1
    out = np.zeros((n, oh, ow, o))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw, :]
            out[:, i, j, :] = np.einsum("nhwc,hwco->no", patch, w)
    return out


@pytest.mark.parametrize("padding,stride", [("VALID", (1, 1)), ("SAME", (1, 1)),
                                            ("SAME", (2, 2))])
def test_conv_matches_numpy(rng, padding, stride):
    init, apply = stax.Conv(4, (3, 3), strides=stride, padding=padding)
    shape, (W, b) = init(random.PRNGKey(1), (2, 6, 6, 3))
    assert W.shape == (3, 3, 3, 4) and b.shape == (1, 1, 1, 4)
    x = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    if padding == "VALID":
        pad = ((0, 0), (0, 0))
    else:   # SAME: out = ceil(in / stride); the extra padding goes high
        pads = []
        for n, s in zip((6, 6), stride):
            total = max((-(-n // s) - 1) * s + 3 - n, 0)
            pads.append((total // 2, total - total // 2))
        pad = tuple(pads)
    want = _np_conv_nhwc(x, np.asarray(W, np.float64), stride, pad) + np.asarray(b)
    got = apply((W, b), x)
    assert got.shape == shape == want.shape
    close(got, want, rtol=1e-4, atol=1e-5)


def test_general_conv_layouts_and_transpose_shapes():
    init, _ = stax.GeneralConv(("NCHW", "OIHW", "NCHW"), 5, (2, 3), strides=(1, 2))
    shape, (W, b) = init(random.PRNGKey(0), (1, 3, 8, 9))
    assert shape == (1, 5, 7, 4) and W.shape == (5, 3, 2, 3) and b.shape == (1, 5, 1, 1)
    init, apply = stax.ConvTranspose(2, (3, 3), strides=(2, 2), padding="SAME")
    shape, params = init(random.PRNGKey(0), (1, 4, 4, 3))
    assert shape == (1, 8, 8, 2) and apply(params, jnp.ones((1, 4, 4, 3))).shape == shape
    init, apply = stax.Conv1DTranspose(2, (3,))
    shape, params = init(random.PRNGKey(0), (2, 5, 3))
    assert shape == (2, 7, 2) and apply(params, jnp.ones((2, 5, 3))).shape == shape


def test_pools_match_numpy(rng):
    x = rng.standard_normal((2, 4, 6, 3)).astype(np.float32)
    blocks = x.reshape(2, 2, 2, 3, 2, 3).transpose(0, 1, 3, 5, 2, 4).reshape(2, 2, 3, 3, 4)
    for layer, red in ((stax.MaxPool, np.max), (stax.SumPool, np.sum),
                       (stax.AvgPool, np.mean)):
        init, apply = layer((2, 2), strides=(2, 2))
        assert init(None, x.shape) == ((2, 2, 3, 3), ())
        close(apply((), x), red(blocks, axis=-1))


def test_avgpool_same_divides_by_the_window_inside_the_input():
    # SAME 2x2 stride 1 on a 3x3 input: the last row/column's windows cover 2 or 1 elements
    x = jnp.arange(9.0).reshape(1, 3, 3, 1)
    init, apply = stax.AvgPool((2, 2), padding="SAME")
    assert init(None, x.shape)[0] == (1, 3, 3, 1)
    xn = np.arange(9.0).reshape(3, 3)
    want = [[xn[i:i + 2, j:j + 2].mean() for j in range(3)] for i in range(3)]
    close(apply((), x)[0, :, :, 0], want)


def test_pool_with_spec_puts_batch_and_channel_where_named(rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)   # NCHW
    init, apply = stax.MaxPool((2, 2), strides=(2, 2), spec="NCHW")
    assert init(None, x.shape)[0] == (2, 3, 2, 2)
    close(apply((), x), x.reshape(2, 3, 2, 2, 2, 2).max(axis=(3, 5)))


def test_batchnorm(rng):
    x = rng.standard_normal((4, 3, 3, 2)).astype(np.float32) * 3 + 1
    init, apply = stax.BatchNorm()
    shape, (beta, gamma) = init(random.PRNGKey(0), x.shape)
    assert shape == x.shape and beta.shape == gamma.shape == (2,)
    m, v = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
    want = (x - m) / np.sqrt(v + 1e-5)
    close(apply((beta, gamma), x), want, rtol=1e-4, atol=1e-5)
    close(apply((beta + 1, gamma * 2), x), 2 * want + 1, rtol=1e-4, atol=1e-5)
    init, apply = stax.BatchNorm(axis=0, center=False, scale=False)
    _, params = init(random.PRNGKey(0), (4, 3))
    assert params == ((), ())


def test_elementwise_layers(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    sm = e / e.sum(-1, keepdims=True)
    cases = [(stax.Tanh, np.tanh(x)), (stax.Relu, np.maximum(x, 0)), (stax.Exp, np.exp(x)),
             (stax.Softmax, sm), (stax.LogSoftmax, np.log(sm)),
             (stax.Softplus, np.log1p(np.exp(x))), (stax.Sigmoid, 1 / (1 + np.exp(-x))),
             (stax.Elu, np.where(x > 0, x, np.expm1(x))),
             (stax.LeakyRelu, np.where(x > 0, x, 0.01 * x))]
    for (init, apply), want in cases:
        assert init(None, x.shape) == (x.shape, ())
        close(apply((), x), want, rtol=1e-5, atol=1e-6)


def test_flatten_identity_fans():
    assert stax.Flatten[0](None, (-1, 2, 3, 4)) == ((-1, 24), ())
    assert stax.Flatten[1]((), jnp.ones((5, 2, 3))).shape == (5, 6)
    assert stax.Identity[1]((), 3.0) == 3.0
    init, apply = stax.serial(stax.FanOut(3), stax.parallel(stax.Identity, stax.Tanh,
                                                            stax.Relu), stax.FanInSum)
    assert init(random.PRNGKey(0), (2,))[0] == (2,)
    x = jnp.array([-1.0, 2.0])
    close(apply(init(random.PRNGKey(0), (2,))[1], x), [-1 + np.tanh(-1), 4 + np.tanh(2)])


def test_dropout_rate_is_the_keep_probability():
    _, apply = stax.Dropout(0.8)
    x = jnp.ones((10000,))
    y = np.asarray(apply((), x, rng=random.PRNGKey(0)))
    assert set(np.unique(y).round(5)) == {0.0, 1.25}
    assert abs((y > 0).mean() - 0.8) < 0.02
    with pytest.raises(ValueError, match="PRNG key"):
        apply((), x)
    close(stax.Dropout(0.5, mode="test")[1]((), x, rng=random.PRNGKey(0)), x)


def test_serial_splits_the_rng_once_per_layer():
    # serial's apply passes layer k the k-th key of split(rng, nlayers), as JAX's
    init, apply = stax.serial(stax.Dropout(0.5), stax.Dropout(0.5))
    key = random.PRNGKey(7)
    k1, k2 = random.split(key, 2)
    x = jnp.ones(64)
    d = stax.Dropout(0.5)[1]
    _, params = init(random.PRNGKey(0), (64,))
    assert params == [(), ()]
    close(apply(params, x, rng=key), d((), d((), x, rng=k1), rng=k2))


def test_serial_init_splits_like_jax():
    # init: rng, layer_rng = split(rng) before each layer
    init, _ = stax.serial(stax.Dense(3), stax.Dense(2))
    _, params = init(random.PRNGKey(0), (1, 4))
    rng, r1 = random.split(random.PRNGKey(0))
    _, r2 = random.split(rng)
    _, p1 = stax.Dense(3)[0](r1, (1, 4))
    _, p2 = stax.Dense(2)[0](r2, (1, 3))
    for got, want in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves([p1, p2])):
        close(got, want)


def test_shape_dependent():
    init, apply = stax.shape_dependent(lambda shape: stax.Dense(shape[-1] + 1))
    shape, params = init(random.PRNGKey(0), (2, 3))
    assert shape == (2, 4) and apply(params, jnp.ones((2, 3))).shape == (2, 4)


def test_mnist_classifier_style_training_converges():
    # JAX's examples/mnist_classifier.py with random data of MNIST's shapes (fewer pixels)
    init_random_params, predict = stax.serial(
        stax.Dense(32), stax.Relu, stax.Dense(32), stax.Relu, stax.Dense(10), stax.LogSoftmax)
    rs = np.random.RandomState(0)
    images = rs.standard_normal((64, 49)).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[rs.randint(0, 10, 64)]

    def loss(params, batch):
        inputs, targets = batch
        return -jnp.mean(jnp.sum(predict(params, inputs) * targets, axis=1))

    def accuracy(params, batch):
        inputs, targets = batch
        return jnp.mean(jnp.argmax(predict(params, inputs), axis=1) == jnp.argmax(targets, 1))

    opt_init, opt_update, get_params = optimizers.momentum(0.1, mass=0.9)

    @jax.jit
    def update(i, opt_state, batch):
        params = get_params(opt_state)
        return opt_update(i, jax.grad(loss)(params, batch), opt_state)

    _, init_params = init_random_params(random.PRNGKey(0), (-1, 49))
    opt_state = opt_init(init_params)
    first = float(loss(init_params, (images, labels)))
    for i in range(60):
        opt_state = update(i, opt_state, (images, labels))
    params = get_params(opt_state)
    assert float(loss(params, (images, labels))) < 0.2 * first
    assert float(accuracy(params, (images, labels))) > 0.9


# ---------------------------------------------------------------------------------------------
# optimizers: numpy transcriptions of JAX's update rules
# ---------------------------------------------------------------------------------------------

def _np_rules(name, lr=0.05):
    if name == "sgd":
        return lambda x: (x,), lambda i, g, s: (s[0] - lr * g,)
    if name == "momentum":
        return (lambda x: (x, 0 * x),
                lambda i, g, s: (s[0] - lr * (0.9 * s[1] + g), 0.9 * s[1] + g))
    if name == "nesterov":
        def upd(i, g, s):
            v = 0.9 * s[1] + g
            return s[0] - lr * (0.9 * v + g), v
        return lambda x: (x, 0 * x), upd
    if name == "adagrad":
        def upd(i, g, s):
            x, gsq, m = s
            gsq = gsq + g * g
            m = 0.1 * g * np.where(gsq > 0, 1 / np.sqrt(gsq), 0) + 0.9 * m
            return x - lr * m, gsq, m
        return lambda x: (x, 0 * x, 0 * x), upd
    if name == "rmsprop":
        def upd(i, g, s):
            a = 0.9 * s[1] + 0.1 * g * g
            return s[0] - lr * g / np.sqrt(a + 1e-8), a
        return lambda x: (x, 0 * x), upd
    if name == "rmsprop_momentum":
        def upd(i, g, s):
            a = 0.9 * s[1] + 0.1 * g * g
            mom = 0.9 * s[2] + lr * g / np.sqrt(a + 1e-8)
            return s[0] - mom, a, mom
        return lambda x: (x, 0 * x, 0 * x), upd
    if name == "adam":
        def upd(i, g, s):
            x, m, v = s
            m = 0.1 * g + 0.9 * m
            v = 0.001 * g * g + 0.999 * v
            mh, vh = m / (1 - 0.9 ** (i + 1)), v / (1 - 0.999 ** (i + 1))
            return x - lr * mh / (np.sqrt(vh) + 1e-8), m, v
        return lambda x: (x, 0 * x, 0 * x), upd
    if name == "adamax":
        def upd(i, g, s):
            x, m, u = s
            m = 0.1 * g + 0.9 * m
            u = np.maximum(0.999 * u, np.abs(g))
            return x - lr / (1 - 0.9 ** (i + 1)) * m / (u + 1e-8), m, u
        return lambda x: (x, 0 * x, 0 * x), upd
    raise KeyError(name)


def _quad_grad(x):
    return 2 * x - 1 + np.sin(x)   # the gradient of x^2 - x - cos(x)


@pytest.mark.parametrize("name", ["sgd", "momentum", "nesterov", "adagrad", "rmsprop",
                                  "rmsprop_momentum", "adam", "adamax"])
def test_optimizer_updates_match_jax_rules(name, rng):
    params = {"w": rng.standard_normal((3, 2)).astype(np.float32),
              "b": (rng.standard_normal(4).astype(np.float32),)}
    extra = (0.9,) if name in ("momentum", "nesterov") else ()
    opt_init, opt_update, get_params = getattr(optimizers, name)(0.05, *extra)
    np_init, np_update = _np_rules(name)
    state = opt_init(jax.tree_util.tree_map(jnp.asarray, params))
    ref = {k: np_init(np.float64(v if k == "w" else v[0])) for k, v in params.items()}
    update = jax.jit(opt_update)
    for i in range(5):
        g = jax.tree_util.tree_map(lambda x: _quad_grad(np.asarray(x)), get_params(state))
        state = update(i, g, state)
        ref = {k: np_update(i, _quad_grad(s[0]), s) for k, s in ref.items()}
    got = get_params(state)
    close(got["w"], ref["w"][0], rtol=1e-4, atol=1e-5)
    close(got["b"][0], ref["b"][0], rtol=1e-4, atol=1e-5)


def test_sm3_matches_its_rule(rng):
    x0 = rng.standard_normal((3, 4)).astype(np.float64)
    opt_init, opt_update, get_params = optimizers.sm3(0.1)
    state = opt_init(jnp.asarray(x0, jnp.float32))
    x, m, vs = x0.copy(), np.zeros_like(x0), [np.zeros(3), np.zeros(4)]
    for i in range(4):
        g = _quad_grad(x)
        state = opt_update(i, jnp.asarray(g, jnp.float32), state)
        accum = np.minimum(vs[0][:, None], vs[1][None, :]) + g * g
        m = 0.1 * g * np.where(accum > 0, 1 / np.sqrt(accum), 0) + 0.9 * m
        x = x - 0.1 * m
        vs = [accum.max(axis=1), accum.max(axis=0)]
    close(get_params(state), x, rtol=1e-4, atol=1e-5)
    # a 0-d parameter keeps its shape
    state = opt_init(jnp.float32(2.0))
    assert get_params(opt_update(0, jnp.float32(1.0), state)).shape == ()


def test_schedules_match_formulas():
    close(optimizers.exponential_decay(0.1, 100, 0.5)(250), 0.1 * 0.5 ** 2.5)
    close(optimizers.inverse_time_decay(0.1, 10, 2.0)(25), 0.1 / (1 + 2.0 * 2.5))
    close(optimizers.inverse_time_decay(0.1, 10, 2.0, staircase=True)(25), 0.1 / 5)
    s = optimizers.polynomial_decay(1.0, 10, 0.1, power=2.0)
    close([s(0), s(5), s(10), s(20)], [1.0, 0.25 * 0.9 + 0.1, 0.1, 0.1])
    s = optimizers.piecewise_constant([5, 10], [1.0, 0.1, 0.01])
    close([s(0), s(5), s(6), s(10), s(11)], [1.0, 1.0, 0.1, 0.1, 0.01])
    with pytest.raises(ValueError):
        optimizers.piecewise_constant([5, 10], [1.0, 0.1])
    with pytest.raises(TypeError):
        optimizers.make_schedule(np.ones(2))


def test_schedule_drives_the_step_size():
    opt_init, opt_update, get_params = optimizers.sgd(lambda i: 0.1 * (i + 1))
    s = opt_init(jnp.float32(0.0))
    for i in range(3):
        s = opt_update(i, jnp.float32(1.0), s)
    close(get_params(s), -0.6)


def test_optimizer_state_is_a_pytree():
    opt_init, _, get_params = optimizers.adam(0.1)
    params = [jnp.ones(3), {"a": jnp.zeros((2, 2))}]
    state = opt_init(params)
    assert isinstance(state, optimizers.OptimizerState)
    leaves, tree = jax.tree_util.tree_flatten(state)
    assert len(leaves) == 6   # (x, m, v) per parameter leaf
    again = jax.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(again, optimizers.OptimizerState)
    doubled = jax.tree_util.tree_map(lambda x: x * 2, state)
    close(get_params(doubled)[0], 2 * np.ones(3))
    for got, want in zip(jax.tree_util.tree_leaves(get_params(state)),
                         jax.tree_util.tree_leaves(params)):
        close(got, want)


def test_update_checks_structures():
    opt_init, opt_update, _ = optimizers.sgd(0.1)
    state = opt_init({"a": jnp.ones(2)})
    with pytest.raises(TypeError, match="did not match the parameter tree"):
        opt_update(0, {"b": jnp.ones(2)}, state)

    @optimizers.optimizer
    def bad():
        return (lambda x: (x,)), (lambda i, g, s: (s[0], s[0])), (lambda s: s[0])

    init, update, _ = bad()
    with pytest.raises(TypeError, match="output structure"):
        update(0, [jnp.ones(1)], init([jnp.ones(1)]))


def test_pack_unpack_round_trip():
    opt_init, opt_update, _ = optimizers.momentum(0.1, 0.9)
    state = opt_update(0, {"w": jnp.ones(2), "b": jnp.ones(1)},
                       opt_init({"w": jnp.zeros(2), "b": jnp.zeros(1)}))
    marked = optimizers.unpack_optimizer_state(state)
    assert isinstance(marked["w"], optimizers.JoinPoint)
    back = optimizers.pack_optimizer_state(marked)
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(state)):
        close(a, b)
    assert back.tree_def == state.tree_def


def test_l2_norm_and_clip_grads():
    tree = {"a": jnp.array([3.0, 0.0]), "b": jnp.array([[4.0]])}
    close(optimizers.l2_norm(tree), 5.0)
    clipped = optimizers.clip_grads(tree, 1.0)
    close(optimizers.l2_norm(clipped), 1.0)
    close(optimizers.clip_grads(tree, 10.0)["a"], [3.0, 0.0])
