"""Every primitive, driven by the spec table: shape rules, numpy impls, eager and staged
evaluation, gradients to second order, and type-checked backward expressions."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prim_specs import F32, SHAPE_CASES, SPECS, all_cases, hypothesis_shapes

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import prims
from funcgrad.core import PRIMITIVES, ShapedArray, bind, eval_expr, to_array, typecheck_expr
from funcgrad.test_util import check_grads

ALL = sorted(SPECS)
DIFF = sorted(n for n, s in SPECS.items() if s.differentiable)
# float-valued primitives whose derivative is zero everywhere it exists
ZERO_GRAD = ("sign", "floor", "round", "stop_gradient")


def _impl(spec, args, params):
    with np.errstate(all="ignore"):  # the CPU backend runs impls the same way
        return np.asarray(spec.prim.impl(*args, **params))


def _check_forward(spec, args, params):
    """(a) shape rule == impl's shape/dtype; (b) eager bind == impl; staged expr == impl."""
    prim = spec.prim
    rule = prim.shape(*[ShapedArray(a.shape, a.dtype) for a in args], **params)
    want = _impl(spec, args, params)
    assert rule.shape == want.shape, (spec.name, params, rule, want.shape)
    assert rule.dtype == want.dtype, (spec.name, params, rule, want.dtype)

    got = bind(prim, *[to_array(a) for a in args], **params)
    assert got.aval == rule
    np.testing.assert_array_equal(np.asarray(got), want, err_msg=f"{spec.name} {params}")

    closed = funcgrad.make_jaxpr(lambda *xs: bind(prim, *xs, **params))(*args)
    typecheck_expr(closed.expr)
    assert [e.prim for e in closed.eqns] == [prim]
    (staged,) = eval_expr(closed.expr, [to_array(a) for a in args], closed.consts)
    np.testing.assert_array_equal(np.asarray(staged), want)


@pytest.mark.parametrize("shape", SHAPE_CASES, ids=str)
@pytest.mark.parametrize("name", ALL)
def test_forward_shape_cases(name, shape):
    spec = SPECS[name]
    if not spec.supports(shape):
        pytest.skip(f"{name} needs rank >= {spec.min_ndim} / a non-empty axis")
    rng = np.random.default_rng(zlib.crc32(repr((name, shape)).encode()))
    for dtype in spec.dtypes:
        args, params = spec.make_args(rng, shape, dtype)
        _check_forward(spec, args, params)


@pytest.mark.parametrize("name", ALL)
@given(data=st.data())
def test_forward_hypothesis(name, data):
    spec = SPECS[name]
    shape = data.draw(hypothesis_shapes(spec), label="shape")
    dtype = data.draw(st.sampled_from(spec.dtypes), label="dtype")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    args, params = spec.make_args(np.random.default_rng(seed), shape, dtype)
    _check_forward(spec, args, params)


# ---------------------------------------------------------------------------------------------
# (c) gradients, through bind, in float64, to second order
# ---------------------------------------------------------------------------------------------

GRAD_SHAPES = ((), (1,), (0,), (3,), (2, 3), (3, 1), (2, 0, 1), (2, 1, 3))


def _grad_cases():
    for name in DIFF:
        spec = SPECS[name]
        for shape in GRAD_SHAPES:
            if spec.supports(shape):
                yield name, shape


@pytest.mark.parametrize("name,shape", list(_grad_cases()), ids=str)
def test_grads(name, shape):
    spec = SPECS[name]
    rng = np.random.default_rng(zlib.crc32(repr((name, shape, "grad")).encode()))
    args, params = spec.make_args(rng, shape, np.float64, for_grad=True)
    check_grads(lambda *xs: bind(spec.prim, *xs, **params), args, order=spec.grad_order,
                **spec.grad_tolerance())


@pytest.mark.parametrize("name", DIFF)
@given(data=st.data())
def test_grads_hypothesis(name, data):
    spec = SPECS[name]
    shape = data.draw(hypothesis_shapes(spec, max_ndim=2, max_side=3), label="shape")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    args, params = spec.make_args(np.random.default_rng(seed), shape, np.float64,
                                  for_grad=True)
    check_grads(lambda *xs: bind(spec.prim, *xs, **params), args, order=1,
                **spec.grad_tolerance())


@pytest.mark.parametrize("name", ZERO_GRAD)
def test_zero_gradient_prims(name):
    spec = SPECS[name]
    args, params = spec.make_args(np.random.default_rng(0), (2, 3), np.float64)
    args = [np.nan_to_num(a, posinf=3.0, neginf=-3.0) + 0.25 for a in args]
    f = lambda x: fnp.sum(bind(spec.prim, x, **params) * 1.5)
    np.testing.assert_array_equal(np.asarray(funcgrad.grad(f)(args[0])), np.zeros((2, 3)))
    _, t = funcgrad.jvp(lambda x: bind(spec.prim, x, **params), (args[0],),
                        (np.ones((2, 3)),))
    np.testing.assert_array_equal(np.asarray(t), np.zeros((2, 3)))


# ---------------------------------------------------------------------------------------------
# (d) the backward expressions type-check (first and second order)
# ---------------------------------------------------------------------------------------------

def _scalar_loss(spec, args, params, rng):
    """f(*diff operands) -> a weighted sum of the primitive's output, other operands fixed."""
    diff = [i for i in spec.diff_argnums if i < len(args)]
    out_shape = _impl(spec, args, params).shape
    w = rng.standard_normal(out_shape)

    def f(*d):
        full = list(args)
        for i, v in zip(diff, d):
            full[i] = v
        return fnp.real(fnp.sum(bind(spec.prim, *full, **params) * w))  # complex: Re
    return f, [args[i] for i in diff], tuple(range(len(diff)))


@pytest.mark.parametrize("name", DIFF)
def test_grad_expr_typechecks(name):
    spec = SPECS[name]
    rng = np.random.default_rng(1)
    for shape in [s for s in ((2, 3), (3,), (), (0, 3)) if spec.supports(s)]:
        args, params = spec.make_args(rng, shape, np.float64, for_grad=True)
        f, dargs, argnums = _scalar_loss(spec, args, params, rng)
        g = funcgrad.grad(f, argnums=argnums)
        closed = funcgrad.make_jaxpr(g)(*dargs)
        typecheck_expr(closed.expr)
        assert spec.prim in [e.prim for e in closed.eqns]
        # the backward pass evaluated from the expression equals grad's own result
        got = eval_expr(closed.expr, [to_array(a) for a in dargs], closed.consts)
        for a, b in zip(got, g(*dargs)):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)

        def second(*d, g=g):
            return sum(fnp.real(fnp.sum(gi * gi)) for gi in g(*d))
        closed2 = funcgrad.make_jaxpr(funcgrad.grad(second, argnums=argnums))(*dargs)
        typecheck_expr(closed2.expr)


@pytest.mark.parametrize("name", DIFF)
def test_jvp_expr_typechecks(name):
    spec = SPECS[name]
    rng = np.random.default_rng(2)
    for shape in [s for s in ((2, 3), ()) if spec.supports(s)]:
        args, params = spec.make_args(rng, shape, np.float64, for_grad=True)
        tangents = [rng.standard_normal(a.shape) if a.dtype.kind == "f" else np.zeros_like(a)
                    for a in args]

        def f_jvp(*xs, params=params, tangents=tangents):
            return funcgrad.jvp(lambda *ys: bind(spec.prim, *ys, **params), xs, tangents)[1]
        closed = funcgrad.make_jaxpr(f_jvp)(*args)
        typecheck_expr(closed.expr)


# every shape rule rejects ill-typed operands with a ShapeError naming the primitive
_f = lambda *s: ShapedArray(s, np.float32)
_i = lambda *s: ShapedArray(s, np.int32)
_b = lambda *s: ShapedArray(s, np.bool_)
INVALID = [
    ("add", [_f(2), _f(3)], {}),
    ("mul", [_f(2), _i(2)], {}),
    ("exp", [_i(2)], {}),
    ("log", [_b(2)], {}),
    ("neg", [_b(2)], {}),
    ("pow", [_i(2), _i(2)], {}),
    ("and", [_f(2), _f(2)], {}),
    ("shift_left", [_f(2), _f(2)], {}),
    ("not", [_f(2)], {}),
    ("integer_pow", [_b(2)], {"y": 2}),
    ("select", [_f(2), _f(2), _f(2)], {}),
    ("select", [_b(3), _f(2), _f(2)], {}),
    ("select", [_b(2), _f(2), _i(2)], {}),
    ("broadcast_in_dim", [_f(3)], {"shape": (2, 4), "broadcast_dimensions": (1,)}),
    ("broadcast_in_dim", [_f(2, 3)], {"shape": (2, 3), "broadcast_dimensions": (1, 0)}),
    ("broadcast_in_dim", [_f(3)], {"shape": (3,), "broadcast_dimensions": ()}),
    ("reshape", [_f(2, 3)], {"new_sizes": (4, 2)}),
    ("transpose", [_f(2, 3)], {"permutation": (0, 0)}),
    ("transpose", [_f(2, 3)], {"permutation": (0,)}),
    ("reduce_sum", [_f(2, 3)], {"axes": (2,)}),
    ("reduce_sum", [_f(2, 3)], {"axes": (0, 0)}),
    ("reduce_max", [_f(2, 3)], {"axes": (-1,)}),
    ("argmax", [_f(2, 3)], {"axis": 2, "index_dtype": np.dtype(np.int32)}),
    ("slice", [_f(4)], {"start_indices": (1,), "limit_indices": (5,), "strides": (1,)}),
    ("slice", [_f(4)], {"start_indices": (3,), "limit_indices": (1,), "strides": (1,)}),
    ("slice", [_f(4)], {"start_indices": (0,), "limit_indices": (4,), "strides": (0,)}),
    ("pad", [_f(4)], {"padding_config": ((-1, 0, 0),), "value": 0.0}),
    ("pad", [_f(4, 2)], {"padding_config": ((1, 0, 0),), "value": 0.0}),
    ("concatenate", [_f(2, 3), _f(3, 3)], {"dimension": 1}),
    ("concatenate", [_f(2, 3), _i(2, 3)], {"dimension": 0}),
    ("concatenate", [_f(2, 3), _f(2, 3)], {"dimension": 2}),
    ("rev", [_f(2, 3)], {"dimensions": (2,)}),
    ("iota", [], {"dtype": np.dtype(np.int32), "shape": (3,), "dimension": 1}),
    ("take", [_f(4, 3), _f(2)], {"axis": 0}),
    ("take", [_f(4, 3), _i(2)], {"axis": 2}),
    ("scatter_add", [_f(4, 3), _i(2), _f(3, 3)], {"axis": 0}),
    ("scatter", [_f(4, 3), _i(2), _i(2, 3)], {"axis": 0}),
    ("dynamic_slice", [_f(4), _f()], {"slice_sizes": (2,)}),
    ("dynamic_slice", [_f(4), _i()], {"slice_sizes": (5,)}),
    ("dynamic_slice", [_f(4, 3), _i()], {"slice_sizes": (2, 2)}),
    ("dynamic_update_slice", [_f(4), _f(5), _i()], {}),
    ("dynamic_update_slice", [_f(4), _i(2), _i()], {}),
    ("dynamic_update_slice", [_f(4), _f(2), _i(1)], {}),
    ("dot_general", [_f(2, 3), _f(4, 5)], {"dimension_numbers": (((1,), (0,)), ((), ()))}),
    ("dot_general", [_f(2, 3), _f(3, 5)], {"dimension_numbers": (((1,), (0,)), ((0,), (1,)))}),
    ("dot_general", [_f(2, 3), _i(3, 5)], {"dimension_numbers": (((1,), (0,)), ((), ()))}),
    ("dot_general", [_b(2, 3), _b(3, 5)], {"dimension_numbers": (((1,), (0,)), ((), ()))}),
]


@pytest.mark.parametrize("i", range(len(INVALID)))
def test_shape_rules_reject_invalid(i):
    name, avals, params = INVALID[i]
    with pytest.raises(funcgrad.ShapeError, match=name.split("_")[0]):
        PRIMITIVES[name].shape(*avals, **params)


# ---------------------------------------------------------------------------------------------
# (e) registry completeness
# ---------------------------------------------------------------------------------------------

def test_every_primitive_has_every_rule_and_a_spec_row():
    missing = {name: [rule for rule in ("shape", "impl", "vjp", "jvp", "batch")
                      if not callable(getattr(p, rule, None))]
               for name, p in PRIMITIVES.items()}
    assert {k: v for k, v in missing.items() if v} == {}
    assert set(PRIMITIVES) - set(SPECS) == set(), "primitives without a spec row"
    assert set(SPECS) - set(PRIMITIVES) == set(), "spec rows without a primitive"
    for name, p in PRIMITIVES.items():
        assert p.name == name and name.isidentifier()


def test_specs_cover_their_shape_cases():
    for name, spec in SPECS.items():
        cases = spec.shape_cases()
        assert cases, name
        assert spec.dtypes, name
        assert any(0 in s for s in cases) or name in ("argmax", "argmin"), name
        assert any(1 in s for s in cases), name


def test_spec_api_shape():
    spec = SPECS["dot_general"]
    args, params = spec.make_args(np.random.default_rng(0), (2, 3, 4))
    assert all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in args)
    assert set(params) == {"dimension_numbers"}
    rtol, atol = spec.tolerance(np.float32)
    assert 0 < rtol < 1e-2 and 0 < atol
    with pytest.raises(ValueError):
        SPECS["argmax"].make_args(np.random.default_rng(0), ())
    cases = all_cases(dtypes=[np.float32])
    assert {n for n, _, _ in cases} == {n for n, s in SPECS.items() if F32 in s.dtypes}
    assert all(SPECS[n].supports(s) and d == F32 for n, s, d in cases)


def test_helpers_full_like_and_add_any():
    x = fnp.ones((2, 2))
    assert np.asarray(prims.full_like(x, 3)).tolist() == [[3, 3], [3, 3]]
    assert prims.add_any(None, x) is x and prims.add_any(x, None) is x


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint32"])
def test_large_select_blends_bits_exactly_like_where(dtype):
    # above 8192 elements select blends bit patterns (np.where is branch-bound on random masks)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((130, 70)) * 1e3).astype(dtype)
    if x.dtype.kind == "f":
        x[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    p = rng.random((130, 70)) > 0.5
    cases = [(p, x, x[::-1]), (p, x, np.zeros((), dtype)), (p, x, np.array(-0.0).astype(dtype)),
             (p[:, :1], x, x.T[:1].T), (p[:1], x, np.zeros((), dtype)),
             (p, x[:, ::2].repeat(2, 1), x)]
    for q, a, b in cases:
        got = prims.select_p.impl(q, a, b)
        want = np.where(q, a, b)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dims", [(((1,), (0,)), ((), ())), (((0,), (0,)), ((), ())),
                                  (((1,), (1,)), ((), ())), (((0,), (1,)), ((), ()))])
def test_matrix_dot_fast_path_matches_einsum(dims):
    rng = np.random.default_rng(0)
    (lc,), (rc,) = dims[0]
    x = rng.standard_normal((3, 4) if lc == 1 else (4, 3))
    y = rng.standard_normal((4, 5) if rc == 0 else (5, 4))
    want = np.einsum("mk,kn->mn", x if lc == 1 else x.T, y if rc == 0 else y.T)
    np.testing.assert_allclose(prims.dot_general_p.impl(x, y, dimension_numbers=dims), want)


def test_dot_over_leading_or_trailing_runs_matches_einsum():
    # contractions over leading/trailing runs of dims are one matmul of reshaped views
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 5))
    cases = [(x, rng.standard_normal((4, 5)), ((2,), (0,)), "abc,cd->abd"),
             (x, y, ((0, 1), (0, 1)), "abc,abd->cd"),
             (x, rng.standard_normal((5, 3, 4)), ((1, 2), (1, 2)), "abc,dbc->ad"),
             (x, rng.standard_normal((3, 4, 5)), ((1, 2), (0, 1)), "abc,bcd->ad"),
             (np.zeros((0, 3, 4)), rng.standard_normal((4, 5)), ((2,), (0,)), "abc,cd->abd"),
             (x, np.zeros((4, 0)), ((2,), (0,)), "abc,cd->abd")]
    for a, b, (lc, rc), spec in cases:
        got = prims.dot_general_p.impl(a, b, dimension_numbers=((lc, rc), ((), ())))
        want = np.einsum(spec, a, b)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12)
