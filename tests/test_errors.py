"""Bad inputs raise errors that name the operation, the operands and the user's file:line.

Every offending call below carries a `# ERR:<tag>` comment; the test asserts that the message
names this file and that line (eagerly, under make_jaxpr, and inside grad).
"""
from __future__ import annotations


import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, prims
from funcgrad.core import ConcretizationError, ShapeError
from funcgrad.api.config_states import check_indices

with open(__file__) as _fh:
    _SOURCE = _fh.read().splitlines()


def line_of(tag: str) -> int:
    hits = [i + 1 for i, line in enumerate(_SOURCE) if line.rstrip().endswith(f"# ERR:{tag}")]
    assert len(hits) == 1, (tag, hits)
    return hits[0]


def assert_names_line(excinfo, tag: str):
    where = f"test_errors.py:{line_of(tag)}"
    assert where in str(excinfo.value), f"{where!r} not in:\n{excinfo.value}"


MODES = ["eager", "make_jaxpr", "grad"]


def run(mode, f, *args):
    """Call f eagerly, while tracing, or under grad (of a scalar function of its result)."""
    if mode == "eager":
        return f(*args)
    if mode == "make_jaxpr":
        return funcgrad.make_jaxpr(f)(*args)
    if mode == "jit_grad":
        return funcgrad.jit(funcgrad.grad(lambda *a: fnp.sum(f(*a))))(*args)
    return funcgrad.grad(lambda *a: fnp.sum(f(*a)))(*args)


# ---------------------------------------------------------------------------------------------
# shape mismatches
# ---------------------------------------------------------------------------------------------

def _add(x, y):
    return x + y  # ERR:add


def _add_fn(x, y):
    return fnp.add(x, y)  # ERR:add_fn


def _matmul(x, y):
    return x @ y  # ERR:matmul


def _matmul_batch(x, y):
    return fnp.matmul(x, y)  # ERR:matmul_batch


def _reshape(x):
    return x.reshape(4, 2)  # ERR:reshape


def _reshape_fn(x):
    return fnp.reshape(x, (-1, 4))  # ERR:reshape_fn


def _concat(x, y):
    return fnp.concatenate([x, y], axis=0)  # ERR:concatenate


def _concat_rank(x, y):
    return fnp.concatenate([x, y.reshape(-1)], axis=1)  # ERR:concatenate_rank


def _where(x, y):
    return fnp.where(x > 0, x, y)  # ERR:where


def _einsum(x, y):
    return fnp.einsum("ij,jk->ik", x, y)  # ERR:einsum


def _broadcast_to(x, y):
    return fnp.broadcast_to(x, (5, 2)) + y[0, 0]  # ERR:broadcast_to


def _stack(x, y):
    return fnp.stack([x, y])  # ERR:stack


SHAPE_CASES = {
    "add": (_add, (3,), (4,), ["(3,)", "(4,)"]),
    "add_fn": (_add_fn, (2, 3), (3, 2), ["(2, 3)", "(3, 2)"]),
    "matmul": (_matmul, (2, 3), (4, 5), ["3", "4"]),
    "matmul_batch": (_matmul_batch, (2, 3, 4), (3, 4, 5), ["(2,)", "(3,)"]),
    "reshape": (_reshape, (6,), None, ["(4, 2)", "6"]),
    "reshape_fn": (_reshape_fn, (6,), None, ["(-1, 4)", "6"]),
    "concatenate": (_concat, (2, 3), (2, 4), ["f32[2,3]", "f32[2,4]"]),
    "concatenate_rank": (_concat_rank, (2, 3), (2, 3), ["f32[2,3]", "f32[6]"]),
    "where": (_where, (2, 3), (3, 2), ["(2, 3)", "(3, 2)"]),
    "einsum": (_einsum, (2, 3), (4, 5), ["3", "4"]),
    "broadcast_to": (_broadcast_to, (3,), (1, 1), ["(3,)", "(5, 2)"]),
    "stack": (_stack, (2,), (3,), ["(2,)", "(3,)"]),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tag", sorted(SHAPE_CASES))
def test_shape_mismatch_names_user_line(tag, mode):
    f, sx, sy, words = SHAPE_CASES[tag]
    args = [fnp.ones(sx)] + ([fnp.ones(sy)] if sy is not None else [])
    with pytest.raises(ShapeError) as e:
        run(mode, f, *args)
    assert isinstance(e.value, TypeError)  # like JAX, shape errors are TypeErrors
    assert_names_line(e, tag)
    msg = str(e.value)
    assert tag.split("_")[0] in msg  # the operation
    for w in words:  # the shapes (or dtype[shape] operands)
        assert w in msg, (w, msg)


# ---------------------------------------------------------------------------------------------
# dtype errors
# ---------------------------------------------------------------------------------------------

def _bitwise_float(x):
    return x & x  # ERR:bitwise_float


def _take_float_idx(x):
    return fnp.take(x, fnp.ones(2))  # ERR:take_float_idx


def _invert_float(x):
    return ~x  # ERR:invert_float


def _prim_dtype_mismatch(x):
    return prims.add(x, fnp.ones(3, fnp.int32))  # ERR:prim_dtype_mismatch


def _dot_general_dtypes(x):
    return lax.dot_general(x, fnp.ones(3, fnp.float64), (((0,), (0,)), ((), ())))  # ERR:dot_dtypes


def _log_bool(x):
    return prims.bind(prims.log_p, x > 0)  # ERR:log_bool


DTYPE_CASES = {
    "bitwise_float": (_bitwise_float, ["float32"]),
    "take_float_idx": (_take_float_idx, ["float32"]),
    "invert_float": (_invert_float, ["float"]),
    "prim_dtype_mismatch": (_prim_dtype_mismatch, ["f32[3]", "i32[3]"]),
    "dot_dtypes": (_dot_general_dtypes, ["f32[3]", "f64[3]"]),
    "log_bool": (_log_bool, ["bool"]),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tag", sorted(DTYPE_CASES))
def test_dtype_errors_name_user_line(tag, mode):
    f, words = DTYPE_CASES[tag]
    with pytest.raises(TypeError) as e:
        run(mode, f, fnp.ones(3))
    assert_names_line(e, tag)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_unsupported_dtypes_name_user_line():
    with pytest.raises(TypeError, match="complex256") as e:
        fnp.zeros(3, dtype=np.clongdouble)  # ERR:complex_dtype
    assert_names_line(e, "complex_dtype")
    with pytest.raises(TypeError, match="str|U1") as e:
        fnp.asarray(np.array(["a", "b"]))  # ERR:str_array
    assert_names_line(e, "str_array")
    with pytest.raises(TypeError) as e:
        fnp.ones(2).astype(np.clongdouble)  # ERR:astype_complex
    assert_names_line(e, "astype_complex")


def test_dtype_error_message_has_op_shapes_dtypes():
    with pytest.raises(ShapeError) as e:
        _prim_dtype_mismatch(fnp.ones(3))
    msg = str(e.value)
    assert msg.startswith("add:") and "dtype" in msg and "f32[3], i32[3]" in msg


# ---------------------------------------------------------------------------------------------
# out-of-range integer indices raise (never clamp), naming the line
# ---------------------------------------------------------------------------------------------

def _index_int(x):
    return x[5]  # ERR:index_int


def _index_neg(x):
    return x[:, -4]  # ERR:index_neg


def _index_array(x):
    return x[np.array([0, 4])]  # ERR:index_array


def _index_array_neg(x):
    return x[np.array([[0], [-5]]), 1]  # ERR:index_array_neg


def _index_two_arrays(x):
    return x[np.array([0, 1]), np.array([2, 3])]  # ERR:index_two_arrays


def _take_oob(x):
    return fnp.take(x, np.array([1, 12]))  # ERR:take_oob


def _take_axis_oob(x):
    return fnp.take(x, np.array([3]), axis=1)  # ERR:take_axis_oob


def _take_along_oob(x):
    return fnp.take_along_axis(x, np.array([[0], [3], [1], [0]]), axis=1)  # ERR:take_along_oob


def _at_set_oob(x):
    return x.at[4].set(1.0)  # ERR:at_set_oob


def _at_add_oob(x):
    return x.at[np.array([1, -5])].add(1.0)  # ERR:at_add_oob


INDEX_CASES = ["index_int", "index_neg", "index_array", "index_array_neg", "index_two_arrays",
               "take_oob", "take_axis_oob", "take_along_oob", "at_set_oob", "at_add_oob"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tag", INDEX_CASES)
def test_out_of_range_index_raises_naming_line(tag, mode):
    f = globals()["_" + tag]
    x = fnp.ones((4, 3))
    if mode == "make_jaxpr" and tag not in ("index_int", "index_neg", "at_set_oob"):
        # index arrays are checked when the gather runs; static Python ints while tracing
        funcgrad.make_jaxpr(f)(x)
        return
    gather = tag.startswith("index_array") or tag == "index_two_arrays"
    if gather:   # with check_indices off, integer-array gathers clamp as JAX's do
        with check_indices(False):
            out = run(mode, f, x)
        if mode == "eager":
            np.testing.assert_allclose(np.asarray(out), 1.0)
    with pytest.raises(IndexError) as e:   # the default: nothing is clamped silently
        run(mode, f, x)
    assert_names_line(e, tag)
    assert "out of bounds" in str(e.value)


def test_index_error_message_details():
    with pytest.raises(IndexError) as e:
        _index_int(fnp.ones((4, 3)))
    msg = str(e.value)
    assert "index 5" in msg and "size 4" in msg
    with pytest.raises(IndexError) as e:
        _take_oob(fnp.ones((4, 3)))
    assert "12" in str(e.value) and "12" in str(e.value)


def test_index_arrays_that_do_not_broadcast():
    x = fnp.ones((4, 3))
    with pytest.raises(IndexError, match="shape mismatch") as e:
        x[np.array([0, 1]), np.array([0, 1, 2])]  # ERR:index_bcast
    assert_names_line(e, "index_bcast")
    assert "(2,) (3,)" in str(e.value)


def test_out_of_range_traced_indices_raise_at_run_time():
    def f(x, i):
        return x[i]  # ERR:traced_index

    x, i = fnp.ones(3), fnp.asarray([0, 3])
    with check_indices():   # JAX clamps them (the default); checked, they raise
        with pytest.raises(IndexError) as e:
            funcgrad.grad(lambda x: fnp.sum(f(x, i)))(x)
        assert_names_line(e, "traced_index")
        with pytest.raises(IndexError) as e:
            f(x, i)
        assert_names_line(e, "traced_index")
        with pytest.raises(IndexError) as e:   # a jitted plan names the same line
            funcgrad.jit(lambda x, i: f(x, i) * 2.0)(x, i)
        assert_names_line(e, "traced_index")


# ---------------------------------------------------------------------------------------------
# traced values where Python needs a concrete one
# ---------------------------------------------------------------------------------------------

def _traced_if(x):
    if fnp.sum(x) > 0:  # ERR:traced_if
        return x * 2.0
    return x


def _traced_float(x):
    return float(x[0]) * x  # ERR:traced_float


def _traced_int_index(x):
    return x[fnp.argmax(x).astype(fnp.int32):]  # ERR:traced_int_index


def _traced_asarray(x):
    return np.asarray(x)  # ERR:traced_asarray


def _traced_item(x):
    return x * x[0].item()  # ERR:traced_item


@pytest.mark.parametrize("mode", ["make_jaxpr", "jit_grad"])
@pytest.mark.parametrize("tag", ["traced_if", "traced_float", "traced_int_index",
                                 "traced_asarray", "traced_item"])
def test_traced_value_in_python_control_flow(tag, mode):
    f = globals()["_" + tag]
    with pytest.raises(ConcretizationError) as e:
        run(mode, f, fnp.ones(3))
    assert isinstance(e.value, TypeError)
    assert_names_line(e, tag)
    assert "traced array" in str(e.value) and "where" in str(e.value)


@pytest.mark.parametrize("tag", ["traced_float", "traced_asarray"])
def test_eager_grad_refuses_what_jax_refuses(tag):
    # eager grad has concrete values (issue 32), but float() and numpy.asarray() of a value
    # being differentiated raise as in JAX: they would drop the derivative
    f = globals()["_" + tag]
    with pytest.raises(ConcretizationError) as e:
        run("grad", f, fnp.ones(3))
    assert_names_line(e, tag)
    assert "traced array" in str(e.value) and "where" in str(e.value)


@pytest.mark.parametrize("tag", ["traced_if", "traced_int_index", "traced_item"])
def test_eager_grad_reads_concrete_values(tag):
    # outside jit, grad evaluates primals concretely (as JAX's eager autodiff): bool(),
    # operator.index() and .item() read them
    f = globals()["_" + tag]
    x = fnp.asarray([0.5, 2.0, 1.0])
    g = run("grad", f, x)
    want = {"traced_if": [2, 2, 2], "traced_int_index": [0, 1, 1],
            "traced_item": [0.5, 0.5, 0.5]}[tag]   # .item() is a constant: d/dx sum(x * x0) = x0
    np.testing.assert_allclose(np.asarray(g), want)


def test_concrete_if_is_fine_eagerly():
    np.testing.assert_allclose(np.asarray(_traced_if(fnp.ones(3))), [2, 2, 2])


# ---------------------------------------------------------------------------------------------
# other user errors
# ---------------------------------------------------------------------------------------------

def test_grad_errors_name_user_line():
    with pytest.raises(TypeError) as e:
        funcgrad.grad(lambda x: x * 2.0)(fnp.ones(3))  # ERR:grad_nonscalar
    assert_names_line(e, "grad_nonscalar")
    with pytest.raises(TypeError) as e:
        funcgrad.grad(lambda x: x * 2.0)(fnp.int32(3))  # ERR:grad_int
    assert_names_line(e, "grad_int")
    with pytest.raises((TypeError, ValueError)) as e:
        funcgrad.jvp(fnp.sin, (fnp.ones(3),), (fnp.ones(2),))  # ERR:jvp_shape
    assert_names_line(e, "jvp_shape")


def test_axis_errors():
    x = fnp.ones((2, 3))
    with pytest.raises(ShapeError) as e:
        fnp.sum(x, axis=2)  # ERR:sum_axis
    assert_names_line(e, "sum_axis")
    with pytest.raises(ShapeError) as e:
        fnp.transpose(x, (0, 0))  # ERR:transpose_axes
    assert_names_line(e, "transpose_axes")
    with pytest.raises(ShapeError) as e:
        fnp.squeeze(x, 1)  # ERR:squeeze_axis
    assert_names_line(e, "squeeze_axis")


def test_empty_reduction_raises():
    with pytest.raises(Exception) as e:
        fnp.max(fnp.ones((0, 3)))  # ERR:max_empty
    assert "zero-size" in str(e.value) or "empty" in str(e.value)
    assert_names_line(e, "max_empty")
    with pytest.raises(Exception) as e:
        fnp.argmax(fnp.ones((0,)))  # ERR:argmax_empty
    assert_names_line(e, "argmax_empty")


def test_leaked_tracer():
    leaked = []

    def f(x):
        leaked.append(x)
        return fnp.sum(x)

    funcgrad.grad(f)(fnp.ones(2))
    with pytest.raises(Exception) as e:
        leaked[0] + 1.0  # ERR:leaked
    assert "escaped" in str(e.value) or "leak" in str(e.value)
    assert_names_line(e, "leaked")
