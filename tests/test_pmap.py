"""pmap over virtual CPU devices and the collectives (issue 14): each against the single-device
computation on the stacked array, gradients included (JAX: pmap(grad(f_i)) = grad(sum_i f_i))."""
from __future__ import annotations

import functools
import os
import subprocess
import sys

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.test_util import check_grads

N = 4   # virtual CPU devices in these tests
pm = functools.partial(funcgrad.pmap, backend="cpu")


@pytest.fixture(autouse=True)
def _cpu_devices():
    old = funcgrad.config.num_cpu_devices
    funcgrad.config.update("num_cpu_devices", N)
    yield
    funcgrad.config.update("num_cpu_devices", old)


def close(a, b, tol=1e-9):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _bcast(v):
    """The same value on every device: the stacked result of a replicated output."""
    return fnp.broadcast_to(v, (N,) + tuple(v.shape))


# name -> (per-device function, single-device reference on the stacked (N, ...) array,
#          per-device input shape)
CASES = {
    "psum": (lambda x: lax.psum(x, "i"), lambda X: _bcast(fnp.sum(X, 0)), (2, 3)),
    "pmean": (lambda x: lax.pmean(x, "i"), lambda X: _bcast(fnp.mean(X, 0)), (3,)),
    "pmax": (lambda x: lax.pmax(x, "i"), lambda X: _bcast(fnp.max(X, 0)), (2, 3)),
    "pmin": (lambda x: lax.pmin(x, "i"), lambda X: _bcast(fnp.min(X, 0)), (3,)),
    "all_gather": (lambda x: lax.all_gather(x, "i"), lambda X: _bcast(X), (2,)),
    "all_gather_axis1": (lambda x: lax.all_gather(x, "i", axis=1),
                         lambda X: _bcast(fnp.transpose(X, (1, 0, 2))), (2, 3)),
    "all_gather_tiled": (lambda x: lax.all_gather(x, "i", axis=-1, tiled=True),
                         lambda X: _bcast(fnp.reshape(fnp.transpose(X, (1, 0, 2)), (2, 3 * N))),
                         (2, 3)),
    "psum_scatter": (lambda x: lax.psum_scatter(x, "i"), lambda X: fnp.sum(X, 0), (N, 2)),
    "psum_scatter_tiled": (
        lambda x: lax.psum_scatter(x, "i", scatter_dimension=1, tiled=True),
        lambda X: fnp.transpose(fnp.reshape(fnp.sum(X, 0), (3, N, 2)), (1, 0, 2)), (3, 2 * N)),
    "ppermute_ring": (lambda x: lax.ppermute(x, "i", [(j, (j + 1) % N) for j in range(N)]),
                      lambda X: fnp.roll(X, 1, axis=0), (3,)),
    "ppermute_partial": (lambda x: lax.ppermute(x, "i", [(0, 2), (1, 0)]),
                         lambda X: fnp.stack([X[1], fnp.zeros_like(X[0]), X[0],
                                              fnp.zeros_like(X[0])]), (2,)),
    "axis_index": (lambda x: x * lax.axis_index("i"),
                   lambda X: X * fnp.arange(N, dtype="float64")[:, None], (3,)),
}


def _inputs(name, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(N,) + CASES[name][2])


@pytest.mark.parametrize("name", sorted(CASES))
def test_collective_matches_single_device(name):
    coll, ref, _ = CASES[name]
    X = _inputs(name)
    want = ref(X)
    close(pm(coll, "i")(X), want)
    close(funcgrad.vmap(coll, axis_name="i")(X), want)   # vmap names its axis as JAX allows


@pytest.mark.parametrize("name", sorted(CASES))
def test_grad_and_jvp_inside_pmap(name):
    """Transpose and jvp rules: pmap(grad(f_i)) = grad(sum_i f_i) and pmap(jvp) = jvp(ref)."""
    coll, ref, _ = CASES[name]
    X = _inputs(name)
    rng = np.random.default_rng(1)
    C = rng.normal(size=np.shape(ref(X)))
    T = rng.normal(size=X.shape)
    got = pm(funcgrad.grad(lambda x, c: fnp.sum(fnp.sin(coll(x)) * c)), "i")(X, C)
    want = funcgrad.grad(lambda X: fnp.sum(fnp.sin(ref(X)) * C))(X)
    close(got, want)
    got_t = pm(lambda x, t: funcgrad.jvp(coll, (x,), (t,))[1], "i")(X, T)
    close(got_t, funcgrad.jvp(ref, (X,), (T,))[1])


@pytest.mark.parametrize("name", ["psum", "pmax", "all_gather_tiled", "psum_scatter",
                                  "ppermute_partial"])
def test_check_grads_through_pmap(name):
    coll, _, _ = CASES[name]
    check_grads(pm(lambda x: fnp.sin(coll(x)), "i"), (_inputs(name),), order=2)


def test_pmax_ties_share_the_gradient():
    X = np.array([[1.0, 3.0], [3.0, 2.0], [3.0, 0.0], [0.0, 1.0]])
    got = pm(funcgrad.grad(lambda x: fnp.sum(lax.pmax(x, "i") * fnp.array([1.0, 2.0]))),
             "i")(X)
    want = funcgrad.grad(lambda X: fnp.sum(_bcast(fnp.max(X, 0)) * fnp.array([1.0, 2.0])))(X)
    close(got, want)
    close(got[:, 0], [0.0, 2.0, 2.0, 0.0])   # 4 devices' ct 1 split between the two maxima


def test_data_parallel_step_matches_one_device():
    """The pattern of issue 14: per-device grads averaged with pmean equal the full batch's."""
    rng = np.random.default_rng(0)
    w, xs, ys = rng.normal(size=3), rng.normal(size=(N, 5, 3)), rng.normal(size=(N, 5))

    def loss(w, x, y):
        return fnp.mean((fnp.tanh(x @ w) - y) ** 2)

    step = pm(lambda w, x, y: lax.pmean(funcgrad.grad(loss)(w, x, y), "i"), "i",
              in_axes=(None, 0, 0))
    g = step(w, xs, ys)
    close(g, _bcast(funcgrad.grad(loss)(w, xs.reshape(-1, 3), ys.reshape(-1))))


def test_in_axes_out_axes_variants():
    X = np.arange(12.0).reshape(3, N)
    w = np.array([1.0, 2.0, 3.0])
    f = pm(lambda x, w: x * w + lax.psum(x, "i"), "i", in_axes=(1, None), out_axes=1)
    close(f(X, w), X * w[:, None] + X.sum(1, keepdims=True))
    close(pm(lambda x: lax.psum(x, "i"), "i", in_axes=1, out_axes=None)(X), X.sum(1))
    with pytest.raises(ValueError, match="out_axes=None"):
        pm(lambda x: x, "i", out_axes=None)(X.T)
    g = pm(lambda p, s, *, b: p["w"] * s + p["c"] + b, "i", in_axes=({"w": 0, "c": None}, None),
           static_broadcasted_argnums=(1,))
    out = g({"w": X.T, "c": 1.0}, 2.0, b=np.ones((N, 3)))
    close(out, X.T * 2.0 + 2.0)


def test_second_call_does_not_retrace():
    calls = []

    def f(x):
        calls.append(1)
        return lax.pmean(x, "i")
    p = pm(f, "i")
    p(np.ones((N, 2)))
    p(np.zeros((N, 2)))
    assert len(calls) == 1
    p(np.ones((N - 1, 2)))   # a new size is a new program
    assert len(calls) == 2


def test_nested_vmap_inside_pmap():
    X = np.random.default_rng(0).normal(size=(N, 3, 2))

    def f(x):
        return (lax.psum(x, "j"), lax.psum(x, ("i", "j")), lax.axis_index(("i", "j")),
                lax.all_gather(x, ("i", "j")), lax.pmean(x, "i"))
    a, b, c, d, e = pm(funcgrad.vmap(f, axis_name="j"), "i")(X)
    close(a, np.broadcast_to(X.sum(1, keepdims=True), X.shape))
    close(b, np.broadcast_to(X.sum((0, 1)), X.shape))
    close(c, np.arange(N * 3).reshape(N, 3))
    close(d, np.broadcast_to(X.reshape(N * 3, 2), (N, 3, N * 3, 2)))
    close(e, np.broadcast_to(X.mean(0), X.shape))
    # an unnamed vmap inside: psum over "i" acts per vmapped element
    close(pm(funcgrad.vmap(lambda x: lax.psum(x, "i")), "i")(X), _bcast(X.sum(0)))
    # the inner axis can shadow the outer name, as in JAX
    close(pm(funcgrad.vmap(lambda x: lax.psum(x, "i"), axis_name="i"), "i")(X),
          np.broadcast_to(X.sum(1, keepdims=True), X.shape))
    check_grads(pm(funcgrad.vmap(lambda x: fnp.sin(lax.psum(x, ("i", "j"))), axis_name="j"),
                   "i"), (X,), order=1)


def test_composes_with_jit_and_grad():
    X = np.random.default_rng(0).normal(size=(N, 3))
    f = pm(funcgrad.jit(lambda x: x * lax.psum(x, "i")), "i")
    close(f(X), X * X.sum(0))
    close(funcgrad.jit(pm(lambda x: x * lax.psum(x, "i"), "i"))(X), X * X.sum(0))
    g = funcgrad.grad(lambda X: fnp.sum(pm(lambda x: x * lax.psum(x, "i"), "i")(X)))(X)
    close(g, np.broadcast_to(2 * X.sum(0), X.shape))   # d sum_i x_i S / dx_k = S + S


def test_devices_argument_and_counts():
    devs = funcgrad.devices("cpu")
    assert len(devs) == N and [d.id for d in devs] == list(range(N))
    assert all(d == "cpu" and d.platform == "cpu" for d in devs)
    assert funcgrad.device_count("cpu") == funcgrad.local_device_count("cpu") == N
    assert funcgrad.local_devices(backend="cpu") == devs
    f = funcgrad.pmap(lambda x: lax.psum(x, "i"), "i", devices=devs[:2])
    close(f(np.array([1.0, 2.0])), [3.0, 3.0])
    with pytest.raises(ValueError, match=r"size 3 \(argument shapes \[\(3,\)\]\) but exactly 2"):
        f(np.ones(3))
    close(pm(lambda x: lax.psum(x, "i"), "i")(np.ones(2)), [2.0, 2.0])   # fewer: allowed


def test_errors_name_the_problem_and_the_line():
    with pytest.raises(NameError, match=r"unbound axis name: 'j'(.|\n)*test_pmap.py:\d+"):
        pm(lambda x: lax.psum(x, "j"), "i")(np.ones((N, 2)))
    with pytest.raises(NameError, match="unbound axis name: 'i'"):
        pm(lambda x: lax.axis_index("i"))(np.ones(N))            # pmap without axis_name
    with pytest.raises(NameError, match="unbound axis name"):
        lax.pmean(np.ones(2), "i")                                 # no mapped axis at all
    with pytest.raises(ValueError, match=r"size 5 \(argument shapes \[\(5, 2\)\]\)(.|\n)*"
                                         r"1 to 4 cpu(.|\n)*test_pmap.py:\d+"):
        pm(lambda x: x, "i")(np.ones((5, 2)))
    with pytest.raises(ValueError, match=r"different sizes: \(4, 2\) \(axis 0\), \(3, 5\) "
                                         r"\(axis 1\)(.|\n)*test_pmap.py:\d+"):
        pm(lambda x, y: x, "i", in_axes=(0, 1))(np.ones((4, 2)), np.ones((3, 5)))
    with pytest.raises(ValueError, match="in_axes 2 is out of range for an argument of shape"):
        pm(lambda x: x, "i", in_axes=2)(np.ones((4, 2)))
    with pytest.raises(funcgrad.ShapeError, match="does not divide evenly"):
        pm(lambda x: lax.psum_scatter(x, "i", tiled=True), "i")(np.ones((N, 6)))
    with pytest.raises(ValueError, match="appears twice"):
        pm(lambda x: lax.ppermute(x, "i", [(0, 1), (2, 1)]), "i")(np.ones(N))
    with pytest.raises(ValueError, match="outside"):
        pm(lambda x: lax.ppermute(x, "i", [(0, N)]), "i")(np.ones(N))
    with pytest.raises(ValueError, match="axis 3 is out of range"):
        pm(lambda x: lax.all_gather(x, "i", axis=3), "i")(np.ones((N, 2)))
    with pytest.raises(TypeError, match="hashable"):
        pm(lambda x, s: x, "i", static_broadcasted_argnums=1)(np.ones(N), [1])


def test_several_gpus_are_not_pretended(monkeypatch):
    from funcgrad.api import device_objects as _devices
    monkeypatch.setattr(_devices, "platform_devices",
                        lambda p: [_devices.Device(p, i) for i in range(2)])
    with pytest.raises(NotImplementedError, match="NCCL(.|\n)*not built yet"):
        funcgrad.pmap(lambda x: x, "i", backend="cuda")(np.ones((2, 1)))


def test_env_var_sets_the_cpu_device_count_at_import():
    code = ("import numpy as np, funcgrad\n"
            "funcgrad.config.update('default_device', 'cpu')\n"
            "from funcgrad import lax\n"
            "print(funcgrad.local_device_count(), funcgrad.device_count(),\n"
            "      [d.id for d in funcgrad.local_devices()],\n"
            "      funcgrad.pmap(lambda x: lax.psum(x, 'i'), 'i')(np.ones(3)).tolist())\n")
    env = dict(os.environ, FUNCGRAD_NUM_CPU_DEVICES="3")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["3", "3", "[0,", "1,", "2]", "[3.0,", "3.0,", "3.0]"]
    env["FUNCGRAD_NUM_CPU_DEVICES"] = "0"
    r = subprocess.run([sys.executable, "-c", "import funcgrad"], env=env, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode != 0 and "FUNCGRAD_NUM_CPU_DEVICES must be an integer >= 1" in r.stderr


def test_default_is_one_cpu_device():
    env = {k: v for k, v in os.environ.items() if k != "FUNCGRAD_NUM_CPU_DEVICES"}
    code = "import funcgrad; print(funcgrad.config.num_cpu_devices, funcgrad.device_count('cpu'))"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["1", "1"]


@pytest.mark.cuda
def test_pmap_over_one_gpu():
    """On CUDA pmap maps over one GPU (the simulator in CI): the same batched program there."""
    from funcgrad import cuda as fcuda
    if not fcuda.usable():
        pytest.skip("no GPU and no simulator")
    X = np.arange(6.0).reshape(1, 2, 3)
    out = funcgrad.pmap(lambda x: x * lax.psum(x, "i") + lax.axis_index("i"), "i",
                        backend="cuda")(X)
    assert out.device == "cuda"
    close(out, X * X)
