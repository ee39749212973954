"""A byte-level GPT in funcgrad: parameters, forward pass, loss, and a KV-cache decode step."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import nn


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


def forward(params: dict, idx, cfg: Config):
    """Logits [B, T, vocab] for token ids [B, T] (tied input/output embeddings)."""
    b, t = idx.shape
    x = fnp.take(params["wte"], idx, axis=0) + params["wpe"][:t]
    for blk in params["blocks"]:
        qkv = _dense(_ln(x, blk["ln1"]), blk["qkv"])
        q, k, v = fnp.split(qkv.reshape(b, t, 3 * cfg.heads, cfg.head_dim), 3, axis=2)
        a = nn.dot_product_attention(q, k, v, is_causal=True)
        x = x + _dense(a.reshape(b, t, cfg.d), blk["proj"])
        x = x + _mlp(x, blk)
    return _ln(x, params["lnf"]) @ params["wte"].T


def loss_fn(params: dict, idx, targets, cfg: Config):
    """Mean next-byte cross-entropy in nats."""
    logits = forward(params, idx, cfg)
    return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(logits, targets))


class KVCache(NamedTuple):
    k: list  # per layer [B, ctx, heads, head_dim]
    v: list


def init_cache(cfg: Config, batch: int) -> KVCache:
    shape = (batch, cfg.ctx, cfg.heads, cfg.head_dim)
    return KVCache([fnp.zeros(shape) for _ in range(cfg.layers)],
                   [fnp.zeros(shape) for _ in range(cfg.layers)])


def decode_step(params: dict, cache: KVCache, token, pos, cfg: Config):
    """One token per call: logits [B, vocab] for `token` [B] at position `pos` (an int32
    scalar array), and the cache with this position's keys and values written in."""
    b = token.shape[0]
    x = fnp.take(params["wte"], token, axis=0) + fnp.take(params["wpe"], pos, axis=0)
    x = x[:, None, :]
    visible = (fnp.arange(cfg.ctx) <= pos)[None, None, None, :]  # [1, 1, 1, ctx]
    new_k, new_v = [], []
    for i, blk in enumerate(params["blocks"]):
        qkv = _dense(_ln(x, blk["ln1"]), blk["qkv"])
        q, k, v = fnp.split(qkv.reshape(b, 1, 3 * cfg.heads, cfg.head_dim), 3, axis=2)
        ck = cache.k[i].at[:, pos].set(k[:, 0])
        cv = cache.v[i].at[:, pos].set(v[:, 0])
        new_k.append(ck)
        new_v.append(cv)
        a = nn.dot_product_attention(q, ck, cv, mask=visible)
        x = x + _dense(a.reshape(b, 1, cfg.d), blk["proj"])
        x = x + _mlp(x, blk)
    logits = _ln(x, params["lnf"])[:, 0] @ params["wte"].T
    return logits, KVCache(new_k, new_v)


def sample(params: dict, cfg: Config, prompt: bytes, n: int, key, temperature: float = 0.8):
    """Generate n bytes after `prompt` with a jitted one-token decode step."""
    step = funcgrad.jit(decode_step, static_argnums=(4,))
    cache = init_cache(cfg, 1)
    out = list(prompt)
    logits = None
    for pos, tok in enumerate(prompt):
        logits, cache = step(params, cache, fnp.asarray([tok], fnp.int32),
                             fnp.asarray(pos, fnp.int32), cfg)
    for pos in range(len(prompt), min(len(prompt) + n, cfg.ctx)):
        key, sub = funcgrad.random.split(key)
        tok = int(np.asarray(funcgrad.random.categorical(sub, logits[0] / temperature)))
        out.append(tok)
        if pos + 1 >= cfg.ctx:
            break
        logits, cache = step(params, cache, fnp.asarray([tok], fnp.int32),
                             fnp.asarray(pos, fnp.int32), cfg)
    return bytes(out)
