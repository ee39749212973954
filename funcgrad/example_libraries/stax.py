"""stax: neural-network layers as (init_fun, apply_fun) pairs, as JAX's example_libraries.stax.

A layer constructor returns a pair of functions:

* ``init_fun(rng, input_shape) -> (output_shape, params)``
* ``apply_fun(params, inputs, **kwargs) -> outputs`` (``rng=`` for random layers: Dropout)

Combinators (:func:`serial`, :func:`parallel`, :func:`shape_dependent`) compose layers into
layers. The names, arguments, defaults and parameter layouts are JAX's, so that programs
written for ``jax.example_libraries.stax`` run unchanged (including JAX's quirks: Dropout's
``rate`` is the probability of *keeping* a unit).

Example:
    >>> import funcgrad.numpy as jnp
    >>> from funcgrad import random
    >>> from funcgrad.example_libraries import stax
    >>> init, apply = stax.serial(stax.Dense(4), stax.Relu, stax.Dense(2), stax.LogSoftmax)
    >>> out_shape, params = init(random.PRNGKey(0), (-1, 3))
    >>> out_shape
    (-1, 2)
    >>> apply(params, jnp.ones((5, 3))).shape
    (5, 2)
"""
from __future__ import annotations

import functools
import math

from funcgrad import lax, random
from funcgrad import numpy as jnp
from funcgrad.nn import (
    elu,
    gelu,
    leaky_relu,
    log_softmax,
    relu,
    selu,
    sigmoid,
    softmax,
    softplus,
    standardize,
)
from funcgrad.nn.initializers import glorot_normal, normal, ones, zeros

__all__ = [
    "AvgPool",
    "BatchNorm",
    "Conv",
    "Conv1DTranspose",
    "ConvTranspose",
    "Dense",
    "Dropout",
    "Elu",
    "Exp",
    "FanInConcat",
    "FanInSum",
    "FanOut",
    "Flatten",
    "Gelu",
    "GeneralConv",
    "GeneralConvTranspose",
    "Identity",
    "LeakyRelu",
    "LogSoftmax",
    "MaxPool",
    "Relu",
    "Selu",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "SumPool",
    "Tanh",
    "elementwise",
    "glorot",
    "logsoftmax",
    "parallel",
    "randn",
    "serial",
    "shape_dependent",
]

# JAX's aliases, kept for programs written against older stax
glorot = glorot_normal
randn = normal
logsoftmax = log_softmax


def Dense(out_dim, W_init=glorot_normal(), b_init=normal()):  # noqa: B008 (JAX's defaults)
    """A fully-connected layer: ``inputs @ W + b``.

    Args:
        out_dim: the number of output features.
        W_init: initializer of the (in_dim, out_dim) weight matrix.
        b_init: initializer of the (out_dim,) bias.

    Returns:
        (init_fun, apply_fun); params are ``(W, b)``.

    Example:
        >>> from funcgrad import random
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.Dense(3)
        >>> shape, (W, b) = init(random.PRNGKey(1), (2, 5))
        >>> shape, W.shape, b.shape
        ((2, 3), (5, 3), (3,))
    """
    def init_fun(rng, input_shape):
        output_shape = tuple(input_shape[:-1]) + (out_dim,)
        k1, k2 = random.split(rng)
        return output_shape, (W_init(k1, (input_shape[-1], out_dim)), b_init(k2, (out_dim,)))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return jnp.dot(inputs, W) + b

    return init_fun, apply_fun


def _conv_kernel_shape(dimension_numbers, out_chan, filter_shape, input_shape):
    """The kernel's shape in rhs_spec order: O and I from out_chan and the input's channels,
    the spatial sizes from filter_shape in order."""
    lhs_spec, rhs_spec, _ = dimension_numbers
    spatial = iter(filter_shape)
    return [out_chan if c == "O" else input_shape[lhs_spec.index("C")] if c == "I"
            else next(spatial) for c in rhs_spec]


def GeneralConv(dimension_numbers, out_chan, filter_shape, strides=None,
                padding="VALID", W_init=None, b_init=normal(1e-6)):  # noqa: B008
    """A convolution layer with explicit dimension numbers (lhs, rhs, out specs).

    Args:
        dimension_numbers: a triple of layout strings such as ``("NHWC", "HWIO", "NHWC")``.
        out_chan: the number of output channels.
        filter_shape: the kernel's spatial sizes.
        strides: the window strides (ones by default).
        padding: "VALID", "SAME" or explicit (low, high) pairs.
        W_init: the kernel's initializer (glorot_normal over the I and O axes by default).
        b_init: the bias's initializer; the bias broadcasts over all but the channel axis.

    Returns:
        (init_fun, apply_fun); params are ``(W, b)``.

    Example:
        >>> from funcgrad import random
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.GeneralConv(("NCHW", "OIHW", "NCHW"), 4, (3, 3))
        >>> init(random.PRNGKey(0), (1, 2, 8, 8))[0]
        (1, 4, 6, 6)
    """
    _, rhs_spec, out_spec = dimension_numbers
    one = (1,) * len(filter_shape)
    strides = strides or one
    W_init = W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape):
        kernel_shape = _conv_kernel_shape(dimension_numbers, out_chan, filter_shape,
                                          input_shape)
        output_shape = lax.conv_general_shape_tuple(input_shape, kernel_shape, strides,
                                                    padding, dimension_numbers)
        bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
        k1, k2 = random.split(rng)
        return output_shape, (W_init(k1, kernel_shape), b_init(k2, bias_shape))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return lax.conv_general_dilated(inputs, W, strides, padding, one, one,
                                        dimension_numbers=dimension_numbers) + b

    return init_fun, apply_fun


Conv = functools.partial(GeneralConv, ("NHWC", "HWIO", "NHWC"))


def GeneralConvTranspose(dimension_numbers, out_chan, filter_shape, strides=None,
                         padding="VALID", W_init=None,
                         b_init=normal(1e-6)):  # noqa: B008
    """A transposed-convolution layer with explicit dimension numbers.

    Args:
        dimension_numbers: a triple of layout strings such as ``("NHWC", "HWIO", "NHWC")``.
        out_chan: the number of output channels.
        filter_shape: the kernel's spatial sizes.
        strides: the strides of the transposed convolution (ones by default).
        padding: "VALID", "SAME" or explicit (low, high) pairs.
        W_init: the kernel's initializer (glorot_normal over the I and O axes by default).
        b_init: the bias's initializer.

    Returns:
        (init_fun, apply_fun); params are ``(W, b)``.

    Example:
        >>> from funcgrad import random
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.ConvTranspose(2, (3, 3), strides=(2, 2))
        >>> init(random.PRNGKey(0), (1, 4, 4, 3))[0]
        (1, 9, 9, 2)
    """
    _, rhs_spec, out_spec = dimension_numbers
    one = (1,) * len(filter_shape)
    strides = strides or one
    W_init = W_init or glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape):
        kernel_shape = _conv_kernel_shape(dimension_numbers, out_chan, filter_shape,
                                          input_shape)
        output_shape = lax.conv_transpose_shape_tuple(input_shape, kernel_shape, strides,
                                                      padding, dimension_numbers)
        bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
        k1, k2 = random.split(rng)
        return output_shape, (W_init(k1, kernel_shape), b_init(k2, bias_shape))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return lax.conv_transpose(inputs, W, strides, padding,
                                  dimension_numbers=dimension_numbers) + b

    return init_fun, apply_fun


Conv1DTranspose = functools.partial(GeneralConvTranspose, ("NHC", "HIO", "NHC"))
ConvTranspose = functools.partial(GeneralConvTranspose, ("NHWC", "HWIO", "NHWC"))


def BatchNorm(axis=(0, 1, 2), epsilon=1e-5, center=True, scale=True,
              beta_init=zeros, gamma_init=ones):
    """Batch normalization over `axis` with a learned shift (beta) and scale (gamma).

    Normalizes with the statistics of the batch being applied (there are no running
    averages, as in JAX's stax).

    Args:
        axis: the axes reduced over (the parameters have the shape of the other axes).
        epsilon: added to the variance.
        center: learn a shift beta (params hold ``()`` in its place when False).
        scale: learn a scale gamma (params hold ``()`` in its place when False).
        beta_init, gamma_init: their initializers.

    Returns:
        (init_fun, apply_fun); params are ``(beta, gamma)``.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad import random
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.BatchNorm(axis=(0,))
        >>> _, params = init(random.PRNGKey(0), (4, 3))
        >>> y = apply(params, jnp.arange(12.0).reshape(4, 3))
        >>> [round(float(v), 4) for v in y.mean(axis=0)]
        [0.0, 0.0, 0.0]
    """
    axis = (axis,) if jnp.isscalar(axis) else tuple(axis)

    def init_fun(rng, input_shape):
        shape = tuple(d for i, d in enumerate(input_shape) if i not in axis)
        k1, k2 = random.split(rng)
        beta = beta_init(k1, shape) if center else ()
        gamma = gamma_init(k2, shape) if scale else ()
        return input_shape, (beta, gamma)

    def apply_fun(params, x, **kwargs):
        beta, gamma = params
        ed = tuple(None if i in axis else slice(None) for i in range(jnp.ndim(x)))
        z = standardize(x, axis, epsilon=epsilon)
        if center and scale:
            return gamma[ed] * z + beta[ed]
        if center:
            return z + beta[ed]
        if scale:
            return gamma[ed] * z
        return z

    return init_fun, apply_fun


def elementwise(fun, **fun_kwargs):
    """A parameterless layer applying ``fun(inputs, **fun_kwargs)``.

    Args:
        fun: an elementwise function (or any shape-preserving one).
        **fun_kwargs: keyword arguments passed to fun on every call.

    Returns:
        (init_fun, apply_fun); params are ``()``.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.elementwise(jnp.square)
        >>> apply((), jnp.array([1.0, 3.0])).tolist()
        [1.0, 9.0]
    """
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        return fun(inputs, **fun_kwargs)

    return init_fun, apply_fun


Tanh = elementwise(jnp.tanh)
Relu = elementwise(relu)
Exp = elementwise(jnp.exp)
LogSoftmax = elementwise(log_softmax, axis=-1)
Softmax = elementwise(softmax, axis=-1)
Softplus = elementwise(softplus)
Sigmoid = elementwise(sigmoid)
Elu = elementwise(elu)
LeakyRelu = elementwise(leaky_relu)
Selu = elementwise(selu)
Gelu = elementwise(gelu)


def _window_with_batch_and_channel(window_shape, strides, spec):
    """Window and strides over every axis: 1 at the batch and channel axes (N first, C last
    unless `spec` names them)."""
    strides = tuple(strides or (1,) * len(window_shape))
    window_shape = tuple(window_shape)
    if spec is None:
        non_spatial = (0, len(window_shape) + 1)
    else:
        non_spatial = (spec.index("N"), spec.index("C"))
    for i in sorted(non_spatial):
        window_shape = window_shape[:i] + (1,) + window_shape[i:]
        strides = strides[:i] + (1,) + strides[i:]
    return window_shape, strides


def _pooling_layer(reducer, init_val, normalize=False):
    """A pooling-layer constructor reducing windows with `reducer` from `init_val`
    (`normalize`: divide by the number of elements each window covers, padding excluded)."""
    def PoolingLayer(window_shape, strides=None, padding="VALID", spec=None):
        dims, strd = _window_with_batch_and_channel(window_shape, strides, spec)
        ones_ = (1,) * len(dims)

        def init_fun(rng, input_shape):
            pads = lax.padtype_to_pads(input_shape, dims, strd, padding)
            return lax.reduce_window_shape_tuple(input_shape, dims, strd, pads, ones_,
                                                 ones_), ()

        def apply_fun(params, inputs, **kwargs):
            out = lax.reduce_window(inputs, init_val, reducer, dims, strd, padding)
            if not normalize:
                return out
            return out / _window_sizes(inputs, spec, window_shape, strides, padding)

        return init_fun, apply_fun

    return PoolingLayer


def _window_sizes(inputs, spec, window_shape, strides, padding):
    """How many input elements each output window of an average pool covers (broadcastable
    against the output: size-1 batch and channel axes)."""
    non_spatial = (0, inputs.ndim - 1) if spec is None else (spec.index("N"), spec.index("C"))
    spatial = tuple(inputs.shape[i] for i in range(inputs.ndim) if i not in non_spatial)
    one = jnp.ones(spatial, dtype=inputs.dtype)
    sizes = lax.reduce_window(one, 0.0, lax.add, tuple(window_shape),
                              tuple(strides or (1,) * len(window_shape)), padding)
    for i in sorted(non_spatial):
        sizes = jnp.expand_dims(sizes, i)
    return sizes


MaxPool = _pooling_layer(lax.max, -jnp.inf)
MaxPool.__doc__ = """Max pooling over windows of `window_shape` (JAX's stax.MaxPool).

Example:
    >>> import funcgrad.numpy as jnp
    >>> from funcgrad.example_libraries import stax
    >>> init, apply = stax.MaxPool((2, 2), strides=(2, 2))
    >>> x = jnp.arange(16.0).reshape(1, 4, 4, 1)
    >>> apply((), x)[0, :, :, 0].tolist()
    [[5.0, 7.0], [13.0, 15.0]]
"""
SumPool = _pooling_layer(lax.add, 0.0)
SumPool.__doc__ = "Sum pooling over windows of `window_shape` (JAX's stax.SumPool)."
AvgPool = _pooling_layer(lax.add, 0.0, normalize=True)
AvgPool.__doc__ = ("Average pooling over windows of `window_shape`; with padding=\"SAME\" a "
                   "window's mean is over its elements inside the input (JAX's stax.AvgPool).")


def _flatten():
    """A layer flattening all but the leading (batch) axis."""
    def init_fun(rng, input_shape):
        return (input_shape[0], math.prod(input_shape[1:])), ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.reshape(inputs, (inputs.shape[0], -1))

    return init_fun, apply_fun


Flatten = _flatten()


def _identity():
    """A layer returning its inputs."""
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        return inputs

    return init_fun, apply_fun


Identity = _identity()


def FanOut(num):
    """A layer returning a list of `num` copies of its input (for :func:`parallel`).

    Example:
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.FanOut(2)
        >>> init(None, (3,))
        ([(3,), (3,)], ())
    """
    def init_fun(rng, input_shape):
        return [input_shape] * num, ()

    def apply_fun(params, inputs, **kwargs):
        return [inputs] * num

    return init_fun, apply_fun


def _fan_in_sum():
    """A layer summing a list of inputs."""
    def init_fun(rng, input_shape):
        return input_shape[0], ()

    def apply_fun(params, inputs, **kwargs):
        return sum(inputs)

    return init_fun, apply_fun


FanInSum = _fan_in_sum()


def FanInConcat(axis=-1):
    """A layer concatenating a list of inputs along `axis`.

    Example:
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.FanInConcat()
        >>> init(None, [(2, 3), (2, 4)])
        ((2, 7), ())
    """
    def init_fun(rng, input_shape):
        ax = axis % len(input_shape[0])
        size = sum(shape[ax] for shape in input_shape)
        first = tuple(input_shape[0])
        return first[:ax] + (size,) + first[ax + 1:], ()

    def apply_fun(params, inputs, **kwargs):
        return jnp.concatenate(inputs, axis)

    return init_fun, apply_fun


def Dropout(rate, mode="train"):
    """Dropout: in "train" mode keeps each unit with probability `rate` and scales it by
    1 / rate (as JAX's stax: `rate` is the keep probability); other modes return the input.

    apply_fun needs ``rng=`` (a PRNG key); :func:`serial` passes each layer its own key.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad import random
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.Dropout(0.5)
        >>> y = apply((), jnp.ones(1000), rng=random.PRNGKey(0))
        >>> sorted(set(y.tolist()))
        [0.0, 2.0]
    """
    def init_fun(rng, input_shape):
        return input_shape, ()

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.get("rng", None)
        if rng is None:
            raise ValueError(
                "Dropout layer requires apply_fun to be called with a PRNG key argument. That "
                "is, instead of `apply_fun(params, inputs)`, call it like "
                "`apply_fun(params, inputs, rng=key)` where `key` is a PRNG key (e.g. from "
                "`funcgrad.random.PRNGKey`).")
        if mode == "train":
            keep = random.bernoulli(rng, rate, inputs.shape)
            return jnp.where(keep, inputs / rate, 0)
        return inputs

    return init_fun, apply_fun


def serial(*layers):
    """Compose layers in sequence: each layer's output feeds the next.

    Args:
        *layers: (init_fun, apply_fun) pairs.

    Returns:
        (init_fun, apply_fun); params are a list with each layer's params. apply_fun's
        ``rng=`` (if given) is split into one key per layer.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad import random
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.serial(stax.Dense(8), stax.Tanh, stax.Dense(1))
        >>> shape, params = init(random.PRNGKey(0), (-1, 2))
        >>> shape, len(params), apply(params, jnp.zeros((3, 2))).shape
        ((-1, 1), 3, (3, 1))
    """
    n = len(layers)
    init_funs, apply_funs = zip(*layers) if layers else ((), ())

    def init_fun(rng, input_shape):
        params = []
        for init in init_funs:
            rng, layer_rng = random.split(rng)
            input_shape, param = init(layer_rng, input_shape)
            params.append(param)
        return input_shape, params

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, n) if rng is not None else (None,) * n
        for fun, param, r in zip(apply_funs, params, rngs):
            inputs = fun(param, inputs, rng=r, **kwargs)
        return inputs

    return init_fun, apply_fun


def parallel(*layers):
    """Apply layers side by side: the i-th layer gets the i-th of a sequence of inputs.

    Usually between :func:`FanOut` and :data:`FanInSum` / :func:`FanInConcat`.

    Args:
        *layers: (init_fun, apply_fun) pairs.

    Returns:
        (init_fun, apply_fun) taking and returning sequences with one entry per layer.

    Example:
        >>> import funcgrad.numpy as jnp
        >>> from funcgrad import random
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.serial(stax.FanOut(2), stax.parallel(stax.Dense(3),
        ...                           stax.Identity), stax.FanInConcat())
        >>> init(random.PRNGKey(0), (4, 2))[0]
        (4, 5)
    """
    n = len(layers)
    init_funs, apply_funs = zip(*layers) if layers else ((), ())

    def init_fun(rng, input_shape):
        rngs = random.split(rng, n)
        return zip(*[init(r, shape) for init, r, shape in zip(init_funs, rngs, input_shape)])

    def apply_fun(params, inputs, **kwargs):
        rng = kwargs.pop("rng", None)
        rngs = random.split(rng, n) if rng is not None else (None,) * n
        return [f(p, x, rng=r, **kwargs)
                for f, p, x, r in zip(apply_funs, params, inputs, rngs)]

    return init_fun, apply_fun


def shape_dependent(make_layer):
    """A layer built by ``make_layer(input_shape)`` once the input's shape is known.

    Args:
        make_layer: input shape -> (init_fun, apply_fun).

    Returns:
        (init_fun, apply_fun) delegating to the layer made for each input's shape.

    Example:
        >>> from funcgrad import random
        >>> from funcgrad.example_libraries import stax
        >>> init, apply = stax.shape_dependent(lambda s: stax.Dense(2 * s[-1]))
        >>> init(random.PRNGKey(0), (1, 3))[0]
        (1, 6)
    """
    def init_fun(rng, input_shape):
        return make_layer(input_shape)[0](rng, input_shape)

    def apply_fun(params, inputs, **kwargs):
        return make_layer(inputs.shape)[1](params, inputs, **kwargs)

    return init_fun, apply_fun
