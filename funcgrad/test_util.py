"""Testing helpers for users and funcgrad's own tests: numerical gradient checks."""
from __future__ import annotations


import numpy as np

from funcgrad.transforms.ad import jvp, vjp
from funcgrad.tree_util import tree_flatten, tree_unflatten


def _to64(x):
    a = np.asarray(x)
    return (a.astype(np.float64) if a.dtype.kind == "f" else
            a.astype(np.complex128) if a.dtype.kind == "c" else a)


def _inner(xs, ys):
    # the real pairing Re(sum x y) (no conjugate): JAX's vjp transposes the R-linear jvp
    return sum(float(np.sum(_to64(x) * _to64(y)).real) for x, y in zip(xs, ys))


def _rand_leaf(rng, x):
    a = np.asarray(x)
    if a.dtype.kind == "f":
        return rng.standard_normal(a.shape).astype(a.dtype)
    if a.dtype.kind == "c":   # a direction in the complex plane: both parts move
        return (rng.standard_normal(a.shape) + 1j * rng.standard_normal(a.shape)).astype(a.dtype)
    return np.zeros(a.shape, a.dtype)


def _rand_like(rng, leaves):
    return [_rand_leaf(rng, x) for x in leaves]


def _flatten_out(out):
    return [_to64(o) for o in tree_flatten(out)[0]]


def check_jvp(f, args, eps, atol, rtol, rng):
    """Directional derivative by central differences against jvp."""
    leaves, tree = tree_flatten(tuple(args))
    t = _rand_like(rng, leaves)
    plus = [np.asarray(x) + eps * d if np.asarray(x).dtype.kind in "fc" else np.asarray(x)
            for x, d in zip(leaves, t)]
    minus = [np.asarray(x) - eps * d if np.asarray(x).dtype.kind in "fc" else np.asarray(x)
             for x, d in zip(leaves, t)]
    fp = _flatten_out(f(*tree_unflatten(tree, plus)))
    fm = _flatten_out(f(*tree_unflatten(tree, minus)))
    # integer/bool outputs have no derivative (their tangents are zero): skip them
    numeric = [(a - b) / (2 * eps) if a.dtype.kind in "fc" else None for a, b in zip(fp, fm)]
    _, tan = jvp(f, tuple(tree_unflatten(tree, leaves)), tuple(tree_unflatten(tree, t)))
    for n, a in zip(numeric, _flatten_out(tan)):
        if n is None:
            continue
        np.testing.assert_allclose(a, n, atol=atol, rtol=rtol,
                                   err_msg="jvp does not match central differences")


def check_vjp(f, args, atol, rtol, rng):
    """The identity <vjp(ct), t> == <ct, jvp(t)> along random directions."""
    leaves, tree = tree_flatten(tuple(args))
    t = _rand_like(rng, leaves)
    out, tan = jvp(f, tuple(tree_unflatten(tree, leaves)), tuple(tree_unflatten(tree, t)))
    out_leaves, out_tree = tree_flatten(out)
    ct = _rand_like(rng, out_leaves)
    _, f_vjp = vjp(f, *tree_unflatten(tree, leaves))
    ct_in = tree_flatten(f_vjp(tree_unflatten(out_tree, ct)))[0]
    lhs = _inner(ct_in, t)
    rhs = _inner(ct, tree_flatten(tan)[0])
    np.testing.assert_allclose(lhs, rhs, atol=atol, rtol=rtol,
                               err_msg="vjp is not the transpose of jvp")


def check_grads(f, args, order: int = 2, modes=("fwd", "rev"), eps: float = 1e-4,
                atol: float = 1e-6, rtol: float = 1e-5, seed: int = 0):
    """Check f's derivatives up to `order` numerically (best in float64).

    Forward mode is compared with central differences along random directions; reverse mode
    with the identity <t, vjp(ct)> = <jvp(t), ct>. Higher orders check the derivative
    functions themselves.

    Example:
        >>> import numpy as np, funcgrad.numpy as fnp
        >>> check_grads(fnp.sin, (np.float64(0.5),), order=2)
    """
    rng = np.random.default_rng(seed)
    # Python floats would trace as float32 while their tangents are float64: check in float64
    leaves, tree = tree_flatten(tuple(args))
    args = tuple(tree_unflatten(tree, [np.float64(x) if isinstance(x, float) else x
                                       for x in leaves]))
    check_jvp(f, args, eps, atol, rtol, rng)
    if "rev" in modes:
        check_vjp(f, args, atol, rtol, rng)
    if order > 1:
        leaves, tree = tree_flatten(args)
        t = _rand_like(rng, leaves)

        def f_jvp(*a):
            return jvp(f, a, tuple(tree_unflatten(tree, t)))[1]
        check_grads(f_jvp, args, order - 1, ("fwd",), eps, atol, rtol, seed + 1)
        if "rev" in modes:
            out_leaves, out_tree = tree_flatten(f(*args))
            ct = _rand_like(rng, out_leaves)

            def f_vjp(*a):
                return vjp(f, *a)[1](tree_unflatten(out_tree, ct))
            check_grads(f_vjp, args, order - 1, ("rev",), eps, atol, rtol, seed + 2)


