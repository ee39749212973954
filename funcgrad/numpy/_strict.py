"""JAX's check_arraylike: funcgrad.numpy's public functions refuse lists where JAX's do."""
from __future__ import annotations

import functools
import inspect
import types

import numpy as np

from funcgrad.core import ArrayBase, user_frame_src

# what JAX calls array-like: arrays, numpy scalars, Python scalars (np.isscalar); None stands
# for an optional argument left out
_ARRAYLIKE = (ArrayBase, np.ndarray, np.generic, bool, int, float, complex, str, bytes,
              type(None))


def is_arraylike(x) -> bool:
    """True for what JAX's numpy functions take as an array argument: arrays, numpy and Python
    scalars, objects with `__jax_array__`; False for lists, tuples and other containers."""
    return isinstance(x, _ARRAYLIKE) or hasattr(x, "__jax_array__")


def check_arraylike(fun_name: str, *args) -> None:
    """JAX's util.check_arraylike: a TypeError naming the first argument that is not an array
    or a scalar (a list, a tuple), as JAX words it, and the user's line.

    Example:
        >>> from funcgrad.numpy._strict import check_arraylike
        >>> try:
        ...     check_arraylike("sum", [1, 2, 3])
        ... except TypeError as e:
        ...     print(str(e).splitlines()[0])
        sum requires ndarray or scalar arguments, got <class 'list'> at position 0.
    """
    for pos, arg in enumerate(args):
        if not is_arraylike(arg):
            raise TypeError(f"{fun_name} requires ndarray or scalar arguments, got "
                            f"{type(arg)} at position {pos}.\n  at {user_frame_src()}")


# the parameters JAX checks, per function ("*name": each element of that sequence or of those
# varargs); functions not named here take lists (array, asarray, the creation functions taking
# shapes, shape / ndim / size, the dtype functions, block, einsum, select, lexsort, ...)
_X = ("x",)
_X12 = ("x1", "x2")
_A = ("a",)
STRICT: dict[str, tuple[str, ...]] = {
    **{n: _X for n in (
        "abs absolute acos acosh arccos arccosh arcsin arcsinh arctan arctanh asin asinh atan "
        "atanh bitwise_count bitwise_invert bitwise_not cbrt ceil conj conjugate cos cosh "
        "cumulative_prod cumulative_sum deg2rad degrees exp exp2 expm1 fabs fix floor frexp i0 "
        "invert iscomplex isfinite isinf isnan isneginf isposinf isreal log log10 log1p log2 "
        "logical_not matrix_transpose modf negative positive rad2deg radians reciprocal rint "
        "sign signbit sin sinc sinh spacing sqrt square tan tanh trunc unique_all unique_counts "
        "unique_inverse unique_values unstack around round astype nan_to_num vander "
        "piecewise").split()},
    **{n: _X12 for n in (
        "add arctan2 atan2 bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift "
        "bitwise_xor copysign divide divmod equal float_power floor_divide fmax fmin fmod gcd "
        "greater greater_equal heaviside hypot lcm ldexp left_shift less less_equal logaddexp "
        "logaddexp2 logical_and logical_or logical_xor matvec maximum minimum mod multiply "
        "nextafter not_equal pow power remainder right_shift subtract true_divide vecdot "
        "vecmat").split()},
    **{n: _A for n in (
        "argwhere flatnonzero msort nonzero ravel sort_complex all any argmax argmin "
        "count_nonzero nanargmax nanargmin amax amin max min nanmax nanmin mean nanmean "
        "nanprod nansum prod sum argsort expand_dims sort squeeze cumprod cumsum nancumprod "
        "nancumsum nanstd nanvar std var partition argpartition median nanmedian transpose "
        "permute_dims ones_like zeros_like copy diagonal diff fill_diagonal moveaxis packbits "
        "ptp repeat reshape resize roll rollaxis swapaxes trace unpackbits apply_over_axes "
        "cross").split()},
    **{n: ("a", "b") for n in
       "dot inner kron matmul outer vdot tensordot allclose isclose".split()},
    **{n: ("a", "q") for n in "nanpercentile nanquantile percentile quantile".split()},
    **{n: ("a1", "a2") for n in "polyadd polymul polysub".split()},
    **{n: ("ar1", "ar2") for n in "setdiff1d setxor1d union1d intersect1d".split()},
    **{n: ("*arrays",) for n in "concat concatenate hstack vstack stack".split()},
    **{n: ("*tup",) for n in "dstack column_stack".split()},
    **{n: ("*arys",) for n in "atleast_1d atleast_2d atleast_3d".split()},
    **{n: ("ary",) for n in "dsplit hsplit vsplit split array_split ediff1d".split()},
    **{n: ("m",) for n in "fliplr flipud flip tril triu rot90".split()},
    **{n: ("v",) for n in "diag diagflat".split()},
    **{n: ("val",) for n in "imag real".split()},
    **{n: ("arr",) for n in "tril_indices_from triu_indices_from diag_indices_from delete "
       "apply_along_axis".split()},
    **{n: ("start", "stop") for n in "linspace logspace geomspace".split()},
    "convolve": ("a", "v"), "correlate": ("a", "v"), "searchsorted": ("a", "v"),
    "full": ("fill_value",), "full_like": ("a", "fill_value"), "empty_like": ("prototype",),
    "angle": ("z",), "append": ("arr", "values"), "average": ("a", "weights"),
    "bincount": ("x", "weights"), "broadcast_to": ("x",), "choose": ("a",),
    "clip": ("x", "min", "max"), "compress": ("condition", "a"), "corrcoef": ("x", "y"),
    "cov": ("m", "y"), "digitize": ("x", "bins"), "extract": ("condition", "arr"),
    "gradient": ("f",), "histogram": ("a",), "histogram_bin_edges": ("a",),
    "insert": ("arr", "values"), "interp": ("x", "xp", "fp"),
    "isin": ("element", "test_elements"), "meshgrid": ("*xi",), "ix_": ("*args",),
    "pad": ("array",), "place": ("arr", "mask"), "poly": ("seq_of_zeros",), "polyder": ("p",),
    "polydiv": ("u", "v"), "polyfit": ("x", "y"), "polyint": ("p",), "polyval": ("p", "x"),
    "put": ("a", "ind", "v"), "put_along_axis": ("arr", "indices", "values"),
    "take": ("a", "indices"), "take_along_axis": ("arr", "indices"), "tile": ("A",),
    "trapezoid": ("y", "x"), "trim_zeros": ("filt",), "unique": ("ar",),
    "unravel_index": ("indices",), "unwrap": ("p",), "where": ("condition", "x", "y"),
}


def _checked(name: str, fun, spec: tuple[str, ...]):
    """fun, refusing lists / tuples in the parameters `spec` names (JAX's check_arraylike)."""
    params = list(inspect.signature(fun).parameters.values())
    index = {p.name: i for i, p in enumerate(params)}
    plain, each, rest = [], [], None     # (position, keyword) pairs; varargs from `rest`
    for s in spec:
        p = params[index[s.lstrip("*")]]
        if p.kind is p.VAR_POSITIONAL:
            rest = index[p.name]
        else:
            pos = index[p.name] if p.kind is not p.KEYWORD_ONLY else None
            (each if s.startswith("*") else plain).append((pos, p.name))

    def check(args, kwargs):
        got = []
        for pos, kw in plain:
            got.append(args[pos] if pos is not None and pos < len(args) else kwargs.get(kw))
        for pos, kw in each:
            seq = args[pos] if pos is not None and pos < len(args) else kwargs.get(kw)
            got.extend(seq if isinstance(seq, (list, tuple)) else (seq,))
        if rest is not None:
            got.extend(args[rest:])
        check_arraylike(name, *got)

    @functools.wraps(fun)
    def strict(*args, **kwargs):
        for a in args:   # the common case: arrays and scalars only (one pass, no lists)
            if not isinstance(a, _ARRAYLIKE):
                check(args, kwargs)
                break
        else:
            if kwargs:
                check(args, kwargs)
        return fun(*args, **kwargs)

    strict.__funcgrad_lenient__ = fun   # the unchecked function, for the library's own calls
    return strict


def make_strict(namespace: dict) -> None:
    """Replace the functions STRICT names in `namespace` (funcgrad.numpy's) by checking ones."""
    for name, spec in STRICT.items():
        fun = namespace.get(name)
        if not isinstance(fun, types.FunctionType):
            raise TypeError(f"funcgrad.numpy.{name} is not a function to check ({fun!r})")
        namespace[name] = _checked(name, fun, spec)
