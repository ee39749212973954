"""The CUDA scalar helpers' typing, checked with numba's CPU compiler (same type inference)."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from funcgrad.cuda.elementwise import HELPERS


def _compile(ct):
    src = (HELPERS["idiv"] + HELPERS["irem"]).replace("@cuda.jit(device=True, {opts})",
                                                       "@numba.njit")
    ns = {"numba": numba, ct: getattr(numba, ct)}
    exec(src.replace("{ct}", ct), ns)  # noqa: S102 - the library's own helper source
    return ns[f"idiv_{ct}"], ns[f"irem_{ct}"]


@pytest.mark.parametrize("ct", ["uint64", "int64", "uint32", "int32"])
def test_integer_division_helpers_are_exact_at_the_top_of_the_range(ct):
    # a plain 0 literal unified with uint64 made the helpers return float64 (rounding values
    # above 2**53: (a * a) % b came out larger than b on a real GPU)
    idiv, irem = _compile(ct)
    info = np.iinfo(ct)
    xs = np.array([info.max, info.max - 2, info.min, info.min + 7, 0, 12345], ct)
    for x in xs:
        for y in np.array([1, 7, 1000, info.max], ct):
            q, r = idiv(x, y), irem(x, y)
            assert not isinstance(q, float) and not isinstance(r, float)
            want_q = int(x) // int(y)
            want_q += 1 if want_q < 0 and want_q * int(y) != int(x) else 0   # C's truncation
            assert int(q) == want_q and int(r) == int(x) - want_q * int(y)
    assert int(idiv(xs[0], np.asarray(0, ct)[()])) == 0


def test_numpy_typing_loads_without_scipy_and_leaves_scipy_importable():
    # runtime.load() loads numba-cuda's numpy typing with scipy.linalg hidden (its import cost
    # 0.3-0.46 s of a warm first call); afterwards the hook is gone and scipy imports normally
    import subprocess
    import sys
    code = (
        "import sys\n"
        "from funcgrad.cuda import runtime\n"
        "runtime._numpy_typing_without_scipy()\n"
        "assert 'numba.cuda.np.arraymath' in sys.modules\n"
        "assert 'scipy.linalg' not in sys.modules\n"
        "from funcgrad.cuda.compile_worker import NoScipy\n"
        "assert NoScipy not in sys.meta_path\n"
        "import scipy.linalg\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
