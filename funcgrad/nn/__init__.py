"""funcgrad.nn: activations, fused softmax/normalizations/losses, attention, RoPE, initializers.

softmax, log_softmax, softmax_cross_entropy_with_integer_labels, layer_norm and rms_norm are
fused primitives (funcgrad/prims/rows.py); the rest are compositions of funcgrad.numpy operations.
"""
from funcgrad.nn import initializers  # noqa: F401
from funcgrad.nn._attention import apply_rotary, dot_product_attention, rotary_embedding  # noqa: F401
from funcgrad.nn._functions import (
    dropout,
    embedding,
    gelu,
    layer_norm,
    log_softmax,
    logsumexp,
    one_hot,
    relu,
    rms_norm,
    sigmoid,
    silu,
    softmax,
    softmax_cross_entropy,
    softmax_cross_entropy_with_integer_labels,
    softplus,
    swish,
)
from funcgrad.nn._activations import *  # noqa: E402,F401,F403  (the rest of jax.nn)
from funcgrad.nn._scaled import get_scaled_dot_general_config, scaled_dot_general, scaled_matmul
