"""How much of optax's public API funcgrad.optim has (the counting helper), that every covered
name is exercised by a test, and that the state types are what their transforms build, with
optax's field names."""
import pathlib
import re

import numpy as np
import pytest

import funcgrad.numpy as fnp
from funcgrad import optim

# optax's public top-level names (optax/__init__.py at google-deepmind/optax 2edbcbe2): the
# imports and assignments of the module plus its __all__.
OPTAX_PUBLIC = """
AdaptiveGradClipState AddDecayedWeightsState AddNoiseState ApplyEvery ApplyIfFiniteState
ArrayTree ClipByGlobalNormState ClipState ConditionallyMaskState ConditionallyTransformState
DifferentiallyPrivateAggregateState EmaState EmptyState FactoredState GradientTransformation
GradientTransformationExtraArgs InjectHyperparamsState InjectStatefulHyperparamsState
LookaheadParams LookaheadState MaskOrFn MaskedNode MaskedState MonitorState MultiSteps
MultiStepsState MultiTransformState NonNegativeParamsState OptState Params PartitionState
ScalarOrSchedule ScaleByAdaDeltaState ScaleByAdamState ScaleByAdanState ScaleByAmsgradState
ScaleByBacktrackingLinesearchState ScaleByBeliefState ScaleByLBFGSState ScaleByLionState
ScaleByNovogradState ScaleByRStdDevState ScaleByRmsState ScaleByRpropState ScaleByRssState
ScaleBySM3State ScaleByScheduleState ScaleByTrustRatioState ScaleByZoomLinesearchState
ScaleState Schedule ShouldSkipUpdateFunction SnapshotState TraceState TransformInitFn
TransformUpdateExtraArgsFn TransformUpdateFn Updates WrappedSchedule ZeroNansState
ZoomLinesearchInfo adabelief adadelta adafactor adagrad adam adamax adamaxw adamw adan
adaptive_grad_clip add_decayed_weights add_noise amsgrad apply_every apply_if_finite
apply_updates assignment bias_correction centralize chain clip clip_by_block_rms
clip_by_global_norm conditionally_mask conditionally_transform constant_schedule contrib
convex_kl_divergence cosine_decay_schedule cosine_distance cosine_onecycle_schedule
cosine_similarity ctc_loss ctc_loss_with_forward_probs differentially_private_aggregate dpsgd
ema experimental exponential_decay flatten freeze fromage generalized_kl_divergence
global_norm hinge_loss huber_loss identity incremental_update init_empty_state
inject_hyperparams inject_stateful_hyperparams join_schedules keep_params_nonnegative
kl_divergence l2_loss lamb lars lbfgs linear_onecycle_schedule linear_schedule lion log_cosh
lookahead losses masked matrix_inverse_pth_root measure_with_ema microbatch microbatching
monitor multi_normal multi_transform nadam nadamw named_chain nnls noisy_sgd
normalize_by_update_norm novograd ntxent optimistic_adam optimistic_adam_v2
optimistic_gradient_descent partition per_example_global_norm_clip
per_example_layer_norm_clip periodic_update perturbations piecewise_constant_schedule
piecewise_interpolate_schedule polyak_sgd polynomial_schedule power_iteration projections
radam rmsprop rprop safe_increment safe_int32_increment safe_norm safe_root_mean_squares
safe_softmax_cross_entropy scale scale_by_adadelta scale_by_adam scale_by_adamax
scale_by_adan scale_by_amsgrad scale_by_backtracking_linesearch scale_by_belief
scale_by_distance_over_gradients scale_by_factored_rms scale_by_lbfgs scale_by_learning_rate
scale_by_lion scale_by_novograd scale_by_optimistic_gradient scale_by_param_block_norm
scale_by_param_block_rms scale_by_polyak scale_by_radam scale_by_rms scale_by_rprop
scale_by_rss scale_by_schedule scale_by_sign scale_by_sm3 scale_by_stddev
scale_by_trust_ratio scale_by_yogi scale_by_zoom_linesearch scale_gradient schedules
second_order selective_transform set_to_zero sgd sgdr_schedule sigmoid_binary_cross_entropy
sigmoid_focal_loss sign_sgd signum skip_large_updates skip_not_finite sm3 smooth_labels
snapshot softmax_cross_entropy softmax_cross_entropy_with_integer_labels squared_error
stateless stateless_with_tree_map trace transforms tree tree_map_params tree_utils
update_infinity_moment update_moment update_moment_per_elem_norm value_and_grad_from_state
warmup_constant_schedule warmup_cosine_decay_schedule warmup_exponential_decay_schedule
with_extra_args_support yogi zero_nans
""".split()

TEST_DIR = pathlib.Path(__file__).parent


def optax_coverage():
    """(covered, missing): optax's public names that funcgrad.optim has, and those it lacks."""
    covered = [n for n in OPTAX_PUBLIC if hasattr(optim, n)]
    return covered, [n for n in OPTAX_PUBLIC if not hasattr(optim, n)]


def test_at_least_180_of_optax_names():
    covered, missing = optax_coverage()
    assert len(OPTAX_PUBLIC) == len(set(OPTAX_PUBLIC)) == 228
    print(f"\nfuncgrad.optim covers {len(covered)} of optax's {len(OPTAX_PUBLIC)} public names; "
          f"missing: {missing}")
    assert len(covered) >= 180, missing


def test_every_covered_name_is_exercised_by_a_test():
    sources = "".join(p.read_text() for p in sorted(TEST_DIR.glob("test_optim*.py")))
    covered, _ = optax_coverage()
    untested = [n for n in covered if not re.search(rf"\b{n}\b", sources.replace(
        OPTAX_PUBLIC_TEXT, ""))]
    assert not untested, untested


OPTAX_PUBLIC_TEXT = " ".join(OPTAX_PUBLIC)

P = {"a": fnp.ones(2), "b": fnp.ones((2, 3))}

STATES = {
    "ScaleByAdaDeltaState": (lambda: optim.scale_by_adadelta(), ("e_g", "e_x")),
    "ScaleByAdamState": (lambda: optim.scale_by_adam(), ("count", "mu", "nu")),
    "ScaleByAdanState": (lambda: optim.scale_by_adan(), ("m", "v", "n", "g", "t")),
    "ScaleByAmsgradState": (lambda: optim.scale_by_amsgrad(), ("count", "mu", "nu", "nu_max")),
    "ScaleByBeliefState": (lambda: optim.scale_by_belief(), ("count", "mu", "nu")),
    "ScaleByLBFGSState": (lambda: optim.scale_by_lbfgs(), (
        "count", "params", "updates", "diff_params_memory", "diff_updates_memory",
        "weights_memory")),
    "ScaleByLionState": (lambda: optim.scale_by_lion(), ("count", "mu")),
    "ScaleByNovogradState": (lambda: optim.scale_by_novograd(), ("count", "mu", "nu")),
    "ScaleByRStdDevState": (lambda: optim.scale_by_stddev(), ("mu", "nu")),
    "ScaleByRmsState": (lambda: optim.scale_by_rms(), ("nu",)),
    "ScaleByRpropState": (lambda: optim.scale_by_rprop(0.1), ("step_sizes", "prev_updates")),
    "ScaleByRssState": (lambda: optim.scale_by_rss(), ("sum_of_squares",)),
    "ScaleBySM3State": (lambda: optim.scale_by_sm3(), ("mu", "nu")),
    "ScaleByScheduleState": (lambda: optim.scale_by_schedule(lambda c: 1.0), ("count",)),
    "TraceState": (lambda: optim.trace(0.9), ("trace",)),
    "EmaState": (lambda: optim.ema(0.9), ("count", "ema")),
    "ApplyEvery": (lambda: optim.apply_every(2), ("count", "grad_acc")),
    "ApplyIfFiniteState": (lambda: optim.apply_if_finite(optim.sgd(0.1), 2), (
        "notfinite_count", "last_finite", "total_notfinite", "inner_state")),
    "InjectHyperparamsState": (lambda: optim.inject_hyperparams(optim.sgd)(0.1), (
        "count", "hyperparams", "inner_state")),
    "MaskedState": (lambda: optim.masked(optim.sgd(0.1), {"a": True, "b": False}),
                    ("inner_state",)),
    "PartitionState": (lambda: optim.partition({"x": optim.sgd(0.1)}, {"a": "x", "b": "x"}),
                       ("inner_states",)),
    "MultiStepsState": (lambda: optim.MultiSteps(optim.sgd(0.1), 2), (
        "mini_step", "gradient_step", "inner_opt_state", "acc_grads", "skip_state")),
    "FactoredState": (lambda: optim.scale_by_factored_rms(), ("count", "v_row", "v_col", "v")),
    "AddNoiseState": (lambda: optim.add_noise(0.1, 0.5, key=0), ("count", "rng_key")),
    "ZeroNansState": (lambda: optim.zero_nans(), ("found_nan",)),
    "LookaheadState": (lambda: optim.lookahead(optim.sgd(0.1), 2, 0.5),
                       ("fast_state", "steps_since_sync")),
    "MonitorState": (lambda: optim.monitor({"n": lambda u: 0.0}),
                     ("measurements", "measure_states")),
    "SnapshotState": (lambda: optim.snapshot("n", lambda u: 0.0), ("measurement",)),
    "ConditionallyMaskState": (lambda: optim.conditionally_mask(optim.sgd(0.1), lambda s: True),
                               ("step", "inner_state")),
    "ConditionallyTransformState": (
        lambda: optim.conditionally_transform(optim.sgd(0.1), lambda s: True),
        ("inner_state", "step")),
    "ScaleByZoomLinesearchState": (lambda: optim.scale_by_zoom_linesearch(5), (
        "learning_rate", "value", "grad", "info")),
    "ScaleByBacktrackingLinesearchState": (
        lambda: optim.scale_by_backtracking_linesearch(5), ("learning_rate", "value", "grad",
                                                            "info")),
}


@pytest.mark.parametrize("name", sorted(STATES))
def test_state_types_and_fields(name):
    make, fields = STATES[name]
    cls = getattr(optim, name)
    state = make().init(P)
    if isinstance(state, tuple) and not hasattr(state, "_fields"):  # a chain: the first state
        state = state[0]
    assert type(state) is cls, (type(state), cls)
    assert cls._fields == fields


EMPTY_ALIASES = {"AdaptiveGradClipState": lambda: optim.adaptive_grad_clip(0.1),
                 "AddDecayedWeightsState": lambda: optim.add_decayed_weights(0.1),
                 "ClipByGlobalNormState": lambda: optim.clip_by_global_norm(1.0),
                 "ClipState": lambda: optim.clip(1.0),
                 "NonNegativeParamsState": lambda: optim.keep_params_nonnegative(),
                 "ScaleByTrustRatioState": lambda: optim.scale_by_trust_ratio(),
                 "ScaleState": lambda: optim.scale(1.0)}


@pytest.mark.parametrize("name", sorted(EMPTY_ALIASES))
def test_stateless_transforms_use_empty_state(name):
    assert getattr(optim, name) is optim.EmptyState
    assert EMPTY_ALIASES[name]().init(P) == optim.EmptyState()


def test_types_wrappers_and_modules():
    assert isinstance(optim.sgd(0.1), optim.GradientTransformation)
    assert isinstance(optim.sgd(0.1), optim.GradientTransformationExtraArgs)
    assert optim.MultiTransformState is optim.PartitionState
    assert optim.ZoomLinesearchInfo._fields == ("num_linesearch_steps", "decrease_error",
                                                "curvature_error")
    masked_leaf = optim.masked(optim.trace(0.9), {"a": True, "b": False}).init(P)
    assert isinstance(masked_leaf.inner_state.trace["b"], optim.MaskedNode)
    assert optim.InjectStatefulHyperparamsState._fields == (
        "count", "hyperparams", "hyperparams_states", "inner_state")
    for alias in ("ArrayTree", "MaskOrFn", "OptState", "Params", "ScalarOrSchedule", "Schedule",
                  "Updates", "TransformInitFn", "TransformUpdateFn",
                  "TransformUpdateExtraArgsFn", "ShouldSkipUpdateFunction"):
        assert hasattr(optim, alias)
    skip, _ = optim.skip_not_finite(fnp.ones(1), 0, None)  # a ShouldSkipUpdateFunction
    assert not bool(skip)
    assert callable(optim.losses.ctc_loss) and callable(optim.schedules.linear_schedule)
    assert callable(optim.transforms.scale_by_adam) and callable(optim.tree_utils.tree_vdot)
    t = optim.GradientTransformationExtraArgs(*optim.sgd(0.1))
    u, _ = t.update(P, t.init(P), P)
    np.testing.assert_allclose(np.asarray(u["b"]), -0.1)
