"""Call sites and errors: every equation remembers the user's file:line, errors name it."""
from __future__ import annotations

import contextlib
import os
import sys
import threading

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # funcgrad/

# ---------------------------------------------------------------------------------------------
# call sites: every equation remembers the user's file:line
# ---------------------------------------------------------------------------------------------

_state = threading.local()


def _src_override():
    return getattr(_state, "src", None)


def user_frame_src() -> str:
    """file:line of the innermost stack frame outside the funcgrad package."""
    return _fmt_src(user_frame())


def user_frame():
    """(file, line) of the innermost stack frame outside the funcgrad package, unformatted
    (cheap: per-call paths keep it and format it only if a message needs it); a str when
    a source_info override is active, None when no such frame exists."""
    override = _src_override()
    if override is not None:
        return override
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG_DIR) and "contextlib" not in fn:
            return fn, f.f_lineno
        f = f.f_back
    return None


def _fmt_src(where) -> str:
    if where is None:
        return "<unknown>"
    if isinstance(where, str):
        return where
    fn, line = where
    return f"{os.path.relpath(fn) if not fn.startswith('<') else fn}:{line}"


def current_tag():
    return getattr(_state, "tag", None)


@contextlib.contextmanager
def eqn_tag(tag):
    """Tag the equations bound inside (checkpoint uses it to keep recomputation apart)."""
    prev = current_tag()
    _state.tag = tag
    try:
        yield
    finally:
        _state.tag = prev


@contextlib.contextmanager
def source_info(src: str | None):
    """Attribute the equations bound inside to `src` (used when replaying or differentiating)."""
    prev = _src_override()
    _state.src = src
    try:
        yield
    finally:
        _state.src = prev


class FuncgradError(Exception):
    """Base class of funcgrad's errors about user programs."""


class ShapeError(FuncgradError, TypeError):
    """An operation got operands of incompatible shapes or dtypes."""


def type_error(prim_name: str, msg: str, avals=()) -> ShapeError:
    where = user_frame_src()
    ops = ", ".join(a.str_short() for a in avals)
    return ShapeError(f"{prim_name}: {msg}" + (f" (operands: {ops})" if ops else "")
                      + f"\n  at {where}")
