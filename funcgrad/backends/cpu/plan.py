"""The CPU jit plan: one generated straight-line function over fused kernels, BLAS and numpy.

Steps (cpu_steps) come from funcgrad.compile.clustering: a fused elementwise cluster runs as one njit kernel
(cpu_kernels), a matrix product as np.matmul into its buffer, a loop (scan, while_loop, cond) with
its bodies as programs of their own (cpu_loops), anything else as its numpy impl.
Every intermediate a kernel or a product writes lives in one arena per plan, at an offset
given by liveness (cpu_memory); results the caller receives are fresh arrays, or the memory of
donated arguments (jit's donate_argnums) that kernels update in place.

Kernels are compiled when a plan has run FUNCGRAD_CPU_FUSE_AFTER times (default 2: a function
called once or twice never waits for numba; at once when it runs a scan of LONG_LOOP steps);
until then, and for clusters that njit cannot take (complex), elementwise equations run as
numpy calls. FUNCGRAD_CPU_FUSE=0 turns kernels off.
Large products run on OpenBLAS's threads or in row blocks on one BLAS thread each, shared by
the caller and a helper thread (cpu_blas; a program whose products are all small holds OpenBLAS
at one thread for its whole run);
attention runs fused kernels whose jobs the two threads share too (cpu_attention); elementwise
kernels run on one thread unless FUNCGRAD_CPU_SPLIT_WORK asks for chunks on two (cpu_parallel).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings

import numpy as np

from funcgrad.core import DeletedBuffer, FuncgradError, Lit
from funcgrad import prims as P
from funcgrad.prims import IndexOutOfRange
from funcgrad.backends.cpu import (
    blas as cpu_blas,
    memory as cpu_memory,
    parallel as cpu_parallel,
)
from funcgrad.config import config
from funcgrad.backends.cpu.steps import Step, build_steps, fold_constants, kernel_step

_FILENAME = "<funcgrad cpu plan>"
_adaptive = config.__dict__["_values"]   # read per call (funcgrad.config's values)


def fuse_after() -> int | None:
    """Calls of a plan before it compiles its kernels (None: never)."""
    if os.environ.get("FUNCGRAD_CPU_FUSE", "1") == "0":
        return None
    return int(os.environ.get("FUNCGRAD_CPU_FUSE_AFTER", "2"))


# a scan of this many iterations makes its plan fuse on the first call: its numpy program
# costs microseconds an iteration (a 1,000,000-step scalar scan ran 2.4-4.8 s a call), more
# than numba takes to compile the loop (cpu_drivers: 8 ms a call after it)
LONG_LOOP = 100_000


def _long_loop(expr) -> bool:
    return any(e.prim.name == "loop_run" and e.params["rec"].kind == "scan"
               and e.params["rec"].length >= LONG_LOOP for e in expr.eqns)


class Program:
    """A generated function plan(args, bufs) for one expression, fused or not."""

    def __init__(self, expr, consts, fuse: bool, filename: str = _FILENAME,
                 blas_held: bool = False, donate=()):
        """blas_held: the caller holds OpenBLAS at one thread around every run (a loop over
        small products, cpu_loops), so small products need not set it each time.
        donate: indices of arguments given up to the call (jit's donate_argnums); kernels write
        results into them where they can (`in_place`: result var -> argument index)."""
        self.filename = filename
        known = {v: np.asarray(c) for v, c in zip(expr.in_binders[:expr.n_consts], consts)}
        self.steps = steps = fold_constants(build_steps(expr, fuse, blas_held), known)
        self.known = known   # constants and the values folded from them alone, by var
        keep = {o for o in expr.outs if not isinstance(o, Lit)}
        self.in_place = _in_place(steps, expr, keep, donate)
        # the arguments written in place, checked on every call (CpuPlan._own_donated)
        self.in_place_args = tuple(sorted(set(self.in_place.values())))
        self.memory = cpu_memory.plan(steps, expr.outs, keep)
        # kernels of its own and of the sub-programs its steps run (a loop's bodies)
        self.kernels = sum(s.kind == "kernel" or getattr(s.fn, "kernels", 0) for s in steps)
        # whether its products are all small (one BLAS thread; loops hold it themselves)
        dots = [s.eqn for s in steps if s.eqn.prim is P.dot_general_p]
        self.products = bool(dots) and all(_flops(e) < cpu_blas.serial_flops() for e in dots)
        self._emit(expr, known, steps, keep)

    def _emit(self, expr, known, steps, keep):
        name, env, n = {}, {"np": np}, [0]
        mem = self.memory

        def fresh():
            n[0] += 1
            return f"v{n[0]}"

        for v, c in known.items():   # constants, and values computed from constants alone
            name[v] = fresh()
            env[name[v]] = c
        args = []
        for v in expr.in_binders[expr.n_consts:]:
            name[v] = fresh()
            args.append(name[v])
        into_arg = {v: args[i] for v, i in self.in_place.items()}

        def ref(x):
            if isinstance(x, Lit):
                k = fresh()
                env[k] = x.val
                return k
            return name[x]

        lines, self.line_eqn, local = [], {}, set()
        per_step = []
        for s in steps:
            if s.kind == "alias":             # a scalar broadcast: the scalar itself
                name[s.outs[0]] = ref(s.ins[0])
                per_step.append([])
                continue
            ins = [ref(x) for x in s.ins]
            outs = []
            for v in s.outs:
                name[v] = fresh()
                outs.append(name[v])
                local.add(name[v])
            f = "f" + outs[0]
            env[f] = s.fn
            here = []
            for v, o in zip(s.outs, outs):
                if s.kind == "np":
                    continue
                if v in into_arg:   # a donated argument's memory (written by the kernel)
                    here.append(f"{o} = {into_arg[v]}")
                elif v in mem.offsets:
                    here.append(f"{o} = bufs[{mem.index[v]}]")
                else:
                    env["s" + o] = (v.aval.shape, v.aval.dtype)
                    here.append(f"{o} = np.empty(*s{o})")
            if s.kind == "np":
                here.append(f"{outs[0]} = {f}({', '.join(ins)})")
            elif s.kind == "into":   # extra: per operand, a view to take (".T") or ""
                call = [a + x for a, x in zip(ins, s.extra)] if s.extra else ins
                here.append(f"{f}({', '.join(call)}, {outs[0]})")
            else:   # kernel: rank-0 operands go by value
                kin = [f"{a}[()]" if x.aval.ndim == 0 else a for a, x in zip(ins, s.ins)]
                kout = [o for v, o in zip(s.outs, outs) if v not in s.stored]
                here.append(f"{f}({', '.join(kin + kout)}{s.extra or ''})")
            per_step.append((s, ins, here))
        # locals are dropped after their last read (views keep their base alive themselves)
        last = {}
        for i, item in enumerate(per_step):
            for x in (item[1] if item else ()):
                last[x] = i
        for o in expr.outs:
            if not isinstance(o, Lit):
                last[name[o]] = len(per_step)
        head = 2
        for i, item in enumerate(per_step):
            if not item:
                continue
            s, ins, here = item
            for ln in here:
                if s.kind != "kernel" and ln.startswith(("f" + name[s.outs[0]],
                                                         name[s.outs[0]] + " = f")):
                    self.line_eqn[head + len(lines) + 1] = s.eqn
                lines.append(ln)
            dead = sorted({x for x in ins if x in local and last[x] == i})
            if dead:
                lines.append(f"{', '.join(dead)} = {', '.join(['None'] * len(dead))}")
        outs = []
        exact = {v for s in steps if s.kind in ("into", "kernel") for v in s.outs}
        for o in expr.outs:
            r = ref(o)
            if not isinstance(o, Lit) and o in mem.may_alias_arena:
                env["detach"] = _detach
                r = f"detach({r}, bufs)"
            if not isinstance(o, Lit) and o not in exact:   # numpy may return another dtype
                fix = f"as{len(outs)}"
                env[fix] = _as_dtype(o.aval.dtype)
                r = f"{fix}({r})"
            outs.append(r)
        src = (f"def plan(args, bufs):\n    {''.join(a + ', ' for a in args)}= args\n"
               + "".join(f"    {ln}\n" for ln in lines)
               + f"    return ({''.join(o + ', ' for o in outs)})\n")
        if not args:
            src = src.replace("    = args\n", "    pass\n")
        self.source = src
        # the pieces, for functions that run the same lines in a loop (cpu_loops): argument
        # names, lines (line k of the plan is lines[k - 3]), result expressions, globals
        self.arg_names, self.lines, self.out_exprs, self.env = args, lines, outs, env
        exec(compile(src, self.filename, "exec"), env)
        self.fn = env["plan"]


@contextlib.contextmanager
def compile_quietly():
    """Runs a program's first run: numba's compile-time notes are not the user's, funcgrad's own
    warnings (a loop body that went back to numpy, cpu_loops) are passed on."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield
    for w in seen:
        if str(w.message).startswith("funcgrad:"):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _as_dtype(dtype):
    def fix(x):
        x = np.asarray(x)
        return x if x.dtype == dtype else x.astype(dtype)
    return fix


def _detach(x, bufs):
    """x, or a copy when it is a view into the plan's arena (a reshape of an intermediate)."""
    if bufs and isinstance(x, np.ndarray) and np.may_share_memory(x, bufs[-1]):
        return x.copy()
    return x


class CpuPlan:
    """A jitted expression on the CPU: a numpy program first, fused kernels once it pays.

    Every value lives in a local of the generated function, dropped after its last use; the
    intermediates written by kernels and matrix products sit in the plan's arena, reused
    across calls (a concurrent second call gets an arena of its own). Results of kernels are
    written into donated arguments (`donate`, jit's donate_argnums) where they can be
    (Program.in_place), else into fresh arrays.
    """

    def __init__(self, expr, consts, donate=()):
        self.expr, self.consts, self.donate = expr, consts, tuple(donate)
        self.calls = 0
        self.out_avals = [o.aval for o in expr.outs]
        self._after = fuse_after()
        if self._after and _long_loop(expr):
            self._after = 0
        self._lock = threading.Lock()
        self._use(self._program(fuse=self._after == 0))

    def _program(self, fuse):
        return Program(self.expr, self.consts, fuse=fuse, donate=self.donate)

    def _use(self, prog):
        self.program = prog
        self.source, self.line_eqn = prog.source, prog.line_eqn
        # one tuple, read once per call: a call never pairs one program with another's arena
        self._state = (prog.fn, prog.memory.new_buffers(), prog.memory, prog.in_place_args)
        self._compiling = prog.kernels > 0

    @property
    def _bufs(self):
        return self._state[1]

    @property
    def fused(self) -> bool:
        """Whether the plan runs fused kernels."""
        return self.program.kernels > 0

    def fuse(self) -> bool:
        """Build the fused program now (kernels compile on its first run). Returns fused."""
        self._after = None
        try:
            prog = self._program(fuse=True)
        except ImportError:   # no numba: numpy programs only
            return self.fused
        if prog.kernels:
            self._use(prog)
        return self.fused

    def __call__(self, args):
        from funcgrad.core import Array
        self.calls += 1
        if self._after is not None and self.calls > self._after:
            self.fuse()
        fn, bufs, mem, own = self._state
        got = self._lock.acquire(blocking=False)
        if not got:   # another thread (or a re-entrant call) holds the arena: use a fresh one
            bufs = mem.new_buffers()
        bufs_in = [a.buf for a in args]
        try:
            with np.errstate(all="ignore"), _blas_held(self.program):
                if self._compiling:
                    outs = self._first_run(fn, bufs_in, bufs, own)
                else:
                    if own:
                        _own_donated(bufs_in, own)
                    outs = fn(bufs_in, bufs)
        except (IndexOutOfRange, ValueError) as err:
            if own:
                _lose_donated(args, bufs_in, own)
            tb, line = err.__traceback__, None
            while tb is not None:
                if tb.tb_frame.f_code.co_filename == _FILENAME:
                    line = tb.tb_lineno
                tb = tb.tb_next
            e = self.line_eqn.get(line)
            if e is None:
                raise
            kind = IndexError if isinstance(err, IndexOutOfRange) else FuncgradError
            raise kind(f"{err}\n  at {e.src}") from None
        except BaseException:
            if own:
                _lose_donated(args, bufs_in, own)
            raise
        finally:
            if got:
                self._lock.release()
        return [Array(out, aval, "cpu") for out, aval in zip(outs, self.out_avals)]

    def _first_run(self, fn, bufs_in, bufs, own):
        """The fused program's first run, which compiles its kernels; should numba refuse one
        (a bug in the generated source), the plan says so and goes back to numpy (donated
        arguments are copied for this run, so the numpy program reads them unchanged)."""
        self._compiling = False
        for i in own:
            bufs_in[i] = np.array(bufs_in[i], order="C")
        try:
            with compile_quietly():
                return fn(bufs_in, bufs)
        except Exception as err:   # noqa: BLE001 (only numba's own errors are handled here)
            if not type(err).__module__.startswith("numba"):
                raise
            warnings.warn(f"funcgrad: a fused CPU kernel failed to compile "
                          f"({type(err).__name__}: {str(err).splitlines()[0]}); this jitted "
                          "function runs its numpy program instead", RuntimeWarning, stacklevel=3)
            self._use(self._program(fuse=False))
            fn, _, mem, _ = self._state
            return fn(bufs_in, mem.new_buffers())


def _flops(e) -> int:
    """2 m n k of a dot_general equation."""
    (lc, _), _ = e.params["dimension_numbers"]
    return 2 * e.out.aval.size * int(np.prod([e.inputs[0].aval.shape[i] for i in lc]))


_NOTHING = contextlib.nullcontext()


def _blas_held(prog):
    """OpenBLAS held at one thread for a whole run of a program whose products are all small
    (they then enter cpu_blas.one_thread() at the cost of a lock, not of three ctypes calls:
    a 1x64x192 product took 1.5 us alone and 3-7 us in its own hold, ~11 a D1 decode step);
    not while cpu_blas_adaptive may choose the pool."""
    if not prog.products or _adaptive["cpu_blas_adaptive"]:
        return _NOTHING
    return cpu_blas.one_thread() or _NOTHING


def _refs(bufs, i) -> int:
    return sys.getrefcount(bufs[i])


class _Holder:
    __slots__ = ("buf",)


def _alone() -> int:
    """_refs of an array held only by an Array-like slot and the call's list of buffers."""
    h = _Holder()
    h.buf = np.empty(1)
    return _refs([h.buf], 0)


_ALONE = _alone()
_OWN = 0x1 | 0x4 | 0x100   # numpy's flag bits: C-contiguous, owns its data, aligned


def _own_donated(bufs, own):
    """Donated arguments are written in place only when nothing else can see their memory:
    one that is a view, shares its array with anything (a result of another call held twice,
    np.asarray of it, the same array passed twice) or is not C-contiguous and aligned is
    copied first, in `bufs`; a read-only one (device_put's) is made writeable."""
    for i in own:
        b = bufs[i]
        if (type(b) is not np.ndarray or b.flags.num & _OWN != _OWN
                or _refs(bufs, i) > _ALONE + 1):   # + 1: `b`
            bufs[i] = np.array(b, order="C")
        elif not b.flags.writeable:
            b.flags.writeable = True


def _lose_donated(args, bufs, own):
    """A call that raised may have written donated arguments in part: they are deleted."""
    gone = DeletedBuffer("it was donated to a jitted call (donate_argnums) that raised, "
                         "after which its memory may hold part of a result")
    for i in own:
        if args[i].buf is bufs[i]:
            args[i].buf = gone


# ---------------------------------------------------------------------------------------------
# donated arguments written in place by the steps' kernels
# ---------------------------------------------------------------------------------------------

def _in_place(steps, expr, keep, donate) -> dict:
    """{result: donated argument index} for the results a kernel writes into the memory of a
    donated argument (jit's donate_argnums), rebuilding those kernels in `steps`.

    A result qualifies when the same kernel makes it alone, an argument has its shape and
    dtype, and that argument is not a result itself (nor any view of it), no later step reads
    it or a view of it, and this kernel reads it only element for element (flat: each element
    is stored after the iteration's reads) or by value (rank 0). Results take the first such
    argument in order, as JAX pairs them (a step's (params, state) -> (params, state): each
    result in its argument's memory). An Adam kernel then streams 7 arrays, not 10 (no fresh
    results to fetch into the cache). Whether the memory is really the argument's alone is
    checked per call (CpuPlan._own_donated)."""
    if not donate:
        return {}
    args = expr.in_binders[expr.n_consts:]
    donated = {args[i]: i for i in donate}
    roots = {x: frozenset([x]) for x in donated}   # var -> donated arguments it may view
    last = {}
    for k, s in enumerate(steps):
        for x in s.ins:
            for a in roots.get(x, ()):
                last[a] = k
        if s.kind in ("np", "alias") and not (isinstance(s.fn, np.ufunc)
                                              or getattr(s.fn, "fresh", False)):
            r = frozenset().union(*[roots.get(x, frozenset()) for x in s.ins])
            if r:
                for v in s.outs:
                    roots[v] = r
    outs = [o for o in expr.outs if not isinstance(o, Lit)]
    escaped = frozenset().union(*[roots.get(o, frozenset()) for o in outs])
    made = {v: k for k, s in enumerate(steps) if s.kind == "kernel"
            and (s.flat or not s.cluster.shape) for v in s.outs}
    alias, into = {}, {}   # into: step -> {output position: the operand it is stored into}
    for v in outs:   # in order, each into the first donated argument that fits (as JAX)
        k = made.get(v)
        if k is None or v in alias or outs.count(v) != 1:
            continue
        s = steps[k]
        reads = [x for x in s.ins if not isinstance(x, Lit)]
        for x, i in donated.items():
            if (i in alias.values() or x in escaped or x.aval.shape != v.aval.shape
                    or x.aval.dtype != v.aval.dtype or last.get(x, -1) > k):
                continue
            here = any(y is x for y in reads)
            if last.get(x, -1) == k and (not here or any(
                    y is not x and x in roots.get(y, ()) for y in reads)):
                continue   # read here through a view
            alias[v] = i
            if here and s.cluster.shape:   # stored into the operand it reads
                into.setdefault(k, {})[s.outs.index(v)] = x
            break
    split = cpu_parallel.split_min_work()
    for k, at in into.items():
        steps[k] = kernel_step(steps[k].cluster, split, at)
    _updates_in_place(steps, outs, donated, roots, last, alias)
    return alias


def _updates_in_place(steps, outs, donated, roots, last, alias):
    """dynamic_update_slice results written into their donated operand (the window only, not
    a copy of the operand first): the operand is the donated argument itself, this step is
    the last to read it or any view of it, and no other result may view it."""
    for k, s in enumerate(steps):
        if s.kind != "np" or s.eqn.prim is not P.dynamic_update_slice_p:
            continue
        v, x = s.outs[0], s.ins[0]
        i = donated.get(x) if not isinstance(x, Lit) else None
        if (i is None or v not in outs or v in alias or outs.count(v) != 1
                or i in alias.values() or last.get(x, -1) != k or x.aval != v.aval
                or any(x in roots.get(o, ()) for o in outs if o is not v)
                or any(y is x or x in roots.get(y, ()) for y in s.ins[1:])):
            continue
        steps[k] = Step("np", s.eqn, s.outs, s.ins, _dus_into)
        alias[v] = i


def _dus_into(x, upd, *starts):
    """dynamic_update_slice's impl writing into x (a donated argument the plan owns)."""
    x[P._window(starts, x.shape, upd.shape)] = upd
    return x


__all__ = ["CpuPlan", "Program"]
