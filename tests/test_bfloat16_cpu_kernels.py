"""Fused CPU kernels on float16/bfloat16 (uint16 bits in, float32 per op, rounded to nearest
even after each op): the same bits as the numpy program, specials included."""
import warnings

import ml_dtypes
import numpy as np
import pytest

import funcgrad.numpy as fnp
from funcgrad import jit, nn

BF16 = np.dtype(ml_dtypes.bfloat16)

FUNCS = [
    lambda a, b: fnp.sin(a) * 1.37 + fnp.exp(a * 0.3) - a * a,
    lambda a, b: fnp.where(a > b, a / 3.0, b - a),
    lambda a, b: (a * 1e4 + b).astype(fnp.float32),
    lambda a, b: (a.astype(fnp.float32) * 1.001).astype(a.dtype) + b,
    lambda a, b: (a.astype(fnp.float64) * (1 + 2 ** -9 + 2 ** -30)).astype(a.dtype),
    lambda a, b: fnp.tanh(a) + fnp.sqrt(fnp.abs(b)) * 2.0,
    lambda a, b: (a > 0).astype(a.dtype) * b + fnp.arange(b.shape[0], dtype=a.dtype),
    lambda a, b: nn.gelu(a * b + 1.0, approximate=True),
    lambda a, b: fnp.maximum(a, 1.0) * a[:, :1] + b[0],
]


def _operands(dt, rng):
    x = rng.standard_normal((9, 7)).astype(dt)
    y = rng.standard_normal((7,)).astype(dt)
    with np.errstate(all="ignore"):   # specials: infinities, NaN, zeros, subnormals, overflow
        x[0, :5] = [np.inf, -np.inf, np.nan, 0.0, -0.0]
        x[1, :4] = ([1e-40, -3e-39, 2e38, 3.3e38] if dt == BF16 else [1e-7, -3e-5, 6e4, 6.5e4])
    return x, y


def _bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 1: np.uint8}[a.itemsize])


@pytest.mark.parametrize("dt", [BF16, np.dtype(np.float16)], ids=["bf16", "f16"])
@pytest.mark.parametrize("k", range(len(FUNCS)))
def test_fused_half_kernels_match_numpy_bits(k, dt, monkeypatch, rng):
    f = FUNCS[k]
    x, y = _operands(dt, rng)
    with np.errstate(all="ignore"):
        want = np.asarray(f(fnp.asarray(x), fnp.asarray(y)))   # numpy, op by op
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    jf = jit(f)
    got = np.asarray(jf(x, y))
    plan = jf.lower(x, y).compile()
    assert plan.fused and plan.program.kernels >= 1
    assert got.dtype == want.dtype
    nan = np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.where(nan, 0, _bits(got)), np.where(nan, 0, _bits(want)))


def test_rounding_helpers_cover_every_bf16_and_f16_value():
    """Decoding all 65536 bit patterns and storing them back gives the same bits; rounding a
    float64 grid lands where ml_dtypes/numpy cast it (ties to even, subnormals, overflow)."""
    from funcgrad.backends.cpu import kernels, ops
    src = ops.half_helpers({"bf16", "f16"}) + """
@njit(cache=True)
def kernel(bits, out_bits, xs, rb, rh):
    for i in range(bits.shape[0]):
        out_bits[i] = bits_bf16(dec_bf16(bits[i]))
        out_bits[bits.shape[0] + i] = bits_f16(dec_f16(bits[i]))
    for i in range(xs.shape[0]):
        rb[i] = rnd_bf16(xs[i])
        rh[i] = rnd_f16(xs[i])
"""
    mod = kernels.module_from_source(src)
    bits = np.arange(2 ** 16, dtype=np.uint16)
    out = np.empty(2 ** 17, np.uint16)
    r = np.random.default_rng(0)
    xs = np.concatenate([r.standard_normal(3000) * 10.0 ** r.integers(-45, 40, 3000),
                         np.float64(1.0) + np.arange(-64, 64) * 2.0 ** -12,   # ties
                         [65519.9, 65520.0, 3.3961e38, 3.4e38, 2.0 ** -134, 2.0 ** -25]])
    rb, rh = np.empty(xs.size, np.float32), np.empty(xs.size, np.float32)
    mod.kernel(bits, out, xs, rb, rh)
    nan_b = np.isnan(bits.view(ml_dtypes.bfloat16).astype(np.float32))
    nan_h = np.isnan(bits.view(np.float16))
    np.testing.assert_array_equal(out[:2 ** 16][~nan_b], bits[~nan_b])
    np.testing.assert_array_equal(out[2 ** 16:][~nan_h], bits[~nan_h])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(rb, xs.astype(ml_dtypes.bfloat16).astype(np.float32))
        np.testing.assert_array_equal(rh, xs.astype(np.float16).astype(np.float32))


def test_scans_with_16_bit_values_match_numpy(monkeypatch, rng):
    """A loop body whose bfloat16 values stay inside one kernel (a driver runs the loop) and a
    bfloat16 carry (the body runs as a program): the numpy program's bits, no fallback."""
    from funcgrad import lax

    def inner(c, x):
        c = (c.astype(fnp.bfloat16) * 1.37 + x.astype(fnp.bfloat16)).astype(fnp.float32)
        return c, c * 2.0

    def carry(c, x):
        return c * 0.9 + x, c
    x = rng.standard_normal((20, 4)).astype(np.float32)
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE_AFTER", "0")
    for body, xs, c0 in ((inner, x, fnp.zeros(4, fnp.float32)),
                         (carry, x.astype(BF16), fnp.zeros(4, fnp.bfloat16))):
        want = lax.scan(body, c0, fnp.asarray(xs))
        f = jit(lambda xs, body=body, c0=c0: lax.scan(body, c0, xs))
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # a kernel that fails to compile warns
            got = f(xs)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(_bits(g), _bits(w))
