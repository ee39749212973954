"""funcgrad.config: a few documented global switches (`funcgrad.config.update(name, value)`)."""
from __future__ import annotations

from typing import Any

_DEFAULTS = {
    # log (logger "funcgrad.jit", level WARNING) why a jitted function traces again
    "explain_retraces": False,
    # raise at the first NaN/Inf a primitive produces, naming it and the user's line
    "debug_nans": False,
    # "cpu" or "cuda" pins the default device; None picks "cuda" when a GPU is usable
    "default_device": None,
}


class _Config:
    """Holds the switches; read them as attributes (`funcgrad.config.debug_nans`)."""

    def __init__(self):
        self._values = dict(_DEFAULTS)

    def update(self, name: str, value: Any) -> None:
        """Set a switch, e.g. `funcgrad.config.update("debug_nans", True)`."""
        if name not in self._values:
            raise KeyError(f"unknown funcgrad config option {name!r}; known: "
                           f"{sorted(self._values)}")
        self._values[name] = value
        for hook in _hooks.get(name, ()):
            hook(value)

    def __getattr__(self, name):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None


_hooks: dict = {}


def on_update(name, hook):
    _hooks.setdefault(name, []).append(hook)


config = _Config()
