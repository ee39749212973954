"""Scaled dot-product attention (causal masks, grouped-query attention) and rotary embeddings."""
from __future__ import annotations

import math

import numpy as np

from funcgrad.core.dtypes import finfo
from funcgrad.prims import rows as F
from funcgrad import numpy as fnp
from funcgrad import prims as P
from funcgrad.prims.attention import MAX_HEAD_DIM, _params, attention_p, attention_precision
from funcgrad.core import bind
from funcgrad.nn._functions import _float_dtype


def _large_negative(dtype):
    """The masked-out logit, finite so that a fully masked row stays finite (like JAX)."""
    return -0.7 * float(finfo(dtype).max)


def _grouped(a, shape5):
    """A bias/mask broadcastable to [B, N, T, S] laid out as the logits: [B, K, T, G, S]."""
    b, k, t, g, s = shape5
    a = fnp.broadcast_to(a, (b, k * g, t, s))
    return fnp.transpose(fnp.reshape(a, (b, k, g, t, s)), (0, 1, 3, 2, 4))


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale=None,
                          is_causal: bool = False):
    """Scaled dot-product attention with jax.nn.dot_product_attention's shapes.

    softmax(query . key / sqrt(head_dim) + bias, masked) . value. Without bias and mask (causal
    or not) it is one fused flash-attention primitive (funcgrad/prims/attention.py): no
    T x S buffer forward or backward, heads read in place through strides. With a bias or
    a mask it is composed (logits, the fused softmax primitive, a contraction).
    Grouped-query (and multi-query) attention: key/value may have K heads where K divides
    the N query heads; query head n then reads key/value head n // (N // K), as if the
    key/value heads were repeated with `fnp.repeat(key, N // K, axis=2)`.

    Args:
        query: [batch, T, N, head_dim] (or [T, N, head_dim]).
        key: [batch, S, K, head_dim] (or [S, K, head_dim]).
        value: [batch, S, K, value_dim] (or [S, K, value_dim]).
        bias: optional logits bias broadcastable to [batch, N, T, S].
        mask: optional boolean mask broadcastable to [batch, N, T, S]; True means attend.
        scale: the logits scale; 1 / sqrt(head_dim) by default.
        is_causal: query position t attends key positions s <= t (top-left aligned, like JAX;
            for a KV-cache decode step pass an explicit `mask` instead).

    Raises:
        ValueError: head_dim or value_dim above 128 (the fused kernels keep a row in
            registers), or incompatible shapes.

    Returns:
        [batch, T, N, value_dim] (or [T, N, value_dim]).

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> q = fnp.ones((2, 5, 4, 8)); kv = fnp.ones((2, 5, 2, 8))
        >>> nn.dot_product_attention(q, kv, kv, is_causal=True).shape
        (2, 5, 4, 8)
    """
    dt = _float_dtype(query, key, value)
    q, k, v = (fnp.asarray(a, dt) for a in (query, key, value))
    unbatched = q.ndim == 3
    if unbatched:
        q, k, v = (fnp.expand_dims(a, 0) for a in (q, k, v))
    if not (q.ndim == k.ndim == v.ndim == 4):
        raise ValueError(f"dot_product_attention: query/key/value must be rank 3 or 4, got "
                         f"{query.shape}, {key.shape}, {value.shape}")
    b, t, n, h = q.shape
    _, s, kh, _ = k.shape
    if k.shape != (b, s, kh, h) or tuple(v.shape[:3]) != (b, s, kh):
        raise ValueError(f"dot_product_attention: incompatible shapes query {q.shape}, key "
                         f"{k.shape}, value {v.shape}")
    if kh == 0 or n % kh:
        raise ValueError(f"dot_product_attention: the {kh} key/value heads must divide the "
                         f"{n} query heads")
    if h > MAX_HEAD_DIM or v.shape[-1] > MAX_HEAD_DIM:
        raise ValueError(f"dot_product_attention: head_dim {h} / value_dim {v.shape[-1]} "
                         f"exceed {MAX_HEAD_DIM}, the largest the fused attention supports "
                         f"(query {q.shape}, value {v.shape})")
    g = n // kh
    scale = 1.0 / math.sqrt(h) if scale is None else float(scale)
    if bias is None and mask is None:
        # float32 under default_matmul_precision "tensorfloat32": TF32 tensor-core kernels
        out = bind(attention_p, q, k, v,
                   **_params(scale, bool(is_causal), attention_precision()))
        return out[0] if unbatched else out
    qg = fnp.reshape(q * scale, (b, t, kh, g, h))
    # logits [B, K, T, G, S]: batch over (B, K), contract head_dim
    logits = P.dot_general(qg, k, (((4,), (3,)), ((0, 2), (0, 2))))
    shape5 = (b, kh, t, g, s)
    if bias is not None:
        logits = logits + _grouped(fnp.asarray(bias, dt), shape5)
    keep = None
    if mask is not None:
        keep = _grouped(fnp.asarray(mask, bool), shape5)
    if is_causal:
        causal = fnp.reshape(fnp.tril(fnp.ones((t, s), bool)), (1, 1, t, 1, s))
        keep = causal if keep is None else keep & causal
    if keep is not None:
        logits = fnp.where(keep, logits, _large_negative(dt))
    probs = bind(F.softmax_p, logits)
    # [B, K, T, G, S] . [B, S, K, Hv] -> [B, K, T, G, Hv] -> [B, T, N, Hv]
    out = P.dot_general(probs, v, (((4,), (1,)), ((0, 1), (0, 2))))
    out = fnp.reshape(fnp.transpose(out, (0, 2, 1, 3, 4)), (b, t, n, v.shape[-1]))
    return out[0] if unbatched else out


# ---------------------------------------------------------------------------------------------
# rotary position embedding (RoPE), "halves" layout
# ---------------------------------------------------------------------------------------------

def rotary_embedding(positions, head_dim: int, base: float = 10000.0, dtype=fnp.float32):
    """The RoPE tables (cos, sin), each shaped positions.shape + (head_dim // 2,).

    Frequency i (of head_dim // 2) is base ** (-2 i / head_dim); the angle is position * it.
    The angles are computed in float32 (float64 when dtype is float64), then cast to dtype.

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> cos, sin = nn.rotary_embedding(fnp.arange(6), 8)
        >>> cos.shape
        (6, 4)
    """
    if head_dim % 2:
        raise ValueError(f"rotary embedding needs an even head_dim, got {head_dim}")
    work = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    inv_freq = (float(base) ** (-np.arange(head_dim // 2, dtype=np.float64) * 2 / head_dim))
    angles = fnp.expand_dims(fnp.asarray(positions, work), -1) * inv_freq.astype(work)
    return fnp.cos(angles).astype(dtype), fnp.sin(angles).astype(dtype)


def apply_rotary(x, positions, base: float = 10000.0):
    """Rotate query/key vectors by their positions (rotary position embedding, RoPE).

    Layout: **halves**, like GPT-NeoX and LLaMA (HF's `rotate_half`): element i of the first
    half of head_dim pairs with element i of the second half, i.e. with x1, x2 = the halves,
    out = concat(x1 cos - x2 sin, x2 cos + x1 sin). (The original RoFormer/GPT-J layout pairs
    interleaved elements 2i, 2i + 1 instead; weights converted between the two need a
    permutation of the head_dim axis.)

    Args:
        x: [..., T, N, head_dim] (the [batch, T, heads, head_dim] layout of attention).
        positions: integer (or float) positions broadcastable to x.shape[:-2], e.g. [T] or
            [batch, T].
        base: the frequency base (10000 for most models).

    Returns:
        An array like x. The map is a rotation: norms are kept, and the dot product of a
        rotated query and key depends only on their position difference.

    Example:
        >>> import funcgrad.nn as nn, funcgrad.numpy as fnp
        >>> nn.apply_rotary(fnp.ones((1, 3, 2, 4)), fnp.arange(3)).shape
        (1, 3, 2, 4)
    """
    x = fnp.asarray(x, _float_dtype(x))
    half = x.shape[-1] // 2
    cos, sin = rotary_embedding(positions, x.shape[-1], base, dtype=x.dtype)
    cos, sin = fnp.expand_dims(cos, -2), fnp.expand_dims(sin, -2)  # broadcast over heads
    x1, x2 = x[..., :half], x[..., half:]
    return fnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

