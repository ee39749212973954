"""The CPU plan's loops: scan / while_loop / cond bodies run as compiled CPU programs.

A jitted step's `loop_run` equation (funcgrad/prims/loops.py) runs its loop here. Each optimized
body expression of the loop's ExecRec is built once into a cpu_plan.Program, the same
generated function over fused njit kernels, BLAS products into planned buffers and numpy
calls that runs a whole step, and cached on the record (`ex.device_cache["cpu"]`, one set of
bodies per kind of program: numpy-only or fused). A cond calls that function with its
operands; a scan runs the same lines inside one generated `for` loop (x rows read, y rows
written, the carry renamed in place) and a while_loop its condition's and body's lines inside
one `while True`, so that an iteration is no Python call. The body's arena is taken once per
loop run and reused by every iteration; a loop whose products are all small holds OpenBLAS at
one thread for the whole run.
A body program follows its plan: the numpy program while the plan runs its numpy program,
kernels once the plan fuses, so results are the numpy interpreter's bit for bit where the
plan's are (FUNCGRAD_CPU_EXACT, the default), and within an ulp or two otherwise. Loops inside
a body run the same way.
A body with host callbacks (debug.print) runs through the numpy impls (loops.run_np), as
eagerly: its prints keep their order.
"""
from __future__ import annotations

import functools
import math
import re
import threading
import warnings

import numpy as np

from funcgrad import prims as P
from funcgrad.core import FuncgradError
from funcgrad.prims.loops import ExecRec, loop_out_p, loop_run_effect_p, loop_run_p
from funcgrad.prims import IndexOutOfRange
from funcgrad.backends.cpu import drivers as cpu_drivers
from funcgrad.backends.cpu.blas import one_thread, serial_flops
from funcgrad.backends.cpu.plan import Program, compile_quietly
from funcgrad.backends.cpu.steps import STEP_BUILDERS, exact_only

_BODY_FILE = "<funcgrad cpu loop body>"


class _Refused(Exception):
    """numba refused to compile a fused body kernel (raised on the body's first run)."""


class Body:
    """One body expression as a compiled CPU program: `fn(args, bufs)` returns its results;
    `bufs` is an arena from `take()` (given back by `give()`)."""

    def __init__(self, expr, consts, fuse: bool, blas_held: bool = False, scan=None):
        self.expr, self.consts = expr, consts
        # a file name of its own: a plan maps its errors by its lines, not a body's
        self.program = prog = Program(expr, consts, fuse, filename=_BODY_FILE,
                                      blas_held=blas_held)
        self.memory = prog.memory
        self._bufs = prog.memory.new_buffers()
        self._lock = threading.Lock()
        self.fn = self._first if prog.kernels else prog.fn
        self.loop, self.line_eqn = None, {prog.fn.__code__: prog.line_eqn}
        if scan is not None:
            self._scan_loop(*scan)

    def _scan_loop(self, nc, nk, ny):
        """loop(consts, carry, xs, ys, bufs, order) -> carry: the body's lines inside one
        generated `for i in order` (x rows in, y rows out, the carry renamed), so that an
        iteration is no Python call and no argument list."""
        prog = self.program
        names = prog.arg_names
        cn, kn, xn = names[:nc], names[nc:nc + nk], names[nc + nk:]

        def unpack(vs, what):
            return [f"    {''.join(v + ', ' for v in vs)}= {what}"] if vs else []
        head = (["def loop(consts, carry, xs, ys, bufs, order):"] + unpack(cn, "consts")
                + unpack(kn, "carry") + unpack([f"X{j}" for j in range(len(xn))], "xs")
                + unpack([f"Y{j}" for j in range(ny)], "ys") + ["    for i in order:"]
                + [f"        {x} = X{j}[i, ...]" for j, x in enumerate(xn)])
        # the new carry and the y rows in one assignment (its right side is read first)
        targets = list(kn) + [f"Y{j}[i]" for j in range(ny)]
        lhs = "".join(t + ", " for t in targets) or "_"
        rhs = "".join(o + ", " for o in prog.out_exprs) or "()"
        tail = [f"        {lhs} = {rhs}", f"    return [{', '.join(kn)}]"]
        src = "\n".join(head + ["        " + ln for ln in prog.lines] + tail) + "\n"
        env = dict(prog.env)
        exec(compile(src, _BODY_FILE, "exec"), env)
        self.loop = env["loop"]
        shift = len(head) + 1 - 3   # the plan's line k is the loop's line k + shift
        self.line_eqn[self.loop.__code__] = {k + shift: e for k, e in prog.line_eqn.items()}
        self.loop_source = src

    def take(self):
        """The body's arena, or a fresh one while another thread runs this body."""
        if self._lock.acquire(blocking=False):
            return self._bufs
        return self.memory.new_buffers()

    def give(self, bufs):
        if bufs is self._bufs:
            self._lock.release()

    def _first(self, args, bufs):
        """The first run compiles the kernels; numba's notes are not the user's."""
        try:
            with compile_quietly():
                out = self.program.fn(args, bufs)
        except Exception as err:   # only numba's own errors are handled here
            if not type(err).__module__.startswith("numba"):
                raise
            raise _Refused(f"{type(err).__name__}: {str(err).splitlines()[0]}") from err
        self.fn = self.program.fn
        return out


def _eqn_of(err, bs):
    """The body equation whose line raised `err` (the innermost body frame), or None."""
    lines = {code: table for b in bs for code, table in b.line_eqn.items()}
    tb, hit = err.__traceback__, None
    while tb is not None:
        table = lines.get(tb.tb_frame.f_code)
        if table is not None:
            hit = table.get(tb.tb_lineno)
        tb = tb.tb_next
    return hit


class Bodies(list):
    """A loop's Body objects; `serial`: every BLAS call they make is a product small enough
    for one BLAS thread (cpu_blas.serial_flops), so the loop holds OpenBLAS at one thread
    once for all its iterations rather than around each product (3.6 instead of 4.8 us for a
    32x64x64 product on the development VM)."""

    def __init__(self, items, serial):
        super().__init__(items)
        self.serial = serial
        self.loop = None   # a while_loop's generated loop (_while_loop)
        self.driver = None   # the whole loop as one njit function (cpu_drivers), if drivable


def _serial_only(expr) -> bool | None:
    """True when the expression's only BLAS users are products under serial_flops() (loops
    inside included), None when it has no product, False otherwise."""
    found = None
    for e in expr.eqns:
        if e.prim is P.dot_general_p:
            (lc, _), _ = e.params["dimension_numbers"]
            k = math.prod(e.inputs[0].aval.shape[i] for i in lc)
            if 2 * e.out.aval.size * k >= serial_flops():
                return False
            found = True
        elif e.prim is loop_run_p:
            for body, _ in e.params["rec"].bodies:
                inner = _serial_only(body)
                if inner is False:
                    return False
                found = found or inner
        elif not (e.prim.kind == "elementwise" or e.prim is loop_out_p or getattr(
                e.prim.impl, "__module__", None) in ("numpy", "funcgrad.prims")):
            return False   # may call BLAS on its own (convolutions, linear algebra, ...)
    return found


def bodies(ex: ExecRec, fuse: bool) -> Bodies:
    """The loop's body programs (built on first use, kept on the record)."""
    cache = ex.device_cache.setdefault("cpu", {})
    key = (fuse, exact_only())
    hit = cache.get(key)
    if hit is None:
        serial = all(_serial_only(e) is not False for e, _ in ex.bodies) and any(
            _serial_only(e) for e, _ in ex.bodies)
        scan = None
        if ex.kind == "scan":
            scan = (ex.n_consts, ex.n_carry, len(ex.out_avals) - ex.n_carry)
        hit = cache[key] = Bodies([Body(e, c, fuse, serial, scan) for e, c in ex.bodies],
                                  serial)
        if ex.kind == "while":
            hit.loop = _while_loop(*hit, ex.n_cconsts, ex.n_bconsts)
        if fuse and cpu_drivers.enabled() and ex.kind == "scan":
            hit.driver = cpu_drivers.scan_driver(ex, hit[0])
        elif fuse and cpu_drivers.enabled() and ex.kind == "while":
            hit.driver = cpu_drivers.while_driver(ex, *hit)
    return hit


def _drive(bs, bufs):
    """The loop's results from its compiled driver (cpu_drivers), or None when it has none
    or numba refused to compile it (the loop then runs from Python, as before)."""
    d = bs.driver
    if d is None:
        return None
    try:
        if d.runs:   # (numba may still compile: arguments of another type, read-only ones)
            return d(bufs)
        with compile_quietly():
            return d(bufs)
    except Exception as err:   # only numba's own errors are handled here
        if not type(err).__module__.startswith("numba"):
            raise
        bs.driver = None
        warnings.warn(f"funcgrad: a compiled CPU loop driver failed to compile "
                      f"({type(err).__name__}: {str(err).splitlines()[0]}); the loop runs its "
                      "iterations from Python instead", RuntimeWarning, stacklevel=2)
        return None


_NAME = re.compile(r"\b((?:f|s)?v\d+|as\d+|bufs)\b")   # the names a Program's lines use


def _renamed(prog, prefix):
    """prog's argument names, lines, result expressions and globals with its own names
    prefixed (so that two programs' lines can share one function)."""
    def sub(text):
        return _NAME.sub(lambda m: prefix + m.group(1), text)
    env = {(prefix + k if _NAME.fullmatch(k) else k): v for k, v in prog.env.items()
           if k != "plan"}
    return ([prefix + a for a in prog.arg_names], [sub(ln) for ln in prog.lines],
            [sub(o) for o in prog.out_exprs], env)


def _while_loop(cond, body, ncc, nbc):
    """loop(cconsts, bconsts, carry, c_bufs, b_bufs) -> carry: the condition's and the body's
    lines in one generated `while True` (no Python call, no argument list per iteration)."""
    cargs, clines, couts, env = _renamed(cond.program, "c_")
    bargs, blines, bouts, benv = _renamed(body.program, "b_")
    env.update(benv)
    ck, bk = cargs[ncc:], bargs[nbc:]

    def names(vs):
        return "".join(v + ", " for v in vs)
    head = ["def loop(cconsts, bconsts, carry, c_bufs, b_bufs):"]
    head += [f"    {names(cargs[:ncc])}= cconsts"] if ncc else []
    head += [f"    {names(bargs[:nbc])}= bconsts"] if nbc else []
    head += [f"    {names(bk)}= carry"] if bk else []
    head += ["    while True:"] + ([f"        {names(ck)}= {names(bk)}"] if ck else [])
    mid = [f"        if not {couts[0]}:", "            break"]
    tail = [f"        {names(bk)}= {names(bouts)}"] if bk else []
    src = "\n".join(head + ["        " + ln for ln in clines] + mid
                    + ["        " + ln for ln in blines] + tail
                    + [f"    return [{', '.join(bk)}]"]) + "\n"
    exec(compile(src, _BODY_FILE, "exec"), env)
    fn = env["loop"]
    # errors: the condition's line k is the loop's k + c_shift, the body's k + b_shift
    c_shift = len(head) + 1 - 3
    b_shift = c_shift + len(clines) + len(mid)
    table = {k + c_shift: e for k, e in cond.program.line_eqn.items()}
    table.update({k + b_shift: e for k, e in body.program.line_eqn.items()})
    body.line_eqn[fn.__code__] = table
    fn.source = src
    return fn


def _scan(ex, bufs, bs):
    res = _drive(bs, bufs)
    if res is not None:
        return res
    (body,) = bs
    nc, nk, n = ex.n_consts, ex.n_carry, ex.length
    consts, carry, xs = list(bufs[:nc]), list(bufs[nc:nc + nk]), bufs[nc + nk:]
    ys = [np.empty(a.shape, a.dtype) for a in ex.out_avals[nk:]]
    if n == 0:
        return carry + ys
    order = range(n - 1, -1, -1) if ex.reverse else range(n)
    arena = body.take()
    try:
        if body.fn is not body.program.fn:   # the first run, which compiles the kernels
            i, order = order[0], order[1:]
            outs = body.fn(consts + carry + [x[i, ...] for x in xs], arena)
            carry = list(outs[:nk])
            for y, o in zip(ys, outs[nk:]):
                y[i] = o
        carry = body.loop(consts, carry, xs, ys, arena, order)
    finally:
        body.give(arena)
    return carry + ys


def _while(ex, bufs, bs):
    res = _drive(bs, bufs)
    if res is not None:
        return res
    cond, body = bs
    ncc, nbc = ex.n_cconsts, ex.n_bconsts
    cconsts, bconsts = list(bufs[:ncc]), list(bufs[ncc:ncc + nbc])
    carry = list(bufs[ncc + nbc:])
    ca = cond.take()
    try:
        ba = body.take()
        try:
            if cond.fn is cond.program.fn and body.fn is body.program.fn:   # compiled
                return bs.loop(cconsts, bconsts, carry, ca, ba)
            while cond.fn(cconsts + carry, ca)[0]:
                carry = list(body.fn(bconsts + carry, ba))
        finally:
            body.give(ba)
    finally:
        cond.give(ca)
    return carry


def _cond(ex, bufs, bs):
    branch = bs[int(np.clip(np.asarray(bufs[0]), 0, len(bs) - 1))]
    arena = branch.take()
    try:
        return list(branch.fn(list(bufs[1:]), arena))
    finally:
        branch.give(arena)


_RUN = {"scan": _scan, "while": _while, "cond": _cond}


def run(ex: ExecRec, bufs: list, fuse: bool) -> list:
    """All results of a loop or branch, its bodies run as compiled programs."""
    bs = bodies(ex, fuse)
    try:
        try:
            res = _run(ex, list(bufs), bs)
        except _Refused as why:
            warnings.warn(f"funcgrad: a fused CPU kernel of a {ex.kind} body failed to compile "
                          f"({why}); the body runs its numpy program instead", RuntimeWarning,
                          stacklevel=2)
            bs = ex.device_cache["cpu"][(fuse, exact_only())] = bodies(ex, False)
            res = _run(ex, list(bufs), bs)
    except (IndexOutOfRange, ValueError) as err:   # named at the body's equation, as run_np
        e = _eqn_of(err, bs)
        if e is None:
            raise
        kind = IndexError if isinstance(err, IndexOutOfRange) else FuncgradError
        raise kind(f"{err}\n  at {e.src}") from None
    return [np.asarray(r).astype(a.dtype, copy=False) for r, a in zip(res, ex.out_avals)]


def _run(ex, bufs, bs):
    hold = one_thread() if bs.serial else None   # None too where numpy's BLAS is not OpenBLAS
    if hold is None:
        return _RUN[ex.kind](ex, bufs, bs)
    with hold:
        return _RUN[ex.kind](ex, bufs, bs)


def _lead(*bufs, ex, index, fuse):
    results = run(ex, bufs, fuse)
    lead = results[index].view()   # a fresh object: the key of the stashed results
    ex.put(lead, results)
    return lead


def _build_run(e, fuse: bool):
    """The plan's function for a `loop_run` equation: the loop with compiled bodies (built
    now; `kernels` tells the plan whether its fused program has kernels to compile)."""
    ex = e.params["rec"]
    fn = functools.partial(_lead, ex=ex, index=e.params["index"], fuse=fuse)
    fn.kernels = sum(b.program.kernels for b in bodies(ex, fuse))
    return fn


def _build_effect(e, fuse: bool):
    """Bodies with host callbacks keep the primitive's impl: the numpy impls (loops.run_np),
    equation by equation, their prints in order."""
    return functools.partial(e.prim.impl, **e.params)


def _build_out(e, fuse: bool):
    """A `loop_out` equation reads a result its lead stashed."""
    return functools.partial(e.params["rec"].get, index=e.params["index"])


def register(table: dict) -> None:
    """Add the loop primitives' plan steps to cpu_steps' table (STEP_BUILDERS)."""
    table[loop_run_p] = _build_run
    table[loop_run_effect_p] = _build_effect
    table[loop_out_p] = _build_out


register(STEP_BUILDERS)
