"""The CPU backend: runs each primitive's numpy impl (the reference semantics)."""
from __future__ import annotations

import numpy as np

from ..core import FuncgradError, user_frame_src
from ..prims import IndexOutOfRange


class CpuBackend:
    """Buffers are read-only numpy arrays; every primitive runs its numpy impl."""
    name = "cpu"

    def from_numpy(self, a: np.ndarray) -> np.ndarray:
        out = np.array(a, copy=True)
        out.flags.writeable = False
        return out

    def from_value(self, a: np.ndarray) -> np.ndarray:
        return a

    def to_numpy(self, buf: np.ndarray) -> np.ndarray:
        return buf

    def apply(self, prim, bufs, params, aval):
        try:
            with np.errstate(all="ignore"):
                out = prim.impl(*bufs, **params)
        except IndexOutOfRange as e:
            raise IndexError(f"{e}\n  at {user_frame_src()}") from None
        except ValueError as e:
            raise FuncgradError(f"{e}\n  at {user_frame_src()}") from None
        out = np.asarray(out)
        if out.dtype != aval.dtype:
            out = out.astype(aval.dtype)
        if out.shape != aval.shape:
            raise AssertionError(f"{prim.name}: impl returned {out.shape}, rule says {aval}")
        if out.flags.writeable:
            out.flags.writeable = False
        return out

    def synchronize(self):
        pass
