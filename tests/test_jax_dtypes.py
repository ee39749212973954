"""funcgrad.dtypes as jax.dtypes: its names, and the bfloat16 rules JAX documents."""
import ml_dtypes
import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import dtypes


def test_names_are_jax_dtypes_names():
    for name in dtypes.__all__:
        assert hasattr(dtypes, name), name
    assert funcgrad.dtypes is dtypes
    assert dtypes.bfloat16 is fnp.bfloat16
    assert np.dtype(dtypes.float8_e4m3fn) == np.dtype(ml_dtypes.float8_e4m3fn)
    assert dtypes.float0 is funcgrad.float0


@pytest.mark.parametrize("a, b, want", [
    ("bfloat16", "float16", "float32"),      # JAX's lattice: the two halves meet at float32
    ("bfloat16", "float32", "float32"),
    ("bfloat16", "int32", "bfloat16"),       # ints promote into any float
    ("bfloat16", "bool", "bfloat16"),
    ("float16", "int8", "float16"),
])
def test_promotion_follows_jax(a, b, want):
    assert dtypes.promote_types(a, b) == np.dtype(want if want != "bfloat16" else dtypes.bfloat16)
    assert dtypes.result_type(np.dtype(a if a != "bfloat16" else dtypes.bfloat16),
                              np.dtype(b)) == dtypes.promote_types(a, b)


def test_bfloat16_is_floating_and_has_finfo():
    assert dtypes.issubdtype(dtypes.bfloat16, fnp.floating)
    assert dtypes.issubdtype(dtypes.bfloat16, fnp.inexact)
    assert not dtypes.issubdtype(dtypes.bfloat16, fnp.integer)
    fi = dtypes.finfo(dtypes.bfloat16)
    assert float(fi.eps) == 2.0 ** -7 and fi.bits == 16
    assert dtypes.iinfo(np.int8).max == 127


def test_canonicalize_dtype_follows_the_x64_switch():
    x64 = funcgrad.config.enable_x64
    try:
        funcgrad.config.update("jax_enable_x64", False)
        assert dtypes.canonicalize_dtype(np.float64) == np.float32
        assert dtypes.canonicalize_dtype(np.int64) == np.int32
        funcgrad.config.update("jax_enable_x64", True)
        assert dtypes.canonicalize_dtype(np.float64) == np.float64
    finally:
        funcgrad.config.update("jax_enable_x64", x64)
    assert dtypes.canonicalize_dtype(dtypes.bfloat16) == np.dtype(dtypes.bfloat16)
