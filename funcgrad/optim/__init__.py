"""funcgrad.optim: optimizers with optax's API and numbers, written in funcgrad.numpy.

Example:
    >>> import funcgrad, funcgrad.numpy as fnp
    >>> from funcgrad import optim
    >>> params = {"w": fnp.asarray([1.0, -2.0])}
    >>> opt = optim.adam(0.1)
    >>> state = opt.init(params)
    >>> grads = funcgrad.grad(lambda p: fnp.sum(p["w"] ** 2))(params)
    >>> updates, state = opt.update(grads, state, params)
    >>> params = optim.apply_updates(params, updates)
"""
from .aliases import adam, adamw, lion, rmsprop, sgd
from .base import (
                   EmptyState,
                   GradientTransformation,
                   OptState,
                   Params,
                   Updates,
                   apply_updates,
                   chain,
                   global_norm,
                   identity,
)
from .schedules import (
                   constant_schedule,
                   cosine_decay_schedule,
                   exponential_decay,
                   join_schedules,
                   linear_schedule,
                   piecewise_constant_schedule,
                   polynomial_schedule,
                   warmup_cosine_decay_schedule,
)
from .transforms import (
                   ScaleByAdamState,
                   ScaleByLionState,
                   ScaleByRmsState,
                   ScaleByRmsWithCountState,
                   ScaleByRStdDevState,
                   ScaleByRStdDevWithCountState,
                   ScaleByScheduleState,
                   TraceState,
                   add_decayed_weights,
                   clip,
                   clip_by_global_norm,
                   scale,
                   scale_by_adam,
                   scale_by_learning_rate,
                   scale_by_lion,
                   scale_by_rms,
                   scale_by_schedule,
                   scale_by_stddev,
                   trace,
)
from .wrappers import (
                   ApplyIfFiniteState,
                   InjectHyperparamsState,
                   MaskedNode,
                   MaskedState,
                   MultiSteps,
                   MultiStepsState,
                   apply_if_finite,
                   inject_hyperparams,
                   masked,
)

__all__ = [
    "ApplyIfFiniteState", "EmptyState", "GradientTransformation", "InjectHyperparamsState",
    "MaskedNode", "MaskedState", "MultiSteps", "MultiStepsState", "OptState", "Params",
    "ScaleByAdamState", "ScaleByLionState", "ScaleByRStdDevState",
    "ScaleByRStdDevWithCountState", "ScaleByRmsState", "ScaleByRmsWithCountState",
    "ScaleByScheduleState", "TraceState", "Updates", "adam", "adamw", "add_decayed_weights",
    "apply_if_finite", "apply_updates", "chain", "clip", "clip_by_global_norm",
    "constant_schedule", "cosine_decay_schedule", "exponential_decay", "global_norm",
    "identity", "inject_hyperparams", "join_schedules", "linear_schedule", "lion", "masked",
    "piecewise_constant_schedule", "polynomial_schedule", "rmsprop", "scale", "scale_by_adam",
    "scale_by_learning_rate", "scale_by_lion", "scale_by_rms", "scale_by_schedule",
    "scale_by_stddev", "sgd", "trace", "warmup_cosine_decay_schedule",
]
