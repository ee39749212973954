"""Scalar code of each elementwise primitive for numba njit kernels (the CPU twin of the CUDA
table): one Python expression per op over operand expressions in a compute type, plus helpers.

The table itself is funcgrad/backends/scalar_exprs.py's, shared with the CUDA backend; this
module gives it the CPU's spellings (njit helpers, typed literals, numpy's fmod, erf and
negative integer powers). Integer results wrap as in numpy (each value is cast back to its
dtype; int64 arithmetic goes through uint64 so that LLVM never sees a signed overflow), NaNs
propagate as in numpy's maximum/minimum, and division by zero follows the numpy impls (IEEE for
floats, 0 for ints). float16 and bfloat16 have no numba CPU type: kernels take their arrays as
uint16 bits, decode them to float32, round each op's float32 result to the 16-bit type (ties
to even: what numpy's float16 and ml_dtypes' bfloat16 ufuncs, and XLA's CPU backend, do op by
op) and store the bits (`half`, HALF_HELPERS); loop drivers still leave them to numpy.
"""
from __future__ import annotations

import numpy as np

from funcgrad.backends import scalar_exprs as sx

# the supported dtypes' numba type names (their compute types)
from funcgrad.backends.scalar_exprs import NB
from funcgrad.core.dtypes import bfloat16, dtype_kind


def supported(dtype) -> bool:
    """Whether njit kernels can read and write `dtype` (float16 and complex cannot)."""
    return np.dtype(dtype).name in NB


def nbt(dtype) -> str:
    """The numba type name of a numpy dtype (the compute type too)."""
    return NB[np.dtype(dtype).name]


def half(dtype) -> str | None:
    """"bf16"/"f16" for bfloat16/float16 (16-bit storage, float32 compute), else None."""
    d = np.dtype(dtype)
    return "bf16" if d == bfloat16 else "f16" if d == np.float16 else None


def fusible(dtype) -> bool:
    """Whether fused kernels take `dtype`: njit's own types and the 16-bit floats."""
    return supported(dtype) or half(dtype) is not None


def ct(dtype) -> str:
    """The compute type of `dtype` in a kernel (float32 for the 16-bit floats)."""
    return "float32" if half(dtype) else nbt(dtype)


# (significand bits, exponent of the smallest normal, of the subnormal quantum, largest finite)
_HALF_FMT = {"bf16": (8, -126, -133, None), "f16": (11, -14, -24, 65504.0)}

_ROUND = """
@njit(cache=True, error_model="numpy")
def rnd_{h}(x):
    # x (float64) rounded to the nearest {h} value, ties to even, as a float32
    if x != x or x == 0.0 or math.isinf(x):
        return float32(x)
    m, e = math.frexp(x)
    if e <= {emin}:
        r = np.rint(x * {sub_up}) * {sub}
    else:
        r = math.ldexp(np.rint(m * {scale}), e - {nbits})
{overflow}    return float32(r)


@njit(cache=True, error_model="numpy")
def bits_{h}(y):
    # the {h} bits of a float32 holding a {h} value
    x = float64(y)
    s = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if x != x:
        return uint16(s | {nan})
    a = abs(x)
    if math.isinf(a):
        return uint16(s | {inf})
    if a == 0.0:
        return uint16(s)
    m, e = math.frexp(a)
    b = e + {bias1}
    if b <= 0:
        return uint16(s | int64(a * {sub_up}))
    return uint16(s | (b << {mbits}) | (int64(m * {scale}) - {half_scale}))


@njit(cache=True, error_model="numpy")
def dec_{h}(b):
    # the float32 value of {h} bits
    b = int64(b)
    s = -1.0 if b & 0x8000 else 1.0
    ex = (b >> {mbits}) & {emask}
    mt = b & {mmask}
    if ex == 0:
        return float32(s * mt * {sub})
    if ex == {emask}:
        return float32(s * math.inf) if mt == 0 else float32(math.nan)
    return float32(s * math.ldexp(float64({half_scale} + mt), ex - {dbias}))
"""


def half_helpers(kinds) -> str:
    """Source of the rounding, storing and decoding helpers of the 16-bit floats in `kinds`."""
    out = []
    for h in sorted(kinds):
        nbits, emin, esub, top = _HALF_FMT[h]
        mbits = nbits - 1
        ebits = 8 if h == "bf16" else 5
        over = "" if top is None else (f"    if abs(r) > {top!r}:\n"
                                       "        r = math.copysign(math.inf, r)\n")
        out.append(_ROUND.format(
            h=h, emin=emin, sub_up=f"{2.0 ** -esub!r}", sub=f"{2.0 ** esub!r}",
            scale=f"{2.0 ** nbits!r}", nbits=nbits, overflow=over, mbits=mbits,
            half_scale=2 ** mbits, emask=2 ** ebits - 1, mmask=2 ** mbits - 1,
            bias1=2 ** (ebits - 1) - 2, dbias=2 ** (ebits - 1) - 1 + mbits,
            nan=hex((2 ** ebits - 1) << mbits | 2 ** (mbits - 1)),
            inf=hex((2 ** ebits - 1) << mbits)))
    return "".join(out)


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
    **sx.helper_templates('@njit(cache=True, error_model="numpy")', cast_products=True),
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


def _sign_consts(t):
    return f"{t.ct}(0)", f"{t.ct}(1)", f"{t.ct}(-1)"


def _ipow_negative(x, y, t):
    # numpy: 1 / (x**|y| wrapped) in float64, cast back: +-1 stay, 1/0 = inf casts (x86)
    # to the 32-bit minimum, truncated to the type (so 0 for 8 and 16 bits), else 0
    p = f"{t.ct}({sx.int_power(x, -y, t)})"
    lo = np.iinfo(t.dtype).min if t.bits >= 32 else 0
    return f"(1 if {p} == 1 else (-1 if {p} == -1 else ({lo} if {p} == 0 else 0)))"


def _abs(a, t):
    if sx.signed64(t):
        return f"(int64(uint64(0) - uint64({a[0]})) if {a[0]} < 0 else {a[0]})"
    return f"abs({a[0]})"


# name -> (number of inputs, template(args, T) -> expression, helpers used)
OPS: dict = sx.ops(
    sign_consts=_sign_consts, ipow_negative=_ipow_negative, fmod="np.fmod", abs_=_abs,
    # the numpy impl evaluates math.erf in float64 and rounds: the same here, bit for bit
    erf=sx.template("math.erf(float64({0}))"))


INEXACT = sx.INEXACT


def exact(e) -> bool:
    """Whether the kernel computes equation e bit for bit as its numpy impl does."""
    name = e.prim.name
    if name == "integer_pow":
        return dtype_kind(e.out.aval.dtype) != "f" or e.params["y"] in (-1, 0, 1, 2)
    return name not in INEXACT


def scalar(name, args, dtype, out_dtype, params) -> tuple[str, set]:
    """Op `name` applied to argument expressions of (compute type of) `dtype`.

    Returns the expression, which yields `out_dtype` after a cast, and the (helper, compute
    type) pairs it calls.

    Example:
        >>> scalar("add", ["a", "b"], np.float32, np.float32, {})[0]
        '(a + b)'
    """
    return sx.scalar(OPS, name, args, sx.T(dtype, out_dtype, params, ct(dtype)))


def helper_source(used: set) -> str:
    """Source of the helper functions in `used` ((name, compute type) pairs)."""
    return sx.helper_source(HELPERS, used, _helper_fill)
