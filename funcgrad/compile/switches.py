"""Engine switches: what changes how jit traces or compiles, read into its shared cache's key."""
from __future__ import annotations

import os
import sys

from funcgrad import core
from funcgrad.config import config

# module name -> {flag name: its value when the module registered it}
_FLAGS: dict[str, dict[str, object]] = {}
# config switches that change nothing jit builds (explain_retraces only logs)
_NOT_ENGINE = frozenset({"explain_retraces"})


def register(module: str, *names: str) -> None:
    """Declare module-level flags that a trace or a compile reads (`ENABLED`, `VEC`, ...).

    Call it in the module, below the flags (`register(__name__, "ENABLED")`): the values then
    are the defaults, and a flag set to another value since (by a test, a benchmark, a user)
    keys jit's shared cache apart, so a `jit(f)` made after the change does not reuse a plan
    compiled before it.

    Example:
        >>> import sys, types
        >>> from funcgrad.compile import switches
        >>> engine = sys.modules.setdefault("my_engine", types.ModuleType("my_engine"))
        >>> engine.UNROLL = 2
        >>> switches.register("my_engine", "UNROLL")
        >>> engine.UNROLL = 4
        >>> ("my_engine", "UNROLL", 4) in switches.fingerprint()[-1]
        True
        >>> engine.UNROLL = 2
    """
    mod = sys.modules[module]
    table = _FLAGS.setdefault(module, {})
    for name in names:
        table[name] = getattr(mod, name)


def _frozen(value):
    try:
        hash(value)
    except TypeError:     # a dict or list flag: its identity (setting a new one changes it)
        return (type(value).__name__, id(value))
    return value


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):   # an array flag: compared by identity
        return False


def fingerprint() -> tuple:
    """Every engine switch not at its default: FUNCGRAD_* environment variables, the
    funcgrad.config switches, the default device and the registered module flags.

    jit(f) made again for the same function shares f's traces and plans only under an equal
    fingerprint (as JAX's cache is keyed by its config states)."""
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("FUNCGRAD_")))
    values = config._values
    conf = tuple((k, _frozen(values[k])) for k in sorted(values) if k not in _NOT_ENGINE)
    flags = []
    for module, table in _FLAGS.items():
        mod = sys.modules.get(module)
        if mod is None:
            continue
        for name, default in table.items():
            value = getattr(mod, name, default)
            if value is not default and not _equal(value, default):
                flags.append((module, name, _frozen(value)))
    return env, conf, core.default_device(), tuple(flags)
