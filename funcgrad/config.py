"""funcgrad.config: a few documented global switches (`funcgrad.config.update(name, value)`)."""
from __future__ import annotations

import operator
import os
from typing import Any


def check_num_cpu_devices(value, what="num_cpu_devices") -> int:
    """An int >= 1 from an int or a decimal string; ValueError naming `what` otherwise."""
    try:
        n = int(value.strip()) if isinstance(value, str) else operator.index(value)
    except (TypeError, ValueError):
        n = 0
    if isinstance(value, bool) or n < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {value!r}")
    return n


_TRUE, _FALSE = ("1", "true", "t", "yes", "y", "on"), ("0", "false", "f", "no", "n", "off", "")


def check_flag(value: str, what: str) -> bool:
    """A bool from an environment variable's text (1/true/yes/on, 0/false/no/off, empty)."""
    text = value.strip().lower()
    if text not in _TRUE + _FALSE:
        raise ValueError(f"{what} must be one of 1/true/yes/on or 0/false/no/off, got "
                         f"{value!r}")
    return text in _TRUE


_DEFAULTS = {
    # log (logger "funcgrad.jit", level WARNING) why a jitted function traces again
    "explain_retraces": False,
    # raise at the first NaN/Inf a primitive produces, naming it and the user's line
    "debug_nans": False,
    # "cpu" or "cuda" pins the default device; None picks "cuda" when a GPU is usable
    "default_device": None,
    # precision of float32 matmuls whose `precision=` is None or "default" (JAX's
    # jax_default_matmul_precision): None or "float32" (full fp32), "tensorfloat32" (TF32 tensor
    # cores on CUDA), "bfloat16" (one bf16 pass, fp32 accumulation); the CPU ignores it
    "default_matmul_precision": None,
    # how many virtual CPU devices pmap maps over (JAX's jax_num_cpu_devices /
    # --xla_force_host_platform_device_count); FUNCGRAD_NUM_CPU_DEVICES, read at import, else 1
    "num_cpu_devices": check_num_cpu_devices(os.environ.get("FUNCGRAD_NUM_CPU_DEVICES", "1"),
                                             "FUNCGRAD_NUM_CPU_DEVICES"),
    # 64-bit types (JAX's jax_enable_x64). False (the default, as in JAX): numpy float64 /
    # int64 inputs and explicit 64-bit dtype requests become 32-bit (complex128 -> complex64).
    # True: they keep their dtype. JAX_ENABLE_X64 (as JAX reads it), read at import, sets it
    "enable_x64": check_flag(os.environ.get("JAX_ENABLE_X64", "0"), "JAX_ENABLE_X64"),
    # False (the default): a CPU matmul runs on OpenBLAS's thread pool or on one thread as its
    # shape says, so reruns of a program give the same bits. True: products of more than
    # FUNCGRAD_CPU_BLAS_SERIAL flops (2 m n k, default 2^25) run on the pool or on one thread,
    # whichever was faster lately, which avoids the pool's stalls on a machine whose cores are
    # busy but makes results differ from run to run in the last bits (the two ways round
    # differently); read at each product, so it applies to compiled functions too
    "cpu_blas_adaptive": False,
    # out-of-range integer-array indices in x[idx] / x.at[idx].get(): True (the default: nothing
    # is clamped silently) raises IndexError naming the user's line, also inside jit; False
    # clamps them into range as JAX's gather does (mode="promise_in_bounds" asks for that per
    # call; index updates, x.at[idx].set/add/..., always raise for out-of-range targets)
    "check_indices": True,
}

# JAX's option names accepted by update()
_ALIASES = {"jax_enable_x64": "enable_x64", "jax_debug_nans": "debug_nans",
            "jax_default_matmul_precision": "default_matmul_precision",
            "jax_num_cpu_devices": "num_cpu_devices", "jax_default_device": "default_device",
            "jax_explain_cache_misses": "explain_retraces"}

# precision names (JAX's strings and lax.Precision members) -> the dot_general param value
_PRECISION_NAMES = {
    "default": None, "fastest": None,
    "bfloat16": "bfloat16",
    "high": "tensorfloat32", "tensorfloat32": "tensorfloat32",
    "highest": "float32", "float32": "float32",
}
_PRECISION_RANK = {None: 0, "bfloat16": 1, "tensorfloat32": 2, "float32": 3}


def canonical_precision(precision):
    """The dot_general `precision` param for a user's value: None (the default, resolved from
    "default_matmul_precision"), "bfloat16", "tensorfloat32" or "float32".

    Accepts None, JAX's strings ("default", "high", "highest", "bfloat16", "tensorfloat32",
    "float32", "fastest"), lax.Precision members (DEFAULT, HIGH, HIGHEST) and a pair of these
    (one per operand: the more precise of the two is used).

    Example:
        >>> from funcgrad.config import canonical_precision
        >>> canonical_precision("high"), canonical_precision(None)
        ('tensorfloat32', None)
    """
    if isinstance(precision, (tuple, list)):
        if len(precision) != 2:
            raise ValueError(f"precision must be one value or a pair (lhs, rhs), got "
                             f"{precision!r}")
        a, b = (canonical_precision(p) for p in precision)
        return a if _PRECISION_RANK[a] >= _PRECISION_RANK[b] else b
    if precision is None:
        return None
    name = precision if isinstance(precision, str) else getattr(precision, "name", None)
    key = name.lower() if isinstance(name, str) else None
    if key not in _PRECISION_NAMES:
        raise ValueError(f"unknown matmul precision {precision!r}; use None, 'default', "
                         "'high', 'highest', 'bfloat16', 'tensorfloat32', 'float32' or a "
                         "lax.Precision member")
    return _PRECISION_NAMES[key]


# checks a switch's value on update: returns the value to store
_VALIDATORS = {"default_matmul_precision": canonical_precision,
               "num_cpu_devices": check_num_cpu_devices, "enable_x64": bool,
               "cpu_blas_adaptive": bool, "check_indices": bool}


class _Config:
    """Holds the switches; read them as attributes (`funcgrad.config.debug_nans`)."""

    def __init__(self):
        self._values = dict(_DEFAULTS)
        self.version = 0    # counts updates: jit's per-call path compares it, not the values

    def update(self, name: str, value: Any) -> None:
        """Set a switch, e.g. `funcgrad.config.update("debug_nans", True)` (JAX's names such
        as "jax_enable_x64" are accepted too)."""
        name = _ALIASES.get(name, name)
        if name not in self._values:
            raise KeyError(f"unknown funcgrad config option {name!r}; known: "
                           f"{sorted(self._values)}")
        check = _VALIDATORS.get(name)
        if check is not None:
            value = check(value)
        self._values[name] = value
        self.version += 1
        for hook in _hooks.get(name, ()):
            hook(value)

    def __getattr__(self, name):
        try:
            return self.__dict__["_values"][_ALIASES.get(name, name)]
        except KeyError:
            raise AttributeError(name) from None

    def read(self, name: str) -> Any:
        """A switch's value by funcgrad's or JAX's name (JAX's config.read).

        Example:
            >>> from funcgrad.config import config
            >>> config.read("jax_enable_x64") == config.enable_x64
            True
        """
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(f"unknown funcgrad config option {name!r}; known: "
                           f"{sorted(self._values)}") from None

    def trace_context(self) -> tuple:
        """The switches that change what a traced function computes, as (name, value) pairs
        for jit's cache key (empty while all are at their defaults)."""
        p = self._values["default_matmul_precision"]
        ctx = () if p is None else (("funcgrad.config.default_matmul_precision", p),)
        if self._values["check_indices"]:
            ctx += (("check_indices", True),)
        return ctx + (("enable_x64", True),) if self._values["enable_x64"] else ctx


_hooks: dict = {}


def on_update(name, hook):
    _hooks.setdefault(name, []).append(hook)


config = _Config()
