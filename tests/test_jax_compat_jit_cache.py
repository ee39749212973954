"""jit's trace cache belongs to the function, as JAX's: jit(f) called again gives a wrapper that
shares f's traces (with the same static_argnums / static_argnames), so a global changed between
the calls is not seen, as in JAX; the entries go when f does."""
from __future__ import annotations

import gc

import funcgrad as jax
from funcgrad.compile import jit as jit_module

SCALE = [1.0]


def _scaled(x):
    return x * SCALE[0]


def _scaled_n(x, n):
    return x * SCALE[0] * n


def test_second_wrapper_shares_the_first_trace():
    # JAX 0.10.2 prints 1.0, then 1.0 again: the cached trace keeps the old global
    def f(x):
        return x * SCALE[0]

    SCALE[0] = 1.0
    try:
        assert float(jax.jit(f)(1.0)) == 1.0
        SCALE[0] = 2.0
        g = jax.jit(f)
        assert float(g(1.0)) == 1.0
        assert g.stats()["traces"] == 1 and g.stats()["cache_size"] == 1
        assert g.stats()["calls"] == 2   # both wrappers' calls
        g.clear_cache()                  # clears f's cache, as JAX's clear_cache does
        assert float(jax.jit(f)(1.0)) == 2.0
    finally:
        SCALE[0] = 1.0


def test_static_arguments_key_the_shared_cache():
    # JAX 0.10.2: 6.0, then 6.0 (cached for n=2) and 12.0 (a new trace for n=3)
    SCALE[0] = 3.0
    try:
        jitted = jax.jit(_scaled_n, static_argnums=1)
        assert float(jitted(1.0, 2)) == 6.0
        SCALE[0] = 4.0
        again = jax.jit(_scaled_n, static_argnums=1)
        assert float(again(1.0, 2)) == 6.0
        assert float(again(1.0, 3)) == 12.0
        # static_argnames="n" names the same argument: the same cache, keyed by how n comes
        # (JAX 0.10.2: 8.0 by keyword, a new trace; 6.0 by position; 8.0 by keyword again)
        by_name = jax.jit(_scaled_n, static_argnames="n")
        assert float(by_name(1.0, n=2)) == 8.0
        assert float(by_name(1.0, 2)) == 6.0
        assert float(jax.jit(_scaled_n, static_argnums=1)(1.0, n=2)) == 8.0
        assert by_name.stats()["traces"] == 3
    finally:
        SCALE[0] = 1.0
        jax.jit(_scaled_n, static_argnums=1).clear_cache()


def test_other_functions_trace_on_their_own():
    def f(x):
        return x + 1

    def g(x):
        return x + 1

    assert float(jax.jit(f)(1.0)) == 2.0
    assert jax.jit(g).stats()["traces"] == 0
    assert jax.jit(f).stats()["traces"] == 1


def test_cache_entries_go_with_their_function():
    def make(i):
        return lambda x: x + i

    before = len(jit_module._SHARED)
    for i in range(4):
        assert float(jax.jit(make(i))(1.0)) == 1.0 + i
    gc.collect()
    assert len(jit_module._SHARED) == before


def test_unhashable_callable_gets_a_cache_of_its_own():
    class Scale:
        __hash__ = None    # unhashable: cannot key the shared cache

        def __call__(self, x):
            return x * 5

    s = Scale()
    assert float(jax.jit(s)(1.0)) == 5.0
    assert jax.jit(s).stats()["traces"] == 0
