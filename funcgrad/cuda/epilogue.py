"""jit: a product and its bias add, or a weight gradient and its bias gradient, as one cuBLASLt
GEMM (the BIAS and BGRADA / BGRADB epilogues).

A dense layer `x @ w + b` traces to a dot_general and an elementwise cluster that adds the
broadcast bias, often with a residual (`h + (x @ w + b)`). When the cluster does nothing else
and is the product's only reader, `fuse` replaces both steps by one ("gemm", BiasGemm) step at
the cluster's place: cuBLASLt writes D = x w + beta C + b with C the residual (beta = 1), so the
product never goes to memory and is never read back (W2: the qkv, attention-out and fc2
products of every layer, 18 graph nodes fewer). On an H200 the epilogue cost nothing over the
plain product (4096x1152x384: 94.0 against 93.6 us) while the bias add alone took 7-18 us.

In the backward pass a dense layer's cotangent ct [..., N] gives the weight gradient, a
dot_general contracting ct's leading axes with the layer's input, and the bias gradient, a
reduce_sum of ct over the same axes. `fuse` pairs the two into one ("gemm", BiasGrad) step:
cuBLASLt sums ct while it reads it for the product (BGRADA when ct is cuBLAS's A, the product's
rhs; BGRADB when it is the lhs). On an H200 the epilogue added 6-10 us to a 4096-token weight
gradient where the column sum alone took 11-16 us; W2 loses its 24 bias sums (with the pairs
above: 410 -> 368 plan steps, the donated step 10.2 -> 9.6-9.75 ms, benchmarks/RESULTS.md).

Where cuBLASLt cannot take the product (the simulator, no nvmath, a copied operand, a strided
bias, no algorithm) the step runs the dot_general and the cluster as before, so results and
fallbacks are those of the unfused plan. FUNCGRAD_GEMM_EPILOGUE=0 turns the matching off.
"""
from __future__ import annotations

import os

from funcgrad import prims as P
from funcgrad.compile import switches
from funcgrad.core import Var
from funcgrad.cuda import fusion, matmul
from funcgrad.cuda.lowering import lower

ENABLED = os.environ.get("FUNCGRAD_GEMM_EPILOGUE", "1") != "0"
switches.register(__name__, "ENABLED")   # a change keys jit's shared cache apart


class BiasGemm:
    """A plan step: `dot` (a dot_general eqn) and `cluster` (its bias add, + a residual)."""

    def __init__(self, dot, cluster, bias: Var, residual: Var | None):
        self.dot, self.cluster, self.bias, self.residual = dot, cluster, bias, residual
        self.out = cluster.outputs[0]
        self.outputs = [self.out]
        self.inputs = [x for x in dot.inputs if isinstance(x, Var)] + [bias] + (
            [residual] if residual is not None else [])

    def describe(self) -> str:
        res = " + residual" if self.residual is not None else ""
        return f"dot_general+bias{res} -> {self.out.aval.str_short()}"


class BiasGrad:
    """A plan step: `dot` (a weight gradient) and `red` (a reduce_sum of one of its operands
    over the axes the product contracts: the bias gradient of the same cotangent)."""

    def __init__(self, dot, red, side: str):
        self.dot, self.red, self.side = dot, red, side
        self.outputs = [dot.out, red.out]
        self.inputs = [x for x in dot.inputs if isinstance(x, Var)]

    def describe(self) -> str:
        return (f"dot_general+bias_grad -> {self.dot.out.aval.str_short()}, "
                f"{self.red.out.aval.str_short()}")


# the products whose bias epilogues cuBLASLt runs here: operands, output and vector of one type
LT_DTYPES = ("float32", "bfloat16", "float16")


def _bias_of(e, shape):
    """The bias vector a broadcast_in_dim eqn spreads over the last axis of `shape`, or None."""
    x = e.inputs[0]
    p = e.params
    if (not isinstance(x, Var) or tuple(p["shape"]) != tuple(shape) or x.aval.ndim != 1
            or tuple(p["broadcast_dimensions"]) != (len(shape) - 1,)
            or x.aval.shape[0] != shape[-1]):
        return None
    return x


def match(dot, c):
    """(bias, residual or None) when cluster c is exactly dot's output + a broadcast bias
    (+ one residual of the same shape), summed in any order; else None."""
    h = dot.out
    (_, rc), (lb, rb) = dot.params["dimension_numbers"]
    if lb or rb or dot.inputs[1].aval.ndim - len(rc) != 1:   # batched, or rhs keeps 0 or 2+ dims
        return None
    if (c.recomputed or len(c.outputs) != 1 or tuple(c.shape) != tuple(h.aval.shape)
            or h.aval.dtype.name not in LT_DTYPES or not h.aval.ndim):
        return None
    bcasts = [e for e in c.eqns if e.prim is P.broadcast_in_dim_p]
    adds = [e for e in c.eqns if e.prim is P.add_p]
    if len(bcasts) != 1 or not 1 <= len(adds) <= 2 or len(adds) + 1 != len(c.eqns):
        return None
    bias = _bias_of(bcasts[0], h.aval.shape)
    if bias is None or bias.aval.dtype != h.aval.dtype:
        return None
    b = bcasts[0].out
    leaves = [x for e in adds for x in e.inputs if x is b or x not in c.members]
    inner = [x for e in adds for x in e.inputs if x is not b and x in c.members]
    if (not all(isinstance(x, Var) for x in leaves) or len(set(inner)) != len(inner)
            or c.outputs[0] in inner or c.outputs[0] not in [e.out for e in adds]):
        return None
    if sum(x is h for x in leaves) != 1 or sum(x is b for x in leaves) != 1:
        return None
    rest = [x for x in leaves if x is not h and x is not b]
    if len(rest) != len(adds) - 1:
        return None
    r = rest[0] if rest else None
    if r is not None and (r.aval.shape != h.aval.shape or r.aval.dtype != h.aval.dtype):
        return None
    return bias, r


def grad_side(dot, red):
    """"x" or "y": the dot_general operand that reduce_sum `red` sums over exactly the axes
    the (unbatched, float32) product contracts, or None."""
    ct = red.inputs[0]
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    x, y = dot.inputs
    if (lb or rb or x is y or ct.aval.dtype.name not in LT_DTYPES
            or dot.out.aval.dtype != ct.aval.dtype or red.out.aval.dtype != ct.aval.dtype
            or not red.out.aval.ndim):
        return None
    for side, v, c in (("x", x, lc), ("y", y, rc)):
        if v is ct and set(c) == set(red.params["axes"]):
            return side
    return None


def _readers(steps) -> dict:
    readers: dict = {}
    for i, (kind, s) in enumerate(steps):
        ins = fusion.external_inputs(s) if kind == "fused" else s.inputs
        for x in ins:
            if isinstance(x, Var):
                readers.setdefault(x, set()).add(i)
    return readers


def fuse(steps: list, expr) -> list:
    """steps (fusion.plan_steps) with each matching dot_general + bias-add cluster pair made
    one ("gemm", BiasGemm) step at the cluster's place, then each reduce_sum + weight-gradient
    dot_general pair of one cotangent one ("gemm", BiasGrad) step at the later one's place."""
    if not ENABLED:
        return steps
    return _fuse_grads(_fuse_bias(steps, expr))


def _fuse_grads(steps: list) -> list:
    readers = _readers(steps)
    drop, put = set(), {}
    for i, (kind, r) in enumerate(steps):
        if kind != "eqn" or r.prim is not P.reduce_sum_p or not isinstance(r.inputs[0], Var):
            continue
        for j in sorted(readers.get(r.inputs[0], ())):
            kd, d = steps[j]
            if kd != "eqn" or d.prim is not P.dot_general_p or j in drop or j in put:
                continue
            side = grad_side(d, r)
            first, last = sorted((i, j))
            made = (r if first == i else d).out   # computed later than before: no reader between
            if side is None or any(k <= last for k in readers.get(made, ())):
                continue
            drop.add(first)
            put[last] = ("gemm", BiasGrad(d, r, side))
            break
    return [put.get(i, st) for i, st in enumerate(steps) if i not in drop]


def fuse_into_reader(steps: list, expr, make) -> list:
    """steps with each dot_general that is no result and whose only reader is a fused cluster,
    for which make(gemm eqn, cluster) gives a step, dropped and that step at the cluster's
    place (make returns None to leave the pair as it is)."""
    readers = _readers(steps)
    outs = {o for o in expr.outs if isinstance(o, Var)}
    drop, put = set(), {}
    for i, (kind, s) in enumerate(steps):
        if kind != "eqn" or s.prim is not P.dot_general_p or s.out in outs:
            continue
        rd = readers.get(s.out, set())
        if len(rd) != 1:
            continue
        j = next(iter(rd))
        if steps[j][0] != "fused" or j in put:
            continue
        step = make(s, steps[j][1])
        if step is not None:
            drop.add(i)
            put[j] = step
    return [put.get(i, st) for i, st in enumerate(steps) if i not in drop]


def _fuse_bias(steps: list, expr) -> list:
    def make(s, cluster):
        m = match(s, cluster)
        return None if m is None else ("gemm", BiasGemm(s, cluster, *m))
    return fuse_into_reader(steps, expr, make)


def run(g, env: dict, read, kernels: dict):
    """Launch step g (a BiasGemm or a BiasGrad): one cuBLASLt call, or its parts apart."""
    x, y = (read(v) for v in g.dot.inputs)
    p = g.dot.params
    if isinstance(g, BiasGrad):
        res = matmul.dot_bgrad(x, y, p["dimension_numbers"], g.dot.out.aval,
                               p.get("precision"), g.side, g.red.out.aval)
        if res is None:
            env[g.red.out] = lower(g.red.prim, [read(g.red.inputs[0])], g.red.params,
                                   g.red.out.aval)
            res = lower(g.dot.prim, [x, y], p, g.dot.out.aval), env[g.red.out]
        env[g.dot.out], env[g.red.out] = res
        return
    out = matmul.dot_bias(x, y, p["dimension_numbers"], g.dot.out.aval, p.get("precision"),
                          read(g.bias), None if g.residual is None else read(g.residual))
    if out is not None:
        env[g.out] = out
        return
    env[g.dot.out] = lower(g.dot.prim, [x, y], p, g.dot.out.aval)
    fusion.run_cluster(kernels, g.cluster, env)
    env.pop(g.dot.out, None)
