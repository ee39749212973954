"""KV-cache decoding (examples/gpt.py): decode steps against the full causal forward, prefill,
per-row positions, one-call generation with on-device sampling, errors, in-place caches."""
import os
import sys

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, random

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import gpt

TINY = gpt.Config(vocab=32, d=16, layers=2, heads=2, ctx=8)
# the CUDA simulator runs every thread in Python: one layer, four positions
SIM_CFG = gpt.Config(vocab=16, d=8, layers=1, heads=2, ctx=4)
HERE = os.path.basename(__file__)


@pytest.fixture(autouse=True)
def _cpu():
    funcgrad.config.update("default_device", "cpu")
    yield
    funcgrad.config.update("default_device", None)


def _setup(cfg, batch=2, seed=3, device="cpu"):
    params = funcgrad.device_put(gpt.init_params(cfg, seed=seed), device)
    toks = np.random.default_rng(seed).integers(0, cfg.vocab, (batch, cfg.ctx)).astype(np.int32)
    full = np.asarray(gpt.forward(funcgrad.device_put(gpt.init_params(cfg, seed=seed), "cpu"),
                                  fnp.asarray(toks), cfg))
    return params, toks, full


def _put(x, device):
    return funcgrad.device_put(x, device)


def _decode_all(step, params, toks, cfg, device="cpu"):
    """Logits [B, T, vocab] of decoding toks one position per step from an empty cache."""
    cache = _put(gpt.init_cache(cfg, toks.shape[0]), device)
    out = []
    for t in range(toks.shape[1]):
        lg, cache = step(params, cache, _put(toks[:, t], device), _put(np.int32(t), device), cfg)
        out.append(np.asarray(lg))
    return np.stack(out, 1), cache


# ---------------------------------------------------------------------------------------------
# decode steps == the full causal forward pass
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_decode_step_equals_full_forward_at_every_position(mode):
    params, toks, full = _setup(TINY)
    step = gpt.decode_step if mode == "eager" else funcgrad.jit(gpt.decode_step,
                                                                 static_argnums=(4,))
    got, _ = _decode_all(step, params, toks, TINY)
    np.testing.assert_allclose(got, full, rtol=1e-5, atol=1e-5)


def test_donated_cache_is_written_in_place_on_cpu():
    """The CPU plan writes a donated cache's new position into the cache's own memory (from
    the fourth call: the first copies the zeros, which are not the plan's to write, and the
    third, compiling the plan's kernels, runs on copies)."""
    params, toks, full = _setup(TINY)
    step = funcgrad.jit(gpt.decode_step, static_argnums=(4,), donate_argnums=(1,))
    got, cache = _decode_all(step, params, toks[:, :3], TINY)
    np.testing.assert_allclose(got, full[:, :3], rtol=1e-5, atol=1e-5)
    for t in range(3, TINY.ctx):
        addrs = [a.buf.ctypes.data for a in cache.k + cache.v]
        lg, cache = step(params, cache, toks[:, t], np.int32(t), TINY)
        assert [a.buf.ctypes.data for a in cache.k + cache.v] == addrs
        np.testing.assert_allclose(np.asarray(lg), full[:, t], rtol=1e-5, atol=1e-5)


def test_the_cache_write_is_one_dynamic_update_slice():
    """.at[:, pos].set with a traced position is the dynamic_update_slice primitive (no
    scatter over the flattened cache)."""
    params, toks, _ = _setup(TINY)
    cache = gpt.init_cache(TINY, 2)
    jaxpr = funcgrad.make_jaxpr(gpt.decode_step, static_argnums=(4,))(
        params, cache, toks[:, 0], np.int32(0), TINY)
    names = [e.prim.name for e in jaxpr.eqns]
    assert names.count("dynamic_update_slice") == 2 * TINY.layers
    assert "scatter" not in names


def test_prefill_fills_the_cache_in_one_pass():
    params, toks, full = _setup(TINY)
    t = 5
    lg, cache = gpt.prefill(params, gpt.init_cache(TINY, 2), fnp.asarray(toks[:, :t]), TINY)
    np.testing.assert_allclose(np.asarray(lg), full[:, t - 1], rtol=1e-5, atol=1e-5)
    _, stepped = _decode_all(gpt.decode_step, params, toks[:, :t], TINY)
    for a, b in zip(cache.k + cache.v, stepped.k + stepped.v):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    # one causal attention pass per layer (the fused flash-attention primitive), no loop
    jaxpr = funcgrad.make_jaxpr(gpt.prefill, static_argnums=(3,))(
        params, gpt.init_cache(TINY, 2), toks[:, :t], TINY)
    names = [e.prim.name for e in jaxpr.eqns]
    assert names.count("attention") == TINY.layers
    assert not {"scan", "while"} & set(names)
    # the decode steps after a prefill continue the forward pass
    for pos in range(t, TINY.ctx):
        lg, cache = gpt.decode_step(params, cache, toks[:, pos], np.int32(pos), TINY)
        np.testing.assert_allclose(np.asarray(lg), full[:, pos], rtol=1e-5, atol=1e-5)


def test_prefill_of_padded_prompts_returns_each_last_token():
    params, toks, full = _setup(TINY)
    lengths = np.array([5, 2], np.int32)
    lg, _ = gpt.prefill(params, gpt.init_cache(TINY, 2), toks[:, :5], TINY, lengths=lengths)
    np.testing.assert_allclose(np.asarray(lg)[0], full[0, 4], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(lg)[1], full[1, 1], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# batched decoding: each sequence at its own position
# ---------------------------------------------------------------------------------------------

def _staggered(step, params, toks, cfg, lags, device="cpu"):
    """Decode a batch where sequence b starts lags[b] steps late (its position lags behind):
    per step logits of every row, with the position each row was at."""
    b = toks.shape[0]
    cache = _put(gpt.init_cache(cfg, b), device)
    rows = []
    for s in range(cfg.ctx + max(lags)):
        pos = np.clip(s - np.asarray(lags), 0, cfg.ctx - 1).astype(np.int32)
        tok = toks[np.arange(b), pos]
        lg, cache = step(params, cache, _put(tok, device), _put(pos, device), cfg)
        rows.append((pos, np.asarray(lg)))
    return rows


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_batched_decode_equals_per_sequence_decode(mode):
    params, toks, full = _setup(TINY, batch=3)
    step = gpt.decode_step if mode == "eager" else funcgrad.jit(gpt.decode_step,
                                                                 static_argnums=(4,))
    lags = [0, 2, 5]
    seen = {}
    for pos, lg in _staggered(step, params, toks, TINY, lags):
        for b in range(3):
            seen[(b, int(pos[b]))] = lg[b]
    single = [_decode_all(gpt.decode_step, params, toks[b:b + 1], TINY)[0][0] for b in range(3)]
    for (b, p), lg in seen.items():
        np.testing.assert_allclose(lg, single[b][p], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lg, full[b, p], rtol=1e-5, atol=1e-5)


def test_per_row_mask_is_arange_le_position():
    params, toks, _ = _setup(TINY)
    jaxpr = funcgrad.make_jaxpr(gpt.decode_step, static_argnums=(4,))(
        params, gpt.init_cache(TINY, 2), toks[:, 0], np.array([1, 3], np.int32), TINY)
    shapes = [tuple(e.out.aval.shape) for e in jaxpr.eqns if e.prim.name == "le"]
    assert (2, TINY.ctx) in shapes


# ---------------------------------------------------------------------------------------------
# generation as one jitted call: prefill + fori_loop of decode steps, on-device sampling
# ---------------------------------------------------------------------------------------------

def _greedy_reference(params, prompt, cfg, n):
    seq = np.asarray(prompt)
    for _ in range(n):
        lg = np.asarray(gpt.forward(params, fnp.asarray(seq), cfg))[:, -1]
        seq = np.concatenate([seq, lg.argmax(-1)[:, None].astype(np.int32)], 1)
    return seq[:, prompt.shape[1]:]


def test_greedy_generation_is_one_call_and_matches_the_forward_pass():
    params, toks, _ = _setup(TINY)
    n = 5
    gen = gpt.generator(TINY, n, temperature=0)
    out, _ = gen(params, gpt.init_cache(TINY, 2), toks[:, :3], random.key(0))
    np.testing.assert_array_equal(np.asarray(out), _greedy_reference(params, toks[:, :3],
                                                                     TINY, n))
    jaxpr = funcgrad.make_jaxpr(lambda p, c, x, k: gpt.generate(p, c, x, k, TINY, n,
                                                                temperature=0))(
        params, gpt.init_cache(TINY, 2), toks[:, :3], random.key(0))
    assert {e.prim.name for e in jaxpr.eqns} & {"scan", "while"}, "the decode steps are no loop"
    assert sum(e.prim.name == "attention" for e in jaxpr.eqns) == TINY.layers   # the prefill


def test_generation_of_padded_prompts_decodes_each_at_its_own_position():
    params, toks, _ = _setup(TINY)
    lengths = np.array([4, 2], np.int32)
    n = 3
    out, _ = gpt.generator(TINY, n, temperature=0)(params, gpt.init_cache(TINY, 2),
                                                   toks[:, :4], random.key(0), lengths)
    for b, ln in enumerate(lengths):
        want = _greedy_reference(params, toks[b:b + 1, :ln], TINY, n)
        np.testing.assert_array_equal(np.asarray(out)[b:b + 1], want)


def test_sampled_generation_is_reproducible_for_a_key():
    params, toks, _ = _setup(TINY)
    gen = gpt.generator(TINY, 5, temperature=1.0, top_k=8, top_p=0.9)
    a = np.asarray(gen(params, gpt.init_cache(TINY, 2), toks[:, :3], random.key(7))[0])
    b = np.asarray(gen(params, gpt.init_cache(TINY, 2), toks[:, :3], random.key(7))[0])
    c = np.asarray(gen(params, gpt.init_cache(TINY, 2), toks[:, :3], random.key(8))[0])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    eager = gpt.generate(params, gpt.init_cache(TINY, 2), toks[:, :3], random.key(7), TINY, 5,
                         temperature=1.0, top_k=8, top_p=0.9)[0]
    np.testing.assert_array_equal(np.asarray(eager), a)


def test_eos_stops_a_sequence():
    """Every token after a sequence's first EOS is EOS; the tokens before it are the ones
    drawn without an EOS (the same keys)."""
    params, toks, _ = _setup(TINY)
    n = 6
    free = np.asarray(gpt.generator(TINY, n, temperature=1.0)(
        params, gpt.init_cache(TINY, 2), toks[:, :2], random.key(3))[0])
    eos = int(free[0, 1])
    got = np.asarray(gpt.generator(TINY, n, temperature=1.0, eos=eos)(
        params, gpt.init_cache(TINY, 2), toks[:, :2], random.key(3))[0])
    for row_free, row in zip(free, got):
        hits = np.flatnonzero(row_free == eos)
        first = hits[0] if hits.size else n
        np.testing.assert_array_equal(row[:first + 1], row_free[:first + 1])
        assert (row[first:] == eos).all()
    assert (got[0, 1:] == eos).all()


def test_sample_prints_tokens_per_second(capsys):
    params = funcgrad.device_put(gpt.init_params(gpt.Config(ctx=16, d=16, layers=1, heads=2)))
    text = gpt.sample(params, gpt.Config(ctx=16, d=16, layers=1, heads=2), b"ab", 6,
                      random.key(1), verbose=True)
    assert len(text) == 8 and text[:2] == b"ab"
    assert "tokens/s" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# sampling: greedy, temperature, top-k, top-p, random.categorical
# ---------------------------------------------------------------------------------------------

def _rows(n=4000, v=10, seed=0):
    logits = np.random.default_rng(seed).standard_normal(v).astype(np.float32) * 2
    return logits, np.broadcast_to(logits, (n, v))


def test_greedy_is_argmax():
    logits = np.random.default_rng(1).standard_normal((5, 11)).astype(np.float32)
    got = gpt.sample_token(random.key(0), logits, temperature=0)
    np.testing.assert_array_equal(np.asarray(got), logits.argmax(-1))


def test_top_k_never_picks_an_excluded_token():
    logits, many = _rows()
    got = np.asarray(gpt.sample_token(random.key(2), many, temperature=1.3, top_k=3))
    allowed = set(np.argsort(-logits)[:3].tolist())
    assert set(got.tolist()) == allowed      # every allowed token drawn, nothing else


def test_top_p_never_picks_an_excluded_token():
    logits, many = _rows(seed=4)
    p = 0.6
    order = np.argsort(-logits)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    before = np.cumsum(probs[order]) - probs[order]
    allowed = set(order[before < p].tolist())
    assert 1 <= len(allowed) < logits.size
    got = np.asarray(gpt.sample_token(random.key(5), many, temperature=1.0, top_p=p))
    assert set(got.tolist()) == allowed
    both = np.asarray(gpt.sample_token(random.key(5), many, temperature=1.0, top_k=2, top_p=p))
    assert set(both.tolist()) <= allowed & set(order[:2].tolist())


def test_temperature_sampling_is_categorical_of_scaled_logits():
    """The same bits as random.categorical (JAX's recipe) of logits / temperature, jitted or
    not; frequencies follow the softmax."""
    logits, many = _rows(n=20000, v=4, seed=6)
    key = random.key(9)
    got = np.asarray(gpt.sample_token(key, many, temperature=2.0))
    want = np.asarray(random.categorical(key, np.asarray(many / np.float32(2.0)), axis=-1))
    np.testing.assert_array_equal(got, want)
    jitted = funcgrad.jit(lambda k, x: gpt.sample_token(k, x, temperature=2.0))(key, many)
    np.testing.assert_array_equal(np.asarray(jitted), got)
    p = np.exp(logits / 2 - (logits / 2).max())
    p /= p.sum()
    np.testing.assert_allclose(np.bincount(got, minlength=4) / got.size, p, atol=0.015)


def test_categorical_is_argmax_of_gumbel_noise():
    """random.categorical is JAX's Gumbel-max recipe on JAX's uniform bits: the argmax of
    logits + -log(-log(uniform(key, shape, minval=tiny))) over the class axis."""
    logits = np.random.default_rng(2).standard_normal((3, 7)).astype(np.float32)
    key = random.key(11)
    u = np.asarray(random.uniform(key, (3, 7), minval=float(np.finfo(np.float32).tiny)))
    want = np.argmax(logits + -np.log(-np.log(u)), axis=-1)
    np.testing.assert_array_equal(np.asarray(random.categorical(key, logits)), want)


def test_categorical_without_replacement():
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4], np.float32))
    draws = np.asarray(random.categorical(random.key(0), logits, shape=(4,), replace=False))
    assert sorted(draws.tolist()) == [0, 1, 2, 3]
    # the k largest of logits + Gumbel noise, in order (JAX's recipe)
    noisy = logits + np.asarray(random.gumbel(random.key(0), (4,)))
    np.testing.assert_array_equal(draws, np.argsort(-noisy, kind="stable"))
    batch = np.asarray(random.categorical(random.key(1), np.zeros((2, 5)), shape=(3, 2),
                                          replace=False))
    assert batch.shape == (3, 2)
    assert all(len(set(batch[:, j].tolist())) == 3 for j in range(2))
    masked = np.array([0.0, -np.inf, 0.0, -np.inf, 0.0], np.float32)
    got = np.asarray(random.categorical(random.key(2), masked, shape=(3,), replace=False))
    assert sorted(got.tolist()) == [0, 2, 4]
    with pytest.raises(ValueError, match="without replacement"):
        random.categorical(random.key(0), logits, shape=(5,), replace=False)


def test_gumbel_high_mode():
    x = np.asarray(random.gumbel(random.key(0), (5000,), mode="high"))
    assert np.isfinite(x).all() and abs(x.mean() - np.euler_gamma) < 0.05
    with pytest.raises(ValueError, match="mode"):
        random.gumbel(random.key(0), (3,), mode="fast")


# ---------------------------------------------------------------------------------------------
# errors name the user's line
# ---------------------------------------------------------------------------------------------

def _line_of(marker):
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line:
                return i
    raise AssertionError(marker)


def test_position_beyond_the_cache_names_the_callers_line():
    params, toks, _ = _setup(TINY)
    cache = gpt.init_cache(TINY, 2)
    with pytest.raises(ValueError, match="position 8 is beyond the cache") as e:
        gpt.decode_step(params, cache, toks[:, 0], np.int32(8), TINY)  # ERR:pos
    assert f"{HERE}:{_line_of('ERR:pos')}" in str(e.value)
    with pytest.raises(ValueError, match="beyond the cache") as e:
        gpt.decode_step(params, cache, toks[:, 0], np.array([1, 9], np.int32), TINY)  # ERR:row
    assert f"{HERE}:{_line_of('ERR:row')}" in str(e.value)
    with pytest.raises(ValueError, match="beyond the cache") as e:
        gpt.generate(params, cache, toks[:, :4], random.key(0), TINY, 6)  # ERR:gen
    assert f"{HERE}:{_line_of('ERR:gen')}" in str(e.value)
    # traced positions: the cache write's device-side index check
    step = funcgrad.jit(gpt.decode_step, static_argnums=(4,))
    with pytest.raises(IndexError, match="out of bounds"):
        step(params, cache, toks[:, 0], np.int32(8), TINY)


def test_cache_of_the_wrong_shape_names_the_callers_line():
    params, toks, _ = _setup(TINY)
    bad = gpt.init_cache(TINY._replace(ctx=4), 2)
    with pytest.raises(ValueError, match=r"cache.k\[0\] has shape \(2, 4, 2, 8\)") as e:
        gpt.decode_step(params, bad, toks[:, 0], np.int32(0), TINY)  # ERR:shape
    assert f"{HERE}:{_line_of('ERR:shape')}" in str(e.value)
    with pytest.raises(ValueError, match="KVCache of 2") as e:
        gpt.prefill(params, gpt.init_cache(TINY._replace(layers=1), 2), toks[:, :2], TINY)
    step = funcgrad.jit(gpt.decode_step, static_argnums=(4,))
    with pytest.raises(ValueError, match="cache.k") as e:   # at trace time, same message
        step(params, gpt.init_cache(TINY, 3), toks[:, 0], np.int32(0), TINY)  # ERR:jit
    assert f"{HERE}:{_line_of('ERR:jit')}" in str(e.value)


# ---------------------------------------------------------------------------------------------
# lax.dynamic_slice / dynamic_update_slice (JAX's semantics)
# ---------------------------------------------------------------------------------------------

def test_dynamic_update_slice_clamps_and_wraps_like_jax():
    x = fnp.zeros(6)
    y = fnp.ones(3)
    assert lax.dynamic_update_slice(x, y, (2,)).tolist() == [0, 0, 1, 1, 1, 0]
    assert lax.dynamic_update_slice(x, y, (5,)).tolist() == [0, 0, 0, 1, 1, 1]
    assert lax.dynamic_update_slice(x, y, (-1,)).tolist() == [0, 0, 0, 1, 1, 1]   # 5
    assert lax.dynamic_update_slice(x, y, (-9,)).tolist() == [1, 1, 1, 0, 0, 0]   # clamped
    a = fnp.arange(12).reshape(3, 4)
    assert lax.dynamic_slice(a, (1, 1), (2, 3)).tolist() == [[5, 6, 7], [9, 10, 11]]
    assert lax.dynamic_slice(a, (2, 1), (2, 3)).tolist() == [[5, 6, 7], [9, 10, 11]]
    assert lax.dynamic_slice(a, (fnp.asarray(-1), 0), (1, 2),
                             allow_negative_indices=False).tolist() == [[0, 1]]
    f = funcgrad.jit(lambda x, i: lax.dynamic_slice(x, fnp.stack([i, i]), (2, 2)))
    assert f(a, np.int32(-1)).tolist() == [[6, 7], [10, 11]]
    assert lax.dynamic_update_index_in_dim(fnp.zeros(6), 1.0, 10, 0).tolist() == [0] * 5 + [1]
    with pytest.raises(ValueError, match="does not fit"):
        lax.dynamic_update_slice(x, fnp.ones(7), (0,))


def test_dynamic_update_slice_gradients_and_batching():
    x = np.arange(12.0).reshape(3, 4)
    u = np.ones((2, 2))

    def f(x, u, i):
        return fnp.sum(lax.dynamic_update_slice(x, u, (i, 1)) ** 2)
    gx, gu = funcgrad.grad(f, argnums=(0, 1))(x, u, np.int32(2))
    want_gx = 2 * x
    want_gx[1:3, 1:3] = 0                                   # the window: clamped to row 1
    np.testing.assert_allclose(np.asarray(gx), want_gx)
    np.testing.assert_allclose(np.asarray(gu), 2 * u)
    rows = funcgrad.vmap(lambda i: lax.dynamic_update_slice(x, u, (i, 1)))(
        np.array([0, 1, 2], np.int32))
    for i in range(3):
        want = x.copy()
        j = min(i, 1)
        want[j:j + 2, 1:3] = 1
        np.testing.assert_allclose(np.asarray(rows[i]), want)


# ---------------------------------------------------------------------------------------------
# CUDA (the simulator under NUMBA_ENABLE_CUDASIM=1): same numbers, caches updated in place
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def cuda():
    from funcgrad import cuda as fcuda
    if not fcuda.usable():
        pytest.skip("no CUDA backend (set NUMBA_ENABLE_CUDASIM=1)")
    return fcuda


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_cuda_decode_step_equals_full_forward(cuda, mode):
    params, toks, full = _setup(SIM_CFG, device="cuda")
    step = gpt.decode_step if mode == "eager" else funcgrad.jit(
        gpt.decode_step, static_argnums=(4,), donate_argnums=(1,))
    got, _ = _decode_all(step, params, toks, SIM_CFG, "cuda")
    np.testing.assert_allclose(got, full, rtol=1e-5, atol=1e-5)


def _in_place_lines(plan, prim):
    return [ln for ln in plan.describe().splitlines()
            if ln.strip().startswith(prim) and "(in place: donated argument" in ln]


@pytest.mark.cuda
def test_cuda_donated_cache_is_updated_in_place(cuda):
    """Every layer's k and v update is planned into its donated cache buffer: the plan's
    memory layout aliases the update's result to the argument, the step says so, and the
    cache's memory stays where it is from call to call (after the first, which copies the
    zeros: views of a shared constant are never written)."""
    from funcgrad.cuda import dynamic
    params, toks, _ = _setup(SIM_CFG, device="cuda")
    step = funcgrad.jit(gpt.decode_step, static_argnums=(4,), donate_argnums=(1,))
    cache = _put(gpt.init_cache(SIM_CFG, 2), "cuda")
    _, cache = step(params, cache, _put(toks[:, 0], "cuda"), _put(np.int32(0), "cuda"), SIM_CFG)
    copies = []
    real_run = dynamic.run
    dynamic.run = lambda *a, **k: copies.append(a) or real_run(*a, **k)
    try:
        for t in range(1, 3):
            ptrs = [c.buf.block.ptr() for c in cache.k + cache.v]
            _, cache = step(params, cache, _put(toks[:, t], "cuda"), _put(np.int32(t), "cuda"),
                            SIM_CFG)
            assert [c.buf.block.ptr() for c in cache.k + cache.v] == ptrs
    finally:
        dynamic.run = real_run
    assert not copies, "a planned in-place update copied its operand"
    plan = step.lower(params, cache, _put(toks[:, 0], "cuda"), _put(np.int32(0), "cuda"),
                      SIM_CFG).compile()
    n_args = len(funcgrad.tree_util.tree_leaves(params))
    donated = {n_args + i for i in range(2 * SIM_CFG.layers)}    # the cache's leaves
    assert set(plan.layout.alias.values()) == donated
    assert len(_in_place_lines(plan, "dynamic_update_slice")) == 2 * SIM_CFG.layers


@pytest.mark.cuda
def test_cuda_batched_decode_updates_rows_in_place(cuda):
    params, toks, full = _setup(SIM_CFG, device="cuda")
    step = funcgrad.jit(gpt.decode_step, static_argnums=(4,), donate_argnums=(1,))
    for pos, lg in _staggered(step, params, toks, SIM_CFG, [0, 1], "cuda"):
        for b in range(2):
            np.testing.assert_allclose(lg[b], full[b, pos[b]], rtol=1e-5, atol=1e-5)
    cache = _put(gpt.init_cache(SIM_CFG, 2), "cuda")
    plan = step.lower(params, cache, _put(toks[:, 0], "cuda"),
                      _put(np.array([0, 1], np.int32), "cuda"), SIM_CFG).compile()
    assert len(_in_place_lines(plan, "scatter")) == 2 * SIM_CFG.layers


@pytest.mark.cuda
def test_cuda_generation_equals_cpu_and_updates_its_carry_in_place(cuda):
    """The fori_loop of decode steps writes each position into the carried caches (and the
    token into the carried output) over the carry buffers: no copy of a cache per step."""
    params, toks, _ = _setup(SIM_CFG, device="cuda")
    cpu_params = funcgrad.device_put(gpt.init_params(SIM_CFG, seed=3), "cpu")
    gen = gpt.generator(SIM_CFG, 2, temperature=1.0, top_k=4)
    key = random.key(4)
    args = (params, _put(gpt.init_cache(SIM_CFG, 2), "cuda"), _put(toks[:, :2], "cuda"),
            _put(np.asarray(key), "cuda"))
    plan = gen.lower(*args).compile()
    got = gen(*args)[0]
    want = gen(cpu_params, gpt.init_cache(SIM_CFG, 2), toks[:, :2], key)[0]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    (rec,) = {id(s.params["rec"]): s.params["rec"] for kind, s in plan.steps
              if kind == "eqn" and s.prim.name == "loop_run"}.values()
    (body,) = rec.device_cache["cuda"]
    written = [body.steps[i][1].prim.name for i in body.into]
    assert written.count("dynamic_update_slice") == 2 * SIM_CFG.layers + 1   # caches, tokens
