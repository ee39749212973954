"""jit on the CUDA backend: plans of fused kernels agree with the CPU and fuse what they should."""
import numpy as np
import pytest

import funcgrad
import funcgrad.cuda
import funcgrad.numpy as fnp
from funcgrad import nn, optim
from funcgrad.tree_util import tree_leaves

pytestmark = [
    pytest.mark.cuda,
    # like the other cuda test files: no GPU and no simulator -> skip (FUNCGRAD_REQUIRE_GPU=1: fail)
    pytest.mark.skipif(not (funcgrad.cuda.usable()
                            or __import__("os").environ.get("FUNCGRAD_REQUIRE_GPU") == "1"),
                       reason="no GPU; run with NUMBA_ENABLE_CUDASIM=1 to use the simulator"),
]


def _mlp(rng, sizes):
    return [{"w": (rng.standard_normal((a, b)) * 0.3).astype(np.float32),
             "b": (rng.standard_normal(b) * 0.1).astype(np.float32)}
            for a, b in zip(sizes[:-1], sizes[1:])]


def _loss(p, x, y):
    h = x
    for i, layer in enumerate(p):
        h = h @ layer["w"] + layer["b"]
        if i < len(p) - 1:
            h = nn.gelu(h)
    return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(h, y))


def _adam_step(opt):
    def step(p, s, x, y):
        val, g = funcgrad.value_and_grad(_loss)(p, x, y)
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s, val
    return step


def _close(a, b, tol=2e-5):
    for u, v in zip(tree_leaves(a), tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=tol, atol=tol)


def test_jitted_adam_step_matches_cpu(rng):
    params = _mlp(rng, [5, 7, 3])
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.integers(0, 3, 4).astype(np.int32)
    opt = optim.adamw(1e-2, weight_decay=0.1)
    step = funcgrad.jit(_adam_step(opt))
    ref = step(*funcgrad.device_put((params, opt.init(params), x, y), "cpu"))
    assert all(leaf.device == "cpu" for leaf in tree_leaves(ref))
    dev = funcgrad.device_put((params, opt.init(params), x, y), "cuda")
    out = step(*dev)
    assert all(leaf.device == "cuda" for leaf in tree_leaves(out))
    _close(ref, out)
    out2 = step(out[0], out[1], dev[2], dev[3])  # second call replays the same plan
    ref2 = step(ref[0], ref[1], x, y)
    _close(ref2, out2)
    assert step.stats()["traces"] == 2  # one per device


def test_adam_update_is_one_fused_kernel_per_parameter_shape(rng):
    params = _mlp(rng, [5, 7, 3])
    opt = optim.adam(1e-3)
    dev = funcgrad.device_put(params, "cuda")
    grads = funcgrad.device_put(_mlp(rng, [5, 7, 3]), "cuda")

    def update(p, s, g):
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s

    low = funcgrad.jit(update).lower(dev, opt.init(dev), grads)
    text = low.as_text()
    kernels = text.split("kernels:")[1].strip().splitlines()
    fused = [k for k in kernels if k.strip().startswith("fused[")]
    # per parameter shape one kernel writes m, v and the parameter (3 outputs)
    for shape in ([5, 7], [7], [7, 3], [3]):
        assert any(f"] {shape}:" in k and "3 out" in k for k in fused), (shape, kernels)
    assert not any(k.strip().startswith(("mul", "add", "sqrt", "div")) for k in kernels)


def test_fused_kernel_reads_views_in_place(rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)

    def f(a, b):
        return fnp.tanh(a.T * 2.0 + b[:, None]) - fnp.exp(a.T)
    ref = f(*funcgrad.device_put((a, b), "cpu"))
    out = funcgrad.jit(f)(*funcgrad.device_put((a, b), "cuda"))
    _close(ref, out)


def test_jit_on_cuda_integer_and_bool_ops(rng):
    x = rng.integers(-9, 9, (5, 3)).astype(np.int32)

    def f(x):
        return (x // 2 + x % 3) * (x > 0), fnp.where(x != 0, x, 7).sum(0)
    ref = f(funcgrad.device_put(x, "cpu"))
    out = funcgrad.jit(f)(funcgrad.device_put(x, "cuda"))
    _close(ref, out, 0)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "int64", "uint64"])
def test_fused_integer_arithmetic_wraps_at_every_step(dtype, rng):
    # numba widens integer products inside a kernel; each fused value must wrap to its dtype
    # as numpy's does, or (a * a) % b differs (the PRNG's randint is such a chain)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, 9, dtype=dtype, endpoint=True)
    b = rng.integers(1, min(info.max, 1000), 9, dtype=dtype)

    def f(a, b):
        return ((a * a) % b * a + b) % b, (a * b) // b, (a + a) >> np.array(1, dtype)
    ref = f(*funcgrad.device_put((a, b), "cpu"))
    out = funcgrad.jit(f)(*funcgrad.device_put((a, b), "cuda"))
    _close(ref, out, 0)


def test_fused_float16_and_mixed_casts(rng):
    x = rng.standard_normal(17).astype(np.float16)
    i = rng.integers(-5, 5, 17).astype(np.int16)

    def f(x, i):
        y = fnp.floor(x * 3) + i.astype(np.float16)
        return y.astype(np.int16) * i, fnp.round(x * 2), (x > 0) & (i < 2)
    ref = f(*funcgrad.device_put((x, i), "cpu"))
    out = funcgrad.jit(f)(*funcgrad.device_put((x, i), "cuda"))
    _close(ref, out, 0)


def test_k_steps_in_one_plan_match_cpu(rng):
    # fori_loop unrolls at trace time: four Adam steps become one plan (one graph on a GPU)
    params = _mlp(rng, [5, 7, 3])
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.integers(0, 3, 4).astype(np.int32)
    opt = optim.adam(1e-2)
    one = _adam_step(opt)
    four = funcgrad.jit(lambda p, s, x, y: funcgrad.lax.fori_loop(
        0, 4, lambda i, c: one(c[0], c[1], x, y), (p, s, np.float32(0))))
    args = (params, opt.init(params), x, y)
    ref = four(*funcgrad.device_put(args, "cpu"))
    dev = funcgrad.device_put(args, "cuda")
    for _ in range(3):   # compile, capture, replay
        out = four(*dev)
        _close(ref, out)
