"""funcgrad.random: Threefry known answers, JAX's numbers, determinism, independence of split
keys, statistical sanity (moments, KS tests), discrete samplers, and jit/vmap invariance."""
import math

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, random

N = 20000  # samples for the statistical tests
KS_CRIT = 1.63 / math.sqrt(N)  # Kolmogorov-Smirnov critical value at the 1% level


def u32(x):
    return np.uint32(x)


# ---------------------------------------------------------------------------------------------
# the Threefry-2x32 block function and JAX's streams
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key,ctr,want", [
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_threefry_known_answers(key, ctr, want):
    """Known-answer vectors of Threefry-2x32 with 20 rounds (Random123)."""
    a, b = random.threefry2x32(u32(key[0]), u32(key[1]), u32(ctr[0]), u32(ctr[1]))
    assert (int(a), int(b)) == want
    assert a.dtype == np.uint32 and b.dtype == np.uint32


def test_threefry_vectorized_matches_scalar():
    k1, k2 = u32(0x13198A2E), u32(0x03707344)
    x1 = fnp.asarray(np.array([0, 0xFFFFFFFF, 0x243F6A88], np.uint32))
    x2 = fnp.asarray(np.array([0, 0xFFFFFFFF, 0x85A308D3], np.uint32))
    a, b = random.threefry2x32(k1, k2, x1, x2)
    for i in range(3):
        sa, sb = random.threefry2x32(k1, k2, u32(np.asarray(x1)[i]), u32(np.asarray(x2)[i]))
        assert (int(np.asarray(a)[i]), int(np.asarray(b)[i])) == (int(sa), int(sb))


def test_jax_threefry_2x32_counts():
    """JAX's original split of PRNGKey(0) is threefry_2x32(key, iota(4)) reshaped: its long
    documented value checks how counters are paired."""
    out = random.threefry_2x32(random.PRNGKey(0), fnp.arange(4, dtype=fnp.uint32))
    assert np.asarray(out).reshape(2, 2).tolist() == [[4146024105, 967050713],
                                                      [2718843009, 1272950319]]
    odd = random.threefry_2x32(random.PRNGKey(0), fnp.arange(3, dtype=fnp.uint32))
    assert odd.shape == (3,)


def test_keys_match_jax():
    assert random.PRNGKey(0).tolist() == [0, 0]
    assert random.PRNGKey(42).tolist() == [0, 42]
    assert random.key(2 ** 40 + 5).tolist() == [256, 5]
    assert random.PRNGKey(-1).tolist() == [0, 0xFFFFFFFF]
    assert random.PRNGKey(fnp.asarray(42)).tolist() == [0, 42]
    assert random.key(0).dtype == np.uint32
    with pytest.raises(TypeError):
        random.PRNGKey(1.5)


def test_uniform_matches_jax_documentation():
    """The values in jax.random's documentation (JAX >= 0.5, partitionable threefry)."""
    key = random.key(0)
    assert float(random.uniform(key)) == pytest.approx(0.947667, abs=1e-6)
    key, subkey = random.split(key)
    assert float(random.uniform(subkey)) == pytest.approx(0.00729382, abs=1e-8)


# ---------------------------------------------------------------------------------------------
# keys: determinism, split, fold_in
# ---------------------------------------------------------------------------------------------

def test_same_key_same_numbers():
    k = random.key(123)
    for f in (lambda k: random.normal(k, (50,)), lambda k: random.uniform(k, (7, 3)),
              lambda k: random.randint(k, (20,), 0, 100), lambda k: random.bits(k, (9,))):
        np.testing.assert_array_equal(np.asarray(f(k)), np.asarray(f(k)))
    assert not np.array_equal(np.asarray(random.normal(random.key(1), (50,))),
                              np.asarray(random.normal(random.key(2), (50,))))


def test_split_shapes_and_prefix_consistency():
    k = random.key(7)
    keys = random.split(k, 5)
    assert keys.shape == (5, 2) and keys.dtype == np.uint32
    assert random.split(k, (2, 3)).shape == (2, 3, 2)
    # counter-based: the first keys of a bigger split are the keys of a smaller one
    np.testing.assert_array_equal(np.asarray(random.split(k, 2)), np.asarray(keys)[:2])
    rows = {tuple(r) for r in np.asarray(random.split(k, 100)).tolist()}
    assert len(rows) == 100 and tuple(np.asarray(k).tolist()) not in rows


def test_split_streams_are_independent():
    k1, k2 = random.split(random.key(0))
    a = np.asarray(random.normal(k1, (N,)), np.float64)
    b = np.asarray(random.normal(k2, (N,)), np.float64)
    assert abs(np.corrcoef(a, b)[0, 1]) < 4 / math.sqrt(N)
    # neighbouring elements of one stream are uncorrelated too
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 4 / math.sqrt(N)


def test_fold_in():
    k = random.key(3)
    a = random.fold_in(k, 5)
    assert a.shape == (2,) and a.dtype == np.uint32
    np.testing.assert_array_equal(np.asarray(a), np.asarray(random.fold_in(k, fnp.asarray(5))))
    assert not np.array_equal(np.asarray(a), np.asarray(random.fold_in(k, 6)))
    assert not np.array_equal(np.asarray(a), np.asarray(k))
    # fold_in(k, d) hashes the counter (0, d)
    b1, b2 = random.threefry2x32(u32(0), u32(3), u32(0), u32(5))
    assert np.asarray(a).tolist() == [int(b1), int(b2)]


def test_bad_keys_raise():
    with pytest.raises(TypeError, match="uint32"):
        random.uniform(fnp.asarray([1, 2]), (3,))
    with pytest.raises(TypeError):
        random.split(random.split(random.key(0), 3))


# ---------------------------------------------------------------------------------------------
# continuous distributions
# ---------------------------------------------------------------------------------------------

def _ks(samples, cdf):
    x = np.sort(np.asarray(samples, np.float64))
    f = cdf(x)
    n = len(x)
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n))


def _normal_cdf(x):
    return 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def test_uniform_statistics():
    x = np.asarray(random.uniform(random.key(11), (N,)))
    assert x.dtype == np.float32 and x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.01 and abs(x.var() - 1 / 12) < 0.005
    assert _ks(x, lambda t: t) < KS_CRIT


def test_uniform_bounds_and_dtypes():
    x = np.asarray(random.uniform(random.key(1), (1000,), minval=-3.0, maxval=-1.0))
    assert x.min() >= -3.0 and x.max() < -1.0
    lo = fnp.asarray([0.0, 10.0])
    y = np.asarray(random.uniform(random.key(1), (500, 2), minval=lo, maxval=lo + 1.0))
    assert y[:, 0].max() < 1.0 and y[:, 1].min() >= 10.0
    for dt in (fnp.float16, fnp.float64):
        z = random.uniform(random.key(2), (1000,), dt)
        assert z.dtype == np.dtype(dt)
        zz = np.asarray(z)
        assert zz.min() >= 0 and zz.max() < 1 and abs(zz.mean() - 0.5) < 0.05
    # float64 uses 52 random bits: more distinct values than float32 could hold
    z64 = np.asarray(random.uniform(random.key(2), (1000,), fnp.float64))
    assert np.any(z64 != z64.astype(np.float32))


def test_normal_statistics():
    x = np.asarray(random.normal(random.key(5), (N,)), np.float64)
    assert abs(x.mean()) < 0.03 and abs(x.var() - 1) < 0.04
    assert _ks(x, _normal_cdf) < KS_CRIT
    assert np.all(np.isfinite(x))


def test_normal_float64_and_float16():
    x = np.asarray(random.normal(random.key(5), (4000,), fnp.float64))
    assert x.dtype == np.float64 and abs(x.mean()) < 0.06 and abs(x.var() - 1) < 0.1
    h = random.normal(random.key(5), (100,), fnp.float16)
    assert h.dtype == np.float16 and np.all(np.isfinite(np.asarray(h)))


def test_erf_inv_inverts_erf():
    for dt, tol in ((np.float32, 2e-6), (np.float64, 1e-13)):
        x = fnp.asarray(np.linspace(-0.9999, 0.9999, 401).astype(dt))
        y = random._erf_inv(x)
        np.testing.assert_allclose(np.asarray(lax.erf(y)), np.asarray(x), atol=tol)


def test_truncated_normal():
    x = np.asarray(random.truncated_normal(random.key(9), -1.0, 2.0, (N,)), np.float64)
    assert x.min() > -1.0 and x.max() < 2.0

    def pdf(t):
        return math.exp(-t * t / 2) / math.sqrt(2 * math.pi)

    def cdf(t):
        return 0.5 * (1 + math.erf(t / math.sqrt(2)))
    z = cdf(2.0) - cdf(-1.0)
    assert abs(x.mean() - (pdf(-1.0) - pdf(2.0)) / z) < 0.02
    assert _ks(x, lambda t: (_normal_cdf(t) - cdf(-1.0)) / z) < KS_CRIT
    assert random.truncated_normal(random.key(0), fnp.zeros(3), 1.0).shape == (3,)


def test_gumbel_statistics():
    x = np.asarray(random.gumbel(random.key(4), (N,)), np.float64)
    assert abs(x.mean() - 0.5772156649) < 0.03  # the Euler-Mascheroni constant
    assert abs(x.var() - math.pi ** 2 / 6) < 0.1
    assert _ks(x, lambda t: np.exp(-np.exp(-t))) < KS_CRIT


# ---------------------------------------------------------------------------------------------
# discrete distributions
# ---------------------------------------------------------------------------------------------

def test_randint_bounds_and_uniformity():
    x = np.asarray(random.randint(random.key(8), (N,), 3, 13))
    assert x.dtype == np.int32 and x.min() == 3 and x.max() == 12
    counts = np.bincount(x - 3, minlength=10)
    assert np.all(np.abs(counts / N - 0.1) < 0.01)
    neg = np.asarray(random.randint(random.key(8), (1000,), -5, -2))
    assert set(neg.tolist()) == {-5, -4, -3}
    empty = np.asarray(random.randint(random.key(8), (10,), 4, 4))  # maxval <= minval
    assert np.all(empty == 4)


def test_randint_extremes_and_dtypes():
    full = np.asarray(random.randint(random.key(1), (2000,), -2 ** 31, 2 ** 31 - 1))
    assert full.min() < -2 ** 30 and full.max() > 2 ** 30
    top = np.asarray(random.randint(random.key(1), (2000,), 0, 2 ** 31))  # maxval clipped
    assert top.min() >= 0 and top.max() > 2 ** 30
    u = random.randint(random.key(1), (100,), 0, 2 ** 32 - 1, dtype=fnp.uint32)
    assert u.dtype == np.uint32 and int(np.asarray(u).max()) > 2 ** 31
    small = np.asarray(random.randint(random.key(1), (500,), -128, 128, dtype=fnp.int8))
    assert small.dtype == np.int8 and small.min() < -100 and small.max() > 100
    lo = fnp.asarray([0, 100])
    both = np.asarray(random.randint(random.key(1), (300, 2), lo, lo + 5))
    assert both[:, 0].max() < 5 and both[:, 1].min() >= 100
    with pytest.raises(TypeError):
        random.randint(random.key(1), (3,), 0, 5, dtype=fnp.float32)


def test_bernoulli_frequency():
    x = np.asarray(random.bernoulli(random.key(2), 0.3, (N,)))
    assert x.dtype == np.bool_ and abs(x.mean() - 0.3) < 0.015
    p = fnp.asarray([0.0, 1.0, 0.5])
    y = np.asarray(random.bernoulli(random.key(2), p))
    assert y.shape == (3,) and not y[0] and y[1]


def test_categorical_frequencies():
    probs = np.array([0.1, 0.2, 0.7], np.float32)
    x = np.asarray(random.categorical(random.key(6), fnp.log(fnp.asarray(probs)), shape=(N,)))
    freq = np.bincount(x, minlength=3) / N
    np.testing.assert_allclose(freq, probs, atol=0.015)


def test_categorical_batch_shapes():
    logits = fnp.asarray([[0.0, 100.0, 0.0], [100.0, 0.0, 0.0]])  # nearly deterministic rows
    assert np.asarray(random.categorical(random.key(0), logits)).tolist() == [1, 0]
    many = random.categorical(random.key(0), logits, shape=(5, 2))
    assert many.shape == (5, 2) and np.all(np.asarray(many) == [1, 0])
    cols = random.categorical(random.key(0), fnp.transpose(logits), axis=0)
    assert np.asarray(cols).tolist() == [1, 0]
    with pytest.raises(ValueError):
        random.categorical(random.key(0), logits, shape=(5, 3))


def test_permutation_is_a_permutation():
    p = np.asarray(random.permutation(random.key(0), 50))
    assert sorted(p.tolist()) == list(range(50)) and p.tolist() != list(range(50))
    x = fnp.asarray(np.arange(12.0).reshape(4, 3))
    rows = np.asarray(random.permutation(random.key(1), x))
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, np.asarray(x).tolist()))
    cols = np.asarray(random.permutation(random.key(1), x, axis=1))
    assert sorted(cols[0].tolist()) == [0.0, 1.0, 2.0] and np.all(np.diff(cols[:, 0]) == 3)
    ind = np.asarray(random.permutation(random.key(1), x, axis=0, independent=True))
    for j in range(3):
        assert sorted(ind[:, j].tolist()) == np.asarray(x)[:, j].tolist()


def test_permutation_two_rounds_and_uniform_positions():
    big = np.asarray(random.permutation(random.key(3), 2000))  # > 1625 elements: two rounds
    assert sorted(big.tolist()) == list(range(2000))
    perms = funcgrad.vmap(lambda k: random.permutation(k, 4))(random.split(random.key(0), 400))
    counts = np.bincount(np.asarray(perms)[:, 0], minlength=4)
    assert np.all(np.abs(counts / 400 - 0.25) < 0.08)


def test_bits():
    b = random.bits(random.key(0), (1000,))
    assert b.dtype == np.uint32 and np.asarray(b).max() > 2 ** 31
    b8 = random.bits(random.key(0), (1000,), fnp.uint8)
    assert b8.dtype == np.uint8 and np.asarray(b8).max() > 200


# ---------------------------------------------------------------------------------------------
# the same numbers under jit and vmap
# ---------------------------------------------------------------------------------------------

def _sample_all(k):
    ks = random.split(k, 6)
    return (random.normal(ks[0], (4,)), random.uniform(ks[1], (3,)),
            random.randint(ks[2], (5,), 0, 7), random.bernoulli(ks[3], 0.5, (4,)),
            random.categorical(ks[4], fnp.zeros((3, 5))), random.fold_in(ks[5], 3))


def test_same_numbers_under_jit():
    k = random.key(99)
    eager = _sample_all(k)
    jitted = funcgrad.jit(_sample_all)(k)
    for a, b in zip(eager, jitted):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    seeded = funcgrad.jit(lambda s: random.normal(random.PRNGKey(s), (3,)))(fnp.asarray(99))
    np.testing.assert_array_equal(np.asarray(seeded), np.asarray(random.normal(k, (3,))))


def test_same_numbers_under_vmap():
    keys = random.split(random.key(5), 4)
    batched = funcgrad.vmap(lambda k: random.normal(k, (3,)))(keys)
    looped = np.stack([np.asarray(random.normal(k, (3,))) for k in keys])
    np.testing.assert_array_equal(np.asarray(batched), looped)
    split_b = funcgrad.vmap(random.split)(keys)
    assert split_b.shape == (4, 2, 2)
    np.testing.assert_array_equal(np.asarray(split_b)[2], np.asarray(random.split(keys[2])))
