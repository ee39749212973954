"""einsum's numpy forms that JAX accepts: a label repeated within one operand (its diagonal;
"ii" is the trace) and the sublist form einsum(a, [0, 1], b, [1, 2], [0, 2]). Expected values
are numpy's einsum (JAX 0.10.2 prints the same for these calls)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad.test_util import check_grads

A = np.arange(9.0).reshape(3, 3)
B = np.arange(24.0).reshape(2, 3, 4)
C = np.arange(18.0).reshape(3, 3, 2)
D = np.arange(27.0).reshape(3, 3, 3)


@pytest.mark.parametrize("spec, operands", [
    ("ii", (A,)), ("ii->i", (A,)), ("iij->j", (C,)), ("iji->j", (D,)), ("iii->i", (D,)),
    ("ij,jj->i", (A, A)), ("...ii->...i", (np.arange(18.0).reshape(2, 3, 3),)),
    ("jii->ij", (D,)),
])
def test_repeated_labels_take_the_diagonal(spec, operands):
    got = jnp.einsum(spec, *operands)
    np.testing.assert_allclose(np.asarray(got), np.einsum(spec, *operands))


def test_sublist_form():
    got = jnp.einsum(A, [0, 1], B, [2, 1, 3], [2, 0, 3])
    np.testing.assert_allclose(np.asarray(got), np.einsum(A, [0, 1], B, [2, 1, 3], [2, 0, 3]))
    assert float(jnp.einsum(A, [0, 0])) == 12.0
    np.testing.assert_allclose(np.asarray(jnp.einsum(A, [Ellipsis, 1], [Ellipsis])),
                               [3.0, 12.0, 21.0])
    np.testing.assert_allclose(np.asarray(jnp.einsum(A, [0, 27], A, [27, 1])), A @ A)
    with pytest.raises(ValueError, match="sublist label"):
        jnp.einsum(A, [0, "a"])


@given(st.integers(0, 3), st.integers(0, 2))
def test_diagonal_sizes_match_numpy(n, m):
    x = np.random.default_rng(n + 5 * m).standard_normal((n, m, n))
    np.testing.assert_allclose(np.asarray(jnp.einsum("iji->ij", x)), np.einsum("iji->ij", x),
                               atol=1e-12)
    np.testing.assert_allclose(np.asarray(jnp.einsum("iji", x)), np.einsum("iji", x),
                               atol=1e-12)


def test_gradients_float64():
    x = np.random.default_rng(0).standard_normal((3, 3))
    check_grads(lambda a: jnp.einsum("ii", a @ a), (x,), order=2)
    check_grads(lambda a: jnp.einsum("ij,jj->i", a, a), (x,), order=2)
    np.testing.assert_allclose(np.asarray(jax.grad(lambda a: jnp.einsum("ii", a @ a))(A)),
                               2 * A.T)


def test_mismatched_repeats_and_outputs_are_refused():
    with pytest.raises(ValueError, match="sizes 3 and 2"):
        jnp.einsum("ii", np.ones((3, 2)))
    with pytest.raises(ValueError, match="repeat a label"):
        jnp.einsum("ij->ii", A)
