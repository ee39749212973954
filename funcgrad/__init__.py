"""funcgrad: JAX-style function transformations (grad, jit, vmap) over numpy and numba.cuda."""
from funcgrad import core as _core
from funcgrad.backends.cpu.backend import CpuBackend as _CpuBackend

_core.register_backend("cpu", _CpuBackend)
_core.register_backend(
    "cuda", lambda: __import__("funcgrad.cuda", fromlist=["x"]).CudaBackend(),
    available=lambda: __import__("funcgrad.cuda", fromlist=["x"]).is_available())

from funcgrad import debug, dlpack, io, lax, nn, numpy, optim, random, scipy, tree_util  # noqa: F401,E501
from funcgrad.prims import attention_bwd, attention_lse, rows_bwd  # noqa: F401,E402
from funcgrad.compile import pipeline as _pipeline  # noqa: E402

_pipeline.install()   # jit's rewrites, in their order (compile/pipeline.py)

from funcgrad.transforms.ad import grad, jvp, linearize, stop_gradient, value_and_grad, vjp  # noqa: F401
from funcgrad.api.devices import default_backend, device_get, device_put, devices, make_jaxpr  # noqa: F401
from funcgrad.transforms.batching import vmap  # noqa: F401
from funcgrad.config import config  # noqa: F401
from funcgrad.core import Array, ClosedExpr, ConcretizationError, Expr, ShapeError  # noqa: F401
from funcgrad.transforms.custom import checkpoint, custom_gradient, custom_jvp, custom_vjp, remat  # noqa: F401
from funcgrad import ad_checkpoint  # noqa: F401,E402  (checkpoint_name, policies)
from funcgrad.ad_checkpoint import checkpoint_policies  # noqa: F401,E402
from funcgrad.transforms.jacobians import hessian, jacfwd, jacrev  # noqa: F401
from funcgrad.compile.jit import clear_caches, disable_jit, jit  # noqa: F401
from funcgrad.api.pmap import pmap  # noqa: F401,E402
from funcgrad import tree  # noqa: F401,E402  (jax.tree's short names)
from funcgrad import distributed  # noqa: F401,E402  (processes, NCCL collectives)
from funcgrad.api.shapes import (
    ShapeDtypeStruct,
    block_until_ready,
    device_count,
    ensure_compile_time_eval,
    eval_shape,
    linear_transpose,
    local_device_count,
    local_devices,
    named_scope,
    process_count,
    process_index,
    pure_callback,
    typeof,
)
from funcgrad.transforms.jacobians import jacrev as jacobian  # noqa: F401,E402
from funcgrad.api.device_objects import Device  # noqa: F401,E402
from funcgrad.api.processes import (
    default_device,
    default_matmul_precision,
    device_put_replicated,
    device_put_sharded,
    host_count,
    host_id,
    host_ids,
    named_call,
    print_environment_info,
    process_indices,
)

from funcgrad.api.config_states import (  # noqa: F401,E402
    debug_nans,
    enable_x64,
    explain_cache_misses,
    float0,
)
from funcgrad import sharding, typing  # noqa: F401,E402  (jax.sharding, jax.typing)
from funcgrad.lax.solvers import closure_convert  # noqa: F401,E402
from funcgrad import (  # noqa: F401,E402  (jax's paths)
    custom_batching, custom_derivatives, dtypes, errors, image, ops)

__version__ = "0.1.0"
