"""Whether a real GPU (or numba's simulator) can run funcgrad's CUDA backend, found once."""
from __future__ import annotations

import os

from funcgrad.cuda import runtime

_status: dict = {}


def _no_device_nodes() -> bool:
    """Linux without /dev/nvidia* (or WSL's /dev/dxg): skip importing numba to find no GPU."""
    import glob
    import sys
    return (sys.platform.startswith("linux") and not glob.glob("/dev/nvidia*")
            and not os.path.exists("/dev/dxg"))


def _probe() -> tuple[bool, bool, str]:
    """(usable, real_gpu, reason), computed once."""
    if "v" in _status:
        return _status["v"]
    if runtime.NUMPY_TOO_NEW:
        res = (False, False, runtime.NUMPY_MSG)
    elif not runtime.sim_requested() and _no_device_nodes():
        res = (False, False, "no NVIDIA device nodes (/dev/nvidia*) found")
    else:
        try:
            cuda = runtime.load()
        except ImportError as e:
            res = (False, False, f"numba-cuda could not be imported: {e}")
        else:
            if runtime.SIM:
                res = (True, False, "numba's CUDA simulator is active (NUMBA_ENABLE_CUDASIM=1): "
                       "device 'cuda' works, slowly, but is never the default")
            else:
                try:
                    ok = bool(cuda.is_available())
                except Exception as e:   # driver errors
                    ok, why = False, str(e)
                else:
                    why = "" if ok else "no CUDA driver or GPU was found"
                res = (ok, ok, why)
    _status["v"] = res
    return res


def is_available() -> bool:
    """True only for a real, usable NVIDIA GPU (what makes "cuda" the default device).

    Under numba's simulator this is False, yet device "cuda" can still be used explicitly
    (`funcgrad.device_put(x, "cuda")`): see simulator_active().
    """
    if runtime.sim_requested():
        return False
    return _probe()[1]


def gpu_available() -> bool:
    """Alias of is_available()."""
    return is_available()


def usable() -> bool:
    """True when device "cuda" can be used explicitly: a real GPU or the active simulator."""
    return _probe()[0]


def simulator_active() -> bool:
    """True when numba's CUDA simulator runs the kernels (NUMBA_ENABLE_CUDASIM=1)."""
    return runtime.sim_requested() and not runtime.NUMPY_TOO_NEW


def unavailable_reason() -> str:
    """Why there is no real GPU ("" when there is one)."""
    usable, real, why = _probe()
    return "" if real else why
