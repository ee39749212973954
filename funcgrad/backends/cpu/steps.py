"""How a CPU plan runs each equation: its list of steps (cpu_plan.Program emits them as code).

A fusible cluster is a numba njit kernel (cpu_kernels); a matrix product is the BLAS runner
called into its buffer (cpu_blas), a transposed one computed already transposed; sums over
leading axes, softmax cross-entropy and the norms (forward and backward) have njit twins of
their numpy impls, bit for bit; attention has fused kernels (cpu_attention); a
loop primitive runs its bodies as programs (STEP_BUILDERS, filled by cpu_loops); anything else
is its numpy impl. Every step knows its equation, so errors point at the user's line.
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np

from funcgrad import prims as P
from funcgrad.compile.clustering import external_inputs, fusible, plan_steps
from funcgrad.core import Lit
from funcgrad.backends.cpu import (
    blas as cpu_blas,
    kernels as cpu_kernels,
    ops as cpu_ops,
    parallel as cpu_parallel,
    rows as cpu_rows,
)
from funcgrad.core.dtypes import compute_dtype, dtype_kind, is_half

# primitives with an njit twin of their numpy impl (bit for bit), used by fused programs
# (builder(x aval, params) -> f(*operands, out) or None)
ROW_TWINS = {
    "softmax_xent": lambda a, prm: cpu_rows.xent_into(a),
    "softmax_xent_bwd": lambda a, prm: cpu_rows.xent_bwd_into(a),
    "layer_norm": lambda a, prm: cpu_rows.norm_into(a, True, False, prm["eps"]),
    "layer_norm_bwd": lambda a, prm: cpu_rows.norm_into(a, True, True, prm["eps"]),
    "rms_norm": lambda a, prm: cpu_rows.norm_into(a, False, False, prm["eps"]),
    "rms_norm_bwd": lambda a, prm: cpu_rows.norm_into(a, False, True, prm["eps"]),
}
# primitive -> builder(eqn, fuse) -> fn(*operands): how the plan runs that primitive's equations
# instead of its numpy impl (fn.kernels, if set, counts the kernels fn runs); the loop
# primitives register here (cpu_loops: bodies as compiled programs)
STEP_BUILDERS: dict = {}


def exact_only() -> bool:
    """Whether kernels leave out ops that numpy rounds differently (exp, tanh, pow, ...: see
    cpu_ops.INEXACT), so that a jitted result is the numpy interpreter's bit for bit. Those
    ops then run as numpy calls between kernels; FUNCGRAD_CPU_EXACT=0 fuses them too (results
    then agree with numpy to an ulp or two)."""
    return os.environ.get("FUNCGRAD_CPU_EXACT", "1") != "0"


class Step:
    """One line of the generated function: `kind` is "np" (out = fn(*ins)), "into"
    (fn(*ins, out): a product or a column sum into its buffer), "kernel" or "alias"."""
    __slots__ = ("kind", "eqn", "outs", "ins", "fn", "extra", "cluster", "flat", "stored")

    def __init__(self, kind, eqn, outs, ins, fn, extra=None):
        self.kind, self.eqn, self.outs, self.ins, self.fn = kind, eqn, outs, ins, fn
        self.extra = extra
        # kernels: their cluster, whether they loop flat, outputs stored into an operand
        self.cluster, self.flat, self.stored = None, False, set()


def fold_constants(steps, known):
    """Runs numpy steps whose operands are all constants once, now (their results join
    `known`); a step that raises stays in the plan, to raise at the user's line."""
    out = []
    for s in steps:
        if s.kind == "np" and all(isinstance(x, Lit) or x in known for x in s.ins):
            vals = [x.val if isinstance(x, Lit) else known[x] for x in s.ins]
            try:
                with np.errstate(all="ignore"):
                    known[s.outs[0]] = s.fn(*vals)
                continue
            except Exception:   # noqa: BLE001 (kept: it raises again, at its line, when run)
                pass
        out.append(s)
    return out


def build_steps(expr, fuse, blas_held=False):
    """The plan's steps in order: kernels for fusible clusters, matmuls, numpy impls."""
    keep = {o for o in expr.outs if not isinstance(o, Lit)}
    swapped = _transposed_dots(expr, keep)   # transpose equation -> its dot equation
    folded = {d.out for d in swapped.values()}
    split = cpu_parallel.split_min_work()
    plain = []   # ("eqn", e) | ("kernel", cluster)
    exact = exact_only()

    def join(e):
        return fusible(e) and (not exact or cpu_ops.exact(e))
    clustered = plan_steps(expr, join)
    if fuse:
        clustered = inline_fills(clustered, expr)
    for kind, s in clustered:
        if kind == "fused" and fuse and cpu_kernels.can_fuse(s):
            plain.append(("kernel", s))
        elif kind == "fused":
            plain += [("eqn", e) for e in s.eqns]
        else:
            plain.append(("eqn", s))
    np_users = {}   # var -> equations run by numpy that read it; kernels count as None
    for kind, s in plain:
        if kind == "eqn":
            for x in s.inputs:
                np_users.setdefault(x, []).append(s)
        else:
            for x in external_inputs(s):
                np_users.setdefault(x, []).append(None)
    lazy = {e.out for kind, e in plain if kind == "eqn" and e.prim is P.broadcast_in_dim_p
            and e.out not in keep and all(u is not None and u.prim.kind == "elementwise"
                                          for u in np_users.get(e.out, ()))}
    steps = []
    for kind, s in plain:
        if kind == "kernel":
            steps.append(kernel_step(s, split))
            continue
        e = s
        if e.out in folded:   # computed, already transposed, by its transpose's step
            continue
        d = swapped.get(e)
        if d is not None:
            (lc, rc), _ = d.params["dimension_numbers"]
            # (x . y)^T = y . x with the contracting dims swapped: a contiguous result
            dn = ((rc, lc), ((), ()))
            x, y = d.inputs[1], d.inputs[0]
            into = _dot_into(x.aval, y.aval, dn, e.out.aval, blas_held)
            if into is not None:
                steps.append(_into_step(e, [x, y], into))
            else:
                fn = functools.partial(d.prim.impl, dimension_numbers=dn)
                steps.append(Step("np", e, [e.out], [x, y], fn))
            continue
        if e.out in lazy and e.inputs[0].aval.ndim == 0:
            steps.append(Step("alias", e, [e.out], [e.inputs[0]], None))
            continue
        if fuse and e.prim.name in ROW_TWINS:
            into = ROW_TWINS[e.prim.name](e.inputs[0].aval, e.params)
            if into is not None:
                steps.append(Step("into", e, [e.out], list(e.inputs), into))
                continue
        if fuse and e.prim is P.reduce_sum_p:
            into = _colsum_into(e.inputs[0].aval, e.params["axes"])
            if into is not None:
                steps.append(Step("into", e, [e.out], list(e.inputs), into))
                continue
        if e.prim is P.dot_general_p:
            into = _dot_into(e.inputs[0].aval, e.inputs[1].aval,
                             e.params["dimension_numbers"], e.out.aval, blas_held)
            if into is not None:
                steps.append(_into_step(e, list(e.inputs), into))
                continue
        build = STEP_BUILDERS.get(e.prim)
        if build is not None:
            steps.append(Step("np", e, [e.out], list(e.inputs), build(e, fuse)))
            continue
        if e.prim is P.reduce_sum_p and e.params["axes"] and not any(x in lazy for x in e.inputs):
            steps.append(Step("np", e, [e.out], list(e.inputs), _sum_of(e)))
            continue
        fn, params = e.prim.impl, e.params
        if e.out in lazy:  # a reshape; numpy broadcasts inside the consumers
            fn, params = _expand_only(e.inputs[0].aval.shape, **e.params), {}
        elif any(x in lazy for x in e.inputs) and not any(
                x not in lazy and x.aval.shape == e.out.aval.shape for x in e.inputs):
            fn = _full_shape(fn, e.out.aval.shape)   # every operand was broadcast
        fn = functools.partial(fn, **params) if params else fn
        steps.append(Step("np", e, [e.out], list(e.inputs),
                           _fresh(fn) if e.prim in FRESH else fn))
    return steps


# primitives whose numpy impls always return a new array (never a view of an operand), so that
# cpu_memory and donation need not treat their results as views (a KV cache's update)
FRESH = frozenset((P.dynamic_slice_p, P.dynamic_update_slice_p))


def _fresh(fn):
    def run(*args):
        return fn(*args)
    run.fresh = True
    return run


def kernel_step(c, split, into=None):
    """The step running cluster c's kernel (outputs `into` operands: see kernel_for)."""
    k, fs = cpu_kernels.kernel_for(c, into)
    n = math.prod(c.shape) if fs.flat else (c.shape[0] if c.shape else 0)
    work = math.prod(c.shape) * sum(e.prim.name in cpu_ops.OPS for e in c.eqns)
    if split is not None and work >= split and n >= 2:
        step = Step("kernel", c.eqns[-1], list(c.outputs), fs.inputs, _halves(k, n))
    else:   # the outer loop's range goes last (rank-0 kernels have none)
        step = Step("kernel", c.eqns[-1], list(c.outputs), fs.inputs, k,
                     f", 0, {n}" if c.shape else "")
    step.cluster, step.flat = c, fs.flat
    step.stored = {c.outputs[j] for j in fs.into}
    return step


def _sum_of(e):
    """reduce_sum's impl, np.sum(x, axes, dtype=x.dtype), as the ufunc reduction np.sum calls
    (the same result; 1.2 instead of 3 us for a 32x64 float32 sum: np.sum's Python layer)."""
    axes, reduce = tuple(e.params["axes"]), np.add.reduce
    acc = compute_dtype(e.inputs[0].aval.dtype)
    if acc != e.inputs[0].aval.dtype:   # float16/bfloat16: summed in float32, rounded once
        def total(x):
            return reduce(x, axes, acc).astype(x.dtype)
        total.fresh = True
        return total

    def total(x):
        return reduce(x, axes, x.dtype)
    total.fresh = True   # a new array: cpu_memory need not keep its operand's space
    return total


def inline_fills(clustered, expr):
    """Kernels that read a constant fill another kernel wrote (a broadcast literal, e.g. the
    zeros that CSE shares between a ReLU and the backward selects) compute it in registers
    instead, and the writer stops storing it when nothing else reads it.

    In C2 one 256x512 array of zeros was written and read three times per step (2 MiB of
    the 6 MiB that the four ReLU and select kernels moved)."""
    fills = {e.out: e for kind, c in clustered if kind == "fused" for e in c.eqns
             if e.prim is P.broadcast_in_dim_p and isinstance(e.inputs[0], Lit)}
    if not fills:
        return clustered
    changed = False
    for kind, c in clustered:
        if kind != "fused" or not cpu_kernels.can_fuse(c):
            continue
        for v in external_inputs(c):
            e = fills.get(v)
            if e is not None and v.aval.shape == c.shape:
                c.eqns.insert(0, e)
                c.members.add(v)
                c.recomputed.add(v)
                changed = True
    if not changed:
        return clustered
    used = {o for o in expr.outs if not isinstance(o, Lit)}
    for kind, c in clustered:
        if kind == "eqn":
            used.update(x for x in c.inputs if not isinstance(x, Lit))
        else:
            used.update(external_inputs(c))
    out = []
    for kind, c in clustered:
        if kind == "fused":
            c.outputs = [o for o in c.outputs if o in used]
            if not c.outputs:
                continue
        out.append((kind, c))
    return out


def _halves(kernel, n):
    """kernel(*args, lo, hi) over [0, n) in chunks shared by two threads (cpu_parallel)."""
    parts = cpu_parallel.bounds(n)

    def run(*args):
        cpu_parallel.run_chunks([lambda lo=lo, hi=hi: kernel(*args, lo, hi)
                                 for lo, hi in parts])
    return run


def _colsum_into(aval, axes):
    """f(x, out): a sum over leading axes as an njit kernel adding rows in order, which is
    numpy's own order for it (bit for bit), or None for other sums (numpy runs them).
    The sum of a whole float vector (a loss's mean) is cpu_rows' twin of numpy's pairwise
    sum: after a product, np.sum of 256 floats took 20-35 us in C2's step (3 us warm), the
    twin shares the njit dispatch path the softmax-CE kernels just ran."""
    nd, k = aval.ndim, len(axes)
    if nd == 1 and k == 1 and cpu_rows.rows_ok(aval):
        row_sums = cpu_rows.row_sums_kernel(aval.dtype)
        n = aval.shape[0]

        def total(x, out):
            row_sums(x.reshape(1, n), out.reshape(1))
        return total
    if (tuple(axes) != tuple(range(k)) or k == nd or dtype_kind(aval.dtype) not in "fiu"
            or not cpu_ops.supported(aval.dtype)):
        return None
    m, n = math.prod(aval.shape[:k]), math.prod(aval.shape[k:])
    if m < 1 or n < 2:   # a single column is a contiguous (pairwise) sum in numpy
        return None
    kernel = cpu_kernels.colsum_kernel()
    one = nd - k == 1

    def into(x, out):
        kernel(x.reshape(m, n), out if one else out.reshape(n))
    return into


def _into_step(e, ins, into):
    """The step of a product: the BLAS runner called on the operands or their transposed views
    right in the plan's line when they are matrices (a product's Python path is run cold,
    after the previous product streamed through the cache: fewer frames, less time)."""
    direct = getattr(into, "direct", None)
    if direct is None:
        return Step("into", e, [e.out], ins, into)
    return Step("into", e, [e.out], ins, direct[0], direct[1])


def _dot_into(xa, ya, dimension_numbers, out_aval, blas_held=False):
    """f(x, y, out): np.matmul of the operands as matrices into `out` (as its (m, n) matrix: a
    [B, T, D] activation times a weight too), or None when the product is not one matmul of
    views (the numpy impl takes it then)."""
    (lc, rc), (lb, _) = dimension_numbers
    if (lb or not out_aval.ndim or not out_aval.size or xa.dtype != out_aval.dtype
            or ya.dtype != out_aval.dtype or dtype_kind(out_aval.dtype) not in "fiu"
            or is_half(out_aval.dtype)):   # 16-bit floats: the impl's float32 product
        return None
    mx, my = _matrix(xa, lc, False), _matrix(ya, rc, True)
    if mx is None or my is None:
        return None
    m = math.prod(d for i, d in enumerate(xa.shape) if i not in lc)
    n = math.prod(d for i, d in enumerate(ya.shape) if i not in rc)
    k = math.prod(xa.shape[i] for i in lc)
    mm = cpu_blas.matmul_into(m, n, k, blas_held)
    if out_aval.shape == (m, n):
        def into(x, y, out):
            mm(mx(x), my(y), out)
        if xa.ndim == 2 and ya.ndim == 2:   # the plan calls mm on x or x.T directly
            into.direct = (mm, ("" if lc[0] == 1 else ".T", "" if rc[0] == 0 else ".T"))
    else:
        def into(x, y, out):
            mm(mx(x), my(y), out.reshape(m, n))
    return into


def _matrix(aval, contract, contract_first):
    """a -> a as a matrix with the contracting dims first (or last), as prims._as_matrix."""
    nd, nc = aval.ndim, len(contract)
    if not nc or not math.prod(aval.shape[i] for i in contract):
        return None
    if nd == 2 and nc == 1:
        last = contract[0] == 1
        return (lambda a: a.T) if last == contract_first else (lambda a: a)
    if tuple(contract) in (tuple(range(nc)), tuple(range(nd - nc, nd))):
        return lambda a: P._as_matrix(a, contract, contract_first)
    return None


def _transposed_dots(expr, keep):
    """{transpose: the dot it reads}, for 2-D matrix products read only by a transpose (the
    backward pass's weight gradients); numpy would otherwise add the strided view slowly."""
    users = {}
    for e in expr.eqns:
        for x in e.inputs:
            users.setdefault(x, []).append(e)
    out = {}
    for e in expr.eqns:
        if e.prim is P.dot_general_p and e.out not in keep and e.out.aval.ndim == 2:
            (lc, rc), (lb, _) = e.params["dimension_numbers"]
            u = users.get(e.out, [])
            if (not lb and len(lc) == 1 and len(u) == 1 and u[0].prim is P.transpose_p
                    and all(x.aval.ndim == 2 for x in e.inputs)):
                out[u[0]] = e
    return out


def _expand_only(in_shape, *, shape, broadcast_dimensions):
    """x reshaped so that numpy broadcasting maps its axes to broadcast_dimensions."""
    if not in_shape:
        return lambda x: x
    dims = list(broadcast_dimensions)
    target = tuple(in_shape[dims.index(d)] if d in dims else 1 for d in range(len(shape)))
    return lambda x: x.reshape(target)


def _full_shape(fn, shape):
    def run(*args, **params):
        out = fn(*args, **params)
        return out if np.shape(out) == shape else np.broadcast_to(out, shape)
    return run
