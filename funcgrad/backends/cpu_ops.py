"""Scalar code of each elementwise primitive for numba njit kernels (the CPU twin of the CUDA
table): one Python expression per op over operand expressions in a compute type, plus helpers.

Integer results wrap as in numpy (each value is cast back to its dtype; int64 arithmetic goes
through uint64 so that LLVM never sees a signed overflow), NaNs propagate as in numpy's
maximum/minimum, and division by zero follows the numpy impls (IEEE for floats, 0 for ints).
float16 has no numba CPU type: clusters touching it stay on numpy (see `supported`).
"""
from __future__ import annotations

import re

import numpy as np

# numba type names of the supported dtypes (all computed in their own type)
NB = {"float32": "float32", "float64": "float64", "int8": "int8", "uint8": "uint8",
      "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32",
      "int64": "int64", "uint64": "uint64", "bool": "boolean"}


def supported(dtype) -> bool:
    """Whether njit kernels can read and write `dtype` (float16 and complex cannot)."""
    return np.dtype(dtype).name in NB


def nbt(dtype) -> str:
    """The numba type name of a numpy dtype (the compute type too)."""
    return NB[np.dtype(dtype).name]


class T:
    """What an op template knows about its operand dtype."""

    def __init__(self, dtype, out_dtype, params):
        d = np.dtype(dtype)
        self.dtype, self.out = d, np.dtype(out_dtype)
        self.ct = nbt(d)
        self.kind = d.kind
        self.bits = d.itemsize * 8
        self.params = params

    f = property(lambda self: self.kind == "f")


# helpers, one per compute type (the type is part of each name)
HELPERS = {
    # lax.div on integers: truncation, 0 for a zero divisor; MIN // -1 wraps (x86 would trap)
    "idiv": """
@njit(cache=True, error_model="numpy")
def idiv_{ct}(x, y):
    if y == 0:
        return {ct}(0)
{neg1}    q = x // y
{trunc}    return {ct}(q)
""",
    "irem": """
@njit(cache=True, error_model="numpy")
def irem_{ct}(x, y):
    if y == 0:
        return {ct}(0)
    return {ct}({wrap_sub})
""",
    "ffloor": """
@njit(cache=True, error_model="numpy")
def ffloor_{ct}(x):
    if not (abs(x) < {ct}(4503599627370496.0)):
        return x
    return {ct}(math.floor(x))
""",
    "fround": """
@njit(cache=True, error_model="numpy")
def fround_{ct}(x):
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
""",
    "ipow": """
@njit(cache=True, error_model="numpy")
def ipow_{ct}(x, n):
    r = {ct}(1)
    while n > 0:
        if n & 1:
            r = {ct}(r * x)
        x = {ct}(x * x)
        n >>= 1
    return r
""",
}


def _helper_fill(name, ct):
    signed = ct.startswith("int")
    if name == "idiv":   # unsigned quotients need no rounding (and an int 1 would make a float)
        if not signed:
            return {"neg1": "", "trunc": ""}
        neg = "int64(uint64(0) - uint64(x))" if ct == "int64" else "-x"
        return {"neg1": f"    if y == -1:\n        return {ct}({neg})\n",
                "trunc": "    if q < 0 and q * y != x:\n        q += 1\n"}
    if name == "irem":
        q = f"idiv_{ct}(x, y)"
        if ct == "int64":
            return {"wrap_sub": f"int64(uint64(x) - uint64({q}) * uint64(y))"}
        return {"wrap_sub": f"x - {q} * y"}
    return {}


def _sign(a, t):
    z = f"{t.ct}(0)"
    one = f"{t.ct}(1)"
    return f"({one} if {a[0]} > {z} else ({t.ct}(-1) if {a[0]} < {z} else {a[0]}))"


def _logistic(a, t):
    x, c = a[0], t.ct
    return (f"(({c}(1) / ({c}(1) + math.exp(-{x}))) if {x} >= {c}(0) else "
            f"(math.exp({x}) / ({c}(1) + math.exp({x}))))")


def _ipow(a, t):
    y, x = t.params["y"], a[0]
    if t.f:
        if y == 0:
            return f"{t.ct}(1)"
        if y == 1:
            return x
        if y == 2:
            return f"({x} * {x})"
        return f"({x} ** {t.ct}({y}))"
    if y < 0:
        # numpy: 1 / (x**|y| wrapped) in float64, cast back: +-1 stay, 1/0 = inf casts (x86)
        # to the 32-bit minimum, truncated to the type (so 0 for 8 and 16 bits), else 0
        p = f"{t.ct}({_ipow([x], T(t.dtype, t.dtype, {'y': -y}))})"
        lo = np.iinfo(t.dtype).min if t.bits >= 32 else 0
        return f"(1 if {p} == 1 else (-1 if {p} == -1 else ({lo} if {p} == 0 else 0)))"
    if y == 0:
        return "1"
    if _signed64(t):
        return f"int64({_ipow(['uint64(' + x + ')'], T(np.uint64, np.uint64, t.params))})"
    return "(" + " * ".join([x] * y) + ")" if y <= 8 else f"ipow_{t.ct}({x}, {y})"


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
        if left and _signed64(t):
            body = f"int64(uint64({x}) << uint64({y}))"
        elif left:
            body = f"({x} << {y})"
        elif t.kind == "u":
            body = f"({x} >> {y})"
        else:
            u = f"uint{t.bits}"
            body = f"({t.out.name}({u}({x}) >> {u}({y})))"
        o = t.out.name
        return f"({o}({body}) if ({y} >= 0 and {y} < {t.bits}) else {o}(0))"
    return f


def _convert(a, t):
    if t.out == np.bool_:
        return f"({a[0]} != 0)"
    return a[0]


def _signed64(t) -> bool:
    return t.kind == "i" and t.bits == 64


def _wrapping(fmt):
    """An integer op that wraps: int64 goes through uint64 (no signed overflow for LLVM)."""
    def f(a, t):
        if _signed64(t):
            return "int64(" + fmt.format(*(f"uint64({x})" for x in a)) + ")"
        return fmt.format(*a)
    return f


def _u(fmt):
    return lambda a, t: fmt.format(*a, ct=t.ct)


def _erf(a, t):
    # the numpy impl evaluates math.erf in float64 and rounds: the same here, bit for bit
    return f"math.erf(float64({a[0]}))"


# name -> (number of inputs, template(args, T) -> expression, helpers used)
OPS: dict = {
    "neg": (1, lambda a, t: f"int64(uint64(0) - uint64({a[0]}))" if _signed64(t)
            else f"(-{a[0]})", ()),
    "exp": (1, _u("math.exp({0})"), ()),
    "log": (1, _u("math.log({0})"), ()),
    "log1p": (1, _u("math.log1p({0})"), ()),
    "expm1": (1, _u("math.expm1({0})"), ()),
    "tanh": (1, _u("math.tanh({0})"), ()),
    "logistic": (1, _logistic, ()),
    "sin": (1, _u("math.sin({0})"), ()),
    "cos": (1, _u("math.cos({0})"), ()),
    "sqrt": (1, _u("math.sqrt({0})"), ()),
    "rsqrt": (1, _u("({ct}(1) / math.sqrt({0}))"), ()),
    "erf": (1, _erf, ()),
    "abs": (1, lambda a, t: f"(int64(uint64(0) - uint64({a[0]})) if {a[0]} < 0 else {a[0]})"
            if _signed64(t) else f"abs({a[0]})", ()),
    "sign": (1, _sign, ()),
    "floor": (1, _u("ffloor_{ct}({0})"), ("ffloor",)),
    "round": (1, _u("fround_{ct}({0})"), ("fround",)),
    "isfinite": (1, _u("math.isfinite({0})"), ()),
    "not": (1, lambda a, t: f"(not {a[0]})" if t.kind == "b" else f"(~{a[0]})", ()),
    "stop_gradient": (1, _u("{0}"), ()),
    "copy": (1, _u("{0}"), ()),
    "convert_element_type": (1, _convert, ()),
    "integer_pow": (1, _ipow, ()),
    "add": (2, _wrapping("({0} + {1})"), ()),
    "sub": (2, _wrapping("({0} - {1})"), ()),
    "mul": (2, _wrapping("({0} * {1})"), ()),
    "div": (2, lambda a, t: f"({a[0]} / {a[1]})" if t.f else f"idiv_{t.ct}({a[0]}, {a[1]})",
            ("idiv",)),
    "rem": (2, lambda a, t: (f"np.fmod({a[0]}, {a[1]})" if t.f
                             else f"irem_{t.ct}({a[0]}, {a[1]})"), ("idiv", "irem")),
    "pow": (2, _u("({0} ** {1})"), ()),
    "max": (2, _maxmin(">"), ()),
    "min": (2, _maxmin("<"), ()),
    "eq": (2, _u("({0} == {1})"), ()),
    "ne": (2, _u("({0} != {1})"), ()),
    "lt": (2, _u("({0} < {1})"), ()),
    "le": (2, _u("({0} <= {1})"), ()),
    "gt": (2, _u("({0} > {1})"), ()),
    "ge": (2, _u("({0} >= {1})"), ()),
    "and": (2, _u("({0} & {1})"), ()),
    "or": (2, _u("({0} | {1})"), ()),
    "xor": (2, _u("({0} ^ {1})"), ()),
    "shift_left": (2, _shift(True), ()),
    "shift_right_logical": (2, _shift(False), ()),
    "select": (3, lambda a, t: f"({a[1]} if {a[0]} else {a[2]})", ()),
}


# ops whose numpy loops (SIMD exp/log/pow/...) round differently from libm in some last bits
INEXACT = frozenset({"exp", "log", "log1p", "expm1", "tanh", "logistic", "sin", "cos", "pow"})


def exact(e) -> bool:
    """Whether the kernel computes equation e bit for bit as its numpy impl does."""
    name = e.prim.name
    if name == "integer_pow":
        return e.out.aval.dtype.kind != "f" or e.params["y"] in (-1, 0, 1, 2)
    return name not in INEXACT


def scalar(name, args, dtype, out_dtype, params) -> tuple[str, set]:
    """Op `name` applied to argument expressions of (compute type of) `dtype`.

    Returns the expression, which yields `out_dtype` after a cast, and the (helper, compute
    type) pairs it calls.

    Example:
        >>> scalar("add", ["a", "b"], np.float32, np.float32, {})[0]
        '(a + b)'
    """
    _, tmpl, helpers = OPS[name]
    t = T(dtype, out_dtype, params)
    expr = tmpl(args, t)
    used = {(h, t.ct) for h in helpers}
    used |= {("ipow", ct) for ct in re.findall(r"ipow_(\w+)\(", expr)}
    return expr, used


def helper_source(used: set) -> str:
    """Source of the helper functions in `used` ((name, compute type) pairs)."""
    return "".join(HELPERS[h].format(ct=ct, **_helper_fill(h, ct)) for h, ct in sorted(used))
