"""Ready-made optimizers (optax's aliases), each a one-line chain of transformations."""
from __future__ import annotations

from funcgrad.optim.base import GradientTransformation, chain, identity
from funcgrad.optim.transforms_basic import (
    ScalarOrSchedule,
    add_decayed_weights,
    scale_by_adam,
    scale_by_learning_rate,
    scale_by_lion,
    scale_by_rms,
    scale_by_stddev,
    trace,
)


def sgd(learning_rate: ScalarOrSchedule, momentum: float | None = None, nesterov: bool = False,
        accumulator_dtype=None) -> GradientTransformation:
    """Stochastic gradient descent, with optional (Nesterov) momentum.

    ``chain(trace(momentum, nesterov), scale_by_learning_rate(learning_rate))``.

    Args:
        learning_rate: a float or a schedule.
        momentum: the momentum decay, or None for plain SGD.
        nesterov: use Nesterov momentum.
        accumulator_dtype: optional dtype of the momentum buffer.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> from funcgrad import optim
        >>> opt = optim.sgd(0.1, momentum=0.9)
        >>> params = fnp.asarray([1.0, -1.0])
        >>> state = opt.init(params)
        >>> for _ in range(100):
        ...     grads = funcgrad.grad(lambda p: fnp.sum(p ** 2))(params)
        ...     updates, state = opt.update(grads, state, params)
        ...     params = optim.apply_updates(params, updates)
    """
    return chain(trace(momentum, nesterov, accumulator_dtype) if momentum is not None
                 else identity(), scale_by_learning_rate(learning_rate))


def adam(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         eps_root: float = 0.0, mu_dtype=None, *, nesterov: bool = False
         ) -> GradientTransformation:
    """Adam: ``chain(scale_by_adam(b1, b2, eps, eps_root), scale_by_learning_rate(lr))``.

    Args:
        learning_rate: a float or a schedule.
        b1: decay of the first moment.
        b2: decay of the second moment.
        eps: added to the denominator outside the square root.
        eps_root: added inside the square root.
        mu_dtype: optional dtype of the first moment.
        nesterov: NAdam's Nesterov momentum.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import optim
        >>> opt = optim.adam(1e-3)
        >>> state = opt.init({"w": fnp.zeros((2, 2))})
    """
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 scale_by_learning_rate(learning_rate))


def adamw(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          eps_root: float = 0.0, mu_dtype=None, weight_decay: float = 1e-4, mask=None, *,
          nesterov: bool = False) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019): the decay
    ``weight_decay * params`` is added after Adam's rescaling, before the learning rate.

    Args:
        learning_rate: a float or a schedule.
        b1: decay of the first moment.
        b2: decay of the second moment.
        eps: added to the denominator outside the square root.
        eps_root: added inside the square root.
        mu_dtype: optional dtype of the first moment.
        weight_decay: the decay coefficient.
        mask: optional pytree of bools (or function of the params) selecting decayed leaves.
        nesterov: NAdam's Nesterov momentum.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import optim
        >>> params = {"w": fnp.ones((2, 2)), "b": fnp.zeros(2)}
        >>> opt = optim.adamw(1e-3, weight_decay=0.1, mask={"w": True, "b": False})
        >>> state = opt.init(params)
    """
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate: ScalarOrSchedule, decay: float = 0.9, eps: float = 1e-8,
            initial_scale: float = 0.0, eps_in_sqrt: bool = True, centered: bool = False,
            momentum: float | None = None, nesterov: bool = False,
            bias_correction: bool = False) -> GradientTransformation:
    """RMSProp (Tieleman & Hinton, 2012): ``scale_by_rms`` (``scale_by_stddev`` when centered),
    the learning rate, then optional momentum.

    Args:
        learning_rate: a float or a schedule.
        decay: decay of the squared-gradient average.
        eps: the term that keeps the division finite.
        initial_scale: initial value of the averages.
        eps_in_sqrt: whether eps goes inside the square root.
        centered: divide by the standard deviation instead of the root mean square.
        momentum: optional momentum decay, applied after the learning rate.
        nesterov: use Nesterov momentum.
        bias_correction: bias-correct the averages.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.rmsprop(1e-3, momentum=0.9)
    """
    scaler = scale_by_stddev if centered else scale_by_rms
    return chain(scaler(decay, eps, initial_scale, eps_in_sqrt, bias_correction),
                 scale_by_learning_rate(learning_rate),
                 trace(momentum, nesterov) if momentum is not None else identity())


def lion(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.99, mu_dtype=None,
         weight_decay: float = 1e-3, mask=None) -> GradientTransformation:
    """Lion (Chen et al., 2023): the sign of an interpolated momentum, decoupled weight decay,
    then the learning rate (use a rate 3-10x smaller than Adam's).

    Args:
        learning_rate: a float or a schedule.
        b1: interpolation between momentum and gradient for the update direction.
        b2: decay of the momentum.
        mu_dtype: optional dtype of the momentum.
        weight_decay: the decay coefficient.
        mask: optional pytree of bools (or function of the params) selecting decayed leaves.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.lion(1e-4)
    """
    return chain(scale_by_lion(b1, b2, mu_dtype), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


__all__ = ["adam", "adamw", "lion", "rmsprop", "sgd"]
