"""funcgrad: JAX-style function transformations (grad, jit, vmap) over numpy and numba.cuda."""
from . import core as _core
from .backends.cpu import CpuBackend as _CpuBackend

_core.register_backend("cpu", _CpuBackend)
_core.register_backend("cuda", lambda: __import__("funcgrad.cuda", fromlist=["x"]).CudaBackend())

from . import numpy  # noqa: E402,F401  (installs the Array operators)
from . import lax, nn, tree_util  # noqa: E402,F401
from .ad import grad, jvp, linearize, stop_gradient, value_and_grad, vjp  # noqa: E402,F401
from .api import (default_backend, device_get, device_put, devices,  # noqa: E402,F401
                  make_jaxpr)
from .config import config  # noqa: E402,F401
from .jit import jit  # noqa: E402,F401
from .batching import vmap  # noqa: E402,F401
from .jacobians import hessian, jacfwd, jacrev  # noqa: E402,F401
from .custom import checkpoint, custom_jvp, custom_vjp, remat  # noqa: E402,F401
from . import debug, io, optim, random  # noqa: E402,F401
from .core import Array, ClosedExpr, ConcretizationError, Expr, ShapeError  # noqa: E402,F401

__version__ = "0.1.0"
