"""funcgrad: JAX-style function transformations (grad, jit, vmap) over numpy and numba.cuda."""
from . import core as _core
from .backends.cpu import CpuBackend as _CpuBackend

_core.register_backend("cpu", _CpuBackend)
_core.register_backend(
    "cuda", lambda: __import__("funcgrad.cuda", fromlist=["x"]).CudaBackend(),
    available=lambda: __import__("funcgrad.cuda", fromlist=["x"]).is_available())

from . import debug, dlpack, io, lax, nn, numpy, optim, random, tree_util  # noqa: F401
from . import attention_bwd, attention_lse, attention_pattern  # noqa: F401,E402  (rules)
from . import fused_bwd, patterns  # noqa: F401,E402  (rules)
from .ad import grad, jvp, linearize, stop_gradient, value_and_grad, vjp  # noqa: F401
from .api import default_backend, device_get, device_put, devices, make_jaxpr  # noqa: F401
from .batching import vmap  # noqa: F401
from .config import config  # noqa: F401
from .core import Array, ClosedExpr, ConcretizationError, Expr, ShapeError  # noqa: F401
from .custom import checkpoint, custom_gradient, custom_jvp, custom_vjp, remat  # noqa: F401
from . import ad_checkpoint  # noqa: F401,E402  (checkpoint_name, policies)
from .ad_checkpoint import checkpoint_policies  # noqa: F401,E402
from .jacobians import hessian, jacfwd, jacrev  # noqa: F401
from .jit import clear_caches, disable_jit, jit  # noqa: F401
from .pmap import pmap  # noqa: F401,E402  (issue 14)
from . import tree  # noqa: F401,E402  (issue 12: jax.tree and more top-level names)
from . import distributed  # noqa: F401,E402  (issue 14: processes, NCCL collectives)
from .api_extra import (  # noqa: F401,E402
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
from .jacobians import jacrev as jacobian  # noqa: F401,E402
from ._devices import Device  # noqa: F401,E402
from .api_more import (  # noqa: F401,E402
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

from .api_config import debug_nans, enable_x64, float0  # noqa: F401,E402
from ._lax_solvers import closure_convert  # noqa: F401,E402

__version__ = "0.1.0"
