"""The CPU engine's choice of BLAS threading under load (C2's large products, cpu_blas)."""
from __future__ import annotations

from funcgrad.backends.cpu_blas import REGRET, Adaptive


def _adaptive(cost):
    now, used = [0.0], []

    def way(k):
        def run():
            used.append(k)
            now[0] += cost[k]
        return run

    return Adaptive((way(0), way(1)), clock=lambda: now[0]), used


def test_a_costly_lost_try_waits_in_proportion_to_its_cost():
    # way 0 (the pool) stalls at 10x the time of way 1 (one thread): after its first lost
    # try it is retried only after ~REGRET * 9 calls, not after the doubling's 16
    cost = [10.0, 1.0]
    ad, used = _adaptive(cost)
    for _ in range(2000):
        ad()
    tries = used.count(0)
    assert ad.best == 1 and ad.explore >= REGRET * 9
    assert tries * (cost[0] - cost[1]) <= 2000 * cost[1] / REGRET * 4   # exploring stays cheap


def test_a_cheap_lost_try_keeps_the_doubling_interval():
    cost = [1.0, 1.25]   # an idle machine: one thread 25% slower than the pool
    ad, used = _adaptive(cost)
    for _ in range(40):
        ad()
    assert ad.best == 0 and used.count(1) >= 2 and ad.explore <= 64
