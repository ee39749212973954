"""Generated kernel source as content-addressed module files (shared by the CPU and CUDA backends).

numba's `cache=True` needs a real source file: functions made by `exec` cannot be cached on disk.
Each generated source is written once to `<cache>/<subdir>/<prefix>_<sha>.py` (the cache root is
`FUNCGRAD_CACHE_DIR` or `~/.cache/funcgrad`, created private to the user) and imported from
there; a new source gets a new file, so numba's cache index (keyed on the file's mtime) stays
valid. Imports no backend.
"""
from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import threading

import numpy as np
from funcgrad.core.dtypes import dtype_kind

_lock = threading.Lock()
_modules: dict[str, object] = {}


def cache_root() -> str:
    return os.environ.get("FUNCGRAD_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "funcgrad")


def import_source(src: str, subdir: str, prefix: str, package: str):
    """The module of generated source `src` (written to its content-addressed file once).

    Example:
        >>> mod = import_source("x = 1\\n", "kernels", "fgk", "funcgrad_kernels")  # doctest: +SKIP
    """
    digest = hashlib.sha256(src.encode()).hexdigest()[:24]
    key = f"{package}.{digest}"
    mod = _modules.get(key)
    if mod is not None:
        return mod
    with _lock:
        mod = _modules.get(key)
        if mod is not None:
            return mod
        name = f"{prefix}_{digest}"
        d = os.path.join(cache_root(), subdir)
        path = os.path.join(d, name + ".py")
        if not os.path.exists(path):
            os.makedirs(d, mode=0o700, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "w") as f:
                f.write(src)
            os.replace(tmp, path)   # atomic; never rewritten
        spec = importlib.util.spec_from_file_location(f"{package}.{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        sys.modules[spec.name] = mod
        _modules[key] = mod
    return mod


def literal(val, dtype, ct: str) -> str:
    """Source text of a scalar literal of `dtype` as a value of numba type `ct` (NaN and
    infinities through `math`, which generated kernels import)."""
    dtype = np.dtype(dtype)
    v = np.asarray(val).astype(dtype).item()
    if dtype == np.bool_:
        return "True" if v else "False"
    if dtype_kind(dtype) == "f":
        if math.isnan(v):
            return f"{ct}(math.nan)"
        if v in (float("inf"), float("-inf")):
            return f"{ct}({'-' if v < 0 else ''}math.inf)"
        return f"{ct}({v!r})"
    return f"{ct}({v})"
