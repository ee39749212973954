"""A byte-level GPT in funcgrad: parameters, forward pass, loss, and KV-cache generation."""
from __future__ import annotations

import math
import os
import sys
import time
from typing import NamedTuple

import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, nn


class Config(NamedTuple):
    vocab: int = 256
    d: int = 384
    layers: int = 6
    heads: int = 6
    ctx: int = 256

    @property
    def head_dim(self) -> int:
        return self.d // self.heads


W2 = Config()  # the W2 benchmark configuration of WORKLOADS.md (10.8M parameters)
SMALL = Config(d=128, layers=2, heads=4, ctx=64)  # for CPU runs


def init_params(cfg: Config, seed: int = 0) -> dict:
    """GPT-2 style init: normal(0.02) weights, zero biases, unit layer-norm scales."""
    rng = np.random.default_rng(seed)
    d = cfg.d

    def nrm(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ln():
        return {"scale": np.ones(d, np.float32), "bias": np.zeros(d, np.float32)}

    proj_std = 0.02 / math.sqrt(2 * cfg.layers)
    blocks = [{"ln1": ln(), "qkv": {"w": nrm(d, 3 * d), "b": np.zeros(3 * d, np.float32)},
               "proj": {"w": nrm(d, d, std=proj_std), "b": np.zeros(d, np.float32)},
               "ln2": ln(), "fc": {"w": nrm(d, 4 * d), "b": np.zeros(4 * d, np.float32)},
               "fc2": {"w": nrm(4 * d, d, std=proj_std), "b": np.zeros(d, np.float32)}}
              for _ in range(cfg.layers)]
    return {"wte": nrm(cfg.vocab, d), "wpe": nrm(cfg.ctx, d), "blocks": blocks, "lnf": ln()}


def _ln(x, p):
    return nn.layer_norm(x, p["scale"], p["bias"], eps=1e-5)


def _dense(x, p):
    return x @ p["w"] + p["b"]


def _mlp(x, blk):
    return _dense(nn.gelu(_dense(_ln(x, blk["ln2"]), blk["fc"])), blk["fc2"])


def _qkv(x, blk, cfg: Config):
    """q, k, v [B, T, heads, head_dim] of block `blk` for activations x [B, T, d]."""
    b, t = x.shape[:2]
    qkv = _dense(_ln(x, blk["ln1"]), blk["qkv"])
    return fnp.split(qkv.reshape(b, t, 3 * cfg.heads, cfg.head_dim), 3, axis=2)


def _causal(params: dict, idx, cfg: Config):
    """The full causal forward pass (flash attention): the final layer norm's output
    [B, T, d] and each layer's keys and values [B, T, heads, head_dim]."""
    b, t = idx.shape
    x = fnp.take(params["wte"], idx, axis=0) + params["wpe"][:t]
    ks, vs = [], []
    for blk in params["blocks"]:
        q, k, v = _qkv(x, blk, cfg)
        ks.append(k)
        vs.append(v)
        a = nn.dot_product_attention(q, k, v, is_causal=True)
        x = x + _dense(a.reshape(b, t, cfg.d), blk["proj"])
        x = x + _mlp(x, blk)
    return _ln(x, params["lnf"]), ks, vs


def forward(params: dict, idx, cfg: Config):
    """Logits [B, T, vocab] for token ids [B, T] (tied input/output embeddings)."""
    return _causal(params, idx, cfg)[0] @ params["wte"].T


def loss_fn(params: dict, idx, targets, cfg: Config):
    """Mean next-byte cross-entropy in nats."""
    logits = forward(params, idx, cfg)
    return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(logits, targets))


# ---------------------------------------------------------------------------------------------
# inference: a KV cache filled by one causal pass (prefill), then one position per decode step
# ---------------------------------------------------------------------------------------------

class KVCache(NamedTuple):
    k: list  # per layer [B, ctx, heads, head_dim]
    v: list


def init_cache(cfg: Config, batch: int) -> KVCache:
    shape = (batch, cfg.ctx, cfg.heads, cfg.head_dim)
    return KVCache([fnp.zeros(shape) for _ in range(cfg.layers)],
                   [fnp.zeros(shape) for _ in range(cfg.layers)])


def _caller() -> str:
    """file:line of the innermost frame outside this file and funcgrad (the user's call)."""
    pkg = os.path.dirname(os.path.abspath(funcgrad.__file__))
    f = sys._getframe(1)
    while f is not None:
        name = os.path.abspath(f.f_code.co_filename)
        if name != os.path.abspath(__file__) and not name.startswith(pkg) and (
                "contextlib" not in name):
            return f"{os.path.relpath(name)}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


def _check_cache(cache, cfg: Config, batch: int, what: str):
    """A clear error, naming the caller's line, for a cache that does not fit cfg and batch."""
    want = (batch, cfg.ctx, cfg.heads, cfg.head_dim)
    if not isinstance(cache, KVCache) or len(cache.k) != cfg.layers or len(cache.v) != (
            cfg.layers):
        raise ValueError(f"{what}: the cache must be a KVCache of {cfg.layers} key and value "
                         f"arrays (init_cache(cfg, batch))\n  at {_caller()}")
    for i, (k, v) in enumerate(zip(cache.k, cache.v)):
        for name, a in (("k", k), ("v", v)):
            if tuple(a.shape) != want:
                raise ValueError(f"{what}: cache.{name}[{i}] has shape {tuple(a.shape)}, not "
                                 f"{want} (batch, ctx, heads, head_dim)\n  at {_caller()}")


def _check_positions(pos, cfg: Config, what: str, span: int = 1):
    """Concrete positions (eager calls) must leave room for `span` positions in the cache;
    traced ones are checked on the device (the cache write's index check)."""
    if isinstance(pos, funcgrad.core.Tracer):
        return
    p = np.asarray(pos)
    if p.size and (p.min() < 0 or p.max() + span > cfg.ctx):
        bad = int(p.max() if p.max() + span > cfg.ctx else p.min())
        raise ValueError(f"{what}: position {bad} is beyond the cache (ctx {cfg.ctx}"
                         + (f", {span} positions from it" if span > 1 else "")
                         + f")\n  at {_caller()}")


def _write(c, kv, pos):
    """The cache c [B, ctx, heads, head_dim] with kv [B, heads, head_dim] written at position
    pos: one dynamic_update_slice for a scalar pos (in place when the cache is donated), a
    scatter of one row per sequence for per-row positions [B]."""
    if pos.ndim == 0:
        return c.at[:, pos].set(kv)
    return funcgrad.vmap(lambda cb, kb, pb: cb.at[pb].set(kb))(c, kv, pos)


def decode_step(params: dict, cache: KVCache, token, pos, cfg: Config):
    """One token per sequence: logits [B, vocab] for `token` [B] at position `pos`, and the
    cache with this position's keys and values written in.

    `pos` is an int32 scalar (every sequence at the same position) or [B] (each sequence at
    its own one: batched decoding of sequences of different lengths); sequence b attends to
    cache positions <= pos[b] (the mask `arange(ctx) <= pos[:, None]`).
    """
    token = fnp.asarray(token)
    b = token.shape[0]
    _check_cache(cache, cfg, b, "decode_step")
    _check_positions(pos, cfg, "decode_step")
    pos = fnp.asarray(pos, fnp.int32)
    x = fnp.take(params["wte"], token, axis=0) + fnp.take(params["wpe"], pos, axis=0)
    x = x[:, None, :]
    seen = fnp.arange(cfg.ctx) <= (pos[:, None] if pos.ndim else pos)
    visible = seen[:, None, None, :] if pos.ndim else seen[None, None, None, :]
    new_k, new_v = [], []
    for i, blk in enumerate(params["blocks"]):
        q, k, v = _qkv(x, blk, cfg)
        ck = _write(cache.k[i], k[:, 0], pos)
        cv = _write(cache.v[i], v[:, 0], pos)
        new_k.append(ck)
        new_v.append(cv)
        a = nn.dot_product_attention(q, ck, cv, mask=visible)
        x = x + _dense(a.reshape(b, 1, cfg.d), blk["proj"])
        x = x + _mlp(x, blk)
    logits = _ln(x, params["lnf"])[:, 0] @ params["wte"].T
    return logits, KVCache(new_k, new_v)


def prefill(params: dict, cache: KVCache, tokens, cfg: Config, lengths=None):
    """The prompt's cache in one pass: positions [0, T) of every layer's keys and values from
    the causal forward pass over `tokens` [B, T] (flash attention, not token by token).

    Returns (logits [B, vocab] of each sequence's last prompt token, the cache). `lengths` [B]
    (int32) gives each sequence's prompt length when prompts are padded to T (the logits are
    then those at position lengths[b] - 1; the cache beyond a prompt holds the padding's keys,
    which decoding overwrites before it attends to them).
    """
    tokens = fnp.asarray(tokens)
    b, t = tokens.shape
    _check_cache(cache, cfg, b, "prefill")
    _check_positions(t - 1, cfg, "prefill")
    if lengths is not None:
        _check_positions(fnp.asarray(lengths) - 1, cfg, "prefill")
    h, ks, vs = _causal(params, tokens, cfg)
    at = (0, 0, 0, 0)
    new_k = [lax.dynamic_update_slice(c, k, at) for c, k in zip(cache.k, ks)]
    new_v = [lax.dynamic_update_slice(c, v, at) for c, v in zip(cache.v, vs)]
    if lengths is None:
        last = h[:, t - 1]
    else:
        idx = fnp.asarray(lengths, fnp.int32) - 1
        last = fnp.take_along_axis(h, idx[:, None, None], axis=1)[:, 0]
    return last @ params["wte"].T, KVCache(new_k, new_v)


def sample_token(key, logits, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None):
    """Next tokens [B] (int32) from logits [B, vocab], on the device.

    temperature 0 is greedy (argmax). Otherwise `random.categorical` of logits / temperature,
    restricted first to the `top_k` largest logits (ties with the k-th kept) and then to the
    fewest most likely tokens whose probability reaches `top_p` (nucleus sampling); excluded
    tokens get -inf and are never drawn.
    """
    logits = fnp.asarray(logits, fnp.float32)
    if temperature == 0:
        return fnp.argmax(logits, axis=-1).astype(fnp.int32)
    logits = logits / fnp.float32(temperature)
    neg = fnp.float32(-np.inf)
    if top_k is not None and top_k < logits.shape[-1]:
        kth = lax.top_k(logits, int(top_k))[0][..., -1:]
        logits = fnp.where(logits < kth, neg, logits)
    if top_p is not None and top_p < 1.0:
        desc = -fnp.sort(-logits, axis=-1)
        probs = nn.softmax(desc, axis=-1)
        before = fnp.cumsum(probs, axis=-1) - probs       # the mass of the likelier tokens
        cutoff = fnp.min(fnp.where(before < fnp.float32(top_p), desc, fnp.float32(np.inf)),
                         axis=-1, keepdims=True)
        logits = fnp.where(logits < cutoff, neg, logits)
    return funcgrad.random.categorical(key, logits, axis=-1).astype(fnp.int32)


def generate(params: dict, cache: KVCache, prompt, key, cfg: Config, n: int, *,
             lengths=None, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, eos: int | None = None):
    """n tokens after each prompt as one computation: the prefill, then n - 1 decode steps in
    one `lax.fori_loop`, each token sampled on the device (sample_token) with keys split from
    `key`. Jit it (`generator` does, donating the cache) and the whole generation is one call.

    prompt [B, T] (int32; padded when `lengths` [B] gives per-sequence prompt lengths, and
    each sequence then decodes at its own positions); after a sequence draws `eos`, every later
    token of it is `eos`. Returns (tokens [B, n], the cache).
    """
    prompt = fnp.asarray(prompt, fnp.int32)
    b, t = prompt.shape
    if n < 1:
        raise ValueError(f"generate: n must be at least 1, got {n}\n  at {_caller()}")
    _check_positions(t - 1, cfg, "generate", span=n)
    logits, cache = prefill(params, cache, prompt, cfg, lengths)
    pos0 = (fnp.asarray(lengths, fnp.int32) if lengths is not None
            else fnp.asarray(t, fnp.int32))
    if lengths is not None:
        _check_positions(pos0 - 1, cfg, "generate", span=n)

    def pick(k, lg, done):
        tok = sample_token(k, lg, temperature, top_k, top_p)
        if eos is None:
            return tok, done
        tok = fnp.where(done, fnp.int32(eos), tok)
        return tok, done | (tok == eos)

    key, sub = funcgrad.random.split(key)
    tok, done = pick(sub, logits, fnp.zeros((b,), bool))
    out = fnp.zeros((b, n), fnp.int32).at[:, 0].set(tok)

    def body(i, carry):
        cache, tok, done, key, out = carry
        lg, cache = decode_step(params, cache, tok, pos0 + (i - 1), cfg)
        key, sub = funcgrad.random.split(key)
        tok, done = pick(sub, lg, done)
        return cache, tok, done, key, out.at[:, i].set(tok)

    cache, _, _, _, out = lax.fori_loop(1, n, body, (cache, tok, done, key, out))
    return out, cache


def generator(cfg: Config, n: int, **sampling):
    """generate(params, cache, prompt, key, [lengths]) jitted for cfg, n and the sampling
    options (temperature, top_k, top_p, eos), the cache donated (updated in place on the
    GPU): `tokens, cache = gen(params, cache, prompt, key)`."""
    def run(params, cache, prompt, key, lengths=None):
        return generate(params, cache, prompt, key, cfg, n, lengths=lengths, **sampling)
    return funcgrad.jit(run, donate_argnums=(1,))


def sample(params: dict, cfg: Config, prompt: bytes, n: int, key, temperature: float = 0.8,
           top_k: int | None = None, top_p: float | None = None, verbose: bool = False):
    """n bytes after `prompt`, generated as one jitted call (prefill + decode loop)."""
    n = min(n, cfg.ctx - len(prompt))
    if n < 1:
        return bytes(prompt)
    gen = generator(cfg, n, temperature=temperature, top_k=top_k, top_p=top_p)
    ids = fnp.asarray(np.frombuffer(bytes(prompt), np.uint8).astype(np.int32)[None])
    t0 = time.perf_counter()
    toks, _ = gen(params, init_cache(cfg, 1), ids, key)
    toks = np.asarray(toks)[0]
    if verbose:
        dt = time.perf_counter() - t0
        print(f"generated {n} tokens in {dt:.3f} s ({n / dt:.1f} tokens/s, first call "
              f"included)")
    return bytes(prompt) + bytes(int(t) for t in toks)
