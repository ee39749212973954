"""Fused (flash) attention primitives: softmax(scale q.k, causal) . v without a T x S buffer.

Layout is jax.nn.dot_product_attention's: q [B, T, N, H], k [B, S, K, H], v [B, S, K, Hv] with
K dividing N (grouped-query attention: query head n reads key/value head n // (N // K)); causal
means query t sees keys s <= t (top-left aligned). Four primitives:

  attention(q, k, v)                      -> o [B, T, N, Hv]
  attention_stats(q, k, o, do)            -> [B, N, T, 2]: (logsumexp of the logits row,
                                              delta = sum(do * o) over Hv)
  attention_dq(q, k, v, do, stats)        -> dq [B, T, N, H]
  attention_dkv(q, k, v, do, stats)       -> [B, S, K, H + Hv]: dk and dv side by side

attention's vjp is the last three (the backward recomputes the probabilities from the saved
logsumexp, FlashAttention-2 style); under jit, attention_dq and attention_dkv of one set of
operands merge into attention_bwd (funcgrad/prims/attention_bwd.py: one pass on a GPU). The numpy
impls walk the queries in chunks, so memory grows with T, not T x S. The rules of the three
backward primitives (their own vjp and jvp, for higher-order derivatives) differentiate a
composed reference written with funcgrad.numpy: those materialize T x S, and only second-order
use pays for it. float16 and bfloat16 operands compute in float32; the stats are float32 for
them. The CUDA
kernels live in funcgrad/cuda/attention.py.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad import prims as P
from funcgrad.config import canonical_precision, config
from funcgrad.core import ShapedArray, bind, defprim, is_float, is_half, type_error

MAX_HEAD_DIM = 128   # the kernels keep a query/key row in registers
_CHUNK = 128         # query rows per step of the numpy impls


# ---------------------------------------------------------------------------------------------
# shape rules
# ---------------------------------------------------------------------------------------------

def _check_qkv(name, q, k, v, extra=()):
    avals = (q, k, v) + tuple(extra)
    if not (q.ndim == k.ndim == v.ndim == 4):
        raise type_error(name, "query/key/value must be rank 4: [batch, T, heads, head_dim]",
                         avals)
    b, _, n, h = q.shape
    _, s, kh, _ = k.shape
    if k.shape[0] != b or k.shape[3] != h or tuple(v.shape[:3]) != (b, s, kh):
        raise type_error(name, "incompatible query/key/value shapes", avals)
    if kh == 0 or n % kh:
        raise type_error(name, f"the {kh} key/value heads must divide the {n} query heads",
                         avals)
    if not (is_float(q.dtype) and q.dtype == k.dtype == v.dtype):
        raise type_error(name, "query/key/value must share one floating dtype", avals)
    if h > MAX_HEAD_DIM or v.shape[3] > MAX_HEAD_DIM:
        raise type_error(name, f"head_dim {h} / value_dim {v.shape[3]}: the fused attention "
                         f"kernels support head dims up to {MAX_HEAD_DIM}", avals)


def _stats_dtype(dtype):
    return np.dtype(np.float32) if is_half(dtype) else np.dtype(dtype)


def _expect(name, what, got, shape, dtype, avals):
    if got.shape != tuple(shape) or got.dtype != np.dtype(dtype):
        raise type_error(name, f"{what} must be {np.dtype(dtype).name}{list(shape)}", avals)


def _attn_shape(q, k, v, *, scale, causal, precision=None):
    _check_qkv("attention", q, k, v)
    return ShapedArray(q.shape[:3] + v.shape[3:], q.dtype)


def _stats_shape(q, k, o, do, *, scale, causal, precision=None):
    _check_qkv("attention_stats", q, k, k, (o, do))
    b, t, n, _ = q.shape
    hv = o.shape[-1] if o.ndim == 4 else -1
    _expect("attention_stats", "o", o, (b, t, n, hv), q.dtype, (q, k, o, do))
    _expect("attention_stats", "do", do, (b, t, n, hv), q.dtype, (q, k, o, do))
    return ShapedArray((b, n, t, 2), _stats_dtype(q.dtype))


def _bwd_check(name, q, k, v, do, stats):
    _check_qkv(name, q, k, v, (do, stats))
    b, t, n, _ = q.shape
    _expect(name, "do", do, (b, t, n, v.shape[3]), q.dtype, (q, k, v, do, stats))
    _expect(name, "stats", stats, (b, n, t, 2), _stats_dtype(q.dtype), (q, k, v, do, stats))


def _dq_shape(q, k, v, do, stats, *, scale, causal, precision=None):
    _bwd_check("attention_dq", q, k, v, do, stats)
    return ShapedArray(q.shape, q.dtype)


def _dkv_shape(q, k, v, do, stats, *, scale, causal, precision=None):
    _bwd_check("attention_dkv", q, k, v, do, stats)
    return ShapedArray(k.shape[:3] + (k.shape[3] + v.shape[3],), q.dtype)


# ---------------------------------------------------------------------------------------------
# numpy impls (the executable spec), chunked over query rows
# ---------------------------------------------------------------------------------------------

def _acc(x):
    return x.astype(np.float32) if is_half(x.dtype) else x


def _expand(x, n):
    """Key/value heads repeated for the n query heads (grouped-query attention)."""
    return np.repeat(x, n // x.shape[2], axis=2) if x.shape[2] != n else x


def _chunk_probs(qc, kk, t0, scale, causal, lse=None):
    """(probabilities [B, N, tc, S], logsumexp [B, N, tc]) of query rows t0 ... t0 + tc."""
    logits = np.einsum("btnh,bsnh->bnts", qc, kk) * qc.dtype.type(scale)
    tc, s = qc.shape[1], kk.shape[1]
    if causal:
        keep = np.arange(s)[None, :] <= (t0 + np.arange(tc))[:, None]
        logits = np.where(keep, logits, -np.inf)
    if lse is None:
        m = logits.max(axis=-1, keepdims=True) if s else np.full(logits.shape[:-1] + (1,),
                                                                   -np.inf, logits.dtype)
        m = np.where(np.isfinite(m), m, 0)
        with np.errstate(divide="ignore"):
            lse = (np.log(np.exp(logits - m).sum(axis=-1, keepdims=True)) + m)[..., 0]
    with np.errstate(invalid="ignore"):
        p = np.exp(logits - lse[..., None])
    return np.where(np.isfinite(lse)[..., None], p, 0).astype(qc.dtype), lse


def _chunks(t):
    return [(t0, min(t, t0 + _CHUNK)) for t0 in range(0, t, _CHUNK)]


def _attn_impl(q, k, v, *, scale, causal, precision=None):
    qa, kk, vv = _acc(q), _expand(_acc(k), q.shape[2]), _expand(_acc(v), q.shape[2])
    out = np.zeros(q.shape[:3] + v.shape[3:], qa.dtype)
    for t0, t1 in _chunks(q.shape[1]):
        p, _ = _chunk_probs(qa[:, t0:t1], kk, t0, scale, causal)
        out[:, t0:t1] = np.einsum("bnts,bsnh->btnh", p, vv)
    return out.astype(q.dtype)


def _stats_impl(q, k, o, do, *, scale, causal, precision=None):
    qa, kk = _acc(q), _expand(_acc(k), q.shape[2])
    b, t, n, _ = q.shape
    lse = np.zeros((b, n, t), qa.dtype)
    for t0, t1 in _chunks(t):
        lse[:, :, t0:t1] = _chunk_probs(qa[:, t0:t1], kk, t0, scale, causal)[1]
    delta = (_acc(o) * _acc(do)).sum(axis=-1).transpose(0, 2, 1)
    return np.stack([lse, delta.astype(lse.dtype)], axis=-1).astype(_stats_dtype(q.dtype))


def _bwd_chunks(q, k, v, do, stats, scale, causal):
    """Yield (t0, t1, p, ds, kk) per query chunk: ds = p * (do . v - delta)."""
    qa, doa = _acc(q), _acc(do)
    kk, vv = _expand(_acc(k), q.shape[2]), _expand(_acc(v), q.shape[2])
    st = stats.astype(qa.dtype)
    for t0, t1 in _chunks(q.shape[1]):
        p, _ = _chunk_probs(qa[:, t0:t1], kk, t0, scale, causal, lse=st[:, :, t0:t1, 0])
        dp = np.einsum("btnh,bsnh->bnts", doa[:, t0:t1], vv)
        yield t0, t1, p, p * (dp - st[:, :, t0:t1, 1, None]), kk


def _dq_impl(q, k, v, do, stats, *, scale, causal, precision=None):
    dq = np.zeros(q.shape, _acc(q).dtype)
    for t0, t1, _, ds, kk in _bwd_chunks(q, k, v, do, stats, scale, causal):
        dq[:, t0:t1] = np.einsum("bnts,bsnh->btnh", ds, kk) * dq.dtype.type(scale)
    return dq.astype(q.dtype)


def _dkv_impl(q, k, v, do, stats, *, scale, causal, precision=None):
    b, t, n, h = q.shape
    s, kh, hv = k.shape[1], k.shape[2], v.shape[3]
    qa, doa = _acc(q), _acc(do)
    dk = np.zeros((b, s, n, h), qa.dtype)
    dv = np.zeros((b, s, n, hv), qa.dtype)
    for t0, t1, p, ds, _ in _bwd_chunks(q, k, v, do, stats, scale, causal):
        dv += np.einsum("bnts,btnh->bsnh", p, doa[:, t0:t1])
        dk += np.einsum("bnts,btnh->bsnh", ds, qa[:, t0:t1])
    g = n // kh
    dk = dk.reshape(b, s, kh, g, h).sum(axis=3) * qa.dtype.type(scale)
    dv = dv.reshape(b, s, kh, g, hv).sum(axis=3)
    return np.concatenate([dk, dv], axis=-1).astype(q.dtype)


# ---------------------------------------------------------------------------------------------
# composed references (funcgrad.numpy, T x S): the rules of the backward primitives use them
# ---------------------------------------------------------------------------------------------

def _ref_logits(q, k, scale, causal):
    """Logits [B, N, T, S] with masked entries at -inf, and the keep mask (or None)."""
    from funcgrad import numpy as fnp
    kk = fnp.repeat(k, q.shape[2] // k.shape[2], axis=2) if k.shape[2] != q.shape[2] else k
    logits = fnp.einsum("btnh,bsnh->bnts", q, kk) * scale
    if not causal:
        return logits, None
    t, s = q.shape[1], k.shape[1]
    keep = fnp.asarray(np.arange(s)[None, :] <= np.arange(t)[:, None])
    return fnp.where(keep, logits, -np.inf), keep


def _ref_probs(q, k, scale, causal, lse):
    from funcgrad import numpy as fnp
    logits, keep = _ref_logits(q, k, scale, causal)
    fin = fnp.isfinite(lse)[..., None]
    safe_lse = fnp.where(fin, lse[..., None], 0)
    shifted = logits - safe_lse
    if keep is not None:
        shifted = fnp.where(keep, shifted, 0)
        fin = fin & keep
    return fnp.where(fin, fnp.exp(shifted), 0)


def _ref_expand(x, n):
    from funcgrad import numpy as fnp
    return fnp.repeat(x, n // x.shape[2], axis=2) if x.shape[2] != n else x


def _ref_stats(q, k, o, do, *, scale, causal, precision=None):
    from funcgrad import numpy as fnp
    logits, keep = _ref_logits(q, k, scale, causal)
    if logits.shape[-1] == 0:
        lse = fnp.full(logits.shape[:-1], -np.inf, logits.dtype)
    else:
        m = bind(P.stop_gradient_p, fnp.max(logits, axis=-1, keepdims=True))
        m = fnp.where(fnp.isfinite(m), m, 0)
        e = fnp.exp(logits - m)
        lse = fnp.log(fnp.sum(e, axis=-1)) + m[..., 0]
    delta = fnp.transpose(fnp.sum(o * do, axis=-1), (0, 2, 1))
    dt = _stats_dtype(q.dtype)
    return fnp.stack([lse.astype(dt), delta.astype(dt)], axis=-1)


def _ref_bwd(q, k, v, do, stats, scale, causal):
    from funcgrad import numpy as fnp
    dt = q.dtype
    lse, delta = stats[..., 0].astype(dt), stats[..., 1].astype(dt)
    p = _ref_probs(q, k, scale, causal, lse)
    dp = fnp.einsum("btnh,bsnh->bnts", do, _ref_expand(v, q.shape[2]))
    return p, p * (dp - delta[..., None])


def _ref_dq(q, k, v, do, stats, *, scale, causal, precision=None):
    from funcgrad import numpy as fnp
    _, ds = _ref_bwd(q, k, v, do, stats, scale, causal)
    return fnp.einsum("bnts,bsnh->btnh", ds, _ref_expand(k, q.shape[2])) * scale


def _ref_dkv(q, k, v, do, stats, *, scale, causal, precision=None):
    from funcgrad import numpy as fnp
    p, ds = _ref_bwd(q, k, v, do, stats, scale, causal)
    b, s, kh, h = k.shape
    g = q.shape[2] // kh
    dk = fnp.einsum("bnts,btnh->bsnh", ds, q) * scale
    dv = fnp.einsum("bnts,btnh->bsnh", p, do)
    dk = fnp.sum(fnp.reshape(dk, (b, s, kh, g, h)), axis=3)
    dv = fnp.sum(fnp.reshape(dv, (b, s, kh, g, v.shape[3])), axis=3)
    return fnp.concatenate([dk, dv], axis=-1)


def _ref_attention(q, k, v, *, scale, causal, precision=None):
    from funcgrad import numpy as fnp
    logits, _ = _ref_logits(q, k, scale, causal)
    if logits.shape[-1] == 0:
        return fnp.zeros(q.shape[:3] + v.shape[3:], q.dtype)
    from funcgrad.prims.rows import softmax_p
    probs = bind(softmax_p, logits)
    return fnp.einsum("bnts,bsnh->btnh", probs, _ref_expand(v, q.shape[2]))


# ---------------------------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------------------------

def _ref_vjp(ref):
    """vjp rule: the vjp of the composed reference (T x S; for higher-order derivatives)."""
    def rule(ct, *xs, out, **params):
        from funcgrad.transforms.ad import vjp
        _, f_vjp = vjp(lambda *a: ref(*a, **params), *xs)
        return tuple(f_vjp(ct))
    return rule


def _ref_jvp(ref):
    """jvp rule: the jvp of the composed reference."""
    def rule(ts, xs, *, out, **params):
        if all(t is None for t in ts):
            return None
        from funcgrad.transforms.ad import jvp
        ts = [P.zeros_like(x) if t is None else t for t, x in zip(ts, xs)]
        return jvp(lambda *a: ref(*a, **params), tuple(xs), tuple(ts))[1]
    return rule


def _batch_rule(prim_ref):
    """vmap: the mapped axis merges into the batch axis (every operand leads with batch)."""
    def rule(args, dims, **params):
        size = P._batch_size(args, dims)
        args = [P._bcast_batched(a, d, size) for a, d in zip(args, dims)]
        flat = [P.reshape(a, (size * a.shape[1],) + tuple(a.shape[2:])) for a in args]
        out = bind(prim_ref[0], *flat, **params)
        return P.reshape(out, (size, args[0].shape[1]) + tuple(out.shape[1:])), 0
    return rule


def _last_slice(x, lo, hi):
    nd = len(x.shape)
    return bind(P.slice_p, x, start_indices=(0,) * (nd - 1) + (lo,),
                limit_indices=tuple(x.shape[:-1]) + (hi,), strides=(1,) * nd)


def _params(scale, causal, precision):
    """The attention primitives' params; precision only when it is TF32 (float32 operands then
    take the tensor-core kernels on a GPU; every other dtype and backend computes exactly)."""
    prm = {"scale": scale, "causal": causal}
    if precision == "tensorfloat32":
        prm["precision"] = precision
    return prm


def tf32_of(p):
    """The attention params' precision for a resolved dot precision p: "tensorfloat32" for
    TF32 or bfloat16 (TF32 is the closest the kernels have), else None."""
    return "tensorfloat32" if p in ("tensorfloat32", "bfloat16") else None


def attention_precision(precision=None):
    """The attention params' precision for a user's dot precision (None: the config's
    default_matmul_precision, which JAX's attention einsums follow too)."""
    p = canonical_precision(precision)
    return tf32_of(config.default_matmul_precision if p is None else p)


def _attn_vjp(ct, q, k, v, *, out, scale, causal, precision=None):
    # FlashAttention-2: P = exp(s q.k - lse); dv = P^T do; ds = P (do.v - delta);
    # dq = s ds k; dk = s ds^T q
    prm = _params(scale, causal, precision)
    stats = bind(attention_stats_p, q, k, out, ct, **prm)
    dq = bind(attention_dq_p, q, k, v, ct, stats, **prm)
    dkv = bind(attention_dkv_p, q, k, v, ct, stats, **prm)
    h = k.shape[3]
    return dq, _last_slice(dkv, 0, h), _last_slice(dkv, h, dkv.shape[3])


def _attn_jvp(ts, xs, *, out, scale, causal, precision=None):
    return _ref_jvp(_ref_attention)(ts, xs, out=out, scale=scale, causal=causal)


_self: list = []
attention_p = defprim("attention", _attn_shape, _attn_impl, _attn_vjp, _attn_jvp,
                      batch=_batch_rule(_self))
_self.append(attention_p)

_stats_self: list = []
attention_stats_p = defprim("attention_stats", _stats_shape, _stats_impl,
                            _ref_vjp(_ref_stats), _ref_jvp(_ref_stats),
                            batch=_batch_rule(_stats_self))
_stats_self.append(attention_stats_p)

_dq_self: list = []
attention_dq_p = defprim("attention_dq", _dq_shape, _dq_impl, _ref_vjp(_ref_dq),
                         _ref_jvp(_ref_dq), batch=_batch_rule(_dq_self))
_dq_self.append(attention_dq_p)

_dkv_self: list = []
attention_dkv_p = defprim("attention_dkv", _dkv_shape, _dkv_impl, _ref_vjp(_ref_dkv),
                          _ref_jvp(_ref_dkv), batch=_batch_rule(_dkv_self))
_dkv_self.append(attention_dkv_p)

ATTENTION_PRIMITIVES = (attention_p, attention_stats_p, attention_dq_p, attention_dkv_p)


def attention(q, k, v, *, scale=None, causal=False, precision=None):
    """Fused attention of [B, T, N, H] queries over [B, S, K, H] keys / [B, S, K, Hv] values.

    The primitive behind funcgrad.nn.dot_product_attention when it has no bias and no explicit
    mask: no T x S buffer forward or backward (see the module docstring). `precision` (None:
    funcgrad.config's default_matmul_precision) "tensorfloat32" lets float32 attention run on
    TF32 tensor cores on a GPU, as JAX's attention einsums do.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad.prims.attention import attention
        >>> attention(fnp.ones((1, 3, 2, 4)), fnp.ones((1, 3, 1, 4)), fnp.ones((1, 3, 1, 4)),
        ...           causal=True).shape
        (1, 3, 2, 4)
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return bind(attention_p, q, k, v,
                **_params(scale, bool(causal), attention_precision(precision)))
