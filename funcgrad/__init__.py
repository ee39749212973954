"""funcgrad: JAX-style function transformations (grad, jit, vmap) over numpy and numba.cuda."""
from . import core as _core
from .backends.cpu import CpuBackend as _CpuBackend

_core.register_backend("cpu", _CpuBackend)
_core.register_backend("cuda", lambda: __import__("funcgrad.cuda", fromlist=["x"]).CudaBackend())

from . import debug, io, lax, nn, numpy, optim, random, tree_util  # noqa: F401
from .ad import grad, jvp, linearize, stop_gradient, value_and_grad, vjp  # noqa: F401
from .api import default_backend, device_get, device_put, devices, make_jaxpr  # noqa: F401
from .batching import vmap  # noqa: F401
from .config import config  # noqa: F401
from .core import Array, ClosedExpr, ConcretizationError, Expr, ShapeError  # noqa: F401
from .custom import checkpoint, custom_jvp, custom_vjp, remat  # noqa: F401
from .jacobians import hessian, jacfwd, jacrev  # noqa: F401
from .jit import jit  # noqa: F401

__version__ = "0.1.0"
