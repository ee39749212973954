"""Scalar expressions of the elementwise primitives, shared by the CPU and CUDA code generators.

Each op is a Python expression over operand expressions in a compute type, which numba compiles
in an njit kernel (funcgrad/backends/cpu/ops.py) or a CUDA kernel (funcgrad/cuda/elementwise.py).
What both backends spell alike lives here once; `ops` and `helper_templates` take what they
spell differently (literals of sign, negative integer powers, fmod, erf, abs, typed products in
the power helper), and each backend adds its own integer division helpers and its own rows
(CUDA: float16 computed in float32, complex numbers, iota). Pure Python: no numba import here.
"""
from __future__ import annotations

import re

import numpy as np

from funcgrad.core.dtypes import dtype_kind
# numba type names of the real dtypes both backends compute in their own type
NB = {"float32": "float32", "float64": "float64", "int8": "int8", "uint8": "uint8",
      "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32",
      "int64": "int64", "uint64": "uint64", "bool": "boolean"}


class T:
    """What an op template knows about its operand dtype (ct: the backend's compute type)."""

    def __init__(self, dtype, out_dtype, params, ct):
        d = np.dtype(dtype)
        self.dtype, self.out = d, np.dtype(out_dtype)
        self.ct = ct
        self.kind = dtype_kind(d)
        self.bits = d.itemsize * 8
        self.params = params

    f = property(lambda self: self.kind == "f")
    c = property(lambda self: self.kind == "c")


def signed64(t) -> bool:
    """Whether the operand is int64 (whose wrapping arithmetic goes through uint64)."""
    return t.kind == "i" and t.bits == 64


def template(fmt):
    """An op spelled by a format string over its arguments {0}, {1}, ... and {ct}."""
    return lambda a, t: fmt.format(*a, ct=t.ct)


def math_fn(fn):
    """math.fn for real operands, cmath.fn for complex ones."""
    return lambda a, t: f"{'cmath' if t.c else 'math'}.{fn}({a[0]})"


def wrapping(fmt):
    """An integer op that wraps: LLVM treats signed overflow as undefined (it proved a*a >= 0
    and mis-adjusted the division of a wrapped square on the H200), so int64 goes via uint64."""
    def f(a, t):
        if signed64(t):
            return "int64(" + fmt.format(*(f"uint64({x})" for x in a)) + ")"
        return fmt.format(*a)
    return f


def sign(consts):
    """sign(x); consts(t) -> the backend's literals (zero, one, minus one) of a real type."""
    def f(a, t):
        x = a[0]
        if t.c:   # numpy 2: z / |z|, 0 at 0
            return f"(({x}) / abs({x}) if {x} != {t.ct}(0) else {t.ct}(0))"
        z, one, minus = consts(t)
        return f"({one} if {x} > {z} else ({minus} if {x} < {z} else {x}))"
    return f


def _logistic(a, t):
    x, c = a[0], t.ct
    return (f"(({c}(1) / ({c}(1) + math.exp(-{x}))) if {x} >= {c}(0) else "
            f"(math.exp({x}) / ({c}(1) + math.exp({x}))))")


def int_power(x, y, t) -> str:
    """x ** y for an integer type and y >= 0, wrapping in the type as numpy does."""
    if y == 0:
        return "1"
    if signed64(t):
        return f"int64({int_power('uint64(' + x + ')', y, T(np.uint64, np.uint64, {}, 'uint64'))})"
    return "(" + " * ".join([x] * y) + ")" if y <= 8 else f"ipow_{t.ct}({x}, {y})"


def integer_pow(negative):
    """lax.integer_pow; negative(x, y, t) spells an integer type's y < 0."""
    def f(a, t):
        y, x = t.params["y"], a[0]
        if t.c:   # square-and-multiply; a negative power is its reciprocal
            if y == 0:
                return f"{t.ct}(1)"
            p = (x if abs(y) == 1 else f"({x} * {x})" if abs(y) == 2
                 else f"ipow_{t.ct}({x}, {abs(y)})")
            return p if y > 0 else f"({t.ct}(1) / {p})"
        if t.f:
            if y == 0:
                return f"{t.ct}(1)"
            if y == 1:
                return x
            if y == 2:
                return f"({x} * {x})"
            return f"({x} ** {t.ct}({y}))"
        return negative(x, y, t) if y < 0 else int_power(x, y, t)
    return f


def _maxmin(op):
    def f(a, t):
        x, y = a
        if t.f:
            return f"({x} if ({x} {op} {y} or {x} != {x}) else {y})"
        return f"({x} if {x} {op} {y} else {y})"
    return f


def _shift(left):
    def f(a, t):
        x, y = a
        if left and signed64(t):
            body = f"int64(uint64({x}) << uint64({y}))"
        elif left:
            body = f"({x} << {y})"
        elif t.kind == "u":
            body = f"({x} >> {y})"
        else:
            u = f"uint{t.bits}"
            body = f"({t.out.name}({u}({x}) >> {u}({y})))"
        # cast both branches: numba would unify a uint64 shift with the int 0 as float64
        o = t.out.name
        return f"({o}({body}) if ({y} >= 0 and {y} < {t.bits}) else {o}(0))"
    return f


def _convert(a, t):
    if t.out == np.bool_:
        return f"({a[0]} != 0)"
    if t.c and dtype_kind(t.out) != "c":   # JAX: complex -> real keeps the real part
        return f"({a[0]}).real"
    return a[0]


def _neg(a, t):
    return f"int64(uint64(0) - uint64({a[0]}))" if signed64(t) else f"(-{a[0]})"


# comparisons and bitwise ops: Python's infix operators
_INFIX = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
          "and": "&", "or": "|", "xor": "^"}


# each elementwise op's properties, beside its row in `ops` below:
# INEXACT: numpy's loops (SIMD exp/log/pow/...) round differently from libm in some last bits,
# so the CPU's jitted kernels leave these ops to numpy (results bit for bit the interpreter's)
INEXACT = frozenset({"exp", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "pow"})
# COMPLEX: the ops whose templates also take complex operands (the CUDA complex kernels)
COMPLEX = frozenset({"neg", "exp", "log", "tanh", "sin", "cos", "sqrt", "abs", "sign", "add",
                     "sub", "mul", "div", "pow", "eq", "ne", "select", "integer_pow",
                     "convert_element_type", "stop_gradient", "real", "imag", "conj", "complex",
                     "square"})


def ops(*, sign_consts, ipow_negative, fmod: str, erf, abs_) -> dict:
    """The op table, name -> (number of inputs, template(args, T) -> expression, helpers used),
    given what a backend spells its own way: `sign_consts` (see `sign`), `ipow_negative` (see
    `integer_pow`), `fmod` (the floating remainder's function) and the erf and abs templates."""
    return {
        "neg": (1, _neg, ()),
        "exp": (1, math_fn("exp"), ()),
        "log": (1, math_fn("log"), ()),
        "log1p": (1, template("math.log1p({0})"), ()),
        "expm1": (1, template("math.expm1({0})"), ()),
        "tanh": (1, math_fn("tanh"), ()),
        "logistic": (1, _logistic, ()),
        "sin": (1, math_fn("sin"), ()),
        "cos": (1, math_fn("cos"), ()),
        "sqrt": (1, math_fn("sqrt"), ()),
        "rsqrt": (1, template("({ct}(1) / math.sqrt({0}))"), ()),
        "square": (1, wrapping("({0} * {0})"), ()),
        "erf": (1, erf, ()),
        "abs": (1, abs_, ()),
        "sign": (1, sign(sign_consts), ()),
        "floor": (1, template("ffloor_{ct}({0})"), ("ffloor",)),
        "round": (1, template("fround_{ct}({0})"), ("fround",)),
        "isfinite": (1, template("math.isfinite({0})"), ()),
        "not": (1, lambda a, t: f"(not {a[0]})" if t.kind == "b" else f"(~{a[0]})", ()),
        "stop_gradient": (1, template("{0}"), ()),
        "copy": (1, template("{0}"), ()),
        "convert_element_type": (1, _convert, ()),
        "integer_pow": (1, integer_pow(ipow_negative), ()),
        "add": (2, wrapping("({0} + {1})"), ()),
        "sub": (2, wrapping("({0} - {1})"), ()),
        "mul": (2, wrapping("({0} * {1})"), ()),
        "div": (2, lambda a, t: (f"({a[0]} / {a[1]})" if (t.f or t.c)
                                 else f"idiv_{t.ct}({a[0]}, {a[1]})"), ("idiv",)),
        "rem": (2, lambda a, t: (f"{fmod}({a[0]}, {a[1]})" if t.f
                                 else f"irem_{t.ct}({a[0]}, {a[1]})"), ("idiv", "irem")),
        "pow": (2, template("({0} ** {1})"), ()),
        "max": (2, _maxmin(">"), ()),
        "min": (2, _maxmin("<"), ()),
        **{name: (2, template("({0} " + op + " {1})"), ()) for name, op in _INFIX.items()},
        "shift_left": (2, _shift(True), ()),
        "shift_right_logical": (2, _shift(False), ()),
        "select": (3, lambda a, t: f"({a[1]} if {a[0]} else {a[2]})", ()),
    }


_FFLOOR = """def ffloor_{ct}(x):
    if not (abs(x) < {ct}(4503599627370496.0)):
        return x
    return {ct}(math.floor(x))
"""

_FROUND = """def fround_{ct}(x):
    if not (abs(x) < {ct}(4503599627370496.0)):
        return x
    r = {ct}(math.floor(x))
    d = x - r
    if d > {ct}(0.5):
        r += {ct}(1)
    elif d == {ct}(0.5):
        h = {ct}(math.floor(r * {ct}(0.5)))
        if r - h * {ct}(2) != {ct}(0):
            r += {ct}(1)
    return r
"""


def _ipow_helper(cast: bool) -> str:
    rx, xx = ("{ct}(r * x)", "{ct}(x * x)") if cast else ("r * x", "x * x")
    return ("def ipow_{ct}(x, n):\n    r = {ct}(1)\n    while n > 0:\n        if n & 1:\n"
            f"            r = {rx}\n        x = {xx}\n        n >>= 1\n    return r\n")


def helper_templates(decorator: str, cast_products: bool) -> dict:
    """Source templates (format field ct, plus any of `decorator`'s) of the helpers floor, round
    and integer power, each under `decorator`; cast_products: the power casts each product."""
    bodies = {"ffloor": _FFLOOR, "fround": _FROUND, "ipow": _ipow_helper(cast_products)}
    return {name: f"\n{decorator}\n{body}" for name, body in bodies.items()}


def scalar(table: dict, name, args, t: T) -> tuple[str, set]:
    """Op `name` of `table` applied to argument expressions; returns the expression and the
    (helper, compute type) pairs it calls."""
    _, tmpl, helpers = table[name]
    expr = tmpl(args, t)
    used = {(h, t.ct) for h in helpers}
    used |= {("ipow", ct) for ct in re.findall(r"ipow_(\w+)\(", expr)}
    return expr, used


def helper_source(templates: dict, used: set, fill=None, **fields) -> str:
    """Source of the helpers in `used` ((name, compute type) pairs) from their `templates`,
    formatted with `fields` and fill(name, compute type)'s."""
    return "".join(templates[h].format(ct=ct, **fields, **(fill(h, ct) if fill else {}))
                   for h, ct in sorted(used))
