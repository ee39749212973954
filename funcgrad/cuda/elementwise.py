"""Elementwise primitives: one scalar-op table and one generated kernel template.

Each op is a Python expression over the loaded operands a0, a1, ... in a compute type (float16
computes in float32); the table is funcgrad/backends/scalar_exprs.py's, shared with the CPU
backend, given the CUDA spellings here (device helpers, complex rows, iota). The template is a
grid-stride loop over the output; each operand is read as 'c' (contiguous: element i), 's' (a
broadcast scalar: one element) or 'g' (general strides, index math over the coalesced shape).
Dims of size 1 are dropped and adjacent dims that are contiguous for every operand are merged
first, so kernels are compiled per (op, dtypes, layouts, coalesced rank, static params), never
per shape.
"""
from __future__ import annotations

import numpy as np

from funcgrad.backends import scalar_exprs as sx
from funcgrad.core.dtypes import STORAGE_ONLY_DTYPES
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, c_strides, const, pool, zero_const, zeros

# ---------------------------------------------------------------------------------------------
# type helpers and the scalar-op table (shared with the CPU backend: backends/scalar_exprs.py)
# ---------------------------------------------------------------------------------------------

# bfloat16 is stored as its bits (funcgrad/cuda/half.py), the float8 types as bytes that only
# copies move (no kernel computes on them: compute_t raises)
STORAGE_ONLY = frozenset(np.dtype(d).name for d in STORAGE_ONLY_DTYPES)
NB = {"float16": "float16", **sx.NB, "complex64": "complex64", "complex128": "complex128",
      "bfloat16": "uint16", **{n: "uint8" for n in STORAGE_ONLY}}
HALF = ("float16", "bfloat16")   # computed in float32


def nbt(dtype) -> str:
    """The numba type name of a numpy dtype (of its storage: uint16 for bfloat16)."""
    return NB[np.dtype(dtype).name]


def compute_t(dtype) -> str:
    """The numba type a kernel computes values of `dtype` in (float32 for 16-bit floats)."""
    d = np.dtype(dtype)
    if d.name in STORAGE_ONLY:
        raise TypeError(f"the CUDA backend has no kernel computing on {d.name} (a storage-only "
                        "type: convert it to float32 or bfloat16 first)")
    return "float32" if d.name in HALF else nbt(d)


def load(dtype, ref: str) -> str:
    """Source of an element `ref` of a `dtype` array as a value of its compute type."""
    if np.dtype(dtype).name == "bfloat16":
        return f"bf16_ld({ref})"
    return f"{compute_t(dtype)}({ref})"


def storer(dtype) -> str:
    """The function turning a compute-type value into an element of a `dtype` array (its
    numba type; bfloat16: bf16_st, its bits rounded to nearest even)."""
    return "bf16_st" if np.dtype(dtype).name == "bfloat16" else nbt(dtype)


def store(dtype, expr: str) -> str:
    """Source of a compute-type value `expr` as an element of a `dtype` array."""
    return f"{storer(dtype)}({expr})"


def rounded(dtype, expr: str) -> str:
    """`expr` cast to the compute type of `dtype`, rounded to `dtype` first where that type is
    wider (a bfloat16 intermediate of a fused kernel: the value a store would keep)."""
    if np.dtype(dtype).name == "bfloat16":
        return f"bf16_rnd({expr})"
    return f"{compute_t(dtype)}({expr})"


# helper device functions, specialised per compute type (typed constants keep float32 float32,
# and uint64 uint64: numba unifies uint64 with a plain int literal as float64, which rounds);
# the type is part of each name so that one fused kernel can hold helpers for several types
HELPERS = {
    "idiv": """
@cuda.jit(device=True, {opts})
def idiv_{ct}(x, y):
    if y == {ct}(0):
        return {ct}(0)
    q = {ct}(x // y)
    if q < {ct}(0) and q * y != x:
        q += {ct}(1)
    return q
""",
    "irem": """
@cuda.jit(device=True, {opts})
def irem_{ct}(x, y):
    if y == {ct}(0):
        return {ct}(0)
    return {ct}(x - idiv_{ct}(x, y) * y)
""",
    **sx.helper_templates("@cuda.jit(device=True, {opts})", cast_products=False),
}


def _sign_consts(t):
    if t.f:
        return f"{t.ct}(0)", f"{t.ct}(1)", f"-{t.ct}(1)"
    return "0", "1", "-1"


def _ipow_negative(x, y, t):
    # numpy: 1 / x**|y| cast back to an integer
    lo = np.iinfo(t.dtype).min
    odd = y % 2 != 0
    return (f"(1 if {x} == 1 else ({('-1 if ' + x + ' == -1 else ') if t.kind == 'i' else ''}"
            f"({lo} if {x} == 0 else 0)))" if odd else
            f"(1 if ({x} == 1 or {x} == -1) else ({lo} if {x} == 0 else 0))")


# name -> (number of inputs, template(args, T) -> expression, helpers used)
OPS: dict = {
    **sx.ops(sign_consts=_sign_consts, ipow_negative=_ipow_negative, fmod="math.fmod",
             erf=sx.template("math.erf({0})"), abs_=sx.template("abs({0})")),
    "iota": (0, lambda a, t: "i", ()),
    # complex primitives (funcgrad/prims/complex.py)
    "real": (1, sx.template("({0}).real"), ()),
    "imag": (1, sx.template("({0}).imag"), ()),
    "conj": (1, lambda a, t: f"({a[0]}).conjugate()" if t.c else a[0], ()),
    "complex": (2, sx.template("complex({0}, {1})"), ()),
}


# ---------------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------------

def coalesce(shape, strides_list):
    """Drop size-1 dims and merge dims that are contiguous with each other for every operand."""
    dims = []
    for k, n in enumerate(shape):
        if n == 1:
            continue
        ss = [s[k] for s in strides_list]
        if dims:
            pn, pss = dims[-1]
            if all(ps == s * n for ps, s in zip(pss, ss)):
                dims[-1] = (pn * n, ss)
                continue
        dims.append((n, ss))
    shape = tuple(n for n, _ in dims)
    return shape, [tuple(ss[j] for _, ss in dims) for j in range(len(strides_list))]


def layout(shape, strides) -> str:
    if all(s == 0 for s in strides) or not shape:
        return "s" if shape else "c"
    return "c" if tuple(strides) == c_strides(shape) else "g"


def scalar(name, args, dtype, out_dtype, params) -> tuple[str, set]:
    """Op `name` applied to argument expressions of (compute type of) `dtype`.

    Returns the expression, which yields the compute type of `out_dtype` after a cast, and the
    (helper, compute type) pairs it calls; the elementwise and the fused kernels both use it.
    """
    return sx.scalar(OPS, name, args, sx.T(dtype, out_dtype, params, compute_t(dtype)))


def helper_source(used: set, opts: str) -> str:
    """Source of the helper device functions in `used` ((name, compute type) pairs)."""
    return sx.helper_source(HELPERS, used, opts=opts)


def coordinates(rank: int, c: str, s: str, idx32: bool) -> list:
    """Source lines splitting the flat index `i` into coordinates c0..c{rank-1} (names
    f"{c}{d}") of the shape s0..s{rank-1} (names f"{s}{d}"). idx32 (fewer than 2^31 elements):
    32-bit unsigned division, since a 64-bit one is a long software sequence on the GPU (it
    bound W2's bias-broadcast kernels: gelu backward 51 us for 75 MB on an H200)."""
    if idx32:
        lines = ["r = uint32(i)"]
        for d in range(rank - 1, 0, -1):
            lines += [f"{c}{d} = int64(r % uint32({s}{d}))", f"r = r // uint32({s}{d})"]
        return lines + [f"{c}0 = int64(r)"]
    lines = ["r = i"]
    for d in range(rank - 1, 0, -1):
        lines += [f"{c}{d} = r % {s}{d}", f"r = r // {s}{d}"]
    return lines + [f"{c}0 = r"]


def _source(name, dtypes, out_dtype, lays, out_lay, rank, params, idx32=False):
    opts = runtime.jit_opts()
    need_g = out_lay == "g" or "g" in lays
    args = ["n", "o", "oo"] + ([f"os{k}" for k in range(rank)] if out_lay == "g" else [])
    for j, lay in enumerate(lays):
        args += [f"x{j}", f"x{j}o"] + ([f"x{j}s{k}" for k in range(rank)] if lay == "g" else [])
    if need_g:
        args += [f"d{k}" for k in range(rank)]
    body = ["    i = cuda.grid(1)", "    step = cuda.gridsize(1)", "    while i < n:"]
    if need_g:
        body += ["        " + x for x in coordinates(rank, "k", "d", idx32)]

    def off(prefix, base, lay):
        if lay == "c":
            return f"{base} + i"
        if lay == "s":
            return base
        return base + "".join(f" + k{k} * {prefix}s{k}" for k in range(rank))

    names = []
    # a copy between equal types moves the stored bits (any dtype, float8 included)
    raw = name == "copy" and all(np.dtype(d) == np.dtype(out_dtype) for d in dtypes)
    for j, (lay, dt) in enumerate(zip(lays, dtypes)):
        ref = f"x{j}[{off(f'x{j}', f'x{j}o', lay)}]"
        body.append(f"        a{j} = {ref if raw else load(dt, ref)}")
        names.append(f"a{j}")
    if raw:
        expr, helpers = names[0], set()
    else:
        expr, helpers = scalar(name, names, dtypes[0] if dtypes else out_dtype, out_dtype,
                               params)
    body.append(f"        o[{off('o', 'oo', out_lay)}] = {expr if raw else store(out_dtype, expr)}")
    body.append("        i += step")
    src = helper_source(helpers, opts)
    src += f"\n@cuda.jit({opts})\ndef kernel({', '.join(args)}):\n" + "\n".join(body) + "\n"
    return src


_plans: dict = {}   # (op, dtypes, shape, strides...) -> (kernel, geometry, layouts): no re-planning


def _plan(name, ins, out_dtype, out, params):
    cshape, cstr = coalesce(out.shape, [out.strides] + [b.strides for b in ins])
    rank = len(cshape)
    out_lay = layout(cshape, cstr[0])
    lays = tuple(layout(cshape, s) for s in cstr[1:])
    dtypes = tuple(b.dtype.name for b in ins)
    general = "g" in lays or out_lay == "g"
    idx32 = general and out.size < 2 ** 31
    key = ("ew", name, dtypes, np.dtype(out_dtype).name, lays, out_lay,
           rank if general else -1, tuple(sorted(params.items())), idx32)
    k = runtime.kernel(key, lambda: _source(name, dtypes, out_dtype, lays, out_lay, rank,
                                            params, idx32))
    blocks, threads = runtime.grid_1d(out.size)
    return (k[blocks, threads, runtime.stream()] if not runtime.SIM else (k, blocks, threads),
            list(cstr[0]) if out_lay == "g" else [],
            [list(st) if lay == "g" else [] for lay, st in zip(lays, cstr[1:])],
            list(cshape) if general else [])


def run(name, ins, out_dtype, params=None, out: DeviceBuffer | None = None, shape=None):
    """Apply op `name` elementwise; writes into `out` (a view) if given, else a new buffer."""
    if out is None:
        out = pool().empty(ins[0].shape if ins else shape, out_dtype)
    n = out.size
    if n == 0:
        return out
    pkey = (name, out_dtype, out.shape, out.strides, runtime._stream,
            tuple((b.dtype, b.strides) for b in ins),
            tuple(sorted(params.items())) if params else ())
    plan = _plans.get(pkey)
    if plan is None:
        if len(_plans) > 20000:
            _plans.clear()
        plan = _plans[pkey] = _plan(name, ins, out_dtype, out, params or {})
    launch, ostr, istr, dims = plan
    args = [n, out.arr(), out.offset, *ostr]
    for b, st in zip(ins, istr):
        args += [b.arr(), b.offset, *st]
    args += dims
    if runtime.SIM:   # the simulator's configured kernels are not reusable objects
        k, blocks, threads = launch
        k[blocks, threads, runtime.stream()](*args)
    else:
        launch(*args)
    return out


def contiguous(buf: DeviceBuffer) -> DeviceBuffer:
    """buf itself when C-contiguous, else a contiguous copy.

    Eagerly (outside a plan's steps, dry run and capture) a broadcast of a zero constant is
    copied by a driver memset: a jit's first call makes its zero arguments (an optimizer's
    freshly initialized state) contiguous so, and a first kernel compiled in this process
    there cost 0.5-0.9 s on an H200 host (numba's typing set-up, NVVM, the linker)."""
    if buf.is_contiguous():
        return buf
    if (runtime._step is None and not runtime.dry_run and runtime._stream is None
            and zero_const(buf)):
        return zeros(buf.shape, buf.dtype)
    return run("copy", [buf], buf.dtype)


def fill(out: DeviceBuffer, value) -> DeviceBuffer:
    """Write `value` into every element of `out`."""
    c = const(value, out.dtype)
    return run("copy", [c.view(out.shape, (0,) * out.ndim, c.offset)], out.dtype, out=out)
