"""The Backend protocol: what the core, jit and interop ask of an execution backend.

A backend registers a factory with the core (`core.register_backend`), so neither the core nor
jit imports one. Every backend subclasses `Backend`; the methods with a default here are the
optional ones (a backend without a planner of its own keeps them), so callers never probe with
`hasattr`.
"""
from __future__ import annotations

from typing import Any

import numpy as np


class Backend:
    """An execution backend: buffers, eager primitive application and compiled plans."""

    name: str = ""

    def from_numpy(self, a: np.ndarray) -> Any:
        """A buffer holding a copy of the host array `a`."""
        raise NotImplementedError

    def from_value(self, a: np.ndarray) -> Any:
        """A buffer for a host value the backend may keep without copying (a constant)."""
        raise NotImplementedError

    def to_numpy(self, buf: Any) -> np.ndarray:
        """The host array a buffer holds."""
        raise NotImplementedError

    def apply(self, prim, bufs: list, params: dict, aval) -> Any:
        """Run one primitive eagerly on buffers; the result's buffer has `aval`."""
        raise NotImplementedError

    def compile(self, expr, consts: list, donate=()) -> Any:
        """A callable plan running the closed expression (expr, consts); None: jit interprets
        the expression equation by equation with `apply`."""
        return None

    def synchronize(self) -> None:
        """Wait for the work issued so far (a no-op on synchronous backends)."""

    def before_trace(self) -> None:
        """Called as jit starts tracing for this backend, so that tracing can overlap work
        (CUDA starts its compile server here)."""

    def planned_peak(self, compile_plan, avals) -> int | None:
        """The planned peak bytes of the plan `compile_plan()` builds for arguments of `avals`,
        or None where only the expression's liveness can estimate it (nothing is compiled)."""
        return None

    def describe(self, compile_plan) -> str:
        """A human-readable account of the plan `compile_plan()` builds ("" when there is
        nothing to add; then nothing is compiled)."""
        return ""
