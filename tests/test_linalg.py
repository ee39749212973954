"""funcgrad.numpy.linalg and funcgrad.scipy.linalg against numpy: values on hypothesis-drawn
batch shapes (0- and 1-sized included), float64 gradients (JAX's rules), vmap/jit, errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad
import funcgrad.numpy as fnp
from funcgrad.scipy import linalg as sla
from funcgrad.test_util import check_grads

LA = fnp.linalg
TOL = {np.dtype(np.float32): 2e-4, np.dtype(np.float64): 1e-10}


def close(got, want, dtype=np.float64, scale=1.0):
    tol = TOL[np.dtype(dtype)] * scale
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


def well_conditioned(rng, shape):
    """(..., n, n) matrices with singular values in [1, 3] (a random rotation of a diagonal)."""
    n = shape[-1]
    a = rng.standard_normal(shape)
    q, _ = np.linalg.qr(a)
    s = rng.uniform(1.0, 3.0, shape[:-1])
    return (q * s[..., None, :]) @ np.swapaxes(np.linalg.qr(rng.standard_normal(shape))[0],
                                               -1, -2) if n else a


def spd(rng, shape):
    a = rng.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


batches = st.lists(st.integers(0, 2), max_size=2).map(tuple)
dtypes = st.sampled_from([np.float32, np.float64])


# ---------------------------------------------------------------------------------------------
# values against numpy
# ---------------------------------------------------------------------------------------------

@given(batch=batches, n=st.integers(0, 4), k=st.integers(0, 2), dt=dtypes,
       seed=st.integers(0, 2**31))
def test_solve_inv_det_match_numpy(batch, n, k, dt, seed):
    rng = np.random.default_rng(seed)
    a = well_conditioned(rng, batch + (n, n)).astype(dt)
    b = rng.standard_normal(batch + (n, k)).astype(dt)
    v = rng.standard_normal((n,)).astype(dt)
    close(LA.solve(a, b), np.linalg.solve(a, b), dt, 10)
    close(LA.solve(a, v), np.linalg.solve(a, v), dt, 10)
    close(LA.inv(a), np.linalg.inv(a), dt, 10)
    close(LA.det(a), np.linalg.det(a), dt, 10)
    sign, logdet = LA.slogdet(a)
    want = np.linalg.slogdet(a)
    close(sign, want.sign, dt)
    close(logdet, want.logabsdet, dt, 10)
    assert LA.solve(a, b).dtype == dt


@given(batch=batches, n=st.integers(0, 4), dt=dtypes, seed=st.integers(0, 2**31))
def test_cholesky_eigh_match_numpy(batch, n, dt, seed):
    rng = np.random.default_rng(seed)
    a = spd(rng, batch + (n, n)).astype(dt)
    close(LA.cholesky(a), np.linalg.cholesky(a), dt, 10)
    close(LA.cholesky(a, upper=True), np.linalg.cholesky(a, upper=True), dt, 10)
    w, v = LA.eigh(a)
    w2, v2 = np.linalg.eigh(a)
    close(w, w2, dt, 30)
    v = np.asarray(v)
    close(np.abs(v), np.abs(v2), dt, 300)                       # eigenvectors up to sign
    close((v * np.asarray(w)[..., None, :]) @ np.swapaxes(v, -1, -2), a, dt, 100)
    if v.size:   # funcgrad's sign convention: the largest entry of each vector is positive
        idx = np.argmax(np.abs(v), axis=-2)[..., None, :]
        assert (np.take_along_axis(v, idx, axis=-2) > 0).all()
    close(LA.eigvalsh(a, "U"), np.linalg.eigvalsh(a, "U"), dt, 30)


@given(batch=batches, m=st.integers(0, 4), n=st.integers(0, 4), full=st.booleans(),
       dt=dtypes, seed=st.integers(0, 2**31))
def test_svd_qr_pinv_match_numpy(batch, m, n, full, dt, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (m, n)).astype(dt)
    u, s, vh = (np.asarray(x) for x in LA.svd(a, full_matrices=full))
    u2, s2, vh2 = np.linalg.svd(a, full_matrices=full)
    assert u.shape == u2.shape and s.shape == s2.shape and vh.shape == vh2.shape
    close(s, s2, dt, 30)
    close(LA.svd(a, compute_uv=False), s2, dt, 30)
    k = min(m, n)
    close((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, dt, 30)
    eye = lambda d: np.broadcast_to(np.eye(d), batch + (d, d))  # noqa: E731
    close(np.swapaxes(u, -1, -2) @ u, eye(u.shape[-1]), dt, 30)
    close(vh @ np.swapaxes(vh, -1, -2), eye(vh.shape[-2]), dt, 30)
    mode = "complete" if full else "reduced"
    q, r = LA.qr(a, mode)
    q2, r2 = np.linalg.qr(a, mode)
    close(q, q2, dt, 30)
    close(r, r2, dt, 30)
    close(LA.qr(a, "r"), np.linalg.qr(a, "r"), dt, 30)
    if k:
        close(LA.pinv(a), np.linalg.pinv(a), dt, 1000)


MATRIX_ORDS = [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]
VECTOR_ORDS = [None, 0, 1, 2, 3.5, -1, np.inf, -np.inf]


@pytest.mark.parametrize("ord", MATRIX_ORDS, ids=str)
def test_matrix_norms_match_numpy(ord):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4))
    for axis in [(-2, -1), (0, 2), (2, 1)]:
        for keep in (False, True):
            close(LA.norm(x, ord, axis, keep), np.linalg.norm(x, ord, axis, keep))
    close(LA.norm(x[0], ord), np.linalg.norm(x[0], ord))
    if ord is not None:
        close(LA.matrix_norm(x, ord=ord), np.linalg.matrix_norm(x, ord=ord))


def test_matrix_2_norm_is_spectral():
    x = fnp.array([[3.0, 0.0], [0.0, 4.0]])
    assert float(LA.norm(x, 2)) == pytest.approx(4.0)       # not the Frobenius norm 5
    assert float(LA.norm(x)) == pytest.approx(5.0)


@pytest.mark.parametrize("ord", VECTOR_ORDS, ids=str)
@pytest.mark.filterwarnings("ignore:divide by zero")   # numpy's own -1-norm of a zero entry
def test_vector_norms_match_numpy(ord):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4))
    x[0, 1] = 0.0
    for axis in (0, 1, -1, (1,)):
        close(LA.norm(x, ord, axis), np.linalg.norm(x, ord, axis))
        close(LA.norm(x, ord, axis, keepdims=True), np.linalg.norm(x, ord, axis, True))
    close(LA.norm(x[1], ord), np.linalg.norm(x[1], ord))
    close(LA.vector_norm(x, ord=2 if ord is None else ord),
          np.linalg.vector_norm(x, ord=2 if ord is None else ord))


def test_norm_defaults_and_errors():
    x = np.arange(24.0).reshape(2, 3, 4)
    close(LA.norm(x), np.linalg.norm(x))
    close(LA.norm(x, keepdims=True), np.linalg.norm(x, keepdims=True))
    assert LA.norm(np.arange(4)).dtype == np.float32                  # ints become float32
    for shape, ord in [((0,), np.inf), ((2, 0), 1), ((0, 3), np.inf), ((0, 2), "fro")]:
        assert float(LA.norm(np.zeros(shape), ord)) == 0.0     # empty max-norms are 0 (JAX)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        LA.norm(x, 2)
    with pytest.raises(ValueError, match="invalid order"):
        LA.norm(x, "fro", axis=0)
    with pytest.raises(ValueError, match="invalid order"):
        LA.norm(x, 3, axis=(0, 1))


def test_cond_lstsq_rank_power_tensor_ops():
    rng = np.random.default_rng(2)
    a = well_conditioned(rng, (2, 3, 3))
    for p in (None, 2, -2, 1, -1, np.inf, "fro", "nuc"):
        close(LA.cond(a, p), np.linalg.cond(a, p), scale=100)
    assert float(LA.cond(np.zeros((2, 2)), 1)) == np.inf                # NaN -> inf
    m, y, ys = rng.standard_normal((5, 3)), rng.standard_normal(5), rng.standard_normal((5, 2))
    for b in (y, ys):
        x, res, rank, s = LA.lstsq(m, b)
        x2, res2, rank2, s2 = np.linalg.lstsq(m, b)
        close(x, x2)
        close(res, res2)
        close(s, s2)
        assert int(rank) == rank2
    low = np.outer(rng.standard_normal(4), rng.standard_normal(3))
    assert int(LA.matrix_rank(low)) == 1 == np.linalg.matrix_rank(low)
    close(LA.matrix_rank(a), np.linalg.matrix_rank(a))
    herm = np.diag([3.0, 1e-20, -2.0])
    assert int(LA.matrix_rank(herm, hermitian=True)) == 2 == np.linalg.matrix_rank(herm, True)
    for n in (-3, -1, 0, 1, 2, 7):
        close(LA.matrix_power(a, n), np.linalg.matrix_power(a, n), scale=1000)
    arrs = [rng.standard_normal(s) for s in [(3,), (3, 4), (4, 6), (6, 2), (2,)]]
    close(LA.multi_dot(arrs), np.linalg.multi_dot(arrs))
    close(LA.multi_dot(arrs[1:4]), np.linalg.multi_dot(arrs[1:4]))
    t = well_conditioned(rng, (6, 6)).reshape(2, 3, 6)
    close(LA.tensorinv(t, 2), np.linalg.tensorinv(t, 2))
    t4 = well_conditioned(rng, (6, 6)).reshape(3, 2, 2, 3)
    b = rng.standard_normal((3, 2))
    close(LA.tensorsolve(t4, b), np.linalg.tensorsolve(t4, b))
    t4b = np.moveaxis(t4, 1, 3)      # axes=(3,) moves that axis to the end
    close(LA.tensorsolve(t4b, b[:, :1] * np.ones((3, 2)), axes=(3,)),
          np.linalg.tensorsolve(t4b, b[:, :1] * np.ones((3, 2)), axes=(3,)))
    x1, x2 = rng.standard_normal((4, 3)), rng.standard_normal(3)
    close(LA.cross(x1, x2), np.cross(x1, x2))
    close(LA.cross(x1.T, x2[:, None], axis=0), np.cross(x1.T, x2[:, None], axis=0))
    close(LA.vecdot(x1, x2), np.linalg.vecdot(x1, x2))
    close(LA.outer(x2, x2), np.linalg.outer(x2, x2))
    close(LA.trace(a, offset=1), np.linalg.trace(a, offset=1))
    close(LA.diagonal(a, offset=-1), np.linalg.diagonal(a, offset=-1))
    close(LA.matrix_transpose(a), np.linalg.matrix_transpose(a))
    close(LA.matmul(a, x2), np.linalg.matmul(a, x2))
    close(LA.tensordot(a, a[0], axes=2), np.linalg.tensordot(a, a[0], axes=2))
    s = spd(rng, (3, 3))
    close(LA.svd(s, hermitian=True).S, np.linalg.svd(s, hermitian=True).S)
    close(LA.pinv(s, hermitian=True), np.linalg.pinv(s, hermitian=True), scale=100)


def test_scipy_triangular_and_cholesky_solves():
    rng = np.random.default_rng(3)
    t = rng.standard_normal((2, 4, 4)) * 0.3 + 3 * np.eye(4)
    b, v = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4))
    for lower in (True, False):
        tri = np.tril(t) if lower else np.triu(t)
        for trans in (0, "T", 2):
            op = tri if trans == 0 else np.swapaxes(tri, -1, -2)
            close(sla.solve_triangular(t, b, trans=trans, lower=lower), np.linalg.solve(op, b))
            close(sla.solve_triangular(t, v, trans=trans, lower=lower),
                  np.linalg.solve(op, v[..., None])[..., 0])
        unit = np.where(np.eye(4, dtype=bool), 1.0, tri)
        close(sla.solve_triangular(t, b, lower=lower, unit_diagonal=True),
              np.linalg.solve(unit, b))
    a = spd(rng, (2, 4, 4))
    close(sla.cholesky(a), np.swapaxes(np.linalg.cholesky(a), -1, -2))
    for lower in (True, False):
        close(sla.cho_solve(sla.cho_factor(a, lower=lower), b), np.linalg.solve(a, b))
        close(sla.cho_solve(sla.cho_factor(a, lower=lower), v),
              np.linalg.solve(a, v[..., None])[..., 0])


def test_not_positive_definite_gives_nan():
    a = np.stack([np.eye(2), -np.eye(2)])
    out = np.asarray(LA.cholesky(a))
    np.testing.assert_array_equal(out[0], np.eye(2))
    assert np.isnan(out[1]).all()


def test_errors_name_shapes():
    with pytest.raises(funcgrad.ShapeError, match=r"solve.*square"):
        LA.solve(np.ones((2, 3)), np.ones(2))
    with pytest.raises(funcgrad.ShapeError, match="at least two axes"):
        LA.inv(np.ones(3))
    with pytest.raises(funcgrad.ShapeError, match="float16"):
        LA.inv(np.eye(2, dtype=np.float16))
    with pytest.raises(funcgrad.ShapeError, match=r"b must be"):
        LA.solve(np.eye(3), np.ones((2, 2)))
    with pytest.raises(ValueError, match="UPLO"):
        LA.eigh(np.eye(2), UPLO="X")
    with pytest.raises(ValueError, match="size 3"):
        LA.cross(np.ones(2), np.ones(2))
    assert LA.inv(np.eye(2, dtype=np.int32)).dtype == np.float32


# ---------------------------------------------------------------------------------------------
# gradients (float64): JAX's rules, checked numerically to second order where JAX has them
# ---------------------------------------------------------------------------------------------

def _rng(i):
    return np.random.default_rng(100 + i)


GRAD_FNS = {
    "solve": (lambda a, b: LA.solve(a, b), lambda r: (well_conditioned(r, (2, 3, 3)),
                                                      r.standard_normal((2, 3, 2)))),
    "solve_vec": (lambda a, b: LA.solve(a, b), lambda r: (well_conditioned(r, (3, 3)),
                                                          r.standard_normal(3))),
    "inv": (LA.inv, lambda r: (well_conditioned(r, (2, 3, 3)),)),
    "det": (LA.det, lambda r: (well_conditioned(r, (2, 3, 3)),)),
    "slogdet": (lambda a: LA.slogdet(a).logabsdet, lambda r: (well_conditioned(r, (3, 3)),)),
    "cholesky": (LA.cholesky, lambda r: (spd(r, (2, 3, 3)),)),
    "eigh": (lambda a: LA.eigh(a), lambda r: (spd(r, (3, 3)) + np.diag([0.0, 2.0, 5.0]),)),
    "eigh_upper_nosym": (lambda a: LA.eigh(a, "U", symmetrize_input=False),
                         lambda r: (r.standard_normal((2, 3, 3)) + np.diag([0.0, 3.0, 6.0]),)),
    "svd_tall": (lambda a: LA.svd(a, full_matrices=False), lambda r: (r.standard_normal((4, 3)),)),
    "svd_wide": (lambda a: LA.svd(a, full_matrices=False), lambda r: (r.standard_normal((2, 4)),)),
    "svdvals": (LA.svdvals, lambda r: (r.standard_normal((2, 3, 4)),)),
    "qr": (lambda a: LA.qr(a), lambda r: (r.standard_normal((2, 4, 3)),)),
    "pinv": (LA.pinv, lambda r: (r.standard_normal((3, 2)),)),
    "lstsq": (lambda a, b: LA.lstsq(a, b)[0], lambda r: (r.standard_normal((4, 2)),
                                                         r.standard_normal(4))),
    "norm_2": (lambda a: LA.norm(a, 2), lambda r: (r.standard_normal((3, 3)),)),
    "norm_nuc": (lambda a: LA.norm(a, "nuc"), lambda r: (r.standard_normal((3, 2)),)),
    "norm_p": (lambda a: LA.norm(a, 3, axis=-1), lambda r: (r.standard_normal((2, 3)),)),
    "cond": (LA.cond, lambda r: (well_conditioned(r, (3, 3)),)),
    "matrix_power": (lambda a: LA.matrix_power(a, -2), lambda r: (well_conditioned(r, (3, 3)),)),
    "solve_triangular": (lambda a, b: sla.solve_triangular(a, b, trans=1),
                         lambda r: (r.standard_normal((3, 3)) + 4 * np.eye(3),
                                    r.standard_normal((3, 2)))),
    "cho_solve": (lambda a, b: sla.cho_solve(sla.cho_factor(a), b),
                  lambda r: (spd(r, (3, 3)), r.standard_normal(3))),
}
SECOND_ORDER = ("solve", "inv", "det", "cholesky", "eigh", "svd_tall", "qr", "cho_solve")


@pytest.mark.parametrize("name", sorted(GRAD_FNS))
def test_grads(name):
    f, make = GRAD_FNS[name]
    args = make(_rng(sorted(GRAD_FNS).index(name)))
    check_grads(f, args, order=2 if name in SECOND_ORDER else 1, atol=1e-5, rtol=1e-4)


def test_grad_of_solve_is_jax_rule():
    # d/da sum(c * solve(a, b)) = -a^-T c x^T, d/db = a^-T c
    r = _rng(50)
    a, b, c = well_conditioned(r, (3, 3)), r.standard_normal((3, 2)), r.standard_normal((3, 2))
    ga, gb = funcgrad.grad(lambda a, b: fnp.sum(c * LA.solve(a, b)), argnums=(0, 1))(a, b)
    x, lam = np.linalg.solve(a, b), np.linalg.solve(a.T, c)
    close(ga, -lam @ x.T, scale=100)
    close(gb, lam, scale=100)


def test_eigh_degenerate_eigenvalues_as_in_jax():
    # repeated eigenvalues: the eigenvalues' gradient is finite, the eigenvectors' is not
    q = np.linalg.qr(_rng(70).standard_normal((3, 3)))[0]
    a = (q * np.array([1.0, 1.0, 2.0])) @ q.T
    gw = funcgrad.grad(lambda a: fnp.sum(LA.eigvalsh(a) * np.array([1.0, 2.0, 3.0])))(a)
    assert np.isfinite(np.asarray(gw)).all()
    gv = funcgrad.grad(lambda a: fnp.sum(LA.eigh(a).eigenvectors ** 3))(a)
    gv = np.asarray(gv)            # 1 / (w_j - w_i): inf, or huge where rounding split them
    assert not np.isfinite(gv).all() or np.abs(gv).max() > 1e8


def test_unsupported_derivatives_raise_like_jax():
    with pytest.raises(NotImplementedError, match="qr"):
        funcgrad.grad(lambda a: fnp.sum(LA.qr(a).R))(np.ones((2, 3)) + np.eye(2, 3))
    with pytest.raises(NotImplementedError, match="qr"):   # U's complement: full_matrices
        funcgrad.grad(lambda a: fnp.sum(LA.svd(a).U))(np.arange(6.0).reshape(3, 2))


def test_vmap_and_jit_agree_with_batched_calls():
    r = _rng(60)
    a, b = well_conditioned(r, (4, 3, 3)), r.standard_normal((4, 3))
    close(funcgrad.vmap(LA.solve)(a, b), np.linalg.solve(a, b[..., None])[..., 0])
    close(funcgrad.vmap(LA.solve, in_axes=(0, None))(a, b[0]), np.linalg.solve(a, b[0]))
    close(funcgrad.vmap(LA.solve, in_axes=(None, 0))(a[0], b),
          np.linalg.solve(a[0], b.T).T)
    close(funcgrad.vmap(LA.svdvals)(a), np.linalg.svd(a, compute_uv=False))
    close(funcgrad.vmap(lambda m: LA.eigh(m + m.T)[0])(a), np.linalg.eigvalsh(a + np.swapaxes(
        a, -1, -2)))
    close(funcgrad.vmap(lambda m: LA.qr(m)[1])(a), np.linalg.qr(a)[1])
    close(funcgrad.vmap(sla.solve_triangular, in_axes=(None, 0))(a[0], b),
          np.linalg.solve(np.triu(a[0]), b.T).T)
    f = funcgrad.jit(lambda a: LA.det(a) + LA.norm(a, 2) + fnp.sum(LA.cholesky(a @ a.T)))
    want = np.linalg.det(a[0]) + np.linalg.norm(a[0], 2) + np.linalg.cholesky(
        a[0] @ a[0].T).sum()
    close(f(a[0]), want, scale=100)
    g = funcgrad.vmap(funcgrad.grad(lambda m: LA.slogdet(m)[1]))(a)
    close(g, np.swapaxes(np.linalg.inv(a), -1, -2), scale=100)   # d log|det a| = a^-T


# ---------------------------------------------------------------------------------------------
# against JAX itself, where it is installed (values and float64 gradients)
# ---------------------------------------------------------------------------------------------

JAX_CASES = {
    "solve": (lambda L, a: L.solve(a, a[..., :2]), "general"),
    "inv": (lambda L, a: L.inv(a), "general"),
    "det": (lambda L, a: L.det(a), "general"),
    "slogdet": (lambda L, a: L.slogdet(a)[1], "general"),
    "cholesky": (lambda L, a: L.cholesky(a), "spd"),
    "eigh": (lambda L, a: L.eigh(a)[0] * 2.0 + L.eigh(a)[1][..., 0] ** 2, "spd"),
    "svdvals": (lambda L, a: L.svd(a, compute_uv=False), "general"),
    "svd_uv_squared": (lambda L, a: L.svd(a, full_matrices=False)[0] ** 2, "general"),
    "qr": (lambda L, a: L.qr(a)[1], "general"),
    "pinv": (lambda L, a: L.pinv(a), "general"),
    "norms": (lambda L, a: L.norm(a, 2, (-2, -1)) + L.norm(a, "nuc", (-2, -1))
              + L.norm(a, -np.inf, (-2, -1)) + L.cond(a), "general"),
    "matrix_power": (lambda L, a: L.matrix_power(a, -2), "general"),
}


@pytest.mark.parametrize("name", sorted(JAX_CASES))
def test_matches_jax(name):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    f, kind = JAX_CASES[name]
    r = _rng(200 + sorted(JAX_CASES).index(name))
    a = spd(r, (2, 3, 3)) if kind == "spd" else well_conditioned(r, (2, 3, 3))
    w = r.standard_normal(np.shape(f(np.linalg, a)))
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        want = np.asarray(f(jnp.linalg, jnp.asarray(a)))
        g_want = np.asarray(jax.grad(lambda x: jnp.sum(f(jnp.linalg, x) * w))(jnp.asarray(a)))
    finally:
        jax.config.update("jax_enable_x64", old)
    close(f(LA, a), want, scale=100)
    close(funcgrad.grad(lambda x: fnp.sum(f(LA, x) * w))(a), g_want, scale=1000)


# ---------------------------------------------------------------------------------------------
# the CUDA kernel sources, compiled by numba for the CPU (the simulator does not type-check them)
# ---------------------------------------------------------------------------------------------

def _cpu_kernel(body, dt):
    import math

    import numba

    from funcgrad.cuda import linalg_kernels as K
    fi = np.finfo(dt)
    fmt = dict(opts="", ct=np.dtype(dt).name, eps=repr(float(fi.eps)),
               tiny=repr(float(fi.tiny) * 16))
    src = (K.FIX_SIGNS.format(**fmt) + body.format(**fmt)).replace(
        "@cuda.jit(device=True)", "@numba.njit").replace("@cuda.jit()", "@numba.njit").replace(
        "cuda.grid(1)", "0").replace("cuda.gridsize(1)", "1")
    ns = {"numba": numba, "math": math, "float32": np.float32, "float64": np.float64}
    exec(src, ns)   # noqa: S102 - the package's own kernel source
    return ns["kernel"]


def test_kernel_sources_compile_with_numba_and_match_impls():
    from funcgrad.prims import linalg as LP
    from funcgrad.prims import linalg_spectral as LS
    from funcgrad.cuda import linalg_kernels as K
    dt, rng = np.float32, np.random.default_rng(7)
    a = rng.standard_normal((2, 4, 4)).astype(dt)
    s = (a @ a.transpose(0, 2, 1) + 4 * np.eye(4)).astype(dt)
    r = rng.standard_normal((2, 3, 5)).astype(dt)

    def run(body, out, *args):
        _cpu_kernel(body, dt)(*args[:1], 0, out.reshape(-1), *args[1:])
        return out
    tol = dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run(K.CHOLESKY, np.zeros_like(s), s.ravel(), 2, 4),
                               LP.cholesky_p.impl(s), **tol)
    b = rng.standard_normal((2, 4, 3)).astype(dt)
    x = np.zeros_like(b)
    _cpu_kernel(K.TRISOLVE, dt)(s.ravel(), 0, b.ravel(), 0, x.reshape(-1), 2, 4, 3, 1, 1, 0)
    np.testing.assert_allclose(x, LP.triangular_solve_p.impl(
        s, b, lower=True, transpose_a=True, unit_diagonal=False), **tol)
    np.testing.assert_allclose(run(K.LU, np.zeros((2, 6, 4), dt), a.ravel(), 2, 4),
                               LP.lu_p.impl(a), **tol)
    np.testing.assert_allclose(run(K.QR, np.zeros((2, 3, 8), dt), r.ravel(), np.zeros(6, dt),
                                   2, 3, 5, 3), LS.qr_p.impl(r, full_matrices=False), **tol)
    np.testing.assert_allclose(run(K.EIGH, np.zeros((2, 5, 4), dt), a.ravel(),
                                   np.zeros(32, dt), 2, 4, 0),
                               LS.eigh_p.impl(a, lower=False), **tol)
    np.testing.assert_allclose(run(K.SVD, np.zeros((2, 9, 3), dt), r.ravel(), np.zeros(30, dt),
                                   np.zeros(18, dt), 2, 3, 5), LS.svd_p.impl(r), **tol)


def test_cholesky_symmetrize_input_false_reads_the_lower_triangle():
    a = spd(_rng(300), (3, 3))
    junk = a + np.triu(np.ones((3, 3)), 1)
    close(LA.cholesky(junk, symmetrize_input=False), np.linalg.cholesky(junk))
    close(LA.cholesky(junk), np.linalg.cholesky((junk + junk.T) / 2))
