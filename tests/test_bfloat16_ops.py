"""bfloat16/float16 computing on the CPU: values against float64, float32 accumulation, gradients
through mixed-precision losses, PRNG draws, checkpoints, and float8 (no kernel) errors."""
import json
import os

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.io as fio
import funcgrad.numpy as fnp
import funcgrad.random as fr
from funcgrad import lax, nn

BF16, F16, F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
# one rounding to the dtype is 2^-8 (bf16) / 2^-11 (f16) relative; composites round a few times
TOL = {BF16: (2.0 ** -6, 2.0 ** -8), F16: (2.0 ** -9, 2.0 ** -11)}

FUNCS = {
    "exp": fnp.exp, "log": lambda x: fnp.log(fnp.abs(x) + 0.5), "sin": fnp.sin,
    "tanh": fnp.tanh, "sqrt": lambda x: fnp.sqrt(fnp.abs(x)), "logistic": nn.sigmoid,
    "gelu": lambda x: nn.gelu(x, approximate=True), "silu": nn.silu,
    "softmax": lambda x: nn.softmax(x, axis=-1), "log_softmax": lambda x: nn.log_softmax(x),
    "logsumexp": lambda x: nn.logsumexp(x, axis=-1), "sum": lambda x: fnp.sum(x, axis=0),
    "mean": lambda x: fnp.mean(x, axis=1), "var": lambda x: fnp.var(x, axis=1),
    "max": lambda x: fnp.max(x, axis=1), "cumsum": lambda x: fnp.cumsum(x, axis=1),
    "norm": lambda x: fnp.linalg.norm(x, axis=-1), "erf": lax.erf,
    "where": lambda x: fnp.where(x > 0, x, 0.1 * x), "pow": lambda x: fnp.abs(x) ** 1.5,
    "layer_norm": lambda x: nn.standardize(x, axis=-1),
}


def _f64(x):
    return np.asarray(x).astype(np.float64)


@pytest.fixture(scope="module")
def x32():
    return np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)


@pytest.mark.parametrize("dt", [BF16, F16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_values_against_float64(name, dt, x32):
    f = FUNCS[name]
    x = fnp.asarray(x32).astype(dt)
    want = _f64(f(fnp.asarray(_f64(x))))    # float64 on the same (rounded) inputs
    rtol, atol = TOL[dt]
    for got in (f(x), funcgrad.jit(f)(x)):
        assert got.dtype == dt, name
        np.testing.assert_allclose(_f64(got), want, rtol=rtol, atol=atol * 4, err_msg=name)


def test_sums_accumulate_in_float32():
    x = fnp.full((1000,), 0.1, fnp.bfloat16)   # bf16 accumulation would stall at 32
    for f, want in ((fnp.sum, 100.0), (fnp.mean, 0.10009765625)):   # jax.numpy's numbers
        for g in (f, funcgrad.jit(f)):
            out = g(x)
            assert out.dtype == BF16 and float(out) == want
    last = fnp.cumsum(x)[-1]
    assert last.dtype == BF16 and abs(float(last) - 100.1) < 1.0
    assert float(fnp.var(fnp.arange(10, dtype=fnp.bfloat16))) == 8.25


def test_matmul_rounds_a_float32_product_once(rng):
    a = rng.standard_normal((5, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 3)).astype(ml_dtypes.bfloat16)
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    for f in (fnp.matmul, funcgrad.jit(fnp.matmul)):
        got = f(fnp.asarray(a), fnp.asarray(b))
        assert got.dtype == BF16
        np.testing.assert_array_equal(np.asarray(got).view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("name", ["tanh", "softmax", "log_softmax", "gelu", "norm", "mean",
                                  "cumsum", "layer_norm"])
def test_grad_of_a_bf16_function_is_bf16(name, x32):
    f = FUNCS[name]

    def loss(x):
        return fnp.sum(fnp.sin(2.0 * f(x).astype(fnp.float32)))
    x = fnp.asarray(x32).astype(fnp.bfloat16)
    want = _f64(funcgrad.grad(loss)(fnp.asarray(_f64(x))))
    scale = np.abs(want).max()
    for g in (funcgrad.grad(loss), funcgrad.jit(funcgrad.grad(loss))):
        got = g(x)
        assert got.dtype == BF16
        np.testing.assert_allclose(_f64(got), want, atol=2.0 ** -5 * scale, err_msg=name)


def _mlp_loss(p, x, cdt):
    p = funcgrad.tree_util.tree_map(lambda w: w.astype(cdt), p)   # fp32 masters, bf16 compute
    h = nn.gelu(x.astype(cdt) @ p["w"], approximate=True)
    logits = (h @ p["v"]).astype(fnp.float32)
    return fnp.mean(nn.logsumexp(logits, axis=-1) - logits[:, 0])


def test_mixed_precision_gradients_are_float32(rng):
    p = {"w": (rng.standard_normal((8, 16)) * 0.3).astype(np.float32),
         "v": (rng.standard_normal((16, 8)) * 0.3).astype(np.float32)}
    x = rng.standard_normal((4, 8)).astype(np.float32)
    p64 = {k: v.astype(np.float64) for k, v in p.items()}
    l64, g64 = funcgrad.value_and_grad(_mlp_loss)(p64, x.astype(np.float64), fnp.float64)
    for vg in (funcgrad.value_and_grad(_mlp_loss),
               funcgrad.jit(funcgrad.value_and_grad(_mlp_loss), static_argnums=2)):
        loss, g = vg(p, x, fnp.bfloat16)
        assert loss.dtype == F32 and abs(float(loss) - float(l64)) < 2e-2
        for k in p:
            assert g[k].dtype == F32
            np.testing.assert_allclose(np.asarray(g[k]), np.asarray(g64[k]),
                                       atol=2e-2 * np.abs(np.asarray(g64[k])).max())


def test_astype_passes_gradients_back_to_float32():
    w = np.array([0.3, -1.7, 2.2], np.float32)
    g = funcgrad.grad(lambda w: fnp.sum(w.astype(fnp.bfloat16) ** 2).astype(fnp.float32))(w)
    assert g.dtype == F32
    wb = w.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.asarray(g), (wb * wb.dtype.type(2)).astype(np.float32))


def test_attention_in_bf16(rng):
    q, k, v = (rng.standard_normal((2, 5, 2, 8)).astype(ml_dtypes.bfloat16) for _ in range(3))

    def f(q, k, v):
        return nn.dot_product_attention(q, k, v, is_causal=True)
    want = _f64(f(*[fnp.asarray(a.astype(np.float64)) for a in (q, k, v)]))
    for g in (f, funcgrad.jit(f)):
        out = g(q, k, v)
        assert out.dtype == BF16
        np.testing.assert_allclose(_f64(out), want, atol=2e-2)
    dq = funcgrad.grad(lambda q: fnp.sum(f(q, k, v).astype(fnp.float32) ** 2))(q)
    assert dq.dtype == BF16 and np.isfinite(_f64(dq)).all()


def test_vmap_and_indexing_keep_bf16():
    b = fnp.arange(6, dtype=fnp.bfloat16).reshape(2, 3) * 0.5
    assert funcgrad.vmap(lambda r: fnp.sum(r * r))(b).dtype == BF16
    assert b.at[0, 1].set(7.0).dtype == BF16 and float(b.at[0, 1].set(7.0)[0, 1]) == 7.0
    assert fnp.concatenate([b, b]).dtype == BF16 and fnp.sort(b[0]).dtype == BF16
    assert fnp.linspace(0, 1, 5, dtype=fnp.bfloat16).dtype == BF16


def test_lax_bits_of_bf16():
    x = np.array([1.0, -2.5, 3.3, 1e30, np.inf], np.float32)
    b = x.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(np.asarray(lax.bitcast_convert_type(fnp.asarray(b), np.uint16)),
                                  b.view(np.uint16))
    back = lax.bitcast_convert_type(fnp.asarray(b.view(np.int16)), fnp.bfloat16)
    assert back.dtype == BF16
    np.testing.assert_array_equal(np.asarray(back).view(np.uint16), b.view(np.uint16))
    np.testing.assert_array_equal(np.asarray(lax.reduce_precision(x, 8, 7)), b.astype(np.float32))


def test_prng_draws_as_jax():
    k = fr.PRNGKey(0)
    u = fr.uniform(k, (5,), fnp.bfloat16)   # jax.random's numbers for this key
    assert u.dtype == BF16
    np.testing.assert_array_equal(_f64(u), [0.6484375, 0.5703125, 0.15625, 0.203125, 0.7109375])
    n = fr.normal(k, (5,), fnp.bfloat16)
    assert n.dtype == BF16
    np.testing.assert_array_equal(_f64(n), [0.38671875, 0.1826171875, -1.0, -0.82421875, 0.5625])
    np.testing.assert_allclose(_f64(fr.uniform(k, (5,), fnp.float16)),
                               [0.3105, 0.2129, 0.0547, 0.6562, 0.2324], atol=1e-3)
    big = _f64(fr.normal(fr.PRNGKey(1), (20000,), fnp.bfloat16))
    assert abs(big.mean()) < 0.03 and abs(big.std() - 1) < 0.03
    assert fr.truncated_normal(k, -1.0, 1.0, (4,), fnp.bfloat16).dtype == BF16


def test_safetensors_bf16_f16_f8(tmp_path):
    path = os.path.join(tmp_path, "ck.safetensors")
    tree = {"w": fnp.asarray([1.5, 2.25, 3.3]).astype(fnp.bfloat16), "h": fnp.ones(2, "float16"),
            "q": fnp.asarray([0.5, 1.0]).astype(ml_dtypes.float8_e4m3fn)}
    fio.save(path, tree)
    with open(path, "rb") as f:
        data = f.read()
    header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    assert (header["w"]["dtype"], header["h"]["dtype"], header["q"]["dtype"]) == (
        "BF16", "F16", "F8_E4M3")
    back = fio.load(path)
    for key, val in tree.items():
        assert back[key].dtype == val.dtype
        np.testing.assert_array_equal(np.ascontiguousarray(back[key]).view(np.uint8),
                                      np.ascontiguousarray(val).view(np.uint8))


F8 = np.dtype(ml_dtypes.float8_e4m3fn)


@pytest.mark.parametrize("name,fn", [
    ("exp", fnp.exp), ("add", lambda x: x + x), ("mul", lambda x: x * 2.0),
    ("reduce_sum", fnp.sum), ("dot_general", lambda x: x @ x),
    ("exp", funcgrad.jit(fnp.exp))])
def test_float8_has_no_kernel_and_says_so(name, fn):
    x = fnp.asarray([1.0, 2.0]).astype(F8)   # storage works: made, cast, reshaped
    assert x.dtype == F8 and x.reshape(2, 1).shape == (2, 1)
    np.testing.assert_array_equal(np.asarray(x.astype(fnp.float32)), [1.0, 2.0])
    with pytest.raises(TypeError) as e:
        fn(x)
    msg = str(e.value)
    assert msg.startswith(name + ":") and "float8_e4m3fn" in msg
    assert "test_bfloat16_ops.py" in msg   # the user's line


def test_float8_is_never_promoted_implicitly():
    x = fnp.asarray([1.0]).astype(F8)
    with pytest.raises(TypeError, match="no implicit promotion"):
        x + fnp.ones(1, fnp.float32)
    assert fnp.result_type(x, 2.0) == F8


def test_preferred_element_type_accumulates_in_float32(rng):
    a = rng.standard_normal((4, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 3)).astype(ml_dtypes.bfloat16)
    want = a.astype(np.float32) @ b.astype(np.float32)   # bf16 products are exact in float32
    dn = (((1,), (0,)), ((), ()))
    for out in (lax.dot_general(a, b, dn, preferred_element_type=np.float32),
                fnp.linalg.matmul(a, b, preferred_element_type=fnp.float32),
                funcgrad.jit(lambda a, b: lax.dot(a, b, preferred_element_type=np.float32))(a, b)):
        assert out.dtype == F32
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-5)
    g = funcgrad.grad(lambda a: fnp.sum(lax.dot_general(a, b, dn, preferred_element_type=F32)))(a)
    assert g.dtype == BF16
    i8 = np.full((2, 300), 100, np.int8)   # int8 products accumulate in int32, no wrap
    assert int(lax.dot(i8, i8.T, preferred_element_type=np.int32)[0, 0]) == 3_000_000


@given(shape=st.lists(st.integers(0, 3), min_size=1, max_size=3),
       dt=st.sampled_from([BF16, F16]), seed=st.integers(0, 2 ** 16))
def test_reductions_and_products_on_drawn_shapes(shape, dt, seed):
    """Shapes with 0- and 1-sized axes: dtypes kept, values within one rounding of float64."""
    r = np.random.default_rng(seed)
    x = r.standard_normal(shape).astype(dt)
    w = r.standard_normal((shape[-1], 2)).astype(dt)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    rtol, atol = TOL[dt]
    cases = [(lambda a: fnp.sum(a, axis=-1), x64.sum(-1)),
             (lambda a: fnp.cumsum(a, axis=0), np.cumsum(x64, 0)),
             (lambda a: fnp.exp(a) * 0.5 + a, np.exp(x64) * 0.5 + x64),
             (lambda a: a @ fnp.asarray(w), x64 @ w64)]
    if x.size:
        cases.append((lambda a: fnp.max(a), x64.max()))
    for f, want in cases:
        for g in (f, funcgrad.jit(f)):
            got = g(fnp.asarray(x))
            assert got.dtype == dt and got.shape == np.shape(want)
            np.testing.assert_allclose(_f64(got), want, rtol=4 * rtol,
                                       atol=4 * atol * max(1, shape[-1]))
