"""jit's traces belong to the function, as JAX's: jit(f) made again reuses f's traces and plans
(same static / donated arguments, same engine switches), so a global changed between the calls
is not seen; stats stay per wrapper, and switches, x64 and the default device key it apart."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad.compile import jit as jit_module
from funcgrad.compile import switches

SCALE = [1.0]


@pytest.fixture
def scale():
    SCALE[0] = 1.0
    yield SCALE
    SCALE[0] = 1.0


def _scaled_n(x, n):
    return x * SCALE[0] * n


def test_second_wrapper_reuses_the_first_trace(scale):
    # JAX 0.4-0.7: 1.0, then 1.0 again (the cached trace keeps the old global)
    def f(x):
        return x * SCALE[0]

    first = jax.jit(f)
    assert float(first(1.0)) == 1.0
    scale[0] = 2.0
    g = jax.jit(f)
    assert float(g(1.0)) == 1.0
    # stats are the wrapper's own: g traced and compiled nothing
    assert g.stats() == {"traces": 0, "compiles": 0, "calls": 1, "cache_size": 1}
    assert first.stats()["traces"] == 1 and first.stats()["calls"] == 1
    for _ in range(3):                 # the JAX idiom jax.jit(f)(x) in a loop: no retrace
        assert float(jax.jit(f)(1.0)) == 1.0
    assert first.stats()["traces"] == 1
    g.clear_cache()                    # clears f's traces, as JAX's clear_cache does
    assert float(jax.jit(f)(1.0)) == 2.0


def test_a_loop_of_fresh_wrappers_traces_once():
    calls = []

    def f(x):
        calls.append(1)
        return jnp.sin(x) + 1

    x = jnp.ones(3)
    for _ in range(5):
        np.testing.assert_allclose(np.asarray(jax.jit(f)(x)), np.sin(1.0) + 1, rtol=1e-6)
    assert len(calls) == 1
    jax.jit(f)(jnp.ones(4))            # a new shape is a new signature
    assert len(calls) == 2


def test_static_arguments_key_the_shared_cache(scale):
    # JAX: 6.0, then 6.0 (cached for n=2) and 12.0 (a new trace for n=3)
    scale[0] = 3.0
    try:
        assert float(jax.jit(_scaled_n, static_argnums=1)(1.0, 2)) == 6.0
        scale[0] = 4.0
        again = jax.jit(_scaled_n, static_argnums=1)
        assert float(again(1.0, 2)) == 6.0
        assert float(again(1.0, 3)) == 12.0
        assert again.stats()["traces"] == 1
        # other options: a cache of their own (traces again, sees the new global)
        assert float(jax.jit(_scaled_n, static_argnums=1, donate_argnums=0)(1.0, 2)) == 8.0
    finally:
        jax.jit(_scaled_n, static_argnums=1).clear_cache()


def test_other_functions_trace_on_their_own():
    def f(x):
        return x + 1

    def g(x):
        return x + 1

    assert float(jax.jit(f)(1.0)) == 2.0
    assert float(jax.jit(g)(1.0)) == 2.0
    assert jax.jit(g).stats()["traces"] == 0
    fresh = jax.jit(f)
    fresh(1.0)
    assert fresh.stats()["traces"] == 0


def test_an_environment_switch_keys_the_cache_apart(scale, monkeypatch):
    def f(x):
        return x * SCALE[0]

    assert float(jax.jit(f)(1.0)) == 1.0
    scale[0] = 2.0
    monkeypatch.setenv("FUNCGRAD_CPU_FUSE", "0")     # plans compiled under it differ
    assert float(jax.jit(f)(1.0)) == 2.0
    monkeypatch.delenv("FUNCGRAD_CPU_FUSE")
    assert float(jax.jit(f)(1.0)) == 1.0             # back: the first plan again


def test_a_module_flag_keys_the_cache_apart(scale, monkeypatch):
    from funcgrad.compile.rewrites import remat

    def f(x):
        return x * SCALE[0]

    assert float(jax.jit(f)(1.0)) == 1.0
    scale[0] = 2.0
    monkeypatch.setattr(remat, "GAP", remat.GAP + 1)
    assert ("funcgrad.compile.rewrites.remat", "GAP", remat.GAP) in switches.fingerprint()[-1]
    assert float(jax.jit(f)(1.0)) == 2.0


def test_x64_and_the_default_device_key_the_cache_apart(scale):
    def f(x):
        return x * SCALE[0]

    x = np.float32(1.0)
    assert float(jax.jit(f)(x)) == 1.0
    scale[0] = 2.0
    with jax.enable_x64(not jax.config.enable_x64):
        assert float(jax.jit(f)(x)) == 2.0
    assert float(jax.jit(f)(x)) == 1.0
    now = switches.fingerprint()
    before = jax.config.default_device
    other = "cuda" if jax.default_backend() == "cpu" else "cpu"
    try:
        jax.config.update("default_device", other)
        assert switches.fingerprint() != now
    finally:
        jax.config.update("default_device", before)
    assert switches.fingerprint() == now


def test_a_config_switch_keys_the_cache_apart(scale):
    def f(x):
        return x * SCALE[0]

    assert float(jax.jit(f)(1.0)) == 1.0
    scale[0] = 2.0
    jax.config.update("debug_nans", True)
    try:
        assert float(jax.jit(f)(1.0)) == 2.0
    finally:
        jax.config.update("debug_nans", False)


def test_clear_caches_drops_the_shared_traces(scale):
    def f(x):
        return x * SCALE[0]

    assert float(jax.jit(f)(1.0)) == 1.0
    scale[0] = 3.0
    jax.clear_caches()
    assert float(jax.jit(f)(1.0)) == 3.0


def test_cache_entries_go_with_their_function():
    def make(i):
        return lambda x: x + i

    gc.collect()
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
    again = jax.jit(s)
    assert float(again(1.0)) == 5.0
    assert again.stats()["traces"] == 1
