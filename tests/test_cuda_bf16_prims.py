"""Every primitive with float operands on bfloat16 operands on the CUDA backend (tiny shapes:
the simulator in CI, or a GPU): JAX's result dtype and values within 16-bit tolerance of float64
on the same rounded inputs, eager and jitted (tests/test_bfloat16_prims.py is the CPU's)."""
import warnings

import numpy as np
import pytest
from prim_specs import SPECS
from test_bfloat16_prims import BF16, F64, NAMES, REJECTED, _case

import funcgrad
from funcgrad import jit
from funcgrad.core import bind


def _usable() -> bool:
    try:
        from funcgrad import cuda
    except ImportError:
        return False
    return cuda.usable()


pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not _usable(), reason="no GPU and no CUDA simulator")]


def _cuda(a):
    return funcgrad.device_put(a, "cuda") if isinstance(a, np.ndarray) else a


@pytest.mark.parametrize("name", NAMES)
def test_primitive_on_bfloat16_on_cuda(name, rng):
    spec = SPECS[name]
    a16, a64, p16, p64 = _case(spec, BF16, rng)
    ins = [_cuda(a) for a in a16]
    if name in REJECTED:
        with pytest.raises(TypeError, match=name + ":"):
            bind(spec.prim, *ins, **p16)
        return
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        want = spec.prim.impl(*a64, **p64)
        eager = bind(spec.prim, *ins, **p16)
        jitted = jit(lambda *xs: bind(spec.prim, *xs, **p16))(*ins)
    wants = want if isinstance(want, (list, tuple)) else [want]
    for got in (eager, jitted):
        gots = got if isinstance(got, (list, tuple)) else [got]
        for g, w in zip(gots, wants):
            assert g.device == "cuda", name
            g, w = np.asarray(g), np.asarray(w)
            assert g.shape == w.shape, name
            if w.dtype == F64:
                assert g.dtype == BF16, name
            if w.dtype.kind in "fc":
                g64, fin = g.astype(w.dtype), np.isfinite(w)
                np.testing.assert_allclose(g64[fin], w[fin], rtol=3e-2, atol=3e-2, err_msg=name)
                np.testing.assert_array_equal(np.isnan(g64), np.isnan(w))
            else:
                np.testing.assert_array_equal(g, w)
