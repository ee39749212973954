"""Wrong results fixed (issue 32, item 7): complex linear algebra keeps the imaginary part
(cholesky, eigh, svd, qr, slogdet / det, solve / inv, norms, pinv, lstsq) against numpy, with
JAX's derivative rules checked numerically to second order; and logaddexp / logaddexp2 have
JAX's second derivatives at x == y (0.25 and ln(2) / 4)."""
from __future__ import annotations

import numpy as np
import pytest

import funcgrad as jax
import funcgrad.numpy as jnp
from funcgrad.test_util import check_grads

LA = jnp.linalg


def close(a, b, rtol=1e-10, atol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def crand(rs, *shape, dtype=np.complex128):
    return (rs.standard_normal(shape) + 1j * rs.standard_normal(shape)).astype(dtype)


def hpd(rs, n, dtype=np.complex128, batch=()):
    a = crand(rs, *batch, n, n, dtype=dtype)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


@pytest.fixture
def rs():
    return np.random.RandomState(0)


TOL = {np.complex128: 1e-10, np.complex64: 2e-4}


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_values_against_numpy(rs, dtype):
    tol = TOL[dtype]
    h = hpd(rs, 4, dtype)
    a = crand(rs, 4, 4, dtype=dtype)
    b = crand(rs, 5, 3, dtype=dtype)
    low = LA.cholesky(h)
    assert low.dtype == dtype
    close(low, np.linalg.cholesky(h), tol, tol)
    close(LA.cholesky(h, upper=True), np.conj(np.linalg.cholesky(h)).T, tol, tol)
    w, v = LA.eigh(h)
    assert w.dtype == np.dtype(dtype).char.lower() or w.dtype.kind == "f"
    close(w, np.linalg.eigvalsh(h), tol, tol * 10)
    close(np.asarray(h) @ np.asarray(v), np.asarray(v) * np.asarray(w), tol * 10, tol * 10)
    close(np.conj(np.asarray(v)).T @ np.asarray(v), np.eye(4), tol, tol)
    close(LA.eigvalsh(h), np.linalg.eigvalsh(h), tol, tol * 10)
    u, s, vh = LA.svd(b, full_matrices=False)
    close(s, np.linalg.svd(b, compute_uv=False), tol, tol)
    close((np.asarray(u) * np.asarray(s)) @ np.asarray(vh), b, tol * 10, tol * 10)
    close(LA.svdvals(b), np.linalg.svd(b, compute_uv=False), tol, tol)
    q, r = LA.qr(b)
    close(np.asarray(q) @ np.asarray(r), b, tol * 10, tol * 10)
    close(np.triu(np.asarray(r)), r)
    sign, logabs = LA.slogdet(a)
    ws, wl = np.linalg.slogdet(a)
    close(sign, ws, tol, tol)
    close(logabs, wl, tol, tol)
    close(LA.det(a), np.linalg.det(a), tol * 10, tol * 10)
    close(LA.inv(a), np.linalg.inv(a), tol * 10, tol * 10)
    close(LA.solve(a, b[:4]), np.linalg.solve(a, b[:4]), tol * 10, tol * 10)
    close(LA.solve(a, b[:4, 0]), np.linalg.solve(a, b[:4, 0]), tol * 10, tol * 10)
    close(LA.pinv(b), np.linalg.pinv(b), tol * 10, tol * 10)
    x, resid, rank, _ = LA.lstsq(b, b[:, :2] @ np.ones((2, 2)))
    wx, wres, wrank, _ = np.linalg.lstsq(b, b[:, :2] @ np.ones((2, 2)), rcond=None)
    close(x, wx, tol * 10, tol * 10)
    close(resid, np.zeros(2) if wres.size == 0 else wres, tol * 100, tol * 100)
    assert int(rank) == wrank == int(LA.matrix_rank(b))


def test_norms_of_complex_arrays(rs):
    # the case: the 2-norm is sqrt(sum |x|^2) (sum x*x dropped the imaginary part)
    v = np.array([1 + 2j, 3 - 1j, -0.5j])
    assert LA.norm(v).dtype == np.float64
    close(LA.norm(v), np.linalg.norm(v))
    m = crand(rs, 3, 5)
    for ord_ in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        close(LA.norm(m, ord_), np.linalg.norm(m, ord_), 1e-9, 1e-9)
    for ord_ in (None, 1, 2, 3.5, 0, np.inf, -np.inf):
        close(LA.norm(m, ord_, axis=1), np.linalg.norm(m, ord_, axis=1), 1e-10, 1e-12)
    close(LA.vector_norm(m), np.linalg.norm(m.ravel()))
    close(LA.matrix_norm(m), np.linalg.norm(m, "fro"))
    close(LA.cond(m[:, :3]), np.linalg.cond(m[:, :3]), 1e-9)
    x32 = v.astype(np.complex64)
    assert LA.norm(x32).dtype == np.float32
    close(LA.norm(x32), np.linalg.norm(v), 1e-6, 1e-6)


def test_batched_jit_vmap(rs):
    h = hpd(rs, 3, batch=(2,))
    close(LA.cholesky(h), np.linalg.cholesky(h))
    close(jax.jit(LA.eigvalsh)(h), np.linalg.eigvalsh(h))
    close(jax.vmap(LA.eigvalsh)(h), np.linalg.eigvalsh(h))
    b = crand(rs, 2, 4, 3)
    close(jax.vmap(LA.svdvals)(b), np.linalg.svd(b, compute_uv=False))
    close(jax.jit(lambda x: LA.slogdet(x)[1])(h), np.linalg.slogdet(h)[1])
    close(jax.vmap(LA.inv)(h), np.linalg.inv(h))
    close(jax.jit(jax.vmap(lambda x: LA.norm(x, 2)))(b), np.linalg.norm(b, 2, axis=(1, 2)))


def test_options_and_edge_cases(rs):
    h = hpd(rs, 3)
    lower = np.tril(h) + np.tril(np.full((3, 3), 9j), -1).T   # junk above the diagonal
    close(LA.cholesky(lower, symmetrize_input=False), np.linalg.cholesky(h))
    close(LA.eigh(lower, symmetrize_input=False).eigenvalues, np.linalg.eigvalsh(h))
    upper = np.triu(h) + np.triu(np.full((3, 3), 9j), 1).T
    close(LA.eigh(upper, UPLO="U", symmetrize_input=False).eigenvalues, np.linalg.eigvalsh(h))
    assert np.isnan(np.asarray(LA.cholesky(-h))).all()        # not positive definite: NaN
    b = crand(rs, 5, 3)
    u, s, vh = LA.svd(b)                                      # full_matrices=True
    assert u.shape == (5, 5) and vh.shape == (3, 3)
    close(np.conj(np.asarray(u)).T @ np.asarray(u), np.eye(5))
    q, r = LA.qr(b, mode="complete")
    assert q.shape == (5, 5) and r.shape == (5, 3)
    close(np.asarray(q) @ np.asarray(r), b)
    assert LA.qr(b, mode="r").shape == (3, 3)
    wide = crand(rs, 2, 4)
    q, r = LA.qr(wide)
    close(np.asarray(q) @ np.asarray(r), wide)
    u, s, vh = LA.svd(h, hermitian=True)
    close(s, np.linalg.svd(h, compute_uv=False))
    close((np.asarray(u) * np.asarray(s)) @ np.asarray(vh), h)
    with pytest.raises(ValueError):   # as in JAX: no derivative of the full factors
        jax.grad(lambda x: jnp.abs(LA.svd(x)[0]).sum())(b)


def _svd_product(u, s, vh):
    return (u * s) @ vh


def _herm(x):
    return x @ jnp.conj(x.T) + 3.0 * jnp.eye(x.shape[0])


GRAD_CASES = {
    "cholesky": (lambda x: LA.cholesky(_herm(x)), "sq"),
    "eigvalsh": (lambda x: LA.eigh(_herm(x))[0], "sq"),
    "eigenvector_moduli": (lambda x: jnp.abs(LA.eigh(_herm(x))[1]) ** 2, "sq"),
    "svdvals": (lambda x: LA.svd(x, compute_uv=False), "tall"),
    "svd_u_moduli": (lambda x: jnp.abs(LA.svd(x, full_matrices=False)[0]) ** 2, "tall"),
    "svd_vh_moduli": (lambda x: jnp.abs(LA.svd(x.T, full_matrices=False)[2]) ** 2, "tall"),
    "svd_product": (lambda x: _svd_product(*LA.svd(x, full_matrices=False)), "tall"),
    "qr": (lambda x: LA.qr(x), "tall"),
    "slogdet": (lambda x: LA.slogdet(x), "sq"),
    "det": (LA.det, "sq"),
    "inv": (LA.inv, "sq"),
    "norm_fro": (LA.norm, "tall"),
    "norm_2": (lambda x: LA.norm(x, 2), "tall"),
    "norm_nuc": (lambda x: LA.norm(x, "nuc"), "tall"),
    "pinv": (LA.pinv, "tall"),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_complex_derivatives(rs, name):
    f, kind = GRAD_CASES[name]
    x = crand(rs, 3, 3) if kind == "sq" else crand(rs, 4, 3)
    check_grads(f, (x,), order=2)


def test_solve_derivatives_in_both_operands(rs):
    check_grads(LA.solve, (crand(rs, 3, 3), crand(rs, 3, 2)), order=2)


def test_grad_of_a_real_loss_of_complex_linalg(rs):
    # JAX's convention for a real loss of a complex input: df/dx - i df/dy = 2 df/dz, which
    # for log|det A| = Re log det A is A^-T
    a = crand(rs, 3, 3)
    g = jax.grad(lambda x: LA.slogdet(x)[1])(a)
    close(g, np.linalg.inv(a).T)


# ---------------------------------------------------------------------------------------------
# logaddexp
# ---------------------------------------------------------------------------------------------

def test_logaddexp_second_derivatives_at_the_diagonal():
    f64 = np.float64
    for x in (-3.0, 0.0, 1.0, 50.0):
        assert float(jax.grad(jax.grad(jnp.logaddexp))(f64(x), f64(x))) == pytest.approx(0.25)
        assert float(jax.grad(jax.grad(jnp.logaddexp, 1), 0)(f64(x), f64(x))) == \
            pytest.approx(-0.25)
        assert float(jax.grad(jax.grad(jnp.logaddexp2))(f64(x), f64(x))) == \
            pytest.approx(0.17328679513998632, rel=1e-12)
    # float32 as in the issue
    assert float(jax.grad(jax.grad(jnp.logaddexp))(1.0, 1.0)) == pytest.approx(0.25)
    check_grads(jnp.logaddexp, (np.array([0.3, -1.0, 2.0]), np.array([0.3, 1.0, 2.0])), order=3)
    check_grads(jnp.logaddexp2, (np.array([0.3, 4.0]), np.array([0.3, -2.0])), order=3)


def test_logaddexp_values_and_infinities():
    x = np.array([-np.inf, -np.inf, np.inf, np.inf, 0.0, 1000.0, -1000.0, 1e-20, 3.0, -np.inf])
    y = np.array([-np.inf, 0.0, np.inf, -np.inf, 0.0, 999.0, -1000.0, 0.0, -40.0, 5.0])
    with np.errstate(invalid="ignore"):
        close(jnp.logaddexp(x, y), np.logaddexp(x, y), 1e-15, 0)
        close(jnp.logaddexp2(x, y), np.logaddexp2(x, y), 1e-14, 0)
    gx, gy = jax.vmap(jax.grad(jnp.logaddexp, (0, 1)))(jnp.asarray(x), jnp.asarray(y))
    assert np.isfinite(np.asarray(gx)).all() and np.isfinite(np.asarray(gy)).all()
    close(gx[4:9], 1 / (1 + np.exp(y[4:9] - x[4:9])), 1e-12, 1e-15)
    assert jnp.logaddexp(np.float32(1), np.float32(2)).dtype == np.float32
