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
from . import losses, schedules, transforms, tree, tree_utils
from .aliases import adam, adamw, lion, rmsprop, sgd
from .aliases_more import (
                   adabelief, adadelta, adafactor, adagrad, adamax, adamaxw, adan, amsgrad,
                   fromage, lamb, lars, nadam, nadamw, noisy_sgd, novograd, optimistic_adam,
                   optimistic_adam_v2, optimistic_gradient_descent, polyak_sgd, radam, rprop,
                   sign_sgd, signum, sm3, yogi,
)
from .base import (
                   ArrayTree, EmptyState, GradientTransformation,
                   GradientTransformationExtraArgs, MaskOrFn, OptState, Params,
                   ScalarOrSchedule, Schedule, TransformInitFn, TransformUpdateExtraArgsFn,
                   TransformUpdateFn, Updates, apply_updates, chain, global_norm, identity,
                   init_empty_state, safe_increment, safe_int32_increment, set_to_zero,
                   stateless, stateless_with_tree_map, with_extra_args_support,
)
from .factorized import FactoredState, scale_by_factored_rms
from .linesearch_zoom import (
                   ScaleByZoomLinesearchState, ZoomLinesearchInfo, scale_by_zoom_linesearch,
)
from .losses import (
                   convex_kl_divergence, cosine_distance, cosine_similarity, ctc_loss,
                   ctc_loss_with_forward_probs, generalized_kl_divergence, hinge_loss,
                   huber_loss, kl_divergence, l2_loss, log_cosh, ntxent,
                   safe_softmax_cross_entropy, sigmoid_binary_cross_entropy,
                   sigmoid_focal_loss, smooth_labels, softmax_cross_entropy,
                   softmax_cross_entropy_with_integer_labels, squared_error,
)
from .numerics import (
                   bias_correction, incremental_update, multi_normal, nnls, periodic_update,
                   power_iteration,
                   safe_norm, safe_root_mean_squares, scale_gradient, tree_map_params,
                   update_infinity_moment, update_moment, update_moment_per_elem_norm,
)
from .privacy import DifferentiallyPrivateAggregateState, differentially_private_aggregate, dpsgd
from .quasi_newton import (
                   ScaleByBacktrackingLinesearchState, ScaleByLBFGSState, lbfgs,
                   scale_by_backtracking_linesearch, scale_by_lbfgs, value_and_grad_from_state,
)
from .schedules import (
                   constant_schedule, cosine_decay_schedule, exponential_decay, join_schedules,
                   linear_schedule, piecewise_constant_schedule, polynomial_schedule,
                   warmup_cosine_decay_schedule,
)
from .schedules_more import (
                   InjectStatefulHyperparamsState, WrappedSchedule, cosine_onecycle_schedule,
                   inject_stateful_hyperparams, linear_onecycle_schedule,
                   piecewise_interpolate_schedule, sgdr_schedule, warmup_constant_schedule,
                   warmup_exponential_decay_schedule,
)
from .transforms import (
                   ScaleByAdamState, ScaleByLionState, ScaleByRmsState,
                   ScaleByRmsWithCountState, ScaleByRStdDevState, ScaleByRStdDevWithCountState,
                   ScaleByScheduleState, TraceState, add_decayed_weights, clip,
                   clip_by_global_norm, scale, scale_by_adam, scale_by_learning_rate,
                   scale_by_lion, scale_by_rms, scale_by_schedule, scale_by_stddev, trace,
)
from .transforms_adaptive import (
                   ScaleByAdaDeltaState, ScaleByAdanState, ScaleByAmsgradState,
                   ScaleByBeliefState, ScaleByNovogradState, ScaleByRpropState, ScaleByRssState,
                   ScaleBySM3State, scale_by_adadelta, scale_by_adamax, scale_by_adan,
                   scale_by_amsgrad, scale_by_belief, scale_by_novograd, scale_by_radam,
                   scale_by_rprop, scale_by_rss, scale_by_sign, scale_by_sm3, scale_by_yogi,
)
from .transforms_misc import (
                   AdaptiveGradClipState, AddDecayedWeightsState, AddNoiseState,
                   ClipByGlobalNormState, ClipState, EmaState, NonNegativeParamsState,
                   ZeroNansState, adaptive_grad_clip, add_noise, clip_by_block_rms, ema,
                   keep_params_nonnegative, per_example_global_norm_clip,
                   per_example_layer_norm_clip, zero_nans,
)
from .transforms_scaling import (
                   ApplyEvery, ScaleByTrustRatioState, ScaleState, apply_every, centralize,
                   normalize_by_update_norm, scale_by_distance_over_gradients,
                   scale_by_optimistic_gradient, scale_by_param_block_norm,
                   scale_by_param_block_rms, scale_by_polyak, scale_by_trust_ratio,
)
from .wrappers import (
                   ApplyIfFiniteState, InjectHyperparamsState, MaskedNode, MaskedState,
                   MultiSteps, MultiStepsState, apply_if_finite, inject_hyperparams, masked,
)
from .wrappers_more import (
                   ConditionallyMaskState, ConditionallyTransformState, LookaheadParams,
                   LookaheadState, MonitorState, MultiTransformState, PartitionState,
                   ShouldSkipUpdateFunction, SnapshotState, conditionally_mask,
                   conditionally_transform, flatten, freeze, lookahead, measure_with_ema,
                   monitor, multi_transform, named_chain, partition, selective_transform,
                   skip_large_updates, skip_not_finite, snapshot,
)

__all__ = sorted(name for name in dir() if not name.startswith("_"))
