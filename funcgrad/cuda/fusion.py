"""Elementwise fusion for jit on CUDA: cluster equations and generate one kernel per cluster.

A cluster is a set of elementwise equations (plus broadcasts of their operands and iotas) that
produce values of one shape. Its kernel reads each external operand once per element — full,
broadcast (through the broadcast_in_dim's index map) or a baked-in scalar literal — computes
every member in registers and writes only the values needed outside the cluster. Shapes are
kernel arguments, so clusters of the same structure (every layer of a network) share one
compiled kernel.
"""
from __future__ import annotations

import numpy as np

from .. import prims as P
from ..core import Lit, Var

# ---------------------------------------------------------------------------------------------
# clustering
# ---------------------------------------------------------------------------------------------


def fusible(e) -> bool:
    return e.prim.kind == "elementwise" or e.prim in (P.broadcast_in_dim_p, P.iota_p)


class Cluster:
    """Equations fused into one kernel; `outputs` are the members used outside it."""

    def __init__(self, shape):
        self.shape = tuple(shape)
        self.eqns = []
        self.members = set()
        self.outputs = []

    def __repr__(self):
        return f"fused[{'+'.join(e.prim.name for e in self.eqns)}]{list(self.shape)}"


def _is_view_bcast(e, members):
    """A broadcast of an operand from outside the cluster: read through an index map."""
    return e.prim is P.broadcast_in_dim_p and not (
        isinstance(e.inputs[0], Var) and e.inputs[0] in members)


def plan_steps(expr):
    """Order the expression into steps: ("eqn", eqn) for kernels of their own and
    ("fused", Cluster) for fused elementwise clusters, respecting dependencies."""
    steps = []
    open_by_shape: dict[tuple, Cluster] = {}
    producer: dict[Var, Cluster] = {}

    def flush(c):
        if open_by_shape.get(c.shape) is c:
            del open_by_shape[c.shape]
            steps.append(("fused", c))

    def flush_inputs(e, keep=None):
        for x in e.inputs:
            c = producer.get(x) if isinstance(x, Var) else None
            if c is not None and c is not keep and open_by_shape.get(c.shape) is c:
                flush(c)

    for e in expr.eqns:
        if fusible(e) and e.out.aval.size > 0:
            shape = e.out.aval.shape
            c = open_by_shape.get(shape)
            if c is None:
                c = open_by_shape[shape] = Cluster(shape)
            flush_inputs(e, keep=c)
            c.eqns.append(e)
            c.members.add(e.out)
            producer[e.out] = c
        else:
            flush_inputs(e)
            steps.append(("eqn", e))
    for c in list(open_by_shape.values()):
        flush(c)
    # which members are needed outside their cluster
    used_outside = {o for o in expr.outs if isinstance(o, Var)}
    for kind, s in steps:
        eqns = [s] if kind == "eqn" else s.eqns
        for e in eqns:
            for x in e.inputs:
                if isinstance(x, Var) and (kind == "eqn" or x not in s.members):
                    used_outside.add(x)
    for kind, s in steps:
        if kind == "fused":
            s.outputs = [e.out for e in s.eqns if e.out in used_outside]
            # members only read through a broadcast need not be computed here
            s.eqns = _prune(s)
    return [(k, s) for k, s in steps if k == "eqn" or s.outputs]


def _prune(c):
    need = set(c.outputs)
    keep = []
    for e in reversed(c.eqns):
        if e.out in need:
            keep.append(e)
            if _is_view_bcast(e, c.members):
                continue
            need.update(x for x in e.inputs if isinstance(x, Var))
    keep.reverse()
    return keep


# ---------------------------------------------------------------------------------------------
# code generation
# ---------------------------------------------------------------------------------------------

_NB = {"float16": "float16", "float32": "float32", "float64": "float64", "int8": "int8",
       "uint8": "uint8", "int32": "int32", "uint32": "uint32", "int64": "int64",
       "bool": "boolean"}

HELPERS = """
@cuda.jit(device=True, inline=True)
def _fmax(a, b):
    if a != a:
        return a
    if b != b:
        return b
    return a if a >= b else b


@cuda.jit(device=True, inline=True)
def _fmin(a, b):
    if a != a:
        return a
    if b != b:
        return b
    return a if a <= b else b


@cuda.jit(device=True, inline=True)
def _sign(a):
    if a != a:
        return a
    return (a > 0) - (a < 0)


@cuda.jit(device=True, inline=True)
def _rint(x):
    r = math.floor(x + 0.5)
    if r - x == 0.5 and math.fmod(r, 2.0) != 0.0:
        r -= 1.0
    return r


@cuda.jit(device=True, inline=True)
def _logistic(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


@cuda.jit(device=True, inline=True)
def _idiv(a, b):
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@cuda.jit(device=True, inline=True)
def _irem(a, b):
    if b == 0:
        return 0
    r = abs(a) % abs(b)
    return r if a >= 0 else -r
"""


def _scalar_expr(e, args, dt):
    """Source of one elementwise primitive applied to argument expressions."""
    name = e.prim.name
    a = args
    f = dt.kind == "f"
    simple = {
        "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
        "neg": "(-{0})", "exp": "math.exp({0})", "log": "math.log({0})",
        "log1p": "math.log1p({0})", "expm1": "math.expm1({0})", "tanh": "math.tanh({0})",
        "sin": "math.sin({0})", "cos": "math.cos({0})", "sqrt": "math.sqrt({0})",
        "rsqrt": "(1.0 / math.sqrt({0}))", "erf": "math.erf({0})",
        "logistic": "_logistic({0})", "abs": "abs({0})", "sign": "_sign({0})",
        "floor": "math.floor({0})", "round": "_rint({0})", "isfinite": "math.isfinite({0})",
        "stop_gradient": "{0}", "eq": "({0} == {1})", "ne": "({0} != {1})",
        "lt": "({0} < {1})", "le": "({0} <= {1})", "gt": "({0} > {1})", "ge": "({0} >= {1})",
        "and": "({0} & {1})", "or": "({0} | {1})", "xor": "({0} ^ {1})",
        "select": "({1} if {0} else {2})", "pow": "({0} ** {1})",
    }
    if name in simple:
        return simple[name].format(*a)
    if name == "div":
        return f"({a[0]} / {a[1]})" if f else f"_idiv({a[0]}, {a[1]})"
    if name == "rem":
        return f"math.fmod({a[0]}, {a[1]})" if f else f"_irem({a[0]}, {a[1]})"
    if name in ("max", "min"):
        if f:
            return f"_f{name}({a[0]}, {a[1]})"
        return f"{name}({a[0]}, {a[1]})"
    if name == "not":
        return f"(not {a[0]})" if dt == np.bool_ else f"(~{a[0]})"
    if name == "integer_pow":
        y = e.params["y"]
        if y == 0:
            return "1"
        base = " * ".join([a[0]] * abs(y)) if abs(y) <= 4 else f"({a[0]} ** {abs(y)})"
        return f"({base})" if y > 0 else f"(1.0 / ({base}))"
    if name == "convert_element_type":
        nd = e.params["new_dtype"]
        src = e.inputs[0].aval.dtype
        if nd == np.bool_:
            return f"({a[0]} != 0)"
        if src.kind == "f" and nd.kind in "iu":
            return f"{_NB[nd.name]}(math.trunc({a[0]}))"
        return f"{_NB[nd.name]}({a[0]})"
    if name == "shift_left":
        bits = dt.itemsize * 8
        return f"({a[0]} << {a[1]} if 0 <= {a[1]} < {bits} else 0)"
    if name == "shift_right_logical":
        bits = dt.itemsize * 8
        u = f"uint{bits}"
        return (f"({_NB[dt.name]}({u}({a[0]}) >> {u}({a[1]})) if 0 <= {a[1]} < {bits} "
                f"else 0)")
    raise NotImplementedError(f"no fused CUDA scalar op for {name}")


def _lit(val, dtype):
    v = np.asarray(val).astype(dtype).item()
    if dtype == np.bool_:
        return "True" if v else "False"
    if dtype.kind == "f":
        if v != v:
            return f"{_NB[dtype.name]}(math.nan)"
        if v in (float("inf"), float("-inf")):
            return f"{_NB[dtype.name]}({'-' if v < 0 else ''}math.inf)"
        return f"{_NB[dtype.name]}({v!r})"
    return f"{_NB[dtype.name]}({v})"


class FusedKernel:
    """Generated source plus how to call it: which buffers go in and come out."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.inputs: list = []  # external Vars read by the kernel (full or broadcast)
        self.source, self.signature = self._generate()

    def _generate(self):
        c = self.cluster
        rank = len(c.shape)
        lines = []
        names = {}
        ext = {}  # external var -> parameter name
        in_modes = []
        bcast_reads = {}
        need_coords = False

        def param(v):
            if v not in ext:
                ext[v] = f"in{len(ext)}"
                self.inputs.append(v)
            return ext[v]

        body = []
        for k, e in enumerate(c.eqns):
            dt = e.out.aval.dtype
            out = f"t{k}"
            if e.prim is P.iota_p:
                need_coords = True
                body.append(f"{out} = {_NB[dt.name]}(c{e.params['dimension']})")
            elif _is_view_bcast(e, c.members):
                x = e.inputs[0]
                if isinstance(x, Lit) or (not isinstance(x, Var)):
                    body.append(f"{out} = {_lit(x.val, dt)}")
                elif x.aval.size == 1:
                    p = param(x)
                    in_modes.append((p, "scalar", ()))
                    body.append(f"{out} = {p}[0]")
                else:
                    p = param(x)
                    bd = tuple(e.params["broadcast_dimensions"])
                    ones = tuple(int(s == 1) for s in x.aval.shape)
                    in_modes.append((p, "bcast", (bd, ones)))
                    need_coords = True
                    bcast_reads[out] = (p, bd, ones, x.aval.ndim)
                    body.append(None)  # filled below
            else:
                args = []
                for x in e.inputs:
                    if isinstance(x, Lit):
                        args.append(_lit(x.val, x.aval.dtype))
                    elif x in names:
                        args.append(names[x])
                    else:
                        p = param(x)
                        in_modes.append((p, "full", ()))
                        args.append(f"{p}[i]")
                body.append(f"{out} = {_scalar_expr(e, args, dt)}")
            names[e.out] = out
        # broadcast reads: source index from output coordinates
        for k, e in enumerate(c.eqns):
            out = f"t{k}"
            if out in bcast_reads:
                p, bd, ones, nd = bcast_reads[out]
                terms = []
                for j in range(nd):
                    if ones[j]:
                        continue
                    stride = " * ".join(f"{p}_d{m}" for m in range(j + 1, nd)) or "1"
                    terms.append(f"c{bd[j]} * ({stride})")
                body[k] = f"{out} = {p}[{' + '.join(terms) or '0'}]"
        outs = [f"out{j}" for j in range(len(c.outputs))]
        for j, o in enumerate(c.outputs):
            body.append(f"{outs[j]}[i] = {names[o]}")
        params = [f"s{d}" for d in range(rank)]
        dims_params = []
        for v, p in ext.items():
            mode = next(m for q, m, _ in in_modes if q == p)
            if mode == "bcast":
                dims_params += [f"{p}_d{m}" for m in range(v.aval.ndim)]
        sig = ["n"] + params + dims_params + list(ext.values()) + outs
        lines.append(f"@cuda.jit({{opts}})\ndef kernel({', '.join(sig)}):")
        lines.append("    start = cuda.grid(1)")
        lines.append("    step = cuda.gridsize(1)")
        lines.append("    for i in range(start, n, step):")
        if need_coords:
            lines.append("        r = i")
            for d in reversed(range(rank)):
                lines.append(f"        c{d} = r % s{d}")
                lines.append(f"        r = r // s{d}")
        for b in body:
            lines.append(f"        {b}")
        src = HELPERS + "\n\n" + "\n".join(lines) + "\n"
        self.dims_params = dims_params
        return src, sig

    def args(self, bufs: dict, out_bufs: list) -> list:
        """Kernel arguments: n, output dims, broadcast operand dims, operands, outputs."""
        c = self.cluster
        n = int(np.prod(c.shape))
        a = [n] + list(c.shape)
        for v in self.inputs:
            if f"{self._pname(v)}_d0" in self.dims_params:
                a += list(v.aval.shape)
        return a + [bufs[v] for v in self.inputs] + list(out_bufs)

    def _pname(self, v):
        return f"in{self.inputs.index(v)}"

    def describe(self) -> str:
        ops = "+".join(e.prim.name for e in self.cluster.eqns)
        return (f"fused[{ops}] {list(self.cluster.shape)}: {len(self.inputs)} in, "
                f"{len(self.cluster.outputs)} out")
