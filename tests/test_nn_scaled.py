"""nn.scaled_matmul, nn.scaled_dot_general and nn.get_scaled_dot_general_config: numpy
references, JAX's quantizer (when importable), gradients, vmap and jit."""
from __future__ import annotations

import doctest

import numpy as np
import pytest

import funcgrad
from funcgrad import nn
from funcgrad.nn import _scaled
from funcgrad.test_util import check_grads

DN = (((2,), (2,)), ((0,), (0,)))


def test_doctests():
    assert doctest.testmod(_scaled, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0


def ref_scaled_matmul(a, b, sa, sb):
    ra, rb = a.shape[2] // sa.shape[2], b.shape[2] // sb.shape[2]
    return np.einsum("bmk,bnk->bmn", a * np.repeat(sa, ra, -1), b * np.repeat(sb, rb, -1))


def test_scaled_matmul_values_dtypes_gradients(rng):
    a, b = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 4, 8))
    sa, sb = rng.uniform(0.5, 2, (2, 3, 2)), rng.uniform(0.5, 2, (2, 4, 2))
    got = nn.scaled_matmul(a, b, sa, sb, preferred_element_type=np.float64)
    np.testing.assert_allclose(np.asarray(got), ref_scaled_matmul(a, b, sa, sb), rtol=1e-12)
    f32 = nn.scaled_matmul(a.astype(np.float32), b.astype(np.float32), sa.astype(np.float32),
                           sb.astype(np.float32))
    assert f32.dtype == np.float32
    np.testing.assert_allclose(np.asarray(f32), ref_scaled_matmul(a, b, sa, sb), rtol=1e-5)
    f16 = nn.scaled_matmul(a.astype(np.float16), b.astype(np.float16), sa.astype(np.float16),
                           sb.astype(np.float16), preferred_element_type=np.float16)
    assert f16.dtype == np.float16
    check_grads(lambda a, b, sa, sb: nn.scaled_matmul(a, b, sa, sb, np.float64),
                (a, b, sa, sb), order=2)
    v = funcgrad.vmap(lambda a: nn.scaled_matmul(a, b, sa, sb, np.float64))(a[None])
    np.testing.assert_allclose(np.asarray(v)[0], ref_scaled_matmul(a, b, sa, sb), rtol=1e-12)
    j = funcgrad.jit(lambda *xs: nn.scaled_matmul(*xs, preferred_element_type=np.float64))
    np.testing.assert_allclose(np.asarray(j(a, b, sa, sb)), ref_scaled_matmul(a, b, sa, sb),
                               rtol=1e-12)


def test_scaled_matmul_errors_name_the_shapes():
    z = np.zeros
    with pytest.raises(ValueError, match="3-dimensional"):
        nn.scaled_matmul(z((3, 8)), z((2, 4, 8)), z((2, 3, 1)), z((2, 4, 1)))
    with pytest.raises(ValueError, match=r"\(2, 3, 8\) and \(2, 4, 6\)"):
        nn.scaled_matmul(z((2, 3, 8)), z((2, 4, 6)), z((2, 3, 1)), z((2, 4, 1)))
    with pytest.raises(ValueError, match=r"a_scales: \(2, 5, 1\)"):
        nn.scaled_matmul(z((2, 3, 8)), z((2, 4, 8)), z((2, 5, 1)), z((2, 4, 1)))
    with pytest.raises(ValueError, match="multiple of the scales' last dimension 3"):
        nn.scaled_matmul(z((2, 3, 8)), z((2, 4, 8)), z((2, 3, 3)), z((2, 4, 3)))
    with pytest.raises(TypeError, match="no float8"):
        nn.scaled_matmul(z((1, 1, 2), int), z((1, 1, 2)), z((1, 1, 1)), z((1, 1, 1)))


def test_configs():
    mx = nn.get_scaled_dot_general_config("mxfp8")
    assert (mx.mode, mx.block_size, mx.global_scale) == ("mxfp8", 32, None)
    nv = nn.get_scaled_dot_general_config("nvfp4", np.array([0.5], np.float32))
    assert (nv.block_size, float(nv.global_scale[0])) == (16, 0.5)
    assert float(nn.get_scaled_dot_general_config("nvfp4").global_scale[0]) == 1.0
    with pytest.raises(ValueError, match="Unsupported mode"):
        nn.get_scaled_dot_general_config("fp16")


def _round_ref(v, nmant, emin):
    e = np.maximum(np.floor(np.log2(np.where(v == 0, 1, np.abs(v)))), emin)
    q = 2.0 ** (e - nmant)
    return np.round(v / q) * q


def ref_quantize(x, mode, gs=1.0):
    """numpy model of JAX's quantize: blocks along the last axis."""
    bs, (nmant, emin, mx) = (32, (3, -6, 448.0)) if mode == "mxfp8" else (16, (1, 0, 6.0))
    xb = x.reshape(x.shape[:-1] + (-1, bs)).astype(np.float64)
    if mode == "nvfp4":
        xb = xb / gs
    amax = np.abs(xb).max(-1, keepdims=True) / mx
    if mode == "mxfp8":
        s = 2.0 ** np.ceil(np.log2(amax))
    else:
        s = _round_ref(np.clip(amax, 0, 448), 3, -6)
    q = _round_ref(np.clip(xb / s, -mx, mx), nmant, emin)
    return q.reshape(x.shape), s[..., 0]


@pytest.mark.parametrize("mode", ["mxfp8", "nvfp4"])
def test_scaled_dot_general_matches_quantized_reference(rng, mode):
    lhs = (rng.standard_normal((2, 4, 64)) * 3).astype(np.float32)
    rhs = rng.standard_normal((2, 5, 64)).astype(np.float32)
    cfg = [nn.get_scaled_dot_general_config(mode)] * 3
    lq, ls = ref_quantize(lhs, mode)
    rq, rs = ref_quantize(rhs, mode)
    want = ref_scaled_matmul(lq, rq, ls, rs)
    got = nn.scaled_dot_general(lhs, rhs, DN, configs=cfg)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-4)
    exact = np.einsum("bmk,bnk->bmn", lhs, rhs)
    assert np.abs(np.asarray(got) - exact).max() < 0.2 * np.abs(exact).max()
    # no configs: lax.dot_general
    np.testing.assert_allclose(np.asarray(nn.scaled_dot_general(lhs, rhs, DN)), exact,
                               rtol=1e-5, atol=1e-4)


def test_scaled_dot_general_no_batch_dims_jit_vmap_and_errors(rng):
    x, w = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal(
        (64, 32)).astype(np.float32)
    cfg = [nn.get_scaled_dot_general_config("mxfp8")] * 3
    dn = (((1,), (0,)), ((), ()))
    out = nn.scaled_dot_general(x, w, dn, configs=cfg)
    assert out.shape == (32, 32)
    np.testing.assert_allclose(np.asarray(funcgrad.jit(
        lambda x, w: nn.scaled_dot_general(x, w, dn, configs=cfg))(x, w)), np.asarray(out))
    v = funcgrad.vmap(lambda x: nn.scaled_dot_general(x, w, dn, configs=cfg))(x[None])
    np.testing.assert_allclose(np.asarray(v)[0], np.asarray(out), rtol=1e-6)
    with pytest.raises(ValueError, match="multiple of the block size 32"):
        nn.scaled_dot_general(x[:, :48], w[:48], dn, configs=cfg)
    with pytest.raises(TypeError, match="float32 or float16"):
        nn.scaled_dot_general(x, w, dn, preferred_element_type=np.float64, configs=cfg)


@pytest.mark.parametrize("mode", ["mxfp8", "nvfp4"])
def test_scaled_dot_general_gradient_is_jax_rule(rng, mode):
    """The backward pass quantizes the cotangent: compare with JAX's rule (its cuDNN matmul
    swapped for an einsum so that it runs on the CPU)."""
    jax = pytest.importorskip("jax")
    try:
        from jax._src.cudnn import scaled_matmul_stablehlo as J
    except ImportError:
        pytest.skip("JAX's scaled matmul module moved")
    lhs = rng.standard_normal((1, 32, 64)).astype(np.float32)
    rhs = rng.standard_normal((1, 32, 64)).astype(np.float32)

    def cpu_matmul(a, b, sa, sb, preferred_element_type=np.float32):
        f = lambda x, s: x.astype(np.float32) * jax.numpy.repeat(
            s.astype(np.float32), x.shape[2] // s.shape[2], -1)
        return jax.numpy.einsum("bmk,bnk->bmn", f(a, sa), f(b, sb)).astype(
            preferred_element_type)
    orig = J.scaled_matmul_wrapper
    J.scaled_matmul_wrapper = cpu_matmul
    try:
        jcfg = [jax.nn.get_scaled_dot_general_config(mode)] * 3
        want = jax.grad(lambda a, b: (J.scaled_dot_general_wrapper(
            a, b, DN, configs=jcfg) ** 2).sum(), (0, 1))(lhs, rhs)
    finally:
        J.scaled_matmul_wrapper = orig
    cfg = [nn.get_scaled_dot_general_config(mode)] * 3
    got = funcgrad.grad(lambda a, b: (nn.scaled_dot_general(a, b, DN, configs=cfg) ** 2).sum(),
                        (0, 1))(lhs, rhs)
    for g, w in zip(got, want):
        w = np.asarray(w)
        ok = np.isfinite(w)
        np.testing.assert_allclose(np.asarray(g)[ok], w[ok], rtol=2e-3,
                                   atol=2e-3 * np.abs(w[ok]).max())
