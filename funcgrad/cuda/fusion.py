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
        t = _NB[dt.name]
        return f"({t}({a[0]} << {a[1]}) if 0 <= {a[1]} < {bits} else {t}(0))"
    if name == "shift_right_logical":
        bits = dt.itemsize * 8
        u = f"uint{bits}"
        return (f"({_NB[dt.name]}({u}({a[0]}) >> {u}({a[1]})) if 0 <= {a[1]} < {bits} "
                f"else {_NB[dt.name]}(0))")
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
    """Generated source for one cluster and one layout of its operands.

    Each external operand is read as "flat" (C-contiguous with the cluster's shape: index i),
    "scalar" (one element) or "strided" (through output coordinates and the buffer's own
    strides: broadcasts, transposes and other views are read in place, never copied).
    """

    def __init__(self, cluster: Cluster, layout: dict):
        self.cluster = cluster
        self.inputs = external_inputs(cluster)
        self.layout = layout  # var -> "flat" | "strided" | "scalar"
        self.source = self._generate()

    def _generate(self):
        c = self.cluster
        rank = len(c.shape)
        pname = {v: f"in{k}" for k, v in enumerate(self.inputs)}
        need_coords = any(self.layout[v] == "strided" for v in self.inputs) or any(
            e.prim is P.iota_p for e in c.eqns)
        names = {}
        body = []

        def read(v, dims_map):
            p = pname[v]
            mode = self.layout[v]
            if mode == "flat":
                return f"{p}[{p}_o + i]"
            if mode == "scalar":
                return f"{p}[{p}_o]"
            terms = [f"c{d} * {p}_s{j}" for j, d in enumerate(dims_map)
                     if v.aval.shape[j] != 1]
            return f"{p}[{' + '.join([p + '_o'] + terms)}]"

        for k, e in enumerate(c.eqns):
            dt = e.out.aval.dtype
            out = f"t{k}"
            if e.prim is P.iota_p:
                body.append(f"{out} = {_NB[dt.name]}(c{e.params['dimension']})")
            elif _is_view_bcast(e, c.members):
                x = e.inputs[0]
                if not isinstance(x, Var):
                    body.append(f"{out} = {_lit(x.val, dt)}")
                else:
                    body.append(f"{out} = {read(x, e.params['broadcast_dimensions'])}")
            else:
                args = []
                for x in e.inputs:
                    if isinstance(x, Lit):
                        args.append(_lit(x.val, x.aval.dtype))
                    elif x in names:
                        args.append(names[x])
                    else:
                        args.append(read(x, tuple(range(rank))))
                body.append(f"{out} = {_scalar_expr(e, args, dt)}")
            names[e.out] = out
        for j, o in enumerate(c.outputs):
            body.append(f"out{j}[out{j}_o + i] = {names[o]}")
        sig = ["n"] + [f"s{d}" for d in range(rank)]
        for v in self.inputs:
            p = pname[v]
            sig += [p, f"{p}_o"]
            if self.layout[v] == "strided":
                sig += [f"{p}_s{j}" for j in range(v.aval.ndim)]
        for j in range(len(c.outputs)):
            sig += [f"out{j}", f"out{j}_o"]
        lines = [f"@cuda.jit({{opts}})\ndef kernel({', '.join(sig)}):",
                 "    i = cuda.grid(1)", "    step = cuda.gridsize(1)", "    while i < n:"]
        if need_coords:
            lines.append("        r = i")
            for d in reversed(range(rank)):
                lines += [f"        c{d} = r % s{d}", f"        r = r // s{d}"]
        lines += [f"        {b}" for b in body]
        lines.append("        i += step")
        return HELPERS + "\n\n" + "\n".join(lines) + "\n"

    def args(self, bufs: list, outs: list) -> list:
        """Kernel arguments for operand buffers (aligned with self.inputs) and outputs."""
        c = self.cluster
        a = [int(np.prod(c.shape))] + list(c.shape)
        for v, b in zip(self.inputs, bufs):
            a += [b.arr(), b.offset]
            if self.layout[v] == "strided":
                a += list(b.strides)
        for o in outs:
            a += [o.arr(), o.offset]
        return a


def external_inputs(c: Cluster) -> list:
    """Variables the cluster reads from outside, in first-use order."""
    seen = []
    for e in c.eqns:
        if e.prim is P.iota_p:
            continue
        for x in e.inputs:
            if isinstance(x, Var) and x not in c.members and x not in seen:
                seen.append(x)
    return seen


def layout_of(v, buf, shape) -> str:
    if buf.size == 1:
        return "scalar"
    if tuple(buf.shape) == tuple(shape) and buf.is_contiguous():
        return "flat"
    return "strided"
