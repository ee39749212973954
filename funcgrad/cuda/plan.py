"""jit on CUDA: a Plan of fused elementwise kernels and per-primitive kernels for one Expr.

The plan is built once per jitted signature. Steps run in dependency order: fused clusters
(fusion.py) and the remaining primitives through the lowering table (views launch nothing).
Each intermediate buffer goes back to the pool after its last use.
"""
from __future__ import annotations

import numpy as np

from ..core import Array, Lit
from . import arrays, fusion, runtime
from .lowering import lower


class Plan:
    """Executable for one optimized expression on the "cuda" device."""

    def __init__(self, backend, expr, consts, donate=()):
        self.backend, self.expr = backend, expr
        self.consts = [c.buf if isinstance(c, Array) and c.device == "cuda"
                       else backend.from_numpy(np.asarray(c)) for c in consts]
        self.steps = fusion.plan_steps(expr)
        self.kernels: dict = {}  # (cluster index, layouts) -> compiled kernel
        # last use of every variable, to release buffers early
        last = {}
        for i, (kind, s) in enumerate(self.steps):
            for x in _reads(kind, s):
                last[x] = i
        for o in expr.outs:
            if not isinstance(o, Lit):
                last[o] = len(self.steps)
        self.free_after = [[] for _ in self.steps]
        for v, i in last.items():
            if i < len(self.steps):
                self.free_after[i].append(v)
        self.lits = {}

    def _lit(self, x):
        key = (x.val.dtype.str, x.val.item())
        b = self.lits.get(key)
        if b is None:
            b = self.lits[key] = self.backend.from_value(x.val)
        return b

    def __call__(self, args: list) -> list:
        env = {}
        expr = self.expr
        for v, b in zip(expr.in_binders, self.consts + [a.buf for a in args]):
            env[v] = b

        def read(x):
            return self._lit(x) if isinstance(x, Lit) else env[x]

        for i, (kind, s) in enumerate(self.steps):
            if kind == "eqn":
                if s.prim.call_impl is not None:  # effectful host calls (debug.print)
                    ins = [Array(read(x), x.aval, "cuda") for x in s.inputs]
                    env[s.out] = s.prim.call_impl(*ins, **s.params)
                    env[s.out] = self.backend.from_numpy(np.asarray(env[s.out]))
                else:
                    env[s.out] = lower(s.prim, [read(x) for x in s.inputs], s.params,
                                       s.out.aval)
            else:
                self._run_fused(i, s, env)
            for v in self.free_after[i]:
                if v not in expr.in_binders:
                    env.pop(v, None)
        return [Array(read(o), o.aval, "cuda") for o in expr.outs]

    def _run_fused(self, i, c, env):
        inputs = fusion.external_inputs(c)
        bufs = [env[v] for v in inputs]
        layout = tuple(fusion.layout_of(v, b, c.shape) for v, b in zip(inputs, bufs))
        key = (i, layout)
        k = self.kernels.get(key)
        if k is None:
            fk = fusion.FusedKernel(c, dict(zip(inputs, layout)))
            mod = runtime.module_from_source(fk.source.replace("{opts}", runtime.jit_opts()))
            k = self.kernels[key] = (fk, mod.kernel)
        fk, kern = k
        pool = arrays.pool()
        outs = [pool.empty(o.aval.shape, o.aval.dtype) for o in c.outputs]
        n = int(np.prod(c.shape))
        blocks, threads = runtime.grid_1d(n)
        kern[blocks, threads](*fk.args(bufs, outs))
        for o, b in zip(c.outputs, outs):
            env[o] = b

    def describe(self) -> str:
        """The kernels this plan launches, in order (views are listed as such)."""
        lines = ["kernels:"]
        for i, (kind, s) in enumerate(self.steps):
            if kind == "eqn":
                lines.append(f"  {s.prim.name} -> {s.out.aval.str_short()}")
            else:
                ops = "+".join(e.prim.name for e in s.eqns)
                lines.append(f"  fused[{ops}] {list(s.shape)}: "
                             f"{len(fusion.external_inputs(s))} in, {len(s.outputs)} out")
        return "\n".join(lines)


def _reads(kind, s):
    if kind == "eqn":
        return [x for x in s.inputs if not isinstance(x, Lit)]
    return fusion.external_inputs(s)
