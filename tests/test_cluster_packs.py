"""Clusters over MAX_EQNS split into packs of identical parts (clustering.split): each pack within
the cap, the parts' results unchanged, identical per-leaf optimizer updates one kernel source."""
import numpy as np
import pytest

import funcgrad
import funcgrad.cuda
import funcgrad.numpy as fnp
from funcgrad.compile import clustering
from funcgrad import lax, optim
from funcgrad.tree_util import tree_leaves


def _params(rng):
    """Ten vectors and five matrices: AdamW's updates of them overflow one 64-equation cluster."""
    vec = [(rng.standard_normal(6) * 0.3).astype(np.float32) for _ in range(10)]
    mat = [(rng.standard_normal((3, 4)) * 0.3).astype(np.float32) for _ in range(5)]
    return {"v": vec, "m": mat}


def _update(opt):
    def update(p, s, g):
        u, s = opt.update(g, s, p)
        return optim.apply_updates(p, u), s
    return update


def _fused(steps):
    return [s for k, s in steps if k == "fused"]


def test_split_packs_identical_parts_within_the_cap(rng):
    p, g = _params(rng), _params(rng)
    opt = optim.adamw(1e-2, weight_decay=0.1)
    expr = funcgrad.jit(_update(opt)).lower(p, opt.init(p), g).expr
    capped = _fused(clustering.plan_steps(expr))
    packed = _fused(clustering.plan_steps(expr, pack=True))
    assert max(len(c.eqns) for c in packed) <= clustering.MAX_EQNS
    # the capped clustering cuts the vectors' updates across clusters (intermediates stored)
    vec_capped = [c for c in capped if c.shape == (6,)]
    vec_packed = [c for c in packed if c.shape == (6,)]
    assert sum(len(c.outputs) for c in vec_packed) < sum(len(c.outputs) for c in vec_capped)
    # every packed cluster writes m, v and the parameter of whole leaves (3 outputs per leaf)
    for c in vec_packed + [c for c in packed if c.shape == (3, 4)]:
        assert len(c.outputs) % 3 == 0, c
    keys = [clustering._part_key(c.eqns, range(len(c.eqns))) for c in vec_packed]
    assert len(vec_packed) >= 3 and keys.count(keys[0]) >= 2   # full packs: one structure


def test_split_cuts_a_long_chain_and_copies_broadcasts():
    """A connected chain longer than the cap is cut in program order; the broadcast of an outer
    scalar that every piece reads is recomputed in each, written by one (it is a result)."""
    def f(x, a):
        b = fnp.broadcast_to(a, x.shape)
        y = x
        for _ in range(50):
            y = fnp.sin(y) * b + 0.5
        return y, b

    x = np.linspace(-1, 1, 6, dtype=np.float32)
    a = np.float32(0.9)
    steps = clustering.plan_steps(funcgrad.jit(f).lower(x, a).expr, pack=True)
    fused = _fused(steps)
    assert len(fused) >= 3 and max(len(c.eqns) for c in fused) <= clustering.MAX_EQNS
    writers = [c for c in fused if any(o.aval.shape == (6,) and o in c.recomputed
                                       for o in c.members)]
    assert len(writers) == len(fused) - 1   # every other piece recomputes the broadcast
    outs = [o for c in fused for o in c.outputs]
    assert len(outs) == len(set(outs))   # each value written once


def test_recomputed_values_come_after_the_broadcasts_they_read():
    """bessel_i1e's long polynomial chains are cut into pieces; a later piece recomputes values
    of an earlier one that read a broadcast the later piece has its own copy of: every value a
    cluster computes is computed before it is read (no member read before it exists)."""
    x = np.linspace(-10, 10, 7, dtype=np.float32)
    expr = funcgrad.jit(lax.bessel_i1e).lower(x).expr
    steps = clustering.plan_steps(expr, rematerialize=True, pack=True)
    fused = _fused(steps)
    assert len(fused) >= 3 and any(c.recomputed for c in fused)
    for c in fused:
        made = set()
        for e in c.eqns:
            assert not any(v in c.members and v not in made for v in e.inputs), c
            made.add(e.out)


def _cuda_ok() -> bool:
    import os
    return funcgrad.cuda.usable() or os.environ.get("FUNCGRAD_REQUIRE_GPU") == "1"


@pytest.mark.cuda
@pytest.mark.skipif(not _cuda_ok(), reason="no GPU; NUMBA_ENABLE_CUDASIM=1 uses the simulator")
def test_packed_update_matches_cpu_and_shares_kernel_sources(rng):
    p, g = _params(rng), _params(rng)
    opt = optim.adamw(1e-2, weight_decay=0.1)
    step = funcgrad.jit(_update(opt))
    ref = step(*funcgrad.device_put((p, opt.init(p), g), "cpu"))
    dev = funcgrad.device_put((p, opt.init(p), g), "cuda")
    out = step(*dev)
    for u, v in zip(tree_leaves(ref), tree_leaves(out)):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=2e-6, atol=1e-7)
    out2, ref2 = step(out[0], out[1], dev[2]), step(ref[0], ref[1], g)
    for u, v in zip(tree_leaves(ref2), tree_leaves(out2)):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=2e-6, atol=1e-7)
    plan = step.lower(*dev).compile()
    fused = [fk for fk, _ in plan.kernels.values()]
    assert len(fused) == len(_fused(plan.steps))
    # full packs of vectors and of matrices (three leaves each) compile one source (no shapes)
    by_source: dict = {}
    for fk in fused:
        by_source.setdefault(fk.source, []).append(fk.cluster)
    packs = max(by_source.values(), key=len)
    assert len(packs) == 4 and {c.shape for c in packs} == {(6,), (3, 4)}
    assert all(len(c.outputs) == 9 for c in packs)
