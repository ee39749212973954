"""Every primitive with float operands, on bfloat16 and float16 operands (CPU): the result dtype
JAX gives and values within 16-bit tolerance of float64 on the same rounded inputs; the
decompositions reject 16-bit floats by name."""
import warnings

import ml_dtypes
import numpy as np
import pytest
from prim_specs import SPECS

import funcgrad.numpy as fnp
from funcgrad import jit
from funcgrad.core import bind

BF16, F64 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float64)
# no 16-bit kernels, as XLA's CPU LAPACK (a clear error instead)
REJECTED = {"cholesky", "eigh", "lu", "qr", "svd", "triangular_solve", "complex"}
# attention's internal backward pieces take float32 statistics made by attention_fwdl: they
# run inside attention's own rules, which test_bfloat16_ops checks end to end
INTERNAL = {"attention_bwd", "attention_bwdl", "attention_delta", "attention_dkv", "attention_dq",
            "attention_fwdl", "attention_stats"}
NAMES = sorted(n for n, s in SPECS.items() if F64 in s.dtypes and n not in INTERNAL)


def _case(spec, dt, rng):
    shape = next(s for s in [(2, 3, 4), (2, 3), (5,), ()] if spec.supports(s))
    args, params = spec.make_args(rng, shape, np.float64)
    fl = [isinstance(a, np.ndarray) and a.dtype == F64 for a in args]
    a16 = [a.astype(dt) if f else a for a, f in zip(args, fl)]
    a64 = [a.astype(dt).astype(F64) if f else a for a, f in zip(args, fl)]
    p16 = {k: (dt if isinstance(v, np.dtype) and v == F64 else v) for k, v in params.items()}
    return a16, a64, p16, params


@pytest.mark.parametrize("dt", [BF16, np.dtype(np.float16)], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", NAMES)
def test_primitive_on_16_bit_floats(name, dt, rng):
    spec = SPECS[name]
    a16, a64, p16, p64 = _case(spec, dt, rng)
    if name in REJECTED:
        with pytest.raises(TypeError, match=name + ":") as e:
            bind(spec.prim, *[fnp.asarray(a) for a in a16], **p16)
        short = "bf16[" if dt == BF16 else "f16["
        assert dt.name in str(e.value) or short in str(e.value)
        return
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        want = spec.prim.impl(*a64, **p64)
        eager = bind(spec.prim, *[fnp.asarray(a) for a in a16], **p16)
        jitted = jit(lambda *xs: bind(spec.prim, *xs, **p16))(*a16)
    wants = want if isinstance(want, (list, tuple)) else [want]
    for got in (eager, jitted):
        gots = got if isinstance(got, (list, tuple)) else [got]
        for g, w in zip(gots, wants):
            g, w = np.asarray(g), np.asarray(w)
            assert g.shape == w.shape
            if w.dtype == F64:
                assert g.dtype == dt, name
            if w.dtype.kind in "fc":
                g64, fin = g.astype(w.dtype), np.isfinite(w)
                np.testing.assert_allclose(g64[fin], w[fin], rtol=3e-2, atol=3e-2, err_msg=name)
                np.testing.assert_array_equal(np.isnan(g64), np.isnan(w))
            else:
                np.testing.assert_array_equal(g, w)
