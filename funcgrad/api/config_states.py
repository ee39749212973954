"""JAX's config-state names at the top level: enable_x64 and debug_nans as context managers
(and funcgrad's check_indices)."""
from __future__ import annotations

import contextlib

import numpy as np

from funcgrad.config import config

float0 = np.dtype([("float0", np.void, 0)])
"""The dtype of cotangents for integer and boolean inputs (jax.float0): it holds no data."""


class ConfigState:
    """A funcgrad.config switch as JAX exposes it (jax.enable_x64, jax.debug_nans): call it
    to get a context manager that sets the switch and restores it on exit; `.value` reads it.

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp, numpy as np
        >>> with funcgrad.enable_x64(True):
        ...     fnp.asarray(np.ones(2)).dtype
        dtype('float64')
        >>> with funcgrad.enable_x64(False):
        ...     funcgrad.enable_x64.value
        False
    """

    def __init__(self, name: str, default=True):
        self.name, self._default = name, default

    @property
    def value(self):
        return getattr(config, self.name)

    def get_global(self):
        return self.value

    def set_global(self, value) -> None:
        config.update(self.name, value)

    @contextlib.contextmanager
    def _scope(self, value):
        old = self.value
        config.update(self.name, value)
        try:
            yield
        finally:
            config.update(self.name, old)

    def __call__(self, new_val=None):
        return self._scope(self._default if new_val is None else new_val)

    def __bool__(self):
        return bool(self.value)

    def __repr__(self):
        return f"ConfigState({self.name!r}, value={self.value!r})"


enable_x64 = ConfigState("enable_x64")
debug_nans = ConfigState("debug_nans")
explain_cache_misses = ConfigState("explain_retraces")
"""JAX's jax.explain_cache_misses: log (logger "funcgrad.jit") why a jitted function traces
again (funcgrad's "explain_retraces")."""
check_indices = ConfigState("check_indices")
"""``with check_indices(False):`` out-of-range integer-array indices in a gather are clamped
into range, as JAX's default gather does, instead of raising IndexError (funcgrad's default:
nothing is clamped silently)."""
