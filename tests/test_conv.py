"""lax.conv_general_dilated and friends against loop references: layouts, groups, padding,
dilations, float64 gradients to second order, jit/vmap, errors; numpy.convolve/correlate."""
from __future__ import annotations

import numpy as np
import pytest
from conv_reference import conv_configs, ref_conv
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax
from funcgrad.test_util import check_grads


CONFIGS = st.composite(lambda draw: conv_configs(draw, st))()


def _conv(lhs, rhs, params):
    return lax.conv_general_dilated(lhs, rhs, **params)


@given(data=st.data())
def test_matches_loop_reference(data):
    lhs, rhs, params = data.draw(CONFIGS)
    got = _conv(lhs, rhs, params)
    want = ref_conv(lhs, rhs, params["window_strides"], params["padding"],
                    params["lhs_dilation"], params["rhs_dilation"],
                    params["dimension_numbers"], params["feature_group_count"],
                    params["batch_group_count"])
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


@given(data=st.data())
def test_grads_second_order(data):
    lhs, rhs, params = data.draw(CONFIGS)
    check_grads(lambda a, b: _conv(a, b, params), (lhs, rhs), order=2)


@pytest.mark.parametrize("padding", ["SAME", "VALID", "SAME_LOWER", [(2, 0), (0, 1)]])
@pytest.mark.parametrize("strides", [(1, 1), (2, 3)])
def test_string_dimension_numbers_and_padding(padding, strides):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 7, 6, 3))                 # NHWC
    k = rng.standard_normal((3, 2, 3, 4))                 # HWIO
    got = lax.conv_general_dilated(x, k, strides, padding,
                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
    want = lax.conv_general_dilated(x.transpose(0, 3, 1, 2), k.transpose(3, 2, 0, 1), strides,
                                    padding)                  # NCHW / OIHW default
    np.testing.assert_allclose(np.asarray(got), np.asarray(want).transpose(0, 2, 3, 1),
                               rtol=1e-12)
    if padding in ("SAME", "SAME_LOWER"):   # SAME keeps ceil(n / stride) positions
        assert got.shape[1:3] == (-(-7 // strides[0]), -(-6 // strides[1]))
    nchw = lax.conv(x.transpose(0, 3, 1, 2), k.transpose(3, 2, 0, 1), strides, padding)
    np.testing.assert_allclose(np.asarray(nchw), np.asarray(want), rtol=1e-12)


def test_dimension_numbers_and_pads_helpers():
    dn = lax.conv_dimension_numbers((1, 5, 5, 3), (3, 3, 3, 8), ("NHWC", "HWIO", "NHWC"))
    assert dn == lax.ConvDimensionNumbers((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    # spatial axes are matched by letter, in the rhs's order
    dn = lax.conv_dimension_numbers((1, 2, 3, 4), (1, 2, 3, 4), ("NWHC", "OIHW", "NCWH"))
    assert dn == lax.ConvDimensionNumbers((0, 3, 2, 1), (0, 1, 2, 3), (0, 1, 3, 2))
    assert lax.conv_dimension_numbers((1, 2, 3), (4, 2, 1), None) == ((0, 1, 2),) * 3
    assert lax.padtype_to_pads((5, 6), (3, 3), (2, 1), "SAME") == [(1, 1), (1, 1)]
    assert lax.padtype_to_pads((4,), (4,), (1,), "SAME") == [(1, 2)]
    assert lax.padtype_to_pads((4,), (4,), (1,), "SAME_LOWER") == [(2, 1)]
    assert lax.padtype_to_pads((4,), (4,), (1,), "VALID") == [(0, 0)]
    for bad in [("NHWC", "HWIO"), ("NHWC", "HWOO", "NHWC"), ("NHWC", "HWIO", "NHXC"), ("NHW",
                "HWIO", "NHWC")]:
        with pytest.raises(TypeError):
            lax.conv_dimension_numbers((1, 2, 3, 4), (1, 2, 3, 4), bad)
    with pytest.raises(ValueError, match="unknown padding"):
        lax.conv(np.ones((1, 1, 3)), np.ones((1, 1, 2)), (1,), "FULL")


def test_depthwise_and_dilated_conv_match_reference():
    rng = np.random.default_rng(1)
    x, k = rng.standard_normal((2, 4, 9)), rng.standard_normal((8, 1, 3))
    got = lax.conv_general_dilated(x, k, (2,), [(3, 1)], lhs_dilation=(2,), rhs_dilation=(3,),
                                   feature_group_count=4)
    want = ref_conv(x, k, (2,), [(3, 1)], (2,), (3,), ((0, 1, 2),) * 3, fg=4)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
    got = lax.conv_with_general_padding(x, rng.standard_normal((3, 4, 2)), (1,), [(1, 1)],
                                        (2,), (1,))
    assert got.shape == (2, 3, 18)


def test_preferred_element_type_and_float16():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float16)
    k = rng.standard_normal((3, 2, 3, 3)).astype(np.float16)
    y = lax.conv(x, k, (1, 1), "SAME", preferred_element_type=np.float32)
    assert y.dtype == np.float32
    want = ref_conv(x, k, (1, 1), [(1, 1), (1, 1)], (1, 1), (1, 1), ((0, 1, 2, 3),) * 3)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)
    assert lax.conv(x, k, (1, 1), "SAME").dtype == np.float16
    gx, gk = funcgrad.grad(lambda a, b: fnp.sum(lax.conv(
        a, b, (1, 1), "SAME", preferred_element_type=np.float32)), argnums=(0, 1))(x, k)
    assert gx.dtype == np.float16 and gk.dtype == np.float16
    gx64 = funcgrad.grad(lambda a: fnp.sum(lax.conv(a, k.astype(np.float64), (1, 1), "SAME")))(
        x.astype(np.float64))
    np.testing.assert_allclose(np.asarray(gx, np.float64), np.asarray(gx64), rtol=1e-2,
                               atol=1e-2)
    ints = lax.conv(np.arange(6, dtype=np.int32).reshape(1, 1, 6),
                    np.array([[[1, -1]]], np.int32), (1,), "VALID")
    assert ints.dtype == np.int32 and np.asarray(ints).tolist() == [[[-1] * 5]]


def test_conv_transpose_is_the_gradient_of_a_strided_conv():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 8, 8, 3))                 # NHWC
    k = rng.standard_normal((3, 3, 3, 5))                 # HWIO
    fwd = lambda a: lax.conv_general_dilated(a, k, (2, 2), "SAME",
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = fwd(x)
    ct = rng.standard_normal(y.shape)
    (want,) = funcgrad.vjp(fwd, x)[1](ct)
    got = lax.conv_transpose(ct, k, (2, 2), "SAME", transpose_kernel=True)
    assert got.shape == x.shape
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-10)
    assert lax.conv_transpose(np.ones((1, 4, 4, 2)), np.ones((3, 3, 2, 5)), (2, 2),
                              "VALID").shape == (1, 9, 9, 5)


def test_jit_vmap_and_grad_compose():
    rng = np.random.default_rng(4)
    x, k = rng.standard_normal((3, 2, 6, 5)), rng.standard_normal((4, 2, 3, 2))

    def f(a, b):
        return fnp.sum(fnp.tanh(lax.conv(a, b, (1, 2), "SAME")) ** 2)
    g = funcgrad.grad(f, argnums=(0, 1))(x, k)
    gj = funcgrad.jit(funcgrad.grad(f, argnums=(0, 1)))(x, k)
    for a, b in zip(g, gj):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10)
    per_kernel = funcgrad.vmap(lambda b: lax.conv(x, b, (1, 1), "VALID"))(
        np.stack([k, 2 * k]))
    np.testing.assert_allclose(np.asarray(per_kernel[1]), 2 * np.asarray(per_kernel[0]),
                               rtol=1e-12)
    per_example = funcgrad.vmap(lambda a: lax.conv(a[None], k, (1, 1), "VALID")[0])(x)
    np.testing.assert_allclose(np.asarray(per_example),
                               np.asarray(lax.conv(x, k, (1, 1), "VALID")), rtol=1e-12)


@pytest.mark.parametrize("lhs,rhs,kw,match", [
    ((1, 4, 5), (2, 3, 2), {}, "input features"),
    ((1, 4, 5), (3, 2, 2), {"feature_group_count": 2}, "divisible"),
    ((3, 2, 5), (2, 2, 2), {"batch_group_count": 2}, "lhs batch"),
    ((1, 2, 5), (2, 2, 2), {"padding": [(-4, -3)]}, "negative padding"),
    ((1, 2, 5), (2, 2, 2, 1), {}, "same rank"),
])
def test_shape_errors_name_the_primitive_and_line(lhs, rhs, kw, match):
    kw = {"window_strides": (1,), "padding": "VALID", **kw}
    with pytest.raises((funcgrad.ShapeError, TypeError), match=match) as e:
        lax.conv_general_dilated(np.ones(lhs), np.ones(rhs), **kw)
    if isinstance(e.value, funcgrad.ShapeError):
        assert "conv_general_dilated" in str(e.value) and "test_conv.py" in str(e.value)
    with pytest.raises(funcgrad.ShapeError, match="equal dtypes"):
        lax.conv(np.ones((1, 1, 3), np.float32), np.ones((1, 1, 2)), (1,), "VALID")


# ---------------------------------------------------------------------------------------------
# numpy.convolve / numpy.correlate
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolve_and_correlate_match_numpy(mode):
    rng = np.random.default_rng(5)
    for n, m in [(1, 1), (5, 3), (3, 5), (4, 4), (6, 1), (2, 7)]:
        a, v = rng.standard_normal(n), rng.standard_normal(m)
        np.testing.assert_allclose(np.asarray(fnp.convolve(a, v, mode)),
                                   np.convolve(a, v, mode), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(fnp.correlate(a, v, mode)),
                                   np.correlate(a, v, mode), rtol=1e-12, atol=1e-12)
    out = fnp.convolve(np.array([1, 2, 3]), np.array([0, 1, 1]), mode)
    assert out.dtype == np.float32   # integers promote to float32, as in JAX


def test_convolve_grads_and_errors():
    rng = np.random.default_rng(6)
    a, v = rng.standard_normal(6), rng.standard_normal(3)
    check_grads(lambda x, y: fnp.convolve(x, y, "same"), (a, v), order=2)
    check_grads(lambda x, y: fnp.correlate(x, y, "full"), (v, a), order=1)
    with pytest.raises(ValueError, match="1-dimensional"):
        fnp.convolve(np.ones((2, 2)), np.ones(2))
    with pytest.raises(ValueError, match="cannot be empty"):
        fnp.correlate(np.ones(0), np.ones(2))
    with pytest.raises(ValueError, match="mode must be"):
        fnp.convolve(np.ones(3), np.ones(2), "circular")


def test_patches_and_shape_helpers():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 5, 4))                 # NCHW
    p = lax.conv_general_dilated_patches(x, (2, 3), (1, 1), "VALID")
    assert p.shape == (2, 3 * 6, 4, 2)
    # feature (c, i, j) of output position (h, w) is x[c, h + i, w + j]
    want = np.stack([x[:, c, i:i + 4, j:j + 2] for c in range(3) for i in range(2)
                     for j in range(3)], axis=1)
    np.testing.assert_allclose(np.asarray(p), want, rtol=1e-12)
    nhwc = lax.conv_general_dilated_patches(x.transpose(0, 2, 3, 1), (2, 3), (1, 1), "VALID",
                                            dimension_numbers=("NHWC", "OIHW", "NHWC"))
    np.testing.assert_allclose(np.asarray(nhwc), want.transpose(0, 2, 3, 1), rtol=1e-12)
    check_grads(lambda a: lax.conv_general_dilated_patches(a, (2, 2), (2, 1), "SAME"), (x,),
                order=1)
    assert lax.conv_shape_tuple((2, 3, 8, 8), (4, 3, 3, 3), (2, 2), "SAME") == (2, 4, 4, 4)
    assert lax.conv_shape_tuple((4, 3, 8), (6, 3, 3), (1,), [(1, 0)], 2) == (2, 6, 7)
    dn = ("NHWC", "HWIO", "NHWC")
    for strides, padding in [((1, 1), "SAME"), ((2, 3), "VALID"), ((2, 2), [(1, 2), (0, 1)])]:
        a, k = np.ones((2, 7, 6, 3)), np.ones((3, 2, 3, 4))
        assert lax.conv_general_shape_tuple(a.shape, k.shape, strides, padding, dn) == \
            lax.conv_general_dilated(a, k, strides, padding, dimension_numbers=dn).shape
        assert lax.conv_transpose_shape_tuple(a.shape, k.shape, strides, padding, dn) == \
            lax.conv_transpose(a, k, strides, padding).shape
    assert lax.reduce_window_shape_tuple((1, 5, 5, 3), (1, 3, 3, 1), (1, 2, 2, 1),
                                         [(0, 0), (1, 1), (1, 1), (0, 0)]) == (1, 3, 3, 3)
