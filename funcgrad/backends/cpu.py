"""The CPU backend: runs each primitive's numpy impl (the reference semantics)."""
from __future__ import annotations

import ctypes
import functools
import os
import sys

import numpy as np

from ..core import FuncgradError, user_frame_src
from ..prims import IndexOutOfRange


def _keep_freed_memory_mapped() -> bool:
    """Ask glibc to serve arrays up to 32 MiB from its heap and keep freed memory mapped.

    By default glibc maps each array above ~128 KiB afresh and returns it on free, so every
    new multi-MB intermediate of a training step page-faults on first write: ~1 ms per 2 MB on
    the development VM, more than the arithmetic (a GPT step on the CPU ran 70 -> 51 ms/step,
    C2 9.7 -> 7.5 ms). Freed memory then stays with the process for reuse (the peak is kept).
    FUNCGRAD_MALLOPT=0 leaves glibc's defaults. Returns whether the settings took effect.
    """
    if os.environ.get("FUNCGRAD_MALLOPT", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):   # not glibc (e.g. musl): nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 32 << 20) and mallopt(m_trim_threshold, 512 << 20))


MALLOPT_APPLIED = _keep_freed_memory_mapped()


class CpuBackend:
    """Buffers are read-only numpy arrays; every primitive runs its numpy impl."""
    name = "cpu"

    def from_numpy(self, a: np.ndarray) -> np.ndarray:
        out = np.array(a, copy=True)
        out.flags.writeable = False
        return out

    def from_value(self, a: np.ndarray) -> np.ndarray:
        return a

    def to_numpy(self, buf: np.ndarray) -> np.ndarray:
        return buf

    def apply(self, prim, bufs, params, aval):
        try:
            with np.errstate(all="ignore"):
                out = prim.impl(*bufs, **params)
        except IndexOutOfRange as e:
            raise IndexError(f"{e}\n  at {user_frame_src()}") from None
        except ValueError as e:
            raise FuncgradError(f"{e}\n  at {user_frame_src()}") from None
        out = np.asarray(out)
        if out.dtype != aval.dtype:
            out = out.astype(aval.dtype)
        if out.shape != aval.shape:
            raise AssertionError(f"{prim.name}: impl returned {out.shape}, rule says {aval}")
        if out.flags.writeable:
            out.flags.writeable = False
        return out

    def synchronize(self):
        pass


class CpuPlan:
    """A jitted expression as one generated Python function of straight-line numpy calls.

    Every value lives in a local variable that is dropped after its last use, so peak memory
    follows the plan. Broadcasts read only by elementwise equations are left to numpy's own
    broadcasting (a reshape, or nothing at all for a scalar).
    """

    def __init__(self, expr, consts):
        from ..core import Lit
        name = {}
        env = {"np": np}
        n = [0]

        def fresh():
            n[0] += 1
            return f"v{n[0]}"

        lines, self.line_eqn = [], {}
        for v, c in zip(expr.in_binders[:expr.n_consts], consts):
            name[v] = fresh()
            env[name[v]] = np.asarray(c)
        args = []
        for v in expr.in_binders[expr.n_consts:]:
            name[v] = fresh()
            args.append(name[v])
        keep = {o for o in expr.outs if not isinstance(o, Lit)}
        lazy = _lazy_broadcasts(expr, keep)

        def ref(x):
            if isinstance(x, Lit):
                k = fresh()
                env[k] = x.val
                return k
            return name[x]

        swapped = _transposed_dots(expr, keep)   # transpose equation -> its dot equation
        folded = {d.out for d in swapped.values()}
        steps = []   # (local name, argument names, equation); functions live in env
        for e in expr.eqns:
            if e.out in folded:   # computed, already transposed, by its transpose's step
                continue
            d = swapped.get(e)
            if d is not None:
                (lc, rc), _ = d.params["dimension_numbers"]
                # (x . y)^T = y . x with the contracting dims swapped: a contiguous result
                name[e.out] = fresh()
                env["f" + name[e.out]] = functools.partial(
                    d.prim.impl, dimension_numbers=((rc, lc), ((), ())))
                steps.append((name[e.out], [ref(d.inputs[1]), ref(d.inputs[0])], e))
                continue
            ins = [ref(x) for x in e.inputs]
            if e.out in lazy and e.inputs[0].aval.ndim == 0:
                name[e.out] = ins[0]   # a scalar broadcasts by itself
                continue
            fn, params = e.prim.impl, e.params
            if e.out in lazy:  # a reshape; numpy broadcasts inside the consumers
                fn, params = _expand_only(e.inputs[0].aval.shape, **e.params), {}
            elif any(x in lazy for x in e.inputs) and not any(
                    x not in lazy and x.aval.shape == e.out.aval.shape for x in e.inputs):
                fn = _full_shape(fn, e.out.aval.shape)   # every operand was broadcast
            name[e.out] = fresh()
            env["f" + name[e.out]] = functools.partial(fn, **params) if params else fn
            steps.append((name[e.out], ins, e))
        outs = [ref(o) for o in expr.outs]
        # locals (step results) are dropped after their last read; arguments and constants
        # stay referenced by the caller and the plan anyway
        local = {out for out, _, _ in steps}
        last = {}
        for i, (_, ins, _) in enumerate(steps):
            for x in ins:
                last[x] = i
        for o in outs:
            last[o] = len(steps)
        head = 2   # the function's source starts with "def" and the argument unpacking
        for i, (out, ins, e) in enumerate(steps):
            self.line_eqn[head + len(lines) + 1] = e
            lines.append(f"{out} = f{out}({', '.join(ins)})")
            dead = sorted({x for x in ins if x in local and last[x] == i})
            if dead:
                lines.append(f"{', '.join(dead)} = {', '.join(['None'] * len(dead))}")
        src = (f"def plan(args):\n    {''.join(a + ', ' for a in args)}= args\n"
               + "".join(f"    {ln}\n" for ln in lines)
               + f"    return ({''.join(o + ', ' for o in outs)})\n")
        if not args:
            src = src.replace("    = args\n", "    pass\n")
        self.source = src
        exec(compile(src, _FILENAME, "exec"), env)
        self._fn = env["plan"]
        self.out_avals = [o.aval for o in expr.outs]

    def __call__(self, args):
        from ..core import Array
        try:
            with np.errstate(all="ignore"):
                outs = self._fn([a.buf for a in args])
        except (IndexOutOfRange, ValueError) as err:
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
        res = []
        for out, aval in zip(outs, self.out_avals):
            out = np.asarray(out)
            if out.dtype != aval.dtype:
                out = out.astype(aval.dtype)
            res.append(Array(out, aval, "cpu"))
        return res


_FILENAME = "<funcgrad cpu plan>"


def _transposed_dots(expr, keep):
    """{transpose: the dot it reads}, for 2-D matrix products read only by a transpose (the
    backward pass's weight gradients); numpy would otherwise add the strided view slowly."""
    from ..prims import dot_general_p, transpose_p
    users = {}
    for e in expr.eqns:
        for x in e.inputs:
            users.setdefault(x, []).append(e)
    out = {}
    for e in expr.eqns:
        if e.prim is dot_general_p and e.out not in keep and e.out.aval.ndim == 2:
            (lc, rc), (lb, _) = e.params["dimension_numbers"]
            u = users.get(e.out, [])
            if (not lb and len(lc) == 1 and len(u) == 1 and u[0].prim is transpose_p
                    and all(x.aval.ndim == 2 for x in e.inputs)):
                out[u[0]] = e
    return out


def _lazy_broadcasts(expr, keep):
    """broadcast_in_dim results read only by elementwise equations (numpy broadcasts itself)."""
    from ..prims import broadcast_in_dim_p
    users = {}
    for e in expr.eqns:
        for x in e.inputs:
            users.setdefault(x, []).append(e)
    return {e.out for e in expr.eqns if e.prim is broadcast_in_dim_p and e.out not in keep
            and all(u.prim.kind == "elementwise" for u in users.get(e.out, ()))}


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


def _compile(self, expr, consts, donate=()):
    return CpuPlan(expr, consts)


CpuBackend.compile = _compile
