"""Testing helpers for users and funcgrad's own tests: JAX's numerical gradient checks.

check_grads / check_jvp / check_vjp have jax.test_util's signatures and JAX's default
tolerances, which depend on the dtype (2e-3 for float32, 1e-5 for float64, 1e-2 for float16,
1e-3 for complex64: those of the dtype funcgrad computes in, so float32's for float64 inputs
while 64-bit types are off, as in JAX) and, as in JAX, scale with the size of the compared
arrays. Tangents are drawn per leaf from numpy's default_rng(seed) (integer leaves get none);
Python floats are checked as float64 (funcgrad would trace them as float32).
"""
from __future__ import annotations

import functools

import numpy as np

from funcgrad.core import canonicalize_dtype
from funcgrad.core.dtypes import dtype_kind
from funcgrad.transforms.ad import jvp, linearize, vjp
from funcgrad.tree_util import tree_flatten, tree_map, tree_unflatten

__all__ = ["check_grads", "check_jvp", "check_vjp", "default_gradient_tolerance"]

EPS = 1e-4

default_gradient_tolerance = {
    np.dtype(np.float16): 1e-2,
    np.dtype(np.float32): 2e-3,
    np.dtype(np.float64): 1e-5,
    np.dtype(np.complex64): 1e-3,
    np.dtype(np.complex128): 1e-5,
}
"""JAX's default atol and rtol of gradient checks, by dtype (others: 0, exact)."""


def _np(x):
    return np.asarray(x)


def _inexact(x) -> bool:
    return dtype_kind(_np(x).dtype) in "fc"


def _tolerance(dtype, tol) -> float:
    if tol is None:
        tol = default_gradient_tolerance
    if not isinstance(tol, dict):
        return float(tol)
    merged = dict(default_gradient_tolerance)
    merged.update({np.dtype(k): v for k, v in tol.items()})
    # the dtype funcgrad computes in: float64 inputs are float32 while 64-bit types are off
    return float(merged.get(canonicalize_dtype(dtype), 0.0))


def _assert_close(a, b, atol, rtol, err_msg):
    """JAX's check_close for one pair of leaves: tolerances of the wider dtype, times the
    number of elements."""
    a, b = _np(a), _np(b)
    if a.shape != b.shape:
        raise AssertionError(f"{err_msg}: shapes differ, {a.shape} and {b.shape}")
    if not (_inexact(a) or _inexact(b)):
        np.testing.assert_array_equal(a, b, err_msg=err_msg)
        return
    at = max(_tolerance(a.dtype, atol), _tolerance(b.dtype, atol)) * max(a.size, 1)
    rt = max(_tolerance(a.dtype, rtol), _tolerance(b.dtype, rtol)) * max(b.size, 1)
    kw = {}
    if at:
        kw["atol"] = at
    if rt:
        kw["rtol"] = rt
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(a, b, err_msg=err_msg, **kw)


def _check_close(xs, ys, atol, rtol, err_msg):
    xl, xt = tree_flatten(xs)
    yl, yt = tree_flatten(ys)
    if xt != yt:
        raise AssertionError(f"{err_msg}: tree structures differ, {xt} and {yt}")
    for x, y in zip(xl, yl):
        _assert_close(x, y, atol, rtol, err_msg)


def _rand_like(rng, x):
    a = _np(x)
    if dtype_kind(a.dtype) == "f":
        return rng.standard_normal(a.shape).astype(a.dtype)
    if dtype_kind(a.dtype) == "c":   # a direction in the complex plane: both parts move
        return (rng.standard_normal(a.shape) + 1j * rng.standard_normal(a.shape)).astype(a.dtype)
    return np.zeros(a.shape, a.dtype)   # integers and bools: no tangent


def _shift(xs, ts, scale):
    def one(x, t):
        return _np(x) + np.asarray(scale, _np(x).dtype) * t if _inexact(x) else _np(x)
    return tree_map(one, xs, ts)


def _safe_sub(x, y):
    """x - y with inf - inf = 0 (JAX's safe_sub); integer outputs give zeros."""
    x, y = _np(x), _np(y)
    if not _inexact(x):
        return np.zeros(x.shape, np.float32)
    with np.errstate(invalid="ignore"):
        return np.where(np.equal(x, y), np.zeros((), x.dtype), x - y)


def numerical_jvp(f, primals, tangents, eps=EPS):
    """Central differences (f(x + eps t) - f(x - eps t)) / (2 eps), in the inputs' dtypes."""
    f_pos = f(*_shift(primals, tangents, eps))
    f_neg = f(*_shift(primals, tangents, -eps))
    return tree_map(lambda a, b: _safe_sub(a, b) * np.asarray(0.5 / eps, _safe_sub(a, b).dtype),
                    f_pos, f_neg)


def _inexact_only(tree, like=None):
    """`tree` with the leaves where `like` (default: tree) is integer / bool replaced by None
    (they have no derivative and are not compared)."""
    keep = tree_map(_inexact, tree if like is None else like)
    return tree_map(lambda x, k: x if k else None, tree, keep)


def _pairing(xs, ys, like):
    """The real pairing Re(sum(x * y)) over the leaves where `like` is inexact (no
    conjugate: vjp transposes the R-linear jvp)."""
    total = 0.0
    for x, y, k in zip(tree_flatten(xs)[0], tree_flatten(ys)[0], tree_flatten(like)[0]):
        if _inexact(k):
            total += float(np.real(np.sum(_np(x).astype(np.complex128) *
                                          _np(y).astype(np.complex128))))
    return np.float64(total)


def _jvp_check(f, f_jvp, args, atol, rtol, eps, err_msg, rng):
    tangents = tree_map(functools.partial(_rand_like, rng), args)
    v_out, t_out = f_jvp(args, tangents)
    _check_close(_inexact_only(v_out), _inexact_only(f(*args)), atol, rtol,
                 f"{err_msg} primal" if err_msg else "primal")
    want = numerical_jvp(f, args, tangents, eps=eps)
    _check_close(_inexact_only(t_out, v_out), _inexact_only(want, v_out), atol, rtol,
                 (f"{err_msg} " if err_msg else "")
                 + "tangent (jvp does not match central differences)")


def _vjp_check(f, f_vjp, args, atol, rtol, eps, err_msg, rng, numeric=True):
    """<vjp(ct), t> against <ct, J t>, with J t from central differences (JAX's check_vjp)
    or, numeric=False, from jvp (the transpose identity, which check_grads' reverse mode
    checks: its forward mode compares jvp with the differences)."""
    tangents = tree_map(functools.partial(_rand_like, rng), args)
    if numeric:
        v_out, vjp_fun = f_vjp(*args)
        t_out = numerical_jvp(f, args, tangents, eps=eps)
    else:
        v_out, t_out = jvp(f, args, tangents)
        vjp_fun = f_vjp(*args)[1]
    _check_close(_inexact_only(v_out), _inexact_only(f(*args)), atol, rtol,
                 f"{err_msg} primal" if err_msg else "primal")
    cts = tree_map(functools.partial(_rand_like, rng), v_out)
    ct_in = vjp_fun(cts)
    # the pairings' dtype, as numpy promotes the leaves' (real part), sets the tolerance
    dts = [_np(x).dtype for x in tree_flatten((tangents, cts))[0] if _inexact(x)]
    dt = np.result_type(*dts) if dts else np.dtype(np.float64)
    dt = np.dtype(f"f{dt.itemsize // 2}") if dtype_kind(dt) == "c" else dt
    got = np.asarray(_pairing(ct_in, tangents, args), np.float64)
    want = np.asarray(_pairing(cts, t_out, v_out), np.float64)
    _check_close(got, want, _tolerance(dt, atol), _tolerance(dt, rtol),
                 (f"{err_msg} " if err_msg else "")
                 + "cotangent projection (vjp is not the transpose of jvp)")


def check_jvp(f, f_jvp, args, atol=None, rtol=None, eps=EPS, err_msg="", seed=0):
    """Check a JVP against central differences along one random direction (as JAX's).

    Args:
        f: the function, checked at ``f(*args)``.
        f_jvp: ``(primals, tangents) -> (primal_out, tangent_out)``, usually
            ``functools.partial(funcgrad.jvp, f)``.
        args: the tuple of arguments.
        atol, rtol: a number, a {dtype: tolerance} dict merged over the defaults, or None
            for :data:`default_gradient_tolerance`.
        eps: the finite-difference step.
        err_msg: prefixed to failure messages.
        seed: the seed of the random direction.

    Raises:
        AssertionError: if the primal or the tangent do not match.

    Example:
        >>> import functools, numpy as np, funcgrad, funcgrad.numpy as fnp
        >>> check_jvp(fnp.sin, functools.partial(funcgrad.jvp, fnp.sin), (np.float64(0.3),))
    """
    _jvp_check(f, f_jvp, tuple(args), atol, rtol, eps, err_msg, np.random.default_rng(seed))


def check_vjp(f, f_vjp, args, atol=None, rtol=None, eps=EPS, err_msg="", seed=0):
    """Check a VJP: <vjp(ct), t> against <ct, jvp(t)> by central differences (as JAX's).

    Args:
        f: the function, checked at ``f(*args)``.
        f_vjp: ``*primals -> (primal_out, vjp_fun)``, usually
            ``functools.partial(funcgrad.vjp, f)``.
        args: the tuple of arguments.
        atol, rtol, eps, err_msg, seed: as in :func:`check_jvp`.

    Raises:
        AssertionError: if the primal or the projected cotangents do not match.

    Example:
        >>> import functools, numpy as np, funcgrad, funcgrad.numpy as fnp
        >>> check_vjp(fnp.tanh, functools.partial(funcgrad.vjp, fnp.tanh), (np.ones(3),))
    """
    _vjp_check(f, f_vjp, tuple(args), atol, rtol, eps, err_msg, np.random.default_rng(seed))


def check_grads(f, args, order: int = 2, modes=("fwd", "rev"), atol=None, rtol=None,
                eps=None, seed: int = 0, err_msg: str = ""):
    """Check f's derivatives up to `order` against finite differences (jax.test_util's).

    Forward mode ("fwd") compares jvp with central differences along a random direction;
    reverse mode ("rev") checks <vjp(ct), t> = <ct, J t>, J t from jvp when forward mode is
    checked too (the transpose identity; the forward check compares jvp with the differences),
    else from central differences as JAX's; "lin" checks linearize. Higher orders check the jvp function at a fixed random tangent in
    forward mode and the vjp function at a fixed random cotangent in reverse mode.

    Args:
        f: the function, checked at ``f(*args)``.
        args: the tuple of arguments.
        order: the highest order checked.
        modes: any of "fwd", "rev", "lin".
        atol, rtol: a number, a {dtype: tolerance} dict, or None for JAX's dtype defaults
            (:data:`default_gradient_tolerance`); as in JAX, they scale with the compared
            arrays' sizes.
        eps: the finite-difference step (1e-4 by default).
        seed: the seed of the random directions.
        err_msg: prefixed to failure messages.

    Raises:
        AssertionError: if a derivative does not match.

    Example:
        >>> import numpy as np, funcgrad.numpy as fnp
        >>> check_grads(fnp.sin, (np.float64(0.5),), order=2)
        >>> check_grads(fnp.tanh, (np.float32([0.1, 0.7]),), order=1)   # float32: 2e-3
    """
    # Python floats would trace as float32 while their tangents are float64: check in float64
    args = tuple(tree_map(lambda x: np.float64(x) if isinstance(x, float) else x,
                          tuple(args)))
    _check_grads(f, args, order, tuple(modes), atol, rtol, eps or EPS, seed, err_msg,
                 numeric_rev="fwd" not in modes)


def _check_grads(f, args, order, modes, atol, rtol, eps, seed, err_msg, numeric_rev):
    rng = np.random.default_rng(seed)
    if "fwd" in modes:
        _jvp_check(f, functools.partial(jvp, f), args, atol, rtol, eps,
                   f"JVP of {err_msg}" if err_msg else "JVP", rng)
    if "rev" in modes:
        _vjp_check(f, functools.partial(vjp, f), args, atol, rtol, eps,
                   f"VJP of {err_msg}" if err_msg else "VJP", rng, numeric=numeric_rev)
    if "lin" in modes:
        _jvp_check(f, functools.partial(_jvp_from_linearize, f), args, atol, rtol, eps,
                   f"LIN of {err_msg}" if err_msg else "LIN", rng)
    if order > 1:
        t = tree_map(functools.partial(_rand_like, rng), args)
        if "fwd" in modes or "lin" in modes:
            _check_grads(lambda *a: jvp(f, a, t)[1], args, order - 1, ("fwd",), atol, rtol,
                         eps, seed + 1, f"JVP of {err_msg}" if err_msg else "JVP", False)
        if "rev" in modes:
            ct = tree_map(functools.partial(_rand_like, rng), f(*args))
            _check_grads(lambda *a: vjp(f, *a)[1](ct), args, order - 1, ("rev",), atol, rtol,
                         eps, seed + 2, f"VJP of {err_msg}" if err_msg else "VJP", numeric_rev)


def _jvp_from_linearize(f, primals, tangents):
    out, f_lin = linearize(f, *primals)
    return out, f_lin(*tangents)


# tree_flatten / tree_unflatten stay importable from here (as before)
_ = tree_unflatten
