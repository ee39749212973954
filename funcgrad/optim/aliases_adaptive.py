"""The rest of optax's ready-made optimizers, each a chain of transformations with optax's
signature and defaults (adagrad, adadelta, adafactor, adamax(w), amsgrad, lamb, lars, ...)."""
from __future__ import annotations

import functools
import warnings

from funcgrad.optim.aliases import adam, adamw, sgd
from funcgrad.optim.base import GradientTransformationExtraArgs, chain
from funcgrad.optim.factorized import scale_by_factored_rms
from funcgrad.optim.transforms_basic import (
    ScalarOrSchedule,
    add_decayed_weights,
    scale,
    scale_by_adam,
    scale_by_learning_rate,
    trace,
)
from funcgrad.optim.transforms_adaptive import (
    scale_by_adadelta,
    scale_by_adamax,
    scale_by_adan,
    scale_by_amsgrad,
    scale_by_belief,
    scale_by_novograd,
    scale_by_radam,
    scale_by_rprop,
    scale_by_rss,
    scale_by_sign,
    scale_by_sm3,
    scale_by_yogi,
)
from funcgrad.optim.transforms_misc import add_noise, clip_by_block_rms, ema
from funcgrad.optim.transforms_scaling import (
    scale_by_optimistic_gradient,
    scale_by_param_block_rms,
    scale_by_polyak,
    scale_by_trust_ratio,
)
from funcgrad.optim.wrappers import masked

GT = GradientTransformationExtraArgs


def adabelief(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
              eps: float = 1e-16, eps_root: float = 1e-16, weight_decay=None,
              weight_decay_mask=None, *, nesterov: bool = False) -> GT:
    """AdaBelief (Zhuang et al., 2020): ``scale_by_belief``, optional decoupled weight decay,
    then the learning rate.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.adabelief(1e-3)
    """
    parts = [scale_by_belief(b1, b2, eps, eps_root, nesterov=nesterov)]
    if weight_decay is not None:
        parts.append(add_decayed_weights(weight_decay, mask=weight_decay_mask))
    parts.append(scale_by_learning_rate(learning_rate))
    return chain(*parts)


def adadelta(learning_rate: ScalarOrSchedule | None = None, rho: float = 0.9, eps: float = 1e-6,
             weight_decay=0.0, weight_decay_mask=None) -> GT:
    """AdaDelta (Zeiler, 2012): weight decay (added to the gradient), ``scale_by_adadelta``,
    then the learning rate (as in optax, None means no scaling and no sign flip).

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.adadelta(1.0)
    """
    return chain(add_decayed_weights(weight_decay, mask=weight_decay_mask),
                 scale_by_adadelta(rho, eps), scale_by_learning_rate(learning_rate))


def adafactor(learning_rate: ScalarOrSchedule | None = None, min_dim_size_to_factor: int = 128,
              decay_rate: float = 0.8, decay_offset: int = 0,
              multiply_by_parameter_scale: bool = True, clipping_threshold: float | None = 1.0,
              momentum: float | None = None, dtype_momentum="float32",
              weight_decay_rate=None, eps: float = 1e-30, factored: bool = True,
              weight_decay_mask=None) -> GT:
    """Adafactor (Shazeer & Stern, 2018): factored RMS scaling, block-RMS clipping, the rate,
    parameter-scale multiplication, optional momentum and weight decay, then ``scale(-1)``.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.adafactor(1e-2)
    """
    tx = [scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor,
                                eps)]
    if clipping_threshold is not None:
        tx.append(clip_by_block_rms(clipping_threshold))
    if learning_rate is not None:
        tx.append(scale_by_learning_rate(learning_rate, flip_sign=False))
    if multiply_by_parameter_scale:
        tx.append(scale_by_param_block_rms())
    if momentum is not None:
        tx.append(ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
    if weight_decay_rate is not None:
        tx.append(add_decayed_weights(weight_decay_rate, mask=weight_decay_mask))
    tx.append(scale(-1))
    return chain(*tx)


def adagrad(learning_rate: ScalarOrSchedule, initial_accumulator_value: float = 0.1,
            eps: float = 1e-7) -> GT:
    """AdaGrad (Duchi et al., 2011): ``scale_by_rss`` then the learning rate.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.adagrad(0.1)
    """
    return chain(scale_by_rss(initial_accumulator_value, eps),
                 scale_by_learning_rate(learning_rate))


def adamax(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
           eps: float = 1e-8) -> GT:
    """Adamax (Kingma & Ba, 2014): Adam with the infinity norm.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.adamax(1e-3)
    """
    return chain(scale_by_adamax(b1, b2, eps), scale_by_learning_rate(learning_rate))


def adamaxw(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
            eps: float = 1e-8, weight_decay=1e-4, mask=None) -> GT:
    """Adamax with decoupled weight decay.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.adamaxw(1e-3, weight_decay=0.01)
    """
    return chain(scale_by_adamax(b1, b2, eps), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def adan(learning_rate: ScalarOrSchedule, b1: float = 0.98, b2: float = 0.92, b3: float = 0.99,
         eps: float = 1e-8, eps_root: float = 1e-8, weight_decay=0.0, mask=None) -> GT:
    """Adan (Xie et al., 2022): ``scale_by_adan``, decoupled weight decay, the learning rate.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.adan(1e-3)
    """
    return chain(scale_by_adan(b1, b2, b3, eps, eps_root), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def amsgrad(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
            eps: float = 1e-8, eps_root: float = 0.0, mu_dtype=None,
            bias_correction_mu: bool = True, bias_correction_nu: bool = True) -> GT:
    """AMSGrad (Reddi et al., 2018).

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.amsgrad(1e-3)
    """
    return chain(scale_by_amsgrad(b1, b2, eps, eps_root, mu_dtype, bias_correction_mu,
                                  bias_correction_nu), scale_by_learning_rate(learning_rate))


def fromage(learning_rate: ScalarOrSchedule, min_norm: float = 1e-6) -> GT:
    """Fromage (Bernstein et al., 2020): trust-ratio scaled steps of size ``lr / sqrt(1 +
    lr**2)`` plus the shrinkage ``params * (1 / sqrt(1 + lr**2) - 1)``.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.fromage(1e-2)
    """
    if not callable(learning_rate):
        mult = 1 / (1 + learning_rate ** 2) ** 0.5
        return chain(scale_by_trust_ratio(min_norm), scale_by_learning_rate(learning_rate * mult),
                     add_decayed_weights(mult - 1))

    def mult_lr(count):
        return 1 / (1 + learning_rate(count) ** 2) ** 0.5
    return chain(scale_by_trust_ratio(min_norm),
                 scale_by_learning_rate(lambda c: mult_lr(c) * learning_rate(c)),
                 add_decayed_weights(lambda c: mult_lr(c) - 1))


def lars(learning_rate: ScalarOrSchedule, weight_decay=0.0, weight_decay_mask=True,
         trust_coefficient: float = 0.001, eps: float = 0.0, trust_ratio_mask=True,
         momentum: float = 0.9, nesterov: bool = False) -> GT:
    """LARS (You et al., 2017): weight decay, the trust ratio (coefficient 0.001), the rate,
    then momentum.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.lars(0.1)
    """
    return chain(add_decayed_weights(weight_decay, mask=weight_decay_mask),
                 masked(scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps),
                        trust_ratio_mask),
                 scale_by_learning_rate(learning_rate), trace(momentum, nesterov))


def lamb(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
         eps_root: float = 0.0, weight_decay=0.0, mask=None) -> GT:
    """LAMB (You et al., 2019): Adam, decoupled weight decay, the trust ratio, the rate.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.lamb(1e-3)
    """
    return chain(scale_by_adam(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
                 scale_by_trust_ratio(), scale_by_learning_rate(learning_rate))


nadam = functools.partial(adam, nesterov=True)
nadam.__doc__ = """NAdam (Dozat, 2016): ``adam(..., nesterov=True)``.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.nadam(1e-3)
    """
nadamw = functools.partial(adamw, nesterov=True)
nadamw.__doc__ = """NAdamW: ``adamw(..., nesterov=True)``.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.nadamw(1e-3)
    """


def noisy_sgd(learning_rate: ScalarOrSchedule, eta: float = 0.01, gamma: float = 0.55,
              key=None, *, seed: int | None = None) -> GT:
    """SGD with annealed Gaussian gradient noise (Neelakantan et al., 2015).

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.noisy_sgd(0.1, key=0)
    """
    return chain(add_noise(eta, gamma, key, seed=seed), scale_by_learning_rate(learning_rate))


def sign_sgd(learning_rate: ScalarOrSchedule) -> GT:
    """signSGD (Bernstein et al., 2018): the sign of the gradient times the rate.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.sign_sgd(0.1)
    """
    return chain(scale_by_sign(), scale_by_learning_rate(learning_rate))


def signum(learning_rate: ScalarOrSchedule, beta: float = 0.9, accumulator_dtype=None) -> GT:
    """Signum (Bernstein et al., 2018): the sign of an (undebiased) EMA of the gradient.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.signum(0.1)
    """
    return chain(ema(beta, debias=False, accumulator_dtype=accumulator_dtype), scale_by_sign(),
                 scale_by_learning_rate(learning_rate))


def novograd(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.25,
             eps: float = 1e-6, eps_root: float = 0.0, weight_decay: float = 0.0) -> GT:
    """NovoGrad (Ginsburg et al., 2019): layer-wise second moments.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.novograd(1e-2)
    """
    return chain(scale_by_novograd(b1, b2, eps, eps_root, weight_decay),
                 scale_by_learning_rate(learning_rate))


def optimistic_gradient_descent(learning_rate: ScalarOrSchedule, alpha: float = 1.0,
                                beta: float = 1.0) -> GT:
    """Optimistic gradient descent (for min-max games): ``-(lr) ((alpha + beta) g - beta
    g_prev)``.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.optimistic_gradient_descent(0.1)
    """
    return chain(scale_by_optimistic_gradient(alpha, beta), scale_by_learning_rate(learning_rate))


def optimistic_adam(learning_rate: float, optimism: float | None = None, b1: float = 0.9,
                    b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0, mu_dtype=None,
                    *, nesterov: bool = True) -> GT:
    """Optimistic Adam (deprecated in optax; use :func:`optimistic_adam_v2`): NAdam, then the
    optimistic step with ``alpha=learning_rate``, ``beta=optimism``, then a sign flip.

    Example:
        >>> import warnings
        >>> from funcgrad import optim
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")
        ...     opt = optim.optimistic_adam(1e-3)
    """
    warnings.warn("`optimistic_adam` is deprecated, use `optimistic_adam_v2`",
                  DeprecationWarning, stacklevel=2)
    if callable(learning_rate):
        raise ValueError("optimistic_adam does not take a schedule; optimistic_adam_v2 does")
    optimism = learning_rate if optimism is None else optimism
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 scale_by_optimistic_gradient(learning_rate, optimism),
                 scale_by_learning_rate(1.0))


def optimistic_adam_v2(learning_rate: ScalarOrSchedule, *, alpha: float = 1.0,
                       beta: float = 1.0, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                       eps_root: float = 0.0, mu_dtype=None, nesterov: bool = True) -> GT:
    """Optimistic Adam: Adam (Nesterov by default), the optimistic step, the learning rate.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.optimistic_adam_v2(1e-3)
    """
    return chain(scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
                 scale_by_optimistic_gradient(alpha, beta),
                 scale_by_learning_rate(learning_rate))


def polyak_sgd(max_learning_rate: float = 1.0, scaling: ScalarOrSchedule = 1.0,
               f_min: float = 0.0, eps: float = 0.0, variant: str = "sps") -> GT:
    """SGD with Polyak step sizes (Loizou et al., 2021); ``update`` needs ``value=f(params)``.

    Example:
        >>> import funcgrad.numpy as fnp
        >>> from funcgrad import optim
        >>> opt = optim.polyak_sgd()
        >>> u, _ = opt.update(fnp.asarray([2.0]), opt.init(fnp.zeros(1)), value=1.0)
        >>> u.tolist()
        [-0.5]
    """
    return chain(sgd(learning_rate=scaling),
                 scale_by_polyak(f_min=f_min, max_learning_rate=max_learning_rate, eps=eps,
                                 variant=variant))


def radam(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-8, eps_root: float = 0.0, threshold: float = 5.0, *,
          nesterov: bool = False) -> GT:
    """Rectified Adam (Liu et al., 2020).

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.radam(1e-3)
    """
    return chain(scale_by_radam(b1, b2, eps, eps_root, threshold, nesterov=nesterov),
                 scale_by_learning_rate(learning_rate))


def rprop(learning_rate: float, eta_minus: float = 0.5, eta_plus: float = 1.2,
          min_step_size: float = 1e-6, max_step_size: float = 50.0) -> GT:
    """Rprop (Riedmiller & Braun, 1993): sign-based steps with adaptive per-element sizes.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.rprop(0.1)
    """
    return chain(scale_by_rprop(learning_rate, eta_minus, eta_plus, min_step_size,
                                max_step_size), scale(-1.0))


def sm3(learning_rate: float, momentum: float = 0.9) -> GT:
    """SM3 (Anil et al., 2019): memory-efficient adaptive steps.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.sm3(0.1)
    """
    return chain(scale_by_sm3(momentum), scale(-learning_rate))


def yogi(learning_rate: ScalarOrSchedule, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-3) -> GT:
    """Yogi (Zaheer et al., 2018): additive second-moment updates.

    Example:
        >>> from funcgrad import optim
        >>> opt = optim.yogi(1e-2)
    """
    return chain(scale_by_yogi(b1, b2, eps), scale_by_learning_rate(learning_rate))


__all__ = ["adabelief", "adadelta", "adafactor", "adagrad", "adamax", "adamaxw", "adan",
           "amsgrad", "fromage", "lamb", "lars", "nadam", "nadamw", "noisy_sgd", "novograd",
           "optimistic_adam", "optimistic_adam_v2", "optimistic_gradient_descent",
           "polyak_sgd", "radam", "rprop", "sign_sgd", "signum", "sm3", "yogi"]
