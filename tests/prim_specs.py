"""The primitive spec table: how to build valid operands for every primitive, and how to compare.

One row (a `PrimSpec`) per primitive in `funcgrad.core.PRIMITIVES`. Test files of every backend
use it the same way:

    from prim_specs import SPECS, SHAPE_CASES
    spec = SPECS["dot_general"]
    for shape in spec.shape_cases():
        args, params = spec.make_args(rng, shape, dtype=np.float32)
        want = spec.prim.impl(*args, **params)           # the numpy reference
        rtol, atol = spec.tolerance(np.float32)           # for comparing another backend

`make_args(rng, shape, dtype=None, for_grad=False)` returns numpy operands and the static params.
`shape` is the "base" shape of the case (the operand's shape for unary/binary/reduction
primitives, the output shape for broadcast_in_dim/iota, the lhs for dot_general); `for_grad=True`
picks values and params where central differences are well defined (no ties at max/min, no
operands at kinks, float->float casts only). Values lie in each primitive's domain (positive for
log/sqrt, non-zero divisors, distinct values for max/min...). `dtypes` lists the dtypes to test
(the first is the default); `diff_argnums` the operands gradients flow to (empty: not
differentiable; its derivative is zero or undefined).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

import funcgrad  # noqa: F401  (registers every primitive)
from funcgrad.core import PRIMITIVES, Primitive

F16, F32, F64 = np.dtype("float16"), np.dtype("float32"), np.dtype("float64")
I8, U8, I32, I64, U32 = (np.dtype(d) for d in ("int8", "uint8", "int32", "int64", "uint32"))
BOOL = np.dtype("bool")
FLOATS = (F32, F64)
INTS = (I32, I64)
NUMERIC = FLOATS + INTS

# Shape cases every backend runs: scalars, size-0 and size-1 axes, ranks 1-3.
SHAPE_CASES: tuple[tuple[int, ...], ...] = (
    (), (1,), (0,), (5,), (2, 3), (1, 4), (3, 1), (0, 3), (2, 1, 3), (2, 0, 1), (2, 3, 4))

# (rtol, atol) for comparing a backend against the numpy impl, by dtype.
DEFAULT_TOL = {F16: (1e-2, 1e-3), F32: (1e-5, 1e-6), F64: (1e-12, 1e-14)}
# (eps, atol, rtol) for funcgrad.test_util.check_grads in float64.
DEFAULT_GRAD_TOL = {"eps": 1e-4, "atol": 1e-6, "rtol": 1e-5}

MakeFn = Callable[[np.random.Generator, tuple, np.dtype, bool], tuple[list, dict]]


@dataclasses.dataclass(frozen=True)
class PrimSpec:
    """How to test one primitive.

    Attributes:
        name: the primitive's name (key of funcgrad.core.PRIMITIVES).
        make: make(rng, shape, dtype, for_grad) -> (operands, params).
        dtypes: operand dtypes to test; the first is the default.
        diff_argnums: operands that gradients flow to (empty: not differentiable).
        domain: a word on the operand values (documentation; make() enforces it).
        min_ndim: smallest rank of `shape` the primitive accepts.
        supports_shape: extra predicate on `shape` (e.g. needs a non-empty axis).
        tol: per-dtype (rtol, atol) overrides of DEFAULT_TOL for cross-backend comparisons.
        grad_tol: overrides of DEFAULT_GRAD_TOL (eps, atol, rtol) for check_grads.
        grad_order: highest derivative order checked.
    """
    name: str
    make: MakeFn
    dtypes: tuple = FLOATS
    diff_argnums: tuple = ()
    domain: str = "real"
    min_ndim: int = 0
    supports_shape: Callable[[tuple], bool] | None = None
    tol: dict = dataclasses.field(default_factory=dict)
    grad_tol: dict = dataclasses.field(default_factory=dict)
    grad_order: int = 2

    @property
    def prim(self) -> Primitive:
        return PRIMITIVES[self.name]

    @property
    def differentiable(self) -> bool:
        return bool(self.diff_argnums)

    def supports(self, shape: Sequence[int]) -> bool:
        shape = tuple(shape)
        return len(shape) >= self.min_ndim and (self.supports_shape is None
                                                or self.supports_shape(shape))

    def shape_cases(self) -> list[tuple[int, ...]]:
        """The entries of SHAPE_CASES this primitive supports."""
        return [s for s in SHAPE_CASES if self.supports(s)]

    def make_args(self, rng: np.random.Generator, shape_case: Sequence[int], dtype=None,
                  for_grad: bool = False) -> tuple[list, dict]:
        """Random valid operands (numpy arrays) and static params for a shape case."""
        shape = tuple(int(s) for s in shape_case)
        if not self.supports(shape):
            raise ValueError(f"{self.name} does not support shape {shape}")
        dtype = np.dtype(dtype) if dtype is not None else self.dtypes[0]
        return self.make(rng, shape, dtype, for_grad)

    def tolerance(self, dtype) -> tuple[float, float]:
        """(rtol, atol) for comparing another backend's result with the numpy impl."""
        dtype = np.dtype(dtype)
        if dtype in self.tol:
            return self.tol[dtype]
        return DEFAULT_TOL.get(dtype, (0.0, 0.0))

    def grad_tolerance(self) -> dict:
        return {**DEFAULT_GRAD_TOL, **self.grad_tol}


# ---------------------------------------------------------------------------------------------
# operand generators
# ---------------------------------------------------------------------------------------------

def rand(rng, shape, dtype, domain="real"):
    """Random values of `dtype` in a domain: real, positive, nonzero, unit (|x| < 0.9),
    distinct (no two equal), special (includes inf/nan), any-int (full range)."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    n = math.prod(shape)
    if dtype == BOOL:
        return rng.random(shape) < 0.5
    if domain == "distinct":
        vals = rng.permutation(n).astype(np.float64) - n // 2
        if dtype.kind == "f":
            vals = vals * 0.37 + 0.05
        return vals.reshape(shape).astype(dtype)
    if dtype.kind in "iu":
        lo, hi = {"positive": (1, 6), "nonzero": (1, 6)}.get(domain, (-5, 6))
        if dtype.kind == "u":
            lo = max(lo, 0)
        x = rng.integers(lo, hi, size=shape)
        if domain == "nonzero":
            x = x * rng.choice([-1, 1] if dtype.kind == "i" else [1], size=shape)
        return np.asarray(x).astype(dtype)
    if domain == "positive":
        x = rng.uniform(0.5, 2.0, size=shape)
    elif domain == "nonzero":
        x = rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    elif domain == "unit":
        x = rng.uniform(-0.9, 0.9, size=shape)
    elif domain == "special":
        x = rng.standard_normal(shape)
        x.flat[::3] = np.array([np.inf, -np.inf, np.nan] * n)[:len(x.flat[::3])]
    else:
        x = rng.standard_normal(shape)
    return np.asarray(x).astype(dtype)


def _away_from_ties(rng, shape, dtype):
    """x, y with |x - y| >= 0.1 everywhere (max/min differentiable)."""
    x = rand(rng, shape, dtype)
    gap = (rng.uniform(0.1, 1.0, size=shape) * rng.choice([-1, 1], size=shape))
    return x, (x + gap).astype(dtype) if dtype.kind == "f" else (x + np.sign(gap).astype(
        dtype)).astype(dtype)


def _subset(rng, n, allowed=None):
    """A random subset of range(n) (of `allowed`), in random order."""
    pool = list(range(n)) if allowed is None else list(allowed)
    k = int(rng.integers(0, len(pool) + 1))
    return tuple(int(a) for a in rng.permutation(pool)[:k])


def unary(domain="real", grad_domain=None):
    def make(rng, shape, dtype, for_grad):
        return [rand(rng, shape, dtype, grad_domain if for_grad and grad_domain else domain)], {}
    return make


def binary(dom_x="real", dom_y="real"):
    def make(rng, shape, dtype, for_grad):
        return [rand(rng, shape, dtype, dom_x), rand(rng, shape, dtype, dom_y)], {}
    return make


def _make_minmax(rng, shape, dtype, for_grad):
    if for_grad:
        return list(_away_from_ties(rng, shape, dtype)), {}
    x = rand(rng, shape, dtype)
    y = np.where(rng.random(shape) < 0.3, x, rand(rng, shape, dtype)).astype(dtype)  # some ties
    return [x, y], {}


def _make_rem(rng, shape, dtype, for_grad):
    if dtype.kind in "iu":
        return [rand(rng, shape, dtype), rand(rng, shape, dtype)], {}  # y == 0 gives 0 (lax)
    y = rand(rng, shape, dtype, "nonzero")
    q = rng.integers(-3, 4, size=shape) + rng.uniform(0.2, 0.8, size=shape)  # x/y off integers
    return [(q * y).astype(dtype), y], {}


def _make_div(rng, shape, dtype, for_grad):
    if dtype.kind in "iu":
        return [rand(rng, shape, dtype), rand(rng, shape, dtype)], {}  # y == 0 gives 0 (lax)
    return [rand(rng, shape, dtype), rand(rng, shape, dtype, "nonzero")], {}


def _make_integer_pow(rng, shape, dtype, for_grad):
    if dtype.kind in "iu":
        return [rand(rng, shape, dtype)], {"y": int(rng.choice([0, 1, 2, 3]))}
    y = int(rng.choice([0, 1, 2, 3, -1, -2, 5]))
    return [rand(rng, shape, dtype, "nonzero" if y < 0 else "real")], {"y": y}


def _make_convert(rng, shape, dtype, for_grad):
    if for_grad:
        return [rand(rng, shape, dtype)], {"new_dtype": F64}
    targets = [F32, F64, I32, BOOL] if dtype.kind == "f" else [F32, I32, I64, BOOL]
    new = np.dtype(targets[int(rng.integers(len(targets)))])
    x = rand(rng, shape, dtype)
    if dtype.kind == "f" and new.kind in "iu":
        x = (x * 4).astype(dtype)  # float -> int truncates toward zero
    return [x], {"new_dtype": new}


def _make_select(rng, shape, dtype, for_grad):
    return [rand(rng, shape, BOOL), rand(rng, shape, dtype), rand(rng, shape, dtype)], {}


def _make_shift(rng, shape, dtype, for_grad):
    bits = dtype.itemsize * 8
    # shifts in [0, bits) plus a few out of range (lax: they give 0)
    y = rng.integers(-2, bits + 3, size=shape).astype(dtype) if dtype.kind == "i" else \
        rng.integers(0, bits + 3, size=shape).astype(dtype)
    x = rng.integers(np.iinfo(dtype).min // 2, np.iinfo(dtype).max // 2, size=shape,
                     dtype=np.int64 if dtype.kind == "i" else np.uint64).astype(dtype)
    return [x, y], {}


def _make_bid(rng, shape, dtype, for_grad):
    nd = len(shape)
    dims = tuple(sorted(_subset(rng, nd)))
    operand = tuple(1 if rng.random() < 0.3 else shape[d] for d in dims)
    return [rand(rng, operand, dtype)], {"shape": shape, "broadcast_dimensions": dims}


def _make_reshape(rng, shape, dtype, for_grad):
    n = math.prod(shape)
    options = [tuple(shape[::-1]), (n,), tuple(shape) + (1,), (1,) + tuple(shape)]
    if len(shape) >= 2:
        options.append((shape[0] * shape[1],) + tuple(shape[2:]))
    new = options[int(rng.integers(len(options)))]
    return [rand(rng, shape, dtype)], {"new_sizes": tuple(int(s) for s in new)}


def _make_transpose(rng, shape, dtype, for_grad):
    perm = tuple(int(p) for p in rng.permutation(len(shape)))
    return [rand(rng, shape, dtype)], {"permutation": perm}


def _make_reduce(domain="real", nonempty=False):
    def make(rng, shape, dtype, for_grad):
        allowed = [i for i, s in enumerate(shape) if s > 0] if nonempty else None
        axes = _subset(rng, len(shape), allowed)
        dom = "distinct" if for_grad and domain == "real" and nonempty else domain
        return [rand(rng, shape, dtype, dom)], {"axes": axes}
    return make


def _has_nonempty_axis(shape):
    return any(s > 0 for s in shape)


def _make_arg(rng, shape, dtype, for_grad):
    axis = int(rng.choice([i for i, s in enumerate(shape) if s > 0]))
    dom = "distinct" if rng.random() < 0.5 else "real"
    return [rand(rng, shape, dtype, dom)], {"axis": axis, "index_dtype": I32}


def _make_slice(rng, shape, dtype, for_grad):
    starts, limits, strides = [], [], []
    for n in shape:
        s = int(rng.integers(0, n + 1))
        starts.append(s)
        limits.append(int(rng.integers(s, n + 1)))
        strides.append(int(rng.integers(1, 4)))
    return [rand(rng, shape, dtype)], {"start_indices": tuple(starts),
                                       "limit_indices": tuple(limits), "strides": tuple(strides)}


def _make_pad(rng, shape, dtype, for_grad):
    cfg = tuple((int(rng.integers(0, 3)), int(rng.integers(0, 3)), int(rng.integers(0, 3)))
                for _ in shape)
    value = 0.0 if for_grad else float(rng.choice([0.0, -1.0, 2.0]))
    return [rand(rng, shape, dtype)], {"padding_config": cfg, "value": value}


def _make_concat(rng, shape, dtype, for_grad):
    dim = int(rng.integers(len(shape)))
    k = int(rng.integers(1, 4))
    xs = [rand(rng, shape, dtype)]
    for _ in range(k - 1):
        s = list(shape)
        s[dim] = int(rng.integers(0, 4))
        xs.append(rand(rng, s, dtype))
    return xs, {"dimension": dim}


def _make_rev(rng, shape, dtype, for_grad):
    return [rand(rng, shape, dtype)], {"dimensions": tuple(sorted(_subset(rng, len(shape))))}


def _make_iota(rng, shape, dtype, for_grad):
    return [], {"dtype": dtype, "shape": shape, "dimension": int(rng.integers(len(shape)))}


def _index_shape(rng, n):
    """A small index shape; empty when the indexed axis is empty."""
    options = [(), (3,), (2, 2), (0,), (1,)] if n else [(0,), (2, 0)]
    return options[int(rng.integers(len(options)))]


def _indices(rng, n, shape):
    return rng.integers(-n, n, size=shape).astype(I32) if n else np.zeros(shape, I32)


def _make_take(rng, shape, dtype, for_grad):
    axis = int(rng.integers(len(shape)))
    n = shape[axis]
    idx = _indices(rng, n, _index_shape(rng, n))
    return [rand(rng, shape, dtype), idx], {"axis": axis}


def _dyn_starts(rng, shape, sizes):
    """Int32 0-d start operands, some outside [0, n - m] (the primitive clamps them)."""
    return [np.asarray(rng.integers(-2, n - m + 3), I32) for n, m in zip(shape, sizes)]


def _make_dynamic_slice(rng, shape, dtype, for_grad):
    sizes = tuple(int(rng.integers(0, n + 1)) for n in shape)
    return [rand(rng, shape, dtype)] + _dyn_starts(rng, shape, sizes), {"slice_sizes": sizes}


def _make_dynamic_update_slice(rng, shape, dtype, for_grad):
    sizes = tuple(int(rng.integers(0, n + 1)) for n in shape)
    return [rand(rng, shape, dtype), rand(rng, sizes, dtype)] + _dyn_starts(rng, shape,
                                                                            sizes), {}


def _make_scatter(unique):
    def make(rng, shape, dtype, for_grad):
        axis = int(rng.integers(len(shape)))
        n = shape[axis]
        ishape = _index_shape(rng, n)
        if unique:  # scatter (set) with repeated indices keeps an unspecified update
            k = math.prod(ishape)
            if k > n:
                ishape, k = (n,), n
            pos = rng.permutation(n)[:k]
            neg = rng.random(k) < 0.5
            idx = np.where(neg, pos - n, pos).astype(I32).reshape(ishape)
        else:
            idx = _indices(rng, n, ishape)
        upd_shape = shape[:axis] + tuple(ishape) + shape[axis + 1:]
        return [rand(rng, shape, dtype), idx, rand(rng, upd_shape, dtype)], {"axis": axis}
    return make


def _make_dot(rng, shape, dtype, for_grad):
    nd = len(shape)
    roles = rng.integers(0, 3, size=nd)  # 0 batch, 1 contract, 2 free
    lb = tuple(int(i) for i in rng.permutation([i for i in range(nd) if roles[i] == 0]))
    lc = tuple(int(i) for i in rng.permutation([i for i in range(nd) if roles[i] == 1]))
    y_axes = [("b", i) for i in lb] + [("c", i) for i in lc] + [
        ("f", int(rng.integers(0, 4))) for _ in range(int(rng.integers(0, 3)))]
    order = rng.permutation(len(y_axes))
    y_axes = [y_axes[i] for i in order]
    y_shape = tuple(shape[i] if kind != "f" else i for kind, i in y_axes)
    rb = tuple(y_axes.index(("b", i)) for i in lb)
    rc = tuple(y_axes.index(("c", i)) for i in lc)
    x, y = rand(rng, shape, dtype), rand(rng, y_shape, dtype)
    return [x, y], {"dimension_numbers": ((lc, rc), (lb, rb))}


def _make_rows(rng, shape, dtype, for_grad):
    return [rand(rng, shape, dtype, "distinct" if for_grad else "real")], {}


def _xent_ok(shape):
    return len(shape) >= 1 and (shape[-1] > 0 or math.prod(shape[:-1]) == 0)


def _make_xent(rng, shape, dtype, for_grad):
    n = shape[-1]
    labels = rng.integers(0, max(n, 1), size=shape[:-1]).astype(I32)
    return [rand(rng, shape, dtype), labels], {}


def _make_norm(n_vecs):
    def make(rng, shape, dtype, for_grad):
        x = rand(rng, shape, dtype, "distinct" if for_grad else "real")
        vecs = [rand(rng, shape[-1:], dtype) for _ in range(n_vecs)]
        return [x] + vecs, {"eps": 1e-5}
    return make


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------

def _specs() -> dict[str, PrimSpec]:
    s: dict[str, PrimSpec] = {}

    def add(name, make, **kw):
        s[name] = PrimSpec(name, make, **kw)

    f32_loose = {F32: (2e-5, 1e-6)}
    # elementwise unary
    add("neg", unary(), dtypes=NUMERIC, diff_argnums=(0,))
    add("exp", unary(), diff_argnums=(0,), tol=f32_loose)
    add("log", unary("positive"), diff_argnums=(0,), domain="positive", tol=f32_loose)
    add("log1p", unary("unit"), diff_argnums=(0,), domain="(-1, inf): |x| < 0.9", tol=f32_loose)
    add("expm1", unary(), diff_argnums=(0,), tol=f32_loose)
    add("tanh", unary(), diff_argnums=(0,), tol=f32_loose)
    add("logistic", unary(), diff_argnums=(0,), tol=f32_loose)
    add("sin", unary(), diff_argnums=(0,), tol=f32_loose)
    add("cos", unary(), diff_argnums=(0,), tol=f32_loose)
    add("sqrt", unary("positive"), diff_argnums=(0,), domain="positive")
    add("rsqrt", unary("positive"), diff_argnums=(0,), domain="positive", tol=f32_loose)
    add("square", unary(), dtypes=NUMERIC, diff_argnums=(0,))
    add("erf", unary(), diff_argnums=(0,), tol=f32_loose)
    add("abs", unary("real", grad_domain="nonzero"), dtypes=NUMERIC, diff_argnums=(0,),
        domain="real; nonzero for gradients")
    add("sign", unary(), dtypes=NUMERIC)
    add("floor", unary("special"), domain="real, inf, nan")
    add("round", unary(), domain="real")
    add("isfinite", unary("special"), domain="real, inf, nan")
    add("not", unary(), dtypes=(BOOL, I32, U8))
    add("stop_gradient", unary(), dtypes=NUMERIC + (BOOL,))
    add("convert_element_type", _make_convert, dtypes=FLOATS + (I32, BOOL), diff_argnums=(0,),
        domain="float->float casts for gradients")
    add("integer_pow", _make_integer_pow, dtypes=FLOATS + (I32,), diff_argnums=(0,),
        domain="nonzero for negative powers; integers only to powers >= 0")
    # elementwise binary
    add("add", binary(), dtypes=NUMERIC + (U8,), diff_argnums=(0, 1))
    add("sub", binary(), dtypes=NUMERIC, diff_argnums=(0, 1))
    add("mul", binary(), dtypes=NUMERIC, diff_argnums=(0, 1))
    add("div", _make_div, dtypes=NUMERIC, diff_argnums=(0, 1),
        domain="non-zero divisors (integers: y == 0 gives 0)")
    add("rem", _make_rem, dtypes=NUMERIC, diff_argnums=(0, 1),
        domain="non-zero divisors, x/y away from integers")
    add("pow", binary("positive", "real"), diff_argnums=(0, 1), domain="x > 0", tol=f32_loose)
    add("max", _make_minmax, dtypes=NUMERIC + (BOOL,), diff_argnums=(0, 1),
        domain="ties allowed; none for gradients")
    add("min", _make_minmax, dtypes=NUMERIC + (BOOL,), diff_argnums=(0, 1),
        domain="ties allowed; none for gradients")
    for cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
        add(cmp, _make_minmax, dtypes=NUMERIC + (BOOL,))
    for bit in ("and", "or", "xor"):
        add(bit, binary(), dtypes=(BOOL, I32, U8))
    add("shift_left", _make_shift, dtypes=(I32, U32, U8), domain="shifts in [-2, bits + 2]")
    add("shift_right_logical", _make_shift, dtypes=(I32, U32, U8),
        domain="shifts in [-2, bits + 2]")
    add("select", _make_select, dtypes=NUMERIC + (BOOL,), diff_argnums=(1, 2))
    # shapes
    add("broadcast_in_dim", _make_bid, dtypes=NUMERIC + (BOOL,), diff_argnums=(0,),
        domain="shape_case is the output shape")
    add("reshape", _make_reshape, dtypes=NUMERIC + (BOOL,), diff_argnums=(0,))
    add("transpose", _make_transpose, dtypes=NUMERIC + (BOOL,), diff_argnums=(0,))
    # reductions
    add("reduce_sum", _make_reduce(), dtypes=NUMERIC, diff_argnums=(0,),
        tol={F32: (1e-5, 1e-5)})
    add("reduce_max", _make_reduce(nonempty=True), dtypes=NUMERIC + (BOOL,), diff_argnums=(0,),
        domain="reduced axes non-empty; distinct values for gradients")
    add("reduce_min", _make_reduce(nonempty=True), dtypes=NUMERIC + (BOOL,), diff_argnums=(0,),
        domain="reduced axes non-empty; distinct values for gradients")
    add("reduce_prod", _make_reduce("nonzero"), dtypes=NUMERIC, diff_argnums=(0,),
        domain="|x| in [0.5, 2]", tol={F32: (1e-5, 1e-6)})
    add("argmax", _make_arg, dtypes=NUMERIC + (BOOL,), min_ndim=1,
        supports_shape=_has_nonempty_axis, domain="the reduced axis is non-empty")
    add("argmin", _make_arg, dtypes=NUMERIC + (BOOL,), min_ndim=1,
        supports_shape=_has_nonempty_axis, domain="the reduced axis is non-empty")
    # slicing and friends
    add("slice", _make_slice, dtypes=NUMERIC + (BOOL,), diff_argnums=(0,))
    add("pad", _make_pad, dtypes=NUMERIC, diff_argnums=(0,))
    add("concatenate", _make_concat, dtypes=NUMERIC + (BOOL,), diff_argnums=(0, 1, 2),
        min_ndim=1, domain="1-3 operands (diff_argnums: all of them)")
    add("rev", _make_rev, dtypes=NUMERIC + (BOOL,), diff_argnums=(0,))
    add("iota", _make_iota, dtypes=(I32, I64, F32), min_ndim=1,
        domain="no operands; shape_case is the output shape")
    # gather / scatter
    add("take", _make_take, dtypes=NUMERIC + (BOOL,), diff_argnums=(0,), min_ndim=1,
        domain="indices in [-n, n)")
    add("scatter_add", _make_scatter(False), dtypes=NUMERIC, diff_argnums=(0, 2), min_ndim=1,
        domain="indices in [-n, n), repeats allowed")
    add("scatter", _make_scatter(True), dtypes=NUMERIC + (BOOL,), diff_argnums=(0, 2),
        min_ndim=1, domain="distinct indices in [-n, n)")
    # dynamic slicing (traced starts, clamped so the window fits)
    add("dynamic_slice", _make_dynamic_slice, dtypes=NUMERIC + (BOOL,), diff_argnums=(0,),
        domain="random window sizes; int32 starts in [-2, n - m + 2]")
    add("dynamic_update_slice", _make_dynamic_update_slice, dtypes=NUMERIC + (BOOL,),
        diff_argnums=(0, 1), domain="random update sizes; int32 starts in [-2, n - m + 2]")
    # contraction
    add("dot_general", _make_dot, dtypes=FLOATS + (I32,), diff_argnums=(0, 1),
        domain="random batch/contract/free roles for the lhs axes; shape_case is the lhs",
        tol={F32: (1e-4, 1e-5)})
    # fused row primitives (funcgrad/prims/rows.py): the last axis is reduced
    add("softmax", _make_rows, diff_argnums=(0,), min_ndim=1, tol=f32_loose)
    add("log_softmax", _make_rows, diff_argnums=(0,), min_ndim=1, tol=f32_loose)
    add("softmax_xent", _make_xent, diff_argnums=(0,), min_ndim=1, supports_shape=_xent_ok,
        domain="logits [..., n]; int32 labels [...] in [0, n)", tol={F32: (1e-5, 1e-5)})
    add("layer_norm", _make_norm(2), diff_argnums=(0, 1, 2), min_ndim=1,
        domain="x [..., n], scale [n], bias [n]", tol={F32: (1e-4, 1e-5)})
    add("rms_norm", _make_norm(1), diff_argnums=(0, 1), min_ndim=1,
        domain="x [..., n], scale [n]", tol={F32: (1e-4, 1e-5)})
    return s


SPECS: dict[str, PrimSpec] = _specs()


def hypothesis_shapes(spec: PrimSpec, max_ndim: int = 3, max_side: int = 4):
    """A hypothesis strategy of shapes the primitive supports (0- and 1-sized axes included)."""
    from hypothesis import strategies as st
    side = st.integers(0, max_side)
    return (st.lists(side, min_size=spec.min_ndim, max_size=max(max_ndim, spec.min_ndim))
            .map(tuple).filter(spec.supports))


def all_cases(names: Sequence[str] | None = None, dtypes: Sequence | None = None
              ) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """(name, shape, dtype) for every row (or `names`), supported shape case and dtype (the
    row's own dtypes, intersected with `dtypes` when given): ready for pytest's parametrize."""
    out = []
    for name in sorted(SPECS) if names is None else names:
        spec = SPECS[name]
        dts = [d for d in spec.dtypes if dtypes is None or d in {np.dtype(x) for x in dtypes}]
        out += [(name, shape, d) for shape in spec.shape_cases() for d in dts]
    return out


# ---------------------------------------------------------------------------------------------
# issue 12 breadth primitives (funcgrad/prims/sorting.py)
# ---------------------------------------------------------------------------------------------

def _make_argsort(rng, shape, dtype, for_grad):
    """Rows with repeated values (stability) and, for floats, NaNs and infinities."""
    x = rand(rng, shape, dtype)
    if dtype.kind == "f":
        x = np.round(x * 2) / 2    # ties
        flat = x.reshape(-1)
        flat[::5] = np.nan
        flat[1::7] = np.inf
        flat[2::11] = -np.inf
    return [x.astype(dtype)], {}


SPECS["argsort"] = PrimSpec("argsort", _make_argsort, dtypes=NUMERIC + (BOOL,), min_ndim=1,
                            domain="ties, NaN and +-inf in float rows")


# ---------------------------------------------------------------------------------------------
# issue 11: backward primitives of the fused row primitives (funcgrad/prims/rows_bwd.py)
# ---------------------------------------------------------------------------------------------

def _make_softmax_bwd(log):
    def make(rng, shape, dtype, for_grad):
        x = rand(rng, shape, np.float64)
        e = np.exp(x - (x.max(axis=-1, keepdims=True) if x.size else 0))
        y = e / e.sum(axis=-1, keepdims=True) if x.size else x
        y = np.log(y) if log and x.size else y
        return [y.astype(dtype), rand(rng, shape, dtype)], {}
    return make


def _make_xent_bwd(rng, shape, dtype, for_grad):
    (x, labels), _ = _make_xent(rng, shape, dtype, for_grad)
    return [x, labels, rand(rng, shape[:-1], dtype)], {}


def _make_norm_bwd(rng, shape, dtype, for_grad):
    x = rand(rng, shape, dtype, "distinct" if for_grad else "real")
    return [x, rand(rng, shape[-1:], dtype), rand(rng, shape, dtype)], {"eps": 1e-5}


for _name, _make, _ok, _diff in [
        ("softmax_bwd", _make_softmax_bwd(False), None, (0, 1)),
        ("log_softmax_bwd", _make_softmax_bwd(True), None, (0, 1)),
        ("softmax_xent_bwd", _make_xent_bwd, _xent_ok, (0, 2)),
        ("layer_norm_bwd", _make_norm_bwd, None, (0, 1, 2)),
        ("rms_norm_bwd", _make_norm_bwd, None, (0, 1, 2))]:
    SPECS[_name] = PrimSpec(_name, _make, diff_argnums=_diff, min_ndim=1, supports_shape=_ok,
                            domain="rows of the last axis; cotangents like the outputs",
                            tol={F32: (1e-4, 1e-5)})


# ---------------------------------------------------------------------------------------------
# issue 11: fused flash attention (funcgrad/prims/attention.py); shape case (batch, T, head_dim)
# ---------------------------------------------------------------------------------------------

def _make_attention(kind):
    def make(rng, shape, dtype, for_grad):
        from funcgrad.prims import attention as A
        b, t, h = shape
        s, hv = t + 1, max(h - 1, 1)   # T != S; 2 query heads over 1 key/value head (GQA)
        q, k = rand(rng, (b, t, 2, h), dtype), rand(rng, (b, s, 1, h), dtype)
        v = rand(rng, (b, s, 1, hv), dtype)
        params = {"scale": 0.6, "causal": h % 2 == 0}
        if kind == "attention":
            return [q, k, v], params
        o = A._attn_impl(q, k, v, **params)
        do = rand(rng, o.shape, dtype)
        if kind == "attention_stats":
            return [q, k, o, do], params
        return [q, k, v, do, A._stats_impl(q, k, o, do, **params)], params
    return make


for _name, _diff in [("attention", (0, 1, 2)), ("attention_stats", (0, 1, 2, 3)),
                     ("attention_dq", (0, 1, 2, 3, 4)), ("attention_dkv", (0, 1, 2, 3, 4)),
                     ("attention_bwd", (0, 1, 2, 3, 4))]:
    SPECS[_name] = PrimSpec(_name, _make_attention(_name), diff_argnums=_diff, min_ndim=3,
                            supports_shape=lambda s: len(s) == 3,
                            domain="q [b, t, 2, h], k [b, t + 1, 1, h], v [b, t + 1, 1, "
                                   "max(h - 1, 1)]; causal when h is even",
                            tol={F32: (1e-4, 1e-5)})


def _make_attention_lse(kind):
    def make(rng, shape, dtype, for_grad):
        from funcgrad.prims import attention_lse as AL
        from funcgrad.prims import attention as A
        (q, k, v), params = _make_attention("attention")(rng, shape, dtype, for_grad)
        if kind == "attention_fwdl":
            return [q, k, v], params
        if kind == "attention_bwdl":   # S == T and H == Hv here, so the packed layout too
            b, t, _, h = q.shape
            k, v = rand(rng, (b, t, 1, h), dtype), rand(rng, (b, t, 1, h), dtype)
            fl = AL._fwdl_impl(q, k, v, **params)
            return ([q, k, v, rand(rng, q.shape, dtype), fl],
                    dict(params, packed=bool(rng.integers(0, 2))))
        o = A._attn_impl(q, k, v, **params)
        lse = AL._lse_impl(q, k, params["scale"], params["causal"]).astype(dtype)
        return [o, rand(rng, o.shape, dtype), lse], {}
    return make


for _name, _diff in [("attention_fwdl", (0, 1, 2)), ("attention_delta", (0, 1, 2)),
                     ("attention_bwdl", (0, 1, 2, 3, 4))]:
    SPECS[_name] = PrimSpec(_name, _make_attention_lse(_name), dtypes=(F32, F64),
                            diff_argnums=_diff, min_ndim=3,
                            supports_shape=lambda s: len(s) == 3,
                            domain="attention's operands (see above); delta: o, do, lse",
                            tol={F32: (1e-4, 1e-5)})


# ---------------------------------------------------------------------------------------------
# issue 12: convolutions and windows (funcgrad/prims/conv.py, funcgrad/prims/windows.py)
# ---------------------------------------------------------------------------------------------

def _perm(rng, n):
    return tuple(int(a) for a in rng.permutation(n))


def _make_conv(rng, shape, dtype, for_grad):
    """shape_case is the lhs's spatial shape; random layout, strides, padding (negative
    too), dilations and feature or batch groups."""
    from funcgrad.prims.conv import ConvDimensionNumbers, dilate_dim
    nsp, nd = len(shape), len(shape) + 2
    mode = int(rng.integers(0, 3))
    fg, bg = (2 if mode == 1 else 1), (2 if mode == 2 else 1)
    cg, og = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    nb = int(rng.integers(0, 3)) if rng.random() < 0.2 else int(rng.integers(1, 3))
    n, c, o = nb * bg, cg * fg, og * max(fg, bg)
    ks = [int(rng.integers(0, 4)) if rng.random() < 0.1 else int(rng.integers(1, 4))
          for _ in shape]
    st, ld, rd = ([int(rng.integers(1, 3)) for _ in shape] for _ in range(3))
    pads = []
    for s, dl in zip(shape, ld):
        lo, hi = int(rng.integers(-1, 3)), int(rng.integers(-1, 3))
        while dilate_dim(s, dl) + lo + hi < 0:
            lo, hi = lo + 1, hi + 1
        pads.append((lo, hi))
    dn = ConvDimensionNumbers(_perm(rng, nd), _perm(rng, nd), _perm(rng, nd))
    lshape, rshape = [0] * nd, [0] * nd
    for a, s in zip(dn.lhs_spec, [n, c] + list(shape)):
        lshape[a] = s
    for a, s in zip(dn.rhs_spec, [o, cg] + ks):
        rshape[a] = s
    pet = None
    if not for_grad and rng.random() < 0.2:
        pet = F64 if dtype.kind == "f" else I64
    params = {"window_strides": tuple(st), "padding": tuple(pads), "lhs_dilation": tuple(ld),
              "rhs_dilation": tuple(rd), "dimension_numbers": dn, "feature_group_count": fg,
              "batch_group_count": bg, "preferred_element_type": pet}
    return [rand(rng, lshape, dtype), rand(rng, rshape, dtype)], params


def _window_params(rng, shape, grad_safe):
    """Random window params; grad_safe: every window holds an operand element (so max/min
    are finite and differentiable there)."""
    wd = tuple(int(rng.integers(1, 4)) for _ in shape)
    p = {"window_dimensions": wd, "window_strides": tuple(int(rng.integers(1, 3)) for _ in shape),
         "base_dilation": tuple(1 if grad_safe else int(rng.integers(1, 3)) for _ in shape),
         "window_dilation": tuple(1 if grad_safe else int(rng.integers(1, 3)) for _ in shape)}
    p["padding"] = tuple((0, 0) if grad_safe and s == 0 else
                         (int(rng.integers(0, w if grad_safe else 3)),
                          int(rng.integers(0, w if grad_safe else 3))) for s, w in zip(shape, wd))
    return p


def _make_reduce_window(kind):
    def make(rng, shape, dtype, for_grad):
        chooser = kind != "sum"
        p = _window_params(rng, shape, for_grad and chooser)
        return [rand(rng, shape, dtype, "distinct" if for_grad and chooser else "real")], p
    return make


def _selected_operand(rng, shape, dtype, for_grad):
    """Distinct values for gradients, else values on a coarse grid (ties: the first wins)."""
    if for_grad:
        return rand(rng, shape, dtype, "distinct")
    return (np.round(rand(rng, shape, np.float64) * 2) / 2).astype(dtype)


def _make_select(kind):
    def make(rng, shape, dtype, for_grad):
        from funcgrad.prims.windows import WINDOW_KEYS, window_out_shape
        p = _window_params(rng, shape, False)
        p["select_prim"] = str(rng.choice(["ge", "le"]))
        x = _selected_operand(rng, shape, dtype, for_grad)
        first = shape if kind == "gather" else window_out_shape(shape, *(p[k] for k in
                                                                         WINDOW_KEYS))
        return [rand(rng, first, dtype), x], p
    return make


SPECS["conv_general_dilated"] = PrimSpec(
    "conv_general_dilated", _make_conv, dtypes=FLOATS + (I32,), diff_argnums=(0, 1),
    domain="shape_case is the lhs's spatial shape; random layouts, groups, strides, "
           "padding (negative too) and dilations", tol={F32: (1e-4, 1e-5)})
for _kind in ("sum", "max", "min"):
    SPECS[f"reduce_window_{_kind}"] = PrimSpec(
        f"reduce_window_{_kind}", _make_reduce_window(_kind), dtypes=FLOATS + (I32,),
        diff_argnums=(0,), tol={F32: (1e-5, 1e-5)},
        domain="random windows, strides, padding and dilations; for max/min gradients "
               "distinct values and windows that hold an element")
SPECS["select_and_gather_add"] = PrimSpec(
    "select_and_gather_add", _make_select("gather"), diff_argnums=(0,),
    domain="tangents shaped like the operand; operand values on a 0.5 grid (ties)")
SPECS["select_and_scatter_add"] = PrimSpec(
    "select_and_scatter_add", _make_select("scatter"), diff_argnums=(0,),
    tol={F32: (1e-5, 1e-6)},
    domain="source shaped like the windows' output; operand values on a 0.5 grid (ties)")


# ---------------------------------------------------------------------------------------------
# issue 12: linalg factorizations (funcgrad/prims/linalg.py, funcgrad/prims/linalg_spectral.py).
# Square primitives read shape_case as batch + (n,) -> (..., n, n) matrices; qr and svd read
# it as batch + (m, n). Values for gradients keep pivots, eigenvalues and singular values apart.
# ---------------------------------------------------------------------------------------------

def _orth(rng, n):
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def _spectrum(rng, batch, n):
    """(batch..., n) well-separated values: 1, 2, ..., n shuffled and signed at random."""
    k = math.prod(batch)
    vals = [rng.permutation(np.arange(1.0, n + 1)) * rng.choice([-1.0, 1.0]) for _ in range(k)]
    return np.asarray(vals).reshape(tuple(batch) + (n,))


def _make_cholesky(rng, shape, dtype, for_grad):
    batch, n = shape[:-1], shape[-1]
    a = rand(rng, tuple(batch) + (n, n), np.float64)
    spd = a @ np.swapaxes(a, -1, -2) + n * np.eye(n)
    if not for_grad and spd.size and rng.random() < 0.5:
        spd.reshape((-1, n, n))[0] *= -1          # not positive definite: NaNs (JAX's result)
    return [spd.astype(dtype)], {}


def _make_trisolve(rng, shape, dtype, for_grad):
    batch, n = tuple(shape[:-1]), shape[-1]
    a = rand(rng, batch + (n, n), np.float64) * 0.5 + 2 * n * np.eye(n)
    k = 2 if for_grad else int(rng.integers(0, 3))
    p = {"lower": bool(rng.random() < 0.5), "transpose_a": bool(rng.random() < 0.5),
         "unit_diagonal": bool(rng.random() < 0.3)}
    return [a.astype(dtype), rand(rng, batch + (n, k), dtype)], p


def _make_lu(rng, shape, dtype, for_grad):
    batch, n = tuple(shape[:-1]), shape[-1]
    if not for_grad:
        return [rand(rng, batch + (n, n), dtype)], {}
    a = rand(rng, batch + (n, n), np.float64) * 0.3 + 4 * n * np.eye(n)
    a = a[..., rng.permutation(n), :]             # pivoting must undo a row permutation
    return [a.astype(dtype)], {}


def _make_qr(rng, shape, dtype, for_grad):
    batch, (m, n) = tuple(shape[:-2]), shape[-2:]
    if for_grad:
        m, n = max(m, n), min(m, n)
        a = rand(rng, batch + (m, n), np.float64) + 2 * np.eye(m, n)
        return [a.astype(dtype)], {"full_matrices": bool(m == n and rng.random() < 0.5)}
    return [rand(rng, batch + (m, n), dtype)], {"full_matrices": bool(rng.random() < 0.5)}


def _make_eigh(rng, shape, dtype, for_grad):
    batch, n = tuple(shape[:-1]), shape[-1]
    lower = bool(rng.random() < 0.5)
    q = np.asarray([_orth(rng, n) for _ in range(math.prod(batch))]).reshape(batch + (n, n))
    w = _spectrum(rng, batch, n)
    a = (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)
    junk = rand(rng, a.shape, np.float64)           # the triangle eigh does not read
    keep = np.tri(n, dtype=bool) if lower else ~np.tri(n, k=-1, dtype=bool)
    return [np.where(keep, a, junk).astype(dtype)], {"lower": lower}


def _make_svd(rng, shape, dtype, for_grad):
    batch, (m, n) = tuple(shape[:-2]), shape[-2:]
    k, nb = min(m, n), math.prod(batch)
    u = np.asarray([_orth(rng, m)[:, :k] for _ in range(nb)]).reshape(batch + (m, k))
    v = np.asarray([_orth(rng, n)[:, :k] for _ in range(nb)]).reshape(batch + (n, k))
    s = np.abs(_spectrum(rng, batch, k))
    return [((u * s[..., None, :]) @ np.swapaxes(v, -1, -2)).astype(dtype)], {}


_LINALG_TOL = {F32: (1e-3, 1e-4), F64: (1e-9, 1e-10)}
for _name, _make, _nd, _dom in [
        ("cholesky", _make_cholesky, 1, "symmetric positive definite (some batches not: NaN)"),
        ("triangular_solve", _make_trisolve, 1, "diagonally dominant triangles; b (..., n, k)"),
        ("lu", _make_lu, 1, "random (grad: a row permutation of a diagonally dominant matrix)"),
        ("qr", _make_qr, 2, "random (grad: m >= n, reduced or square)"),
        ("eigh", _make_eigh, 1, "eigenvalues +-(1..n); junk in the triangle not read"),
        ("svd", _make_svd, 2, "singular values 1..k")]:
    SPECS[_name] = PrimSpec(_name, _make, diff_argnums=(0, 1) if _name == "triangular_solve"
                            else (0,), min_ndim=_nd, domain=_dom, tol=_LINALG_TOL,
                            grad_tol={"atol": 1e-5, "rtol": 1e-4})


# ---------------------------------------------------------------------------------------------
# issue 13: complex primitives (funcgrad/prims/complex.py)
# ---------------------------------------------------------------------------------------------

C64, C128 = np.dtype("complex64"), np.dtype("complex128")
COMPLEX = (C64, C128)
_CPLX_OF = {F32: C64, F64: C128, C64: C64, C128: C128}


def crand(rng, shape, dtype):
    """Random complex values of `dtype` (a float dtype picks its complex counterpart)."""
    cd = _CPLX_OF[np.dtype(dtype)]
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(cd)


def _make_complex_unary(rng, shape, dtype, for_grad):
    return [crand(rng, shape, dtype)], {}


def _make_complex(rng, shape, dtype, for_grad):
    return [rand(rng, shape, dtype), rand(rng, shape, dtype)], {}


for _name in ("real", "imag", "conj"):
    SPECS[_name] = PrimSpec(_name, _make_complex_unary, dtypes=COMPLEX, diff_argnums=(0,),
                            domain="complex", tol={C64: (1e-5, 1e-6), C128: (1e-12, 1e-14)})
SPECS["complex"] = PrimSpec("complex", _make_complex, dtypes=FLOATS, diff_argnums=(0, 1))


def _make_fft(rng, shape, dtype, for_grad):
    return [crand(rng, shape, dtype)], {"axis": len(shape) - 1, "inverse": bool(
        rng.random() < 0.5)}


SPECS["fft"] = PrimSpec("fft", _make_fft, dtypes=COMPLEX, diff_argnums=(0,), min_ndim=1,
                        domain="complex", tol={C64: (1e-4, 1e-5), C128: (1e-11, 1e-12)})
