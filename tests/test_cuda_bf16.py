"""bfloat16 on the CUDA backend: 16-bit storage with fp32 compute in every kernel family
(elementwise, fused clusters, reductions, GEMMs, gathers/scatters, rows) against ml_dtypes /
numpy float32 references, on tiny shapes (numba's simulator in CI, or a real GPU); the
real-size checks at the end need a GPU."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, nn
from funcgrad.core import ShapedArray, bind
from funcgrad.prims import rows as FP
from funcgrad.prims import rows_bwd as FB


def _usable() -> bool:
    try:
        from funcgrad import cuda
    except ImportError:
        return False
    return cuda.usable()


pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not _usable(), reason="no GPU and no CUDA simulator")]

BF = np.dtype(ml_dtypes.bfloat16)
EPS = float(ml_dtypes.finfo(BF).eps)   # 2^-7


def _cuda(a):
    return funcgrad.device_put(a, "cuda")


def _f32(a):
    return np.asarray(a).astype(np.float32)


def _bits(a):
    return np.asarray(a).view(np.uint16)


def _sim() -> bool:
    from funcgrad.cuda import simulator_active
    return simulator_active()


def _close(got, want, rel=2 * EPS, what=""):
    """bfloat16 results: within `rel` (default two bf16 ulps) of the float32 reference."""
    got, want = _f32(got), np.asarray(want, np.float32)
    assert got.shape == want.shape, what
    np.testing.assert_allclose(got, want, rtol=rel, atol=rel, err_msg=what)


# ---------------------------------------------------------------------------------------------
# conversions: round to nearest even, as ml_dtypes / JAX
# ---------------------------------------------------------------------------------------------

SPECIAL = np.array([0.0, -0.0, 1.0, 1.00390625, 1.01171875, 1.005859375, -1.00390625,
                    3.3895314e38, 3.4028235e38, -3.4028235e38, 1e-40, -1e-45, 1.1754944e-38,
                    np.inf, -np.inf, np.nan, -np.nan, 65504.0, 3.14159265], np.float32)


def test_convert_f32_to_bf16_rounds_to_nearest_even():
    x = np.concatenate([SPECIAL, np.random.default_rng(0).standard_normal(64, np.float32)])
    got = _bits(_cuda(x).astype(fnp.bfloat16))
    want = x.astype(BF).view(np.uint16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    # NaN stays a quiet NaN of its sign
    assert np.all((got[nan] & 0x7F80) == 0x7F80) and np.all(got[nan] & 0x0040)
    assert np.array_equal(got[nan] >> 15, (np.signbit(x[nan])).astype(np.uint16))


def test_convert_bf16_to_f32_and_back_is_exact():
    bits = np.arange(0, 1 << 16, 97, dtype=np.uint16)
    x = bits.view(BF)
    f = _cuda(x).astype(np.float32)
    want = x.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(_f32(f)), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(np.asarray(f)[ok].view(np.uint32), want[ok].view(np.uint32))
    back = _bits(f.astype(fnp.bfloat16))
    np.testing.assert_array_equal(back[ok], bits[ok])


def test_host_round_trip_keeps_bits():
    bits = np.random.default_rng(1).integers(0, 1 << 16, (3, 5)).astype(np.uint16)
    x = bits.view(BF)
    a = _cuda(x)
    assert a.dtype == BF and a.device == "cuda"
    np.testing.assert_array_equal(_bits(a), bits)


# ---------------------------------------------------------------------------------------------
# elementwise and fused clusters
# ---------------------------------------------------------------------------------------------

UNARY = {"exp": np.exp, "tanh": np.tanh, "neg": np.negative, "abs": np.abs,
         "sqrt": lambda v: np.sqrt(np.abs(v)), "log1p": lambda v: np.log1p(np.abs(v))}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_eager(name):
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(BF)
    fn = {"exp": fnp.exp, "tanh": fnp.tanh, "neg": fnp.negative, "abs": fnp.abs,
          "sqrt": lambda v: fnp.sqrt(fnp.abs(v)), "log1p": lambda v: fnp.log1p(fnp.abs(v))}[name]
    got = fn(_cuda(x))
    assert got.dtype == BF
    # the float32 result of the bf16 input, rounded once: one bf16 ulp at most
    _close(got, UNARY[name](x.astype(np.float32)), rel=EPS, what=name)


def test_binary_ops_bits_equal_ml_dtypes():
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal((4, 6)).astype(BF) for _ in range(2))
    X, Y = _cuda(x), _cuda(y)
    for got, want in ((X + Y, x + y), (X * Y, x * y), (X - Y, x - y),
                      (fnp.maximum(X, Y), np.maximum(x, y)), (X * 2.5, x * BF.type(2.5))):
        assert got.dtype == BF
        np.testing.assert_array_equal(_bits(got), np.asarray(want, BF).view(np.uint16))


def test_fused_cluster_rounds_bf16_intermediates():
    """A bf16 value inside a fused kernel is the value an unfused step would store."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    w = rng.standard_normal((7,)).astype(BF)

    def f(x, w):
        h = x.astype(fnp.bfloat16) * w + 1.0          # bf16 (rounded at each step)
        return (h.astype(np.float32) * 3.0, h * h)    # a float32 and a bf16 output

    a, b = funcgrad.jit(f)(_cuda(x), _cuda(w))
    h = x.astype(BF) * w + BF.type(1.0)
    assert a.dtype == np.float32 and b.dtype == BF
    np.testing.assert_array_equal(np.asarray(a), h.astype(np.float32) * np.float32(3.0))
    np.testing.assert_array_equal(_bits(b), (h * h).view(np.uint16))


def test_fused_literal_of_bf16_is_its_rounded_value():
    x = np.linspace(-2, 2, 9).astype(BF)
    got = funcgrad.jit(lambda v: v * 3.14159265 + 0.1)(_cuda(x))
    want = x * BF.type(3.14159265) + BF.type(0.1)
    np.testing.assert_array_equal(_bits(got), want.view(np.uint16))


# ---------------------------------------------------------------------------------------------
# reductions: float32 accumulation, one rounding
# ---------------------------------------------------------------------------------------------

@given(st.lists(st.integers(0, 4), min_size=1, max_size=3), st.data())
def test_reductions_accumulate_in_float32(shape, data):
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(BF)
    ax = data.draw(st.sets(st.integers(0, len(shape) - 1)).map(tuple))
    xf = x.astype(np.float32)
    X = _cuda(x)
    got = fnp.sum(X, axis=ax)
    assert got.dtype == BF
    _close(got, xf.sum(axis=ax), rel=EPS + 1e-6, what=f"sum {shape} {ax}")
    if x.size and all(shape[a] for a in ax):
        np.testing.assert_array_equal(_f32(fnp.max(X, axis=ax)), xf.max(axis=ax))
    if x.size and shape[-1]:
        np.testing.assert_array_equal(np.asarray(fnp.argmax(X, axis=-1)), xf.argmax(axis=-1))


def test_long_sum_is_not_accumulated_in_bf16():
    x = np.full(4096, 1.0, BF)   # a bf16 accumulator would stop at 256
    assert float(np.asarray(fnp.sum(_cuda(x))).astype(np.float32)) == 4096.0
    assert float(np.asarray(funcgrad.jit(fnp.sum)(_cuda(x))).astype(np.float32)) == 4096.0


# ---------------------------------------------------------------------------------------------
# GEMMs: bf16 operands, fp32 accumulation, bf16 or float32 results
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [((5, 13), (13, 6)), ((2, 3, 20), (2, 20, 4)), ((1, 9), (9, 1))])
def test_matmul_bf16(shape):
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal(s).astype(BF) for s in shape)
    got = _cuda(x) @ _cuda(y)
    assert got.dtype == BF
    want = np.matmul(x.astype(np.float32), y.astype(np.float32))
    _close(got, want, rel=EPS, what=str(shape))


def test_matmul_preferred_float32_and_transposed_operands():
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((12, 7)).astype(BF), rng.standard_normal((5, 12)).astype(BF)
    got = lax.dot_general(_cuda(x), _cuda(y), (((0,), (1,)), ((), ())),
                          preferred_element_type=np.float32)
    assert got.dtype == np.float32
    want = x.astype(np.float32).T @ y.astype(np.float32).T
    np.testing.assert_allclose(np.asarray(got), want, rtol=EPS, atol=EPS)


@pytest.mark.parametrize("dt", [BF, np.dtype(np.float16)], ids=["bf16", "f16"])
def test_jit_widened_product_is_one_float32_gemm(dt):
    """float32(x @ y) of 16-bit operands feeding only the cast: the GEMM writes the fp32
    accumulator (cuda/cast_gemm.py), not the 16-bit-rounded product widened again."""
    rng = np.random.default_rng(15)
    x, y = rng.standard_normal((9, 33)).astype(dt), rng.standard_normal((33, 7)).astype(dt)

    def f(a, b):
        return (a @ b).astype(np.float32)

    X, Y = _cuda(x), _cuda(y)
    desc = funcgrad.jit(f).lower(X, Y).compile().describe()
    assert "dot_general->float32" in desc and "convert_element_type" not in desc, desc
    got = np.asarray(funcgrad.jit(f)(X, Y))
    exact = x.astype(np.float64) @ y.astype(np.float64)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)
    # the unfused path rounds to the 16-bit type first: its error is that type's
    assert np.max(np.abs(_f32(_cuda(x) @ _cuda(y)) - exact)) > 1e-4


@pytest.mark.parametrize("dt", [BF, np.dtype(np.float16)], ids=["bf16", "f16"])
def test_jit_preferred_float32_reads_the_16bit_operands(dt):
    """dot_general(float32(x), float32(y)) of 16-bit x, y (preferred_element_type=float32) is
    a 16-bit GEMM writing float32 (cuda/cast_gemm.py): the float32 product, no widened copies."""
    rng = np.random.default_rng(16)
    x, y = rng.standard_normal((2, 9, 33)).astype(dt), rng.standard_normal((33, 7)).astype(dt)

    def f(a, b):
        return (lax.dot_general(a, b, (((2,), (0,)), ((), ())), preferred_element_type=np.float32),
                lax.dot_general(a[0], a[1], (((1,), (1,)), ((), ())),
                                preferred_element_type=np.float32))

    X, Y = _cuda(x), _cuda(y)
    desc = funcgrad.jit(f).lower(X, Y).compile().describe()
    assert desc.count(f"dot_general({dt.name} operands)") == 2, desc
    assert "convert_element_type" not in desc, desc
    p, q = funcgrad.jit(f)(X, Y)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    for got, exact in ((p, xd @ yd), (q, xd[0] @ xd[1].T)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(np.asarray(got), exact, rtol=1e-5, atol=1e-5)


def test_matmul_bias_and_its_gradient_in_jit():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 10)).astype(np.float32)
    w = (rng.standard_normal((10, 4)) * 0.3).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)

    def loss(w, b, x):
        h = x.astype(fnp.bfloat16) @ w.astype(fnp.bfloat16) + b.astype(fnp.bfloat16)
        return fnp.sum(nn.gelu(h).astype(np.float32) ** 2)

    g = funcgrad.jit(funcgrad.grad(loss, argnums=(0, 1)))(_cuda(w), _cuda(b), _cuda(x))
    ref = funcgrad.grad(loss, argnums=(0, 1))(w, b, x)   # the CPU backend, in bf16 too
    for a, r in zip(g, ref):
        assert a.dtype == np.float32 and a.device == "cuda"
        scale = np.max(np.abs(np.asarray(r)))
        np.testing.assert_allclose(np.asarray(a), np.asarray(r), atol=8 * EPS * scale, rtol=0)


# ---------------------------------------------------------------------------------------------
# gathers and scatters
# ---------------------------------------------------------------------------------------------

def test_take_and_scatter_add_bf16():
    rng = np.random.default_rng(8)
    w = rng.standard_normal((10, 3)).astype(BF)
    idx = np.array([1, 3, 3, 9, 0, 3, 3], np.int32)
    W, I = _cuda(w), _cuda(idx)
    np.testing.assert_array_equal(_bits(fnp.take(W, I, axis=0)), w[idx].view(np.uint16))
    u = rng.standard_normal((7, 3)).astype(BF)
    got = funcgrad.jit(lambda w, i, u: w.at[i].add(u))(W, I, _cuda(u))
    want = w.astype(np.float32)
    np.add.at(want, idx, u.astype(np.float32))   # summed in float32, rounded once
    np.testing.assert_array_equal(_bits(got), want.astype(BF).view(np.uint16))


def test_embedding_gradient_through_astype():
    w = np.random.default_rng(9).standard_normal((6, 4)).astype(np.float32)
    idx = np.array([[1, 2, 2], [5, 1, 2]], np.int32)

    def loss(w, i):
        return fnp.sum(fnp.take(w.astype(fnp.bfloat16), i, axis=0).astype(np.float32) * 0.5)

    g = funcgrad.jit(funcgrad.grad(loss))(_cuda(w), _cuda(idx))
    want = np.zeros_like(w)
    np.add.at(want, idx.reshape(-1), 0.5)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(g), want)


# ---------------------------------------------------------------------------------------------
# rows: softmax, log_softmax, norms, softmax cross-entropy and their backward
# ---------------------------------------------------------------------------------------------

def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("n", [6, 40, 300])   # warp-per-row (<= 32 slots) and block-per-row
def test_row_forwards(n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((3, n)).astype(BF)
    g, b = (rng.standard_normal(n).astype(BF) for _ in range(2))
    xf, gf, bf = (a.astype(np.float32) for a in (x, g, b))
    X, G, B = _cuda(x), _cuda(g), _cuda(b)
    _close(bind(FP.softmax_p, X), _softmax(xf), rel=EPS, what="softmax")
    _close(bind(FP.log_softmax_p, X), np.log(_softmax(xf)), rel=EPS, what="log_softmax")
    mu = xf.mean(-1, keepdims=True)
    var = ((xf - mu) ** 2).mean(-1, keepdims=True)
    _close(bind(FP.layer_norm_p, X, G, B, eps=1e-5),
           (xf - mu) / np.sqrt(var + 1e-5) * gf + bf, what="layer_norm")
    _close(bind(FP.rms_norm_p, X, G, eps=1e-6),
           xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + 1e-6) * gf, what="rms_norm")
    lab = np.array([0, n - 1, n // 2], np.int32)
    lse = np.log(np.exp(xf - xf.max(-1, keepdims=True)).sum(-1)) + xf.max(-1)
    _close(bind(FP.softmax_xent_p, X, _cuda(lab)), lse - xf[np.arange(3), lab],
           what="softmax_xent")


@pytest.mark.parametrize("name", sorted(p.name for p in FB.BWD_PRIMITIVES))
def test_row_backwards_match_float32(name):
    prim = next(p for p in FB.BWD_PRIMITIVES if p.name == name)
    rng = np.random.default_rng(len(name))
    n = 24
    x = rng.standard_normal((5, n)).astype(np.float32)
    c = rng.standard_normal((5, n)).astype(np.float32)
    sc = rng.standard_normal(n).astype(np.float32)
    args = {"softmax_bwd": lambda: (_softmax(x), c), "log_softmax_bwd": lambda: (
        np.log(_softmax(x)), c), "softmax_xent_bwd": lambda: (
        x, np.arange(5, dtype=np.int32) % n, c[:, 0]), "layer_norm_bwd": lambda: (x, sc, c),
        "rms_norm_bwd": lambda: (x, sc, c)}[name]()
    params = {"eps": 1e-5} if "norm" in name else {}
    a16 = [a.astype(BF) if a.dtype == np.float32 else a for a in args]
    want = prim.impl(*[a.astype(np.float32) if a.dtype == BF else a for a in a16], **params)
    got = bind(prim, *[_cuda(a) for a in a16], **params)
    assert got.dtype == BF
    scale = np.max(np.abs(want)) + 1e-3
    np.testing.assert_allclose(_f32(got), want, atol=4 * EPS * scale, rtol=2 * EPS, err_msg=name)


def test_mixed_precision_layer_norm_loss_gradients():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    g = np.ones(16, np.float32) + 0.1 * rng.standard_normal(16).astype(np.float32)
    w = (rng.standard_normal((16, 8)) * 0.3).astype(np.float32)

    def loss(g, w, x):
        h = x.astype(fnp.bfloat16)
        m = fnp.mean(h, axis=-1, keepdims=True)
        v = fnp.mean((h - m) ** 2, axis=-1, keepdims=True)
        y = (h - m) * lax.rsqrt(v + 1e-5) * g.astype(fnp.bfloat16)
        logits = (y @ w.astype(fnp.bfloat16)).astype(np.float32)
        return fnp.mean(nn.logsumexp(logits, axis=-1) - logits[:, 0])

    gc = funcgrad.jit(funcgrad.value_and_grad(loss, argnums=(0, 1)))(_cuda(g), _cuda(w), _cuda(x))
    ref = funcgrad.value_and_grad(loss, argnums=(0, 1))(
        g.astype(np.float64), w.astype(np.float64), x.astype(np.float64))   # float64: exact
    assert gc[0].dtype == np.float32
    assert abs(float(gc[0]) - float(ref[0])) < 0.02
    for a, r in zip(gc[1], ref[1]):
        assert a.dtype == np.float32
        r = np.asarray(r)
        np.testing.assert_allclose(np.asarray(a), r, atol=0.03 * np.max(np.abs(r)), rtol=0)


def test_adamw_on_float32_masters_with_bf16_grads():
    rng = np.random.default_rng(14)
    p = {"w": rng.standard_normal((3, 8)).astype(np.float32), "b": np.zeros(8, np.float32)}
    g = {"w": rng.standard_normal((3, 8)).astype(BF), "b": rng.standard_normal(8).astype(BF)}
    opt = funcgrad.optim.adamw(1e-2, weight_decay=0.1)

    def step(p, s, g):
        u, s = opt.update(g, s, p)
        return funcgrad.optim.apply_updates(p, u), s

    put = funcgrad.tree_util.tree_map
    pc, _ = funcgrad.jit(step)(put(_cuda, p), put(_cuda, opt.init(p)), put(_cuda, g))
    pr, _ = step(p, opt.init(p), g)   # the CPU backend
    for k in p:
        assert pc[k].dtype == np.float32 and pc[k].device == "cuda"
        np.testing.assert_allclose(np.asarray(pc[k]), np.asarray(pr[k]), rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# primitives without bf16 kernels run widened; float8 only moves
# ---------------------------------------------------------------------------------------------

def test_widened_primitive_returns_bf16():
    from funcgrad.cuda import half_ops
    q = np.random.default_rng(11).standard_normal((1, 4, 2, 8)).astype(BF)
    got = funcgrad.jit(lambda q: nn.dot_product_attention(q, q, q, is_causal=True))(_cuda(q))
    qf = q.astype(np.float32)
    want = nn.dot_product_attention(qf, qf, qf, is_causal=True)
    assert got.dtype == BF
    _close(got, np.asarray(want), rel=2 * EPS, what="attention")
    assert "attention" in half_ops.WIDENED or "attention" in half_ops.NATIVE


def test_float8_reaches_moves_only():
    from funcgrad import prims as P
    from funcgrad.cuda import lowering
    f8 = np.dtype(ml_dtypes.float8_e4m3fn)
    x = _cuda(np.arange(6, dtype=np.float32).astype(f8).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(x[:, 1:]).view(np.uint8),
                                  np.arange(6, dtype=np.float32).astype(f8).reshape(2, 3)[:, 1:]
                                  .view(np.uint8))
    from funcgrad.core import get_backend
    buf = get_backend("cuda").from_numpy(np.zeros(3, f8))
    with pytest.raises(TypeError, match=r"float8_e4m3fn kernel for primitive 'reduce_sum'.*\n"
                                        r"  at .*test_cuda_bf16.py"):
        lowering.lower(P.reduce_sum_p, [buf], {"axes": (0,)}, ShapedArray((), f8))


# ---------------------------------------------------------------------------------------------
# real sizes (a GPU: cuBLAS's bf16 tensor-core GEMM, the epilogue, wide rows)
# ---------------------------------------------------------------------------------------------

gpu_only = pytest.mark.skipif(_sim(), reason="real sizes: a GPU")


@gpu_only
def test_gemm_backend_names_cublas_for_bf16():
    from funcgrad.cuda import gemm_backend
    assert gemm_backend("bfloat16").startswith("cublas"), gemm_backend("bfloat16")


@gpu_only
def test_large_bf16_matmul_with_bias_matches_float32():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2048, 768)).astype(BF)
    w = (rng.standard_normal((768, 2304)) * 0.03).astype(BF)
    b = rng.standard_normal(2304).astype(BF)
    got = funcgrad.jit(lambda x, w, b: x @ w + b)(_cuda(x), _cuda(w), _cuda(b))
    want = x.astype(np.float32) @ w.astype(np.float32) + b.astype(np.float32)
    np.testing.assert_allclose(_f32(got), want, rtol=2 * EPS, atol=4 * EPS)


@gpu_only
def test_large_rows_and_reductions():
    rng = np.random.default_rng(13)
    x = rng.standard_normal((8192, 768)).astype(BF)
    g, b = np.ones(768, BF), np.zeros(768, BF)
    xf = x.astype(np.float32)
    mu = xf.mean(-1, keepdims=True)
    ln = (xf - mu) / np.sqrt(((xf - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    _close(bind(FP.layer_norm_p, _cuda(x), _cuda(g), _cuda(b), eps=1e-5), ln, what="ln")
    _close(fnp.sum(_cuda(x), axis=0), xf.sum(0), rel=EPS + 1e-4, what="col sum")
    big = rng.standard_normal((64, 50304)).astype(BF)
    bf = big.astype(np.float32)
    lse = np.log(np.exp(bf - bf.max(-1, keepdims=True)).sum(-1)) + bf.max(-1)
    _close(nn.logsumexp(_cuda(big).astype(np.float32), axis=-1), lse, rel=1e-5, what="lse")
