"""funcgrad.optim.transforms: optax.transforms' namespace (`transforms.freeze`, ...): the basic
transformations (transforms_basic.py) and the other transformations' names from their modules."""
from funcgrad.optim.base import (  # noqa: F401
    chain,
)
from funcgrad.optim.combinators import (  # noqa: F401
    ConditionFn,
    ConditionallyMaskState,
    ConditionallyTransformState,
    MonitorState,
    PartitionState,
    ShouldSkipUpdateFunction,
    SnapshotState,
    conditionally_mask,
    conditionally_transform,
    flatten,
    freeze,
    measure_with_ema,
    monitor,
    named_chain,
    partition,
    selective_transform,
    skip_large_updates,
    skip_not_finite,
    snapshot,
)
from funcgrad.optim.transforms_misc import (  # noqa: F401
    AddNoiseState,
    EmaState,
    NonNegativeParamsState,
    ZeroNansState,
    adaptive_grad_clip,
    add_noise,
    clip_by_block_rms,
    ema,
    keep_params_nonnegative,
    per_example_global_norm_clip,
    per_example_layer_norm_clip,
    unitwise_clip,
    unitwise_norm,
    zero_nans,
)
from funcgrad.optim.wrappers import (  # noqa: F401
    ApplyIfFiniteState,
    MaskedNode,
    MaskedState,
    MultiSteps,
    MultiStepsState,
    apply_if_finite,
    masked,
)
from funcgrad.optim.transforms_basic import *  # noqa: F401,F403  (its __all__)

__all__ = sorted(name for name in dir() if not name.startswith("_"))
