"""Compiled loop drivers: a scan or while_loop whose bodies are fused kernels runs as one njit call.

A loop body built into a cpu_plan.Program (cpu_loops) runs its iterations as Python: each step
calls its kernels through numba's dispatcher, some microseconds an iteration. When every step
of the body (and of a while_loop's condition) is a fused elementwise kernel, this module writes
one njit function, the driver, that runs the whole loop: the kernels' functions (the same
source cpu_kernels generates, so the same machine code and the same bits) are copied into the
driver's module, and the driver calls them once per iteration, reads x rows, writes y rows and
renames the carry. Every value a kernel writes has a buffer of its own for the run; a carry a
kernel writes swaps buffers with the carry it replaces (no copy), any other (a passed-through
operand, a literal) is copied into a spare buffer, then swapped. The module is
content-addressed like the kernels' (cpu_kernels.module_from_source), so numba caches the
driver on disk. Besides kernels a driven body may read a row of an array at a traced index
(`take` along the first axis with one index: a view, the index checked as numpy's impl checks
it, an error named at the user's line), slice and reshape values (views; a slice that is not
a run of rows is copied), sum them where the plan's njit sums are numpy's bit for bit (floats
pairwise along the last axis or over every axis, rows added in order over leading axes,
integers over any), and take the maximum or minimum of integers and booleans. Bodies with
other steps (BLAS products, other numpy calls, loops, callbacks) are not driven: they keep
cpu_loops' generated Python loop. A while_loop's driver returns to Python every WHILE_CHUNK
iterations (and is called again), so that Ctrl-C stops it.
"""
from __future__ import annotations

import math
import os

import numpy as np

from funcgrad import prims as P
from funcgrad.backends import kernel_files
from funcgrad.backends.cpu import kernels as cpu_kernels, ops as cpu_ops, rows as cpu_rows
from funcgrad.backends.cpu.ops import nbt
from funcgrad.core import Lit, ShapedArray
from funcgrad.core.dtypes import dtype_kind

_OPTS = 'cache=True, nogil=True, error_model="numpy"'
# a while_loop's driver returns to Python after this many iterations and is called again with
# its carry, so that Ctrl-C can stop a loop that never ends (about 5 ms of a scalar body)
WHILE_CHUNK = 1 << 20


def enabled() -> bool:
    """Whether loops whose bodies are fused kernels get drivers (FUNCGRAD_CPU_LOOP_DRIVERS=0:
    never; read when a loop's bodies are built)."""
    return os.environ.get("FUNCGRAD_CPU_LOOP_DRIVERS", "1") != "0"


def _take_ok(s) -> bool:
    x, idx = s.ins
    return (not isinstance(x, Lit) and not isinstance(idx, Lit) and s.eqn.params["axis"] == 0
            and idx.aval.shape in ((), (1,)) and idx.aval.dtype != np.uint64
            and x.aval.shape[0] > 0)


def _dslice_ok(s) -> bool:
    """dynamic_slice of an array at rank-0 integer starts (a window copied out)."""
    x, *starts = s.ins
    return (not isinstance(x, Lit) and x.aval.ndim > 0 and s.outs[0].aval.size > 0
            and all(st.aval.ndim == 0 and dtype_kind(st.aval.dtype) in "iu"
                    and st.aval.dtype != np.uint64 for st in starts))


def _reshape_ok(s) -> bool:
    (x,) = s.ins
    return not isinstance(x, Lit) and (x.aval.ndim > 0 or s.outs[0].aval.ndim == 0)


def _slice_ok(s) -> bool:
    return not isinstance(s.ins[0], Lit) and s.outs[0].aval.size > 0


def _sum_kind(s):
    """How a driver sums: "rows" (cpu_rows' twin of numpy's pairwise sums along the last
    axis), "all" (every axis of a float array: one row), "cols" (over leading axes, adding
    rows in numpy's order: cpu_kernels' column sum), "ints" (integers over any axes: any
    order wraps alike), or None."""
    (x,) = s.ins
    a, axes = x.aval, tuple(s.eqn.params["axes"])
    if isinstance(x, Lit) or not a.size or not axes:
        return None
    if dtype_kind(a.dtype) in "iu":
        return "ints"
    if dtype_kind(a.dtype) != "f":
        return None
    if axes == (a.ndim - 1,) and cpu_rows.rows_ok(a):
        return "rows"
    if axes == tuple(range(a.ndim)) and cpu_rows.rows_ok(ShapedArray((a.size,), a.dtype)):
        return "all"   # numpy sums a contiguous array as one row
    k = len(axes)
    if axes == tuple(range(k)) and k < a.ndim and math.prod(a.shape[k:]) >= 2:
        return "cols"
    return None


def _choose_ok(s) -> bool:
    """reduce_max / reduce_min of integers and booleans (exact in any order; floats are not:
    numpy's SIMD reductions pick between +0.0 and -0.0 in their own order)."""
    (x,) = s.ins
    return not isinstance(x, Lit) and x.aval.size > 0 and dtype_kind(x.aval.dtype) in "iub"


# the numpy steps a driver runs itself: primitive -> whether it can run this step
OTHER_STEPS = {P.take_p: _take_ok, P.reshape_p: _reshape_ok, P.slice_p: _slice_ok,
               P.dynamic_slice_p: _dslice_ok,
               P.reduce_sum_p: lambda s: _sum_kind(s) is not None,
               P.reduce_max_p: _choose_ok, P.reduce_min_p: _choose_ok}
_CHOOSE = {P.reduce_max_p: ">", P.reduce_min_p: "<"}


def _step_ok(s) -> bool:
    if s.kind == "kernel":
        return s.cluster is not None and not s.stored
    ok = OTHER_STEPS.get(s.eqn.prim)
    return s.kind in ("np", "into") and ok is not None and ok(s)


def drivable(prog, avals) -> bool:
    """Whether a body program runs as kernels and OTHER_STEPS only, over dtypes njit takes
    (`avals`: its operands' and results' abstract values)."""
    return (all(_step_ok(s) for s in prog.steps)
            and all(cpu_ops.supported(a.dtype) for a in avals)
            and all(cpu_ops.supported(v.aval.dtype) for s in prog.steps for v in s.outs)
            and all(cpu_ops.supported(np.asarray(c).dtype) for c in prog.known.values()))


class _Source:
    """The driver's source as it is written: argument specs, kernel functions, lines."""

    def __init__(self):
        self.params = []   # (name, spec): how Driver.__call__ makes each argument
        self.functions = {}   # kernel function source -> its name in the module
        self.helpers = set()
        self.halves = set()   # 16-bit float formats inside kernels (their values stay inside)
        self.ref = {}   # var -> (name, "arr" | "arr0" | "scalar")
        self.bufs = set()   # the names of the buffers kernels write
        self.carry = []   # the carry names (an error returns them with its site)
        self.sites = []   # (equation, axis size) of each checked index, by site number
        self.globals = {}   # njit functions of other modules the driver calls, by name
        self.n = 0

    def fresh(self, prefix="v"):
        self.n += 1
        return f"{prefix}{self.n}"

    def param(self, spec, prefix="a", var=None, form=None):
        name = self.fresh(prefix)
        self.params.append((name, spec))
        if var is not None:
            self.ref[var] = (name, form or ("arr0" if var.aval.ndim == 0 else "arr"))
        return name

    def read(self, x) -> str:
        """x's value: a scalar for rank-0 values (kernels take them by value), else its array."""
        if isinstance(x, Lit):
            return kernel_files.literal(x.val, x.aval.dtype, nbt(x.aval.dtype))
        name, form = self.ref[x]
        return f"{name}[()]" if form == "arr0" else name

    def body(self, prog, indent) -> list[str]:
        """The lines running a program's kernel steps (its operands already named); its known
        constants become arguments, its kernel outputs buffers of their own."""
        for v, c in prog.known.items():
            if v not in self.ref:
                self.param(("known", np.asarray(c, order="C")), "k", v)
        lines = []
        for s in prog.steps:
            if s.kind != "kernel":
                lines += (self._sum(s, indent) if s.eqn.prim is P.reduce_sum_p else
                          self._choose(s, indent) if s.eqn.prim in _CHOOSE
                          else self._view(s, indent))
                continue
            fs = cpu_kernels.FusedSource(s.cluster)
            fn = self.functions.get(fs.function)
            if fn is None:
                fn = self.functions[fs.function] = f"kernel{len(self.functions)}"
                self.helpers |= fs.helpers
                self.halves |= fs.halves
            ins = [self.read(x) for x in fs.inputs]
            outs = [self.param(("buf", o.aval), "b", o) for o in s.cluster.outputs]
            self.bufs.update(outs)
            shape = s.cluster.shape
            rng = [] if not shape else ["0", str(math.prod(shape) if fs.flat else shape[0])]
            lines.append(f"{indent}{fn}({', '.join(ins + outs + rng)})")
        return lines

    def _sum(self, s, indent) -> list[str]:
        """The lines of a reduce_sum (see _sum_kind), the numpy impl's result bit for bit."""
        (x,), out = s.ins, s.outs[0]
        a, kind = x.aval, _sum_kind(s)
        xs = self.ref[x][0]
        t = nbt(out.aval.dtype)
        if kind == "ints" and out.aval.ndim == 0:   # in uint64, then wrapped to the dtype
            name, q = self.fresh(), self.fresh("q")
            self.ref[out] = (name, "scalar")
            return [f"{indent}{name} = uint64(0)",
                    f"{indent}for {q} in {xs}.ravel():",
                    f"{indent}    {name} += uint64({q})",
                    f"{indent}{name} = {t}({name})"]
        b = self.param(("buf", out.aval), "b", out)
        self.bufs.add(b)
        if kind == "ints":   # every element added into its place, wrapping as above
            qs = [self.fresh("q") for _ in a.shape]
            kept = [q for d, q in enumerate(qs) if d not in s.eqn.params["axes"]]
            lines = [f"{indent}{b}[:] = 0"]
            for d, q in enumerate(qs):
                lines.append(f"{indent}{'    ' * d}for {q} in range({a.shape[d]}):")
            at = ", ".join(kept)
            lines.append(f"{indent}{'    ' * a.ndim}{b}[{at}] = {t}(uint64({b}[{at}]) + "
                         f"uint64({xs}[{', '.join(qs)}]))")
            return lines
        if kind in ("rows", "all"):
            fn = f"row_sums_{a.dtype.name}"
            self.globals[fn] = cpu_rows.row_sums_kernel(a.dtype)
            m, n = (math.prod(a.shape[:-1]), a.shape[-1]) if kind == "rows" else (1, a.size)
        else:
            fn = "col_sums"
            self.globals[fn] = cpu_kernels.colsum_kernel()
            k = len(s.eqn.params["axes"])
            m, n = math.prod(a.shape[:k]), math.prod(a.shape[k:])
        size = n if kind == "cols" else m
        return [f"{indent}{fn}({xs}.reshape(({m}, {n})), {b}.reshape(({size},)))"]

    def _choose(self, s, indent) -> list[str]:
        """The lines of an integer or boolean reduce_max / reduce_min (see _choose_ok)."""
        (x,), out = s.ins, s.outs[0]
        a, op, xs = x.aval, _CHOOSE[s.eqn.prim], self.ref[x][0]
        dt = np.dtype(a.dtype)
        if dtype_kind(dt) == "b":
            first = op == "<"
        else:
            first = np.iinfo(dt).min if op == ">" else np.iinfo(dt).max
        start = kernel_files.literal(first, dt, nbt(dt))
        if out.aval.ndim == 0:
            name, q = self.fresh(), self.fresh("q")
            self.ref[out] = (name, "scalar")
            return [f"{indent}{name} = {start}",
                    f"{indent}for {q} in {xs}.ravel():",
                    f"{indent}    if {q} {op} {name}:",
                    f"{indent}        {name} = {q}"]
        b = self.param(("buf", out.aval), "b", out)
        self.bufs.add(b)
        qs = [self.fresh("q") for _ in a.shape]
        at = ", ".join(q for d, q in enumerate(qs) if d not in s.eqn.params["axes"])
        v = self.fresh("w")
        lines = [f"{indent}{b}[:] = {start}"]
        for d, q in enumerate(qs):
            lines.append(f"{indent}{'    ' * d}for {q} in range({a.shape[d]}):")
        pad = indent + "    " * a.ndim
        return lines + [f"{pad}{v} = {xs}[{', '.join(qs)}]",
                        f"{pad}if {v} {op} {b}[{at}]:",
                        f"{pad}    {b}[{at}] = {v}"]

    def _view(self, s, indent) -> list[str]:
        """The lines of a take, reshape or slice: its result a view (or, rank 0, a scalar)."""
        out = s.outs[0]
        name = self.fresh()
        self.ref[out] = (name, "scalar" if out.aval.ndim == 0 else "arr")
        if s.eqn.prim is P.reshape_p:
            (x,) = s.ins
            if x.aval.ndim == 0:   # rank 0 to rank 0: the value itself
                self.ref[out] = self.ref[x]
                return []
            if out.aval.ndim == 0:   # one element
                return [f"{indent}{name} = {self.ref[x][0]}[{', '.join(['0'] * x.aval.ndim)}]"]
            return [f"{indent}{name} = {self.ref[x][0]}.reshape({tuple(out.aval.shape)})"]
        if s.eqn.prim is P.slice_p:   # a view of rows; any other slice a contiguous copy
            (x,) = s.ins
            p = s.eqn.params
            parts = [f"{a}:{b}" + (f":{st}" if st != 1 else "") for a, b, st in
                     zip(p["start_indices"], p["limit_indices"], p["strides"])]
            rows = all((a, b, st) == (0, d, 1) for a, b, st, d in zip(
                p["start_indices"][1:], p["limit_indices"][1:], p["strides"][1:],
                x.aval.shape[1:])) and p["strides"][0] == 1
            view = f"{self.ref[x][0]}[{', '.join(parts[:1] if rows else parts)}]"
            return [f"{indent}{name} = {view if rows else f'np.ascontiguousarray({view})'}"]
        if s.eqn.prim is P.dynamic_slice_p:   # XLA's rule: starts clamped so the window fits
            x, *starts = s.ins
            lines, parts = [], []
            for st, n, m in zip(starts, x.aval.shape, s.eqn.params["slice_sizes"]):
                j = self.fresh("j")
                lines.append(f"{indent}{j} = min(max(int64({self.read(st)}), 0), {n - m})")
                parts.append(f"{j}:{j} + {m}")
            return lines + [f"{indent}{name} = np.ascontiguousarray("
                            f"{self.ref[x][0]}[{', '.join(parts)}])"]
        # take: one row (a rank-0 index) or a one-row slice (one index in a vector, as
        # dynamic_slice gives), its index checked as the numpy impl checks it
        x, idx = s.ins
        n, j = x.aval.shape[0], self.fresh("j")
        site = len(self.sites)
        self.sites.append((s.eqn, n))
        back = "".join(c + ", " for c in self.carry)
        at = self.read(idx) if idx.aval.ndim == 0 else f"{self.ref[idx][0]}[0]"
        row = f"{j}:{j} + 1" if idx.aval.ndim else j
        return [f"{indent}{j} = int64({at})",
                f"{indent}if {j} < {-n} or {j} >= {n}:",
                f"{indent}    return ({site}, {j}, {back})",
                f"{indent}if {j} < 0:",
                f"{indent}    {j} += {n}",
                f"{indent}{name} = {self.ref[x][0]}[{row}]"]

    def new_carry(self, carry, outs, indent) -> list[str]:
        """The lines that make `outs` the next iteration's carry (`carry`: the carry names):
        kernel results swap buffers with the carry they replace, other values are copied into
        the carry's spare buffer first (all copies before any swap: a copy may read a carry)."""
        copies, swaps, taken = [], [], set()
        for c, o in zip(carry, outs):
            ref = None if isinstance(o, Lit) else self.ref[o]
            if ref is not None and ref[0] in self.bufs and ref[0] not in taken:
                taken.add(ref[0])
                swaps.append(f"{indent}{c}, {ref[0]} = {ref[0]}, {c}")
                continue
            spare = self.param(("spare", o.aval), "s")
            at = "()" if o.aval.ndim == 0 else ":"
            copies.append(f"{indent}{spare}[{at}] = {self.read(o)}")
            swaps.append(f"{indent}{c}, {spare} = {spare}, {c}")
        return copies + swaps

    def module(self, head, lines) -> str:
        fns = "".join(f.replace("def kernel(", f"def {n}(", 1) for f, n in self.functions.items())
        args = ", ".join(head + [n for n, _ in self.params])
        return (cpu_ops.half_helpers(self.halves) + cpu_ops.helper_source(self.helpers) + fns
                + f"\n@njit({_OPTS})\n"
                f"def driver({args}):\n" + "".join(ln + "\n" for ln in lines))


class Driver:
    """A compiled loop: `driver(bufs)` -> the loop's results, as cpu_loops' runners return
    them; `runs` counts the runs, `source` is the generated module."""

    def __init__(self, kind, src, lines, head, n_carry, length=0, reverse=False, y_avals=()):
        self.kind, self.n_carry, self.length, self.reverse = kind, n_carry, length, reverse
        self.y_avals = list(y_avals)
        self.params, self.sites, self.globals = src.params, src.sites, src.globals
        # every return is (site, bad index, *carry): site -1 when the loop ran to its end
        lines = lines + [f"    return (-1, 0, {''.join(c + ', ' for c in self._carries)})"]
        # the modules of the njit functions it calls, named in its source: numba's disk cache
        # of the driver records them by name, so a driver calling another version of them
        # (their source changed: another digest) must be another file
        deps = sorted({getattr(g, "py_func", g).__module__ for g in self.globals.values()
                       if callable(g)})
        self.source = "".join(f"# calls {d}\n" for d in deps) + src.module(head, lines)
        self._fn = None
        self.runs = 0

    @property
    def _carries(self):
        return [n for n, spec in self.params if spec[0] == "carry"]

    @property
    def fn(self):
        """The njit driver (its module imported on first use; numba compiles on first call)."""
        if self._fn is None:
            mod = cpu_kernels.module_from_source(self.source)
            vars(mod).update(self.globals)   # before numba resolves them (first call)
            self._fn = mod.driver
        return self._fn

    def __call__(self, bufs):
        ys = [np.empty(a.shape, a.dtype) for a in self.y_avals]
        args = []
        for _, spec in self.params:
            kind, what = spec
            if kind == "operand":
                i, aval = what
                args.append(np.asarray(bufs[i], aval.dtype, order="C"))
            elif kind == "carry":
                i, aval = what
                args.append(np.array(bufs[i], aval.dtype, order="C"))   # written: a copy
            elif kind in ("buf", "spare"):
                args.append(np.empty(what.shape, what.dtype))
            elif kind == "ys":
                args.append(ys[what])
            else:   # "known"
                args.append(what)
        head = [self.length, self.reverse] if self.kind == "scan" else [WHILE_CHUNK]
        site, bad, *carry = self.fn(*head, *args)
        while site == -2:   # a while_loop's chunk ended: Python may raise KeyboardInterrupt
            at = iter(carry)   # (buffers anew: a carry may be one of the last call's)
            args = [next(at) if spec[0] == "carry" else np.empty(spec[1].shape, spec[1].dtype)
                    if spec[0] in ("buf", "spare") else a
                    for a, (_, spec) in zip(args, self.params)]
            site, bad, *carry = self.fn(*head, *args)
        self.runs += 1
        if site >= 0:   # an index out of range: named at its equation, as cpu_loops names it
            e, n = self.sites[site]
            raise IndexError(f"take: index {bad} is out of bounds for an axis of size {n} "
                             f"(1 of 1 indices out of range)\n  at {e.src}")
        return carry + ys


def scan_driver(ex, body) -> Driver | None:
    """The driver of a scan (`body`: its cpu_loops.Body), or None when it is not drivable."""
    prog, expr = body.program, body.expr
    binders = expr.in_binders[expr.n_consts:]
    nc, nk = ex.n_consts, ex.n_carry
    if not drivable(prog, [v.aval for v in binders] + [o.aval for o in expr.outs]
                    + list(ex.in_avals) + list(ex.out_avals)):
        return None
    src = _Source()
    for i, v in enumerate(binders[:nc]):
        src.param(("operand", (i, ex.in_avals[i])), "c", v)
    carry = src.carry = [src.param(("carry", (nc + k, ex.in_avals[nc + k])), "h", v)
                         for k, v in enumerate(binders[nc:nc + nk])]
    xs = [src.param(("operand", (nc + nk + j, ex.in_avals[nc + nk + j])), "X")
          for j in range(len(binders) - nc - nk)]
    ys = [src.param(("ys", j), "Y") for j in range(len(expr.outs) - nk)]
    lines = ["    for t in range(n):", "        i = n - 1 - t if rev else t"]
    for x, v in zip(xs, binders[nc + nk:]):
        name = src.fresh("x")
        src.ref[v] = (name, "scalar" if v.aval.ndim == 0 else "arr")
        lines.append(f"        {name} = {x}[i]")
    lines += src.body(prog, "        ")
    lines += [f"        {y}[i] = {src.read(o)}" for y, o in zip(ys, expr.outs[nk:])]
    lines += src.new_carry(carry, expr.outs[:nk], "        ")
    return Driver("scan", src, lines, ["n", "rev"], nk, ex.length, ex.reverse,
                  ex.out_avals[nk:])


def while_driver(ex, cond, body) -> Driver | None:
    """The driver of a while_loop (its condition's and body's cpu_loops.Body), or None."""
    ncc, nbc = ex.n_cconsts, ex.n_bconsts
    cb = cond.expr.in_binders[cond.expr.n_consts:]
    bb = body.expr.in_binders[body.expr.n_consts:]
    avals = [v.aval for v in cb + bb] + [o.aval for o in cond.expr.outs + body.expr.outs]
    if not (drivable(cond.program, avals) and drivable(body.program, avals)
            and all(cpu_ops.supported(a.dtype) for a in ex.in_avals)):
        return None
    src = _Source()
    for i, v in enumerate(cb[:ncc]):
        src.param(("operand", (i, ex.in_avals[i])), "c", v)
    for i, v in enumerate(bb[:nbc]):
        src.param(("operand", (ncc + i, ex.in_avals[ncc + i])), "c", v)
    carry = []
    for k, (cv, bv) in enumerate(zip(cb[ncc:], bb[nbc:])):
        j = ncc + nbc + k
        carry.append(src.param(("carry", (j, ex.in_avals[j])), "h", bv))
        src.ref[cv] = src.ref[bv]
    src.carry = carry
    back = "".join(c + ", " for c in carry)
    lines = ["    for _ in range(chunk):"] + src.body(cond.program, "        ")
    lines += [f"        if not {src.read(cond.expr.outs[0])}:",
              f"            return (-1, 0, {back})"]
    lines += src.body(body.program, "        ")
    lines += src.new_carry(carry, body.expr.outs, "        ")
    lines.append(f"    return (-2, 0, {back})")   # not done: called again
    return Driver("while", src, lines, ["chunk"], len(carry))
