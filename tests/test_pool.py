"""The caching allocator's size buckets: bounded waste, enough reuse."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from funcgrad.cuda.arrays import Pool


@given(st.integers(0, 1 << 30))
def test_buckets_cover_the_request_with_bounded_waste(n):
    b = Pool.bucket(n)
    assert b >= max(n, 1) and b % 256 == 0
    if n > 1 << 16:     # sixteenths of a power of two, then 2 MiB steps: <= 12.5% over
        assert b <= n * 1.125 + (2 << 20)
        assert b <= n * 1.125 or n > 32 << 20
    assert Pool.bucket(b) == b     # a block serves requests of its own size


def test_gpt_weight_sizes():
    # W2's weights: 384x1536 and 384x384 float32 took 4 MiB and 1 MiB blocks before
    assert Pool.bucket(384 * 1536 * 4) == 384 * 1536 * 4
    assert Pool.bucket(384 * 384 * 4) == 384 * 384 * 4
