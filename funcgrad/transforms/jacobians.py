"""jacfwd, jacrev and hessian, built from vmap over jvp / vjp."""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import prims
from funcgrad.core import to_array
from funcgrad.transforms.ad import _as_value, _check_grad_inputs, jvp, vjp
from funcgrad.transforms.batching import vmap
from funcgrad.tree_util import tree_flatten, tree_unflatten


def _argnums(argnums):
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


def _partial(fun, args, nums, kwargs):
    def f(*dyn):
        full = list(args)
        for i, v in zip(nums, dyn):
            full[i] = v
        return fun(*full, **kwargs)
    return f


def _basis(x):
    """Identity basis for leaf x: shape (x.size, *x.shape)."""
    n = int(np.prod(x.shape))
    return prims.reshape(to_array(np.eye(n, dtype=x.dtype)), (n,) + tuple(x.shape))


def _check_real(name, leaves, what):
    from funcgrad.core import aval_of, is_complex, user_frame_src
    for v in leaves:
        if is_complex(aval_of(v).dtype):
            raise TypeError(f"{name} requires real-valued {what}, got {aval_of(v).dtype.name}; "
                            "pass holomorphic=True for holomorphic functions (or use vjp/jvp "
                            f"directly)\n  at {user_frame_src()}")


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable:
    """Jacobian by reverse mode (one vjp per output element, vectorized with vmap).

    The result nests the input structure inside the output structure; each leaf has shape
    out.shape + in.shape (like jax.jacrev).

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> funcgrad.jacrev(lambda x: x ** 2)(fnp.array([1.0, 2.0])).tolist()
        [[2.0, 0.0], [0.0, 4.0]]
    """
    nums = _argnums(argnums)
    multi = not isinstance(argnums, int)

    @functools.wraps(fun)
    def jac(*args, **kwargs):
        _check_grad_inputs("jacrev", args, nums, False, holomorphic)
        dyn = [args[i] for i in nums]
        res = vjp(_partial(fun, args, nums, kwargs), *dyn, has_aux=has_aux)
        y, f_vjp = res[0], res[1]
        y_leaves, y_tree = tree_flatten(y)
        y_leaves = [_as_value(v) for v in y_leaves]
        if not holomorphic:
            _check_real("jacrev", y_leaves, "outputs")
        per_out = []
        for k, yk in enumerate(y_leaves):
            def pull(ct, k=k):
                cts = [ct if j == k else prims.zeros_like(v) for j, v in enumerate(y_leaves)]
                return f_vjp(tree_unflatten(y_tree, cts))
            g = vmap(pull)(_basis(yk))
            g_leaves, g_tree = tree_flatten(g)
            g_leaves = [prims.reshape(gl, tuple(yk.shape) + tuple(gl.shape[1:])) for gl in g_leaves]
            g = tree_unflatten(g_tree, g_leaves)
            per_out.append(g if multi else g[0])
        out = tree_unflatten(y_tree, per_out)
        return (out, res[2]) if has_aux else out

    return jac


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable:
    """Jacobian by forward mode (one jvp per input element, vectorized with vmap).

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> funcgrad.jacfwd(fnp.sin)(fnp.zeros(2)).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    nums = _argnums(argnums)
    multi = not isinstance(argnums, int)

    @functools.wraps(fun)
    def jac(*args, **kwargs):
        _check_grad_inputs("jacfwd", args, nums, False, holomorphic)
        dyn = tuple(args[i] for i in nums)
        if not holomorphic:
            _check_real("jacfwd", tree_flatten(dyn)[0], "inputs")
        f = _partial(fun, args, nums, kwargs)
        x_leaves, x_tree = tree_flatten(dyn)
        x_leaves = [_as_value(v) for v in x_leaves]
        cols = []
        aux = None
        for k, xk in enumerate(x_leaves):
            def push(t, k=k):
                ts = [t if j == k else prims.zeros_like(v) for j, v in enumerate(x_leaves)]
                r = jvp(f, dyn, tuple(tree_unflatten(x_tree, ts)), has_aux=has_aux)
                return r[1]
            jt = vmap(push)(_basis(xk))  # each leaf (n_k, *out.shape)
            cols.append(jt)
        if has_aux:
            aux = jvp(f, dyn, tuple(tree_unflatten(x_tree, [prims.zeros_like(v)
                                                            for v in x_leaves])), True)[2]
        y_tree = tree_flatten(cols[0])[1]
        per_out = []
        for o in range(y_tree.num_leaves):
            blocks = []
            for k, xk in enumerate(x_leaves):
                c = tree_flatten(cols[k])[0][o]  # (n_k, *out_shape)
                out_shape = tuple(c.shape[1:])
                c = prims.transpose(c, tuple(range(1, c.ndim)) + (0,))  # moveaxis(c, 0, -1)
                blocks.append(prims.reshape(c, out_shape + tuple(xk.shape)))
            in_struct = tree_unflatten(x_tree, blocks)
            per_out.append(in_struct if multi else in_struct[0])
        out = tree_unflatten(y_tree, per_out)
        return (out, aux) if has_aux else out

    return jac


def hessian(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """Hessian as jacfwd(jacrev(fun)).

    Example:
        >>> import funcgrad, funcgrad.numpy as fnp
        >>> funcgrad.hessian(lambda x: (x ** 3).sum())(fnp.array([1.0, 2.0])).tolist()
        [[6.0, 0.0], [0.0, 12.0]]
    """
    return jacfwd(jacrev(fun, argnums, has_aux), argnums, has_aux)
