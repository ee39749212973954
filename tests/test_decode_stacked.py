"""Decode-step kernels on CUDA: stacked [layers, ...] KV caches updated in place, and the
two-pass argmax of few long rows (the simulator under NUMBA_ENABLE_CUDASIM=1, or a GPU)."""
import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, nn

NL, T, H, HD, V = 2, 4, 2, 2, 11
D = H * HD


@pytest.fixture
def cuda():
    from funcgrad import cuda as fcuda
    if not fcuda.usable():
        pytest.skip("no CUDA backend (set NUMBA_ENABLE_CUDASIM=1)")
    return fcuda


def _params(seed=0):
    r = np.random.default_rng(seed)
    return {"wte": r.standard_normal((V, D)).astype(np.float32),
            "wqkv": r.standard_normal((NL, D, 3 * D)).astype(np.float32) * 0.5}


def _step(variant):
    """A decode step over caches [NL, 1, T, H, HD] stacked again after each layer's update
    (scale.py's D1 program, shrunk); `variant` bends it where in-place writing must stop."""
    def step(p, ck, cv, tok, t):
        old = fnp.transpose(ck[0])    # a view taken before the updates, read after them
        x = fnp.take(p["wte"], tok, axis=0)[:, None, :]
        visible = (fnp.arange(T) <= t)[None, None, None, :]
        nk, nv = [], []
        for i in range(NL):
            q, k, v = fnp.split((x @ p["wqkv"][i]).reshape(1, 1, 3 * H, HD), 3, axis=2)
            ki = lax.dynamic_update_slice(ck[i], k, (0, t, 0, 0))
            vi = (cv[i] if variant == "unchanged" and i == 1
                  else lax.dynamic_update_slice(cv[i], v, (0, t, 0, 0)))
            nk.append(ki)
            nv.append(vi)
            x = x + nn.dot_product_attention(q, ki, vi, mask=visible).reshape(1, 1, D)
        logits = (x @ p["wte"].T)[:, 0]
        if variant == "reads_old":    # the old cache is read after its update
            logits = logits + fnp.sum(ck[0])
        if variant == "old_view":
            logits = logits + fnp.sum(old * old)
        return fnp.stack(nk), fnp.stack(nv), logits, t + 1
    return step


def _run(step, device, n=3, watch=None, after_first=None):
    p = funcgrad.device_put(_params(), device)
    ck, cv = (funcgrad.device_put(np.zeros((NL, 1, T, H, HD), np.float32), device)
              for _ in range(2))
    tok = funcgrad.device_put(np.zeros(1, np.int32), device)
    t = funcgrad.device_put(np.int32(0), device)
    outs, ptrs = [], []
    for _ in range(n):
        ck, cv, logits, t = step(p, ck, cv, tok, t)
        outs.append((np.asarray(ck), np.asarray(cv), np.asarray(logits)))
        tok = fnp.argmax(logits, axis=-1).astype(fnp.int32)
        if watch is not None:
            ptrs.append((ck.buf.block.ptr(), ck.buf.offset, cv.buf.block.ptr(), cv.buf.offset))
        if after_first is not None and len(outs) == 1:
            after_first()
    return outs, ptrs, (p, ck, cv, tok, t)


def _check_equal(got, want):
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", ["stack", "unchanged"])
def test_stacked_cache_is_updated_in_place(cuda, variant, monkeypatch):
    """Each layer's update writes its position into its run of the donated stacked cache and
    the stack moves nothing: no copy launched, the caches stay where they are, the plan says
    so, and every step equals the CPU's."""
    from funcgrad.cuda import dynamic
    step = funcgrad.jit(_step(variant), donate_argnums=(1, 2))
    want, _, _ = _run(funcgrad.jit(_step(variant)), "cpu", n=4)
    copies, first = [], []
    real = dynamic.run
    monkeypatch.setattr(dynamic, "run", lambda *a, **k: copies.append(a) or real(*a, **k))
    # the first call's dry run goes through the copying lowerings; the calls fed its results
    # back (a graph's capture on a GPU, then replays) launch no copy
    got, ptrs, args = _run(step, "cuda", n=4, watch=True,
                           after_first=lambda: first.append(len(copies)))
    assert len(copies) == first[0], "a planned step copied a cache"
    _check_equal(got, want)
    assert len(set(ptrs[1:])) == 1, ptrs        # (the first call may copy a shared input in)
    plan = step.lower(*args).compile()
    assert len(plan.stacks) == 2
    assert len(plan.layout.regions) == 2 * NL - (variant == "unchanged")
    lines = [ln.strip() for ln in plan.describe().splitlines() if "(in place" in ln]
    assert sum(ln.startswith("concatenate") for ln in lines) == 2
    assert sum(ln.startswith("dynamic_update_slice") for ln in lines) == len(
        plan.layout.regions)


@pytest.mark.cuda
@pytest.mark.parametrize("variant", ["reads_old", "old_view"])
def test_stacked_cache_read_after_its_update_is_copied(cuda, variant):
    """A step that reads the old cache after updating it (directly, or through a view made
    before the update) keeps the copying stack, and the same numbers."""
    step = funcgrad.jit(_step(variant), donate_argnums=(1, 2))
    want, _, _ = _run(funcgrad.jit(_step(variant)), "cpu")
    got, _, args = _run(step, "cuda")
    _check_equal(got, want)
    plan = step.lower(*args).compile()
    # ck is read after its update: only cv's stack is written in place
    assert {w[1] for w in plan.stacks.values()} == {plan.donate[1]}


def test_stacks_along_an_inner_dim_are_not_runs():
    """Pieces of a stack along a dim after one of size > 1 are strided: no in-place plan."""
    from funcgrad.cuda import fusion, inplace

    def f(c, u):
        return fnp.concatenate([lax.dynamic_update_slice(c[:, :1], u, (0, 0)), c[:, 1:]], 1)

    def g(c, u):
        return fnp.concatenate([lax.dynamic_update_slice(c[:1], u, (0, 0)), c[1:]], 0)

    for fun, found in ((f, 0), (g, 1)):
        expr = funcgrad.jit(fun).lower(np.zeros((3, 4), np.float32),
                                       np.zeros((1, 1), np.float32)).expr
        steps = fusion.plan_steps(expr)
        assert len(inplace.stacked_results(steps, expr)) == found


# ---------------------------------------------------------------------------------------------
# argmax / argmin of few long rows: two passes, the one-pass kernel's first occurrence
# ---------------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("shape,axis", [((1, 37), 1), ((3, 50), -1), ((50,), 0),
                                        ((2, 1, 19), 2)])
def test_split_arg_reductions_match_numpy(cuda, monkeypatch, dtype, shape, axis):
    from funcgrad.cuda import argsplit
    monkeypatch.setattr(argsplit, "CHUNK", 4)
    r = np.random.default_rng(1)
    x = (r.integers(-3, 3, shape) if dtype == np.int32 else r.standard_normal(shape)).astype(
        dtype)
    xc = funcgrad.device_put(x, "cuda")
    for f, nf in ((fnp.argmax, np.argmax), (fnp.argmin, np.argmin)):
        np.testing.assert_array_equal(np.asarray(f(xc, axis=axis)), nf(x, axis=axis))


@pytest.mark.cuda
def test_split_argmax_ties_and_nans_keep_the_first(cuda, monkeypatch):
    from funcgrad.cuda import argsplit
    monkeypatch.setattr(argsplit, "CHUNK", 4)
    x = np.zeros((2, 30), np.float32)
    x[0, [7, 20]] = 1.0               # a tie across chunks: the first
    x[1, [9, 26]] = np.nan            # NaN counts as the extreme, the first again
    x[1, 3] = 5.0
    got = fnp.argmax(funcgrad.device_put(x, "cuda"), axis=1)
    np.testing.assert_array_equal(np.asarray(got), [7, 9])
    got = fnp.argmin(funcgrad.device_put(x, "cuda"), axis=1)
    np.testing.assert_array_equal(np.asarray(got), np.argmin(x, axis=1))


@pytest.mark.cuda
def test_split_argmax_of_a_vocabulary_row(cuda):
    """GPT-2's 50,304 logits (on a GPU; a shorter row in the simulator)."""
    n = 50304 if cuda.is_available() else 4 * 2048 + 5
    x = np.random.default_rng(2).standard_normal((1, n)).astype(np.float32)
    got = fnp.argmax(funcgrad.device_put(x, "cuda"), axis=-1)
    np.testing.assert_array_equal(np.asarray(got), np.argmax(x, axis=-1))


# ---------------------------------------------------------------------------------------------
# masked attention of a decode step as two kernels (decode_attn.py, FUNCGRAD_DECODE_ATTN=1)
# ---------------------------------------------------------------------------------------------

@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("B,T,H,KVH,S,D", [(2, 1, 4, 2, 10, 3), (1, 3, 2, 2, 9, 2),
                                           (1, 1, 2, 1, 1, 2)])
def test_decode_attention_matches_cpu(cuda, monkeypatch, dtype, B, T, H, KVH, S, D):
    """Several chunks of positions, grouped-query heads, several queries, a row with no
    visible position (the mean of v, as the composed softmax of equal fills gives)."""
    from funcgrad.cuda import decode_attn
    monkeypatch.setattr(decode_attn, "ENABLED", True)
    r = np.random.default_rng(S)
    q = r.standard_normal((B, T, H, D)).astype(dtype)
    k = r.standard_normal((B, S, KVH, D)).astype(dtype)
    v = r.standard_normal((B, S, KVH, D + 1)).astype(dtype)
    mask = r.random((B, H, T, S)) < 0.6
    mask[0, 0, 0] = False

    def f(q, k, v, mask):
        return nn.dot_product_attention(q, k, v, mask=mask)

    want = np.asarray(funcgrad.jit(f)(*(funcgrad.device_put(a, "cpu") for a in (q, k, v, mask))))
    args = [funcgrad.device_put(a, "cuda") for a in (q, k, v, mask)]
    step = funcgrad.jit(f)
    got = np.asarray(step(*args))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    plan = step.lower(*args).compile()
    assert any("decode attention" in ln for ln in plan.describe().splitlines()) == (
        T == 1 or H == KVH)


@pytest.mark.cuda
def test_decode_attention_in_a_stacked_cache_step(cuda, monkeypatch):
    from funcgrad.cuda import decode_attn
    monkeypatch.setattr(decode_attn, "ENABLED", True)
    step = funcgrad.jit(_step("stack"), donate_argnums=(1, 2))
    want, _, _ = _run(funcgrad.jit(_step("stack")), "cpu", n=4)
    got, _, args = _run(step, "cuda", n=4)
    _check_equal(got, want)
    plan = step.lower(*args).compile()
    assert sum("decode attention" in ln for ln in plan.describe().splitlines()) == NL
