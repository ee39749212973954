"""jit: a decode step's masked attention as two kernels that read only the visible positions.

A KV-cache step attends a few queries over the whole cache with a mask (`nn.dot_product_attention
(q, k_cache, v_cache, mask=arange(T) <= t)`): composed, that is a batched product over all T
positions, the mask's select, a softmax and a second product (D1: four launches a layer, each
reading the whole 1,024-slot cache). `fuse` replaces the plan steps

    L = dot_general(q, k)       batch dims (<= 2) first, one free axis of k (S), one contracted
    M = select(mask, L, fill)   an elementwise cluster of that select alone (fill <= -1e30)
    P = softmax(M)              over S
    O = dot_general(P, v)       contracting S, the same batch dims

by one ("rows", DecodeAttention) step. Its first kernel gives each (batch, head, query) row and
each chunk of CH positions a block: a thread per position computes q . k for the visible ones
(masked positions load nothing), the block keeps its max, sum of exponentials and p-weighted
sum of v rows (a chunk with no visible position reads no v row); the second combines the
chunks in order (flash-decoding). A row with no visible position gets the composed result, the mean of v
(the softmax of equal fills). The mask is read where it lies (broadcast views included).
Opt-in (FUNCGRAD_DECODE_ATTN=1) until it is measured on a GPU.
"""
from __future__ import annotations

import itertools
import math
import os

import numpy as np

from funcgrad import prims as P
from funcgrad.compile import switches
from funcgrad.core import Lit, Var
from funcgrad.cuda import runtime
from funcgrad.cuda.arrays import DeviceBuffer, pool
from funcgrad.cuda.elementwise import contiguous, nbt
from funcgrad.prims.rows import softmax_p

ENABLED = os.environ.get("FUNCGRAD_DECODE_ATTN", "0") == "1"
MAX_QUERIES = 16     # query rows per (batch, head) the step takes (decode: 1)
switches.register(__name__, "ENABLED", "MAX_QUERIES")   # a change keys jit's shared cache apart


def _chunk() -> int:
    return 4 if runtime.SIM else 64


class DecodeAttention:
    """A plan step: the composed masked attention (dot, select cluster, softmax, dot)."""

    def __init__(self, dot1, dot2, pred: Var, roles):
        self.q, self.k = dot1.inputs
        self.pred, self.v, self.roles = pred, dot2.inputs[1], roles
        self.out = dot2.out
        self.outputs = [self.out]
        self.inputs = [self.q, self.k, pred, self.v]

    def describe(self) -> str:
        return f"decode attention -> {self.out.aval.str_short()}"

    def run(self, env: dict, read) -> None:
        env[self.out] = attend(read(self.q), read(self.k), read(self.pred), read(self.v),
                               self.roles, self.out.aval)


def _merged(buf: DeviceBuffer, dims):
    """(size, stride) of dims of buf merged row-major, or None when they are no one run."""
    n = math.prod(buf.shape[d] for d in dims)
    dims = [d for d in dims if buf.shape[d] != 1]
    if not dims:
        return n, 0
    for a, b in itertools.pairwise(dims):
        if buf.strides[a] != buf.strides[b] * buf.shape[b]:
            return None
    return n, buf.strides[dims[-1]]


def _strides(buf, groups):
    """(buf or a contiguous copy of it, [(size, stride)] per group of dims; None: size 1)."""
    for _ in range(2):
        out = [(1, 0) if g is None else _merged(buf, g) for g in groups]
        if None not in out:
            return buf, out
        buf = contiguous(buf)
    raise AssertionError("a contiguous buffer's dims merge")


def attend(q, k, pred, v, roles, aval) -> DeviceBuffer:
    """The composed masked attention whose operands' dims play `roles`, in two launches."""
    qg, kg, pg, vg = roles
    q, ((B, qb), (H, qh), (TQ, qt), (D, qd)) = _strides(q, qg)
    k, ((_, kb), (_, kh), (S, ks), (_, kd)) = _strides(k, kg)
    pred, ((_, mb), (_, mh), (_, mt), (_, ms)) = _strides(pred, pg)
    v, ((_, vb), (_, vh), (_, vs), (DV, vd)) = _strides(v, vg)
    out = pool().empty(aval.shape, aval.dtype)
    rows = B * H * TQ
    if out.size == 0:
        return out
    ch = _chunk()
    ns = -(-S // ch)
    acc = np.dtype(aval.dtype)
    pm = pool().empty((rows * ns,), acc)
    pl = pool().empty((rows * ns,), acc)
    pa = pool().empty((rows * ns * DV,), acc)
    k1 = runtime.kernel(("decode_attn_split", acc.name, ch, D), lambda: _split_source(acc, ch, D))
    k1[(rows, ns), ch, runtime.stream()](
        H, TQ, S, DV, q.arr(), q.offset, qb, qh, qt, qd, k.arr(), k.offset, kb, kh, ks, kd,
        v.arr(), v.offset, vb, vh, vs, vd, pred.arr(), pred.offset, mb, mh, mt, ms,
        pm.arr(), pm.offset, pl.arr(), pl.offset, pa.arr(), pa.offset)
    ct = 4 if runtime.SIM else 64
    k2 = runtime.kernel(("decode_attn_combine", acc.name, ct), lambda: _combine_source(acc, ct))
    k2[rows, ct, runtime.stream()](H, TQ, S, DV, ns, v.arr(), v.offset, vb, vh, vs, vd,
                                   pm.arr(), pm.offset, pl.arr(), pl.offset, pa.arr(),
                                   pa.offset, out.arr(), out.offset)
    return out


def _tree(op, ch):
    """Shared-memory tree over red[0:ch] (ch a power of two) leaving the result in red[0]."""
    L, s = [], ch // 2
    while s:
        L += [f"    if t < {s}:", f"        red[t] = {op.format('red[t]', f'red[t + {s}]')}",
              "    cuda.syncthreads()"]
        s //= 2
    return L


def _split_source(acc, ch, D):
    ct = nbt(acc)
    L = [f"@cuda.jit({runtime.jit_opts()})",
         ("def kernel(H, TQ, S, DV, q, qo, qb, qh, qt, qd, k, ko, kb, kh, ks, kd, v, vo, vb, "
          "vh, vs, vd, m, mo, mb, mh, mt, ms, pm, pmo, pl, plo, pa, pao):"),
         f"    red = cuda.shared.array({ch}, {ct})", f"    sp = cuda.shared.array({ch}, {ct})",
         "    t = cuda.threadIdx.x", "    row = cuda.blockIdx.x", "    c = cuda.blockIdx.y",
         "    ns = cuda.gridDim.y", "    tq = row % TQ", "    bh = row // TQ", "    h = bh % H",
         "    b = bh // H", f"    s0 = c * {ch}", "    s = s0 + t",
         "    ok = s < S and m[mo + b * mb + h * mh + tq * mt + s * ms]",
         f"    score = {ct}(-math.inf)", "    if ok:", f"        a = {ct}(0)",
         "        qa = qo + b * qb + h * qh + tq * qt",
         "        ka = ko + b * kb + h * kh + s * ks", f"        for d in range({D}):",
         f"            a += {ct}(q[qa + d * qd]) * {ct}(k[ka + d * kd])",
         "        score = a", "    red[t] = score", "    cuda.syncthreads()"]
    L += _tree("max({0}, {1})", ch)
    L += ["    mx = red[0]", "    cuda.syncthreads()",
          f"    p = math.exp(score - mx) if ok else {ct}(0)", "    sp[t] = p", "    red[t] = p",
          "    cuda.syncthreads()"]
    L += _tree("{0} + {1}", ch)
    # p.V: no v row of a chunk with nothing visible is read; in the others every row is
    # (a load per row whatever its weight: no branch between the loads and their sums)
    L += ["    tot = red[0]", "    va = vo + b * vb + h * vh", f"    n = min({ch}, S - s0)",
          "    d = t", "    while d < DV:", f"        a = {ct}(0)", "        if tot != 0:",
          "            vd0 = va + s0 * vs + d * vd", f"            if n == {ch}:",
          f"                for j in range({ch}):",
          f"                    a += sp[j] * {ct}(v[vd0 + j * vs])", "            else:",
          "                for j in range(n):",
          f"                    a += sp[j] * {ct}(v[vd0 + j * vs])",
          "        pa[pao + (row * ns + c) * DV + d] = a", f"        d += {ch}",
          "    if t == 0:", "        pm[pmo + row * ns + c] = mx",
          "        pl[plo + row * ns + c] = tot"]
    return "\n".join(L) + "\n"


def _combine_source(acc, ct_threads):
    ct = nbt(acc)
    L = [f"@cuda.jit({runtime.jit_opts()})",
         "def kernel(H, TQ, S, DV, ns, v, vo, vb, vh, vs, vd, pm, pmo, pl, plo, pa, pao, o, oo):",
         "    t = cuda.threadIdx.x", "    row = cuda.blockIdx.x", "    bh = row // TQ",
         "    h = bh % H", "    b = bh // H", f"    M = {ct}(-math.inf)", "    for j in range(ns):",
         "        M = max(M, pm[pmo + row * ns + j])", "    d = t", "    while d < DV:",
         f"        a = {ct}(0)", "        if M == -math.inf:   # nothing visible: the mean of v",
         "            va = vo + b * vb + h * vh + d * vd", "            for s in range(S):",
         f"                a += {ct}(v[va + s * vs])", "            a = a / S", "        else:",
         f"            tot = {ct}(0)", "            for j in range(ns):",
         "                mj = pm[pmo + row * ns + j]", "                if mj != -math.inf:",
         "                    w = math.exp(mj - M)",
         "                    tot += w * pl[plo + row * ns + j]",
         "                    a += w * pa[pao + (row * ns + j) * DV + d]",
         "            a = a / tot",
         "        o[oo + row * DV + d] = a", f"        d += {ct_threads}"]
    return "\n".join(L) + "\n"


# matching ------------------------------------------------------------------------------------

def _select_of(c, L):
    """(pred, fill) when cluster c is `select(pred, L, fill)` alone (fill a broadcast literal
    <= -1e30), else None."""
    if len(c.outputs) != 1:
        return None
    sel = [e for e in c.eqns if e.prim is P.select_p]
    rest = [e for e in c.eqns if e.prim is not P.select_p]
    if len(sel) != 1 or sel[0].out is not c.outputs[0]:
        return None
    pred, x, f = sel[0].inputs
    if x is not L or not isinstance(pred, Var) or pred.aval.shape != L.aval.shape:
        return None
    fills = {e.out: e.inputs[0] for e in rest if e.prim is P.broadcast_in_dim_p
             and isinstance(e.inputs[0], Lit)}
    if len(rest) != len(fills) or (f not in fills and not isinstance(f, Lit)):
        return None
    val = float(np.asarray(fills.get(f, f).val))
    return (pred, val) if val <= -1e30 and not math.isinf(val) else None


def _roles(dot1, dot2):
    """The dims of q, k, pred, v as groups (batch, head, query, S or D), or None."""
    (ca, cb), (ba, bb) = dot1.params["dimension_numbers"]
    (cp, cv), (bp, bv) = dot2.params["dimension_numbers"]
    q, k = dot1.inputs
    pv, v = dot2.inputs
    nb = len(ba)
    if len(ca) != 1 or nb > 2 or len(cv) != 1 or tuple(bp) != tuple(range(nb)):
        return None
    fa = [d for d in range(q.aval.ndim) if d not in ca and d not in ba]
    fb = [d for d in range(k.aval.ndim) if d not in cb and d not in bb]
    fv = [d for d in range(v.aval.ndim) if d not in cv and d not in bv]
    nl = pv.aval.ndim
    if len(fb) != 1 or len(fv) != 1 or tuple(cp) != (nl - 1,) or nl != nb + len(fa) + 1:
        return None
    dt = q.aval.dtype
    if dt not in (np.float32, np.float64) or not (k.aval.dtype == v.aval.dtype == dt):
        return None
    if (math.prod(q.aval.shape[d] for d in fa) > MAX_QUERIES or q.aval.shape[ca[0]] > 256
            or sum(q.aval.shape[d] != 1 for d in fa) > 1):   # one query axis (merged dims)
        return None

    def bt(dims):
        return [[dims[0]] if nb == 2 else None, [dims[-1]] if nb else None]

    return ([*bt(list(ba)), fa, [ca[0]]], [*bt(list(bb)), fb, [cb[0]]],
            [*bt(list(range(nb))), list(range(nb, nl - 1)), [nl - 1]],
            [*bt(list(bv)), [cv[0]], fv])


def fuse(steps: list, expr) -> list:
    """steps with each composed masked attention made one ("rows", DecodeAttention) step at
    the second product's place (the product, select cluster and softmax before it dropped)."""
    if not ENABLED:
        return steps
    from funcgrad.cuda.epilogue import _readers
    readers = _readers(steps)
    outs = {o for o in expr.outs if isinstance(o, Var)}
    at = {}
    for i, (kind, s) in enumerate(steps):
        for o in ([s.out] if kind == "eqn" else s.outputs):
            at[o] = i

    def only(v, kind):
        r = readers.get(v, set())
        if len(r) != 1 or v in outs:
            return None
        j = next(iter(r))
        return j if steps[j][0] == kind else None

    drop, put = set(), {}
    for i, (kind, e1) in enumerate(steps):
        if kind != "eqn" or e1.prim is not P.dot_general_p:
            continue
        j = only(e1.out, "fused")
        sel = None if j is None else _select_of(steps[j][1], e1.out)
        if sel is None:
            continue
        m = steps[j][1].outputs[0]
        k = only(m, "eqn")
        if k is None or steps[k][1].prim is not softmax_p:
            continue
        n = only(steps[k][1].out, "eqn")
        if n is None or steps[n][1].prim is not P.dot_general_p or \
                steps[n][1].inputs[0] is not steps[k][1].out:
            continue
        e5 = steps[n][1]
        roles = _roles(e1, e5)
        if roles is None or at.get(sel[0], -1) > n or at.get(e5.inputs[1], -1) > n:
            continue
        put[n] = ("rows", DecodeAttention(e1, e5, sel[0], roles))
        drop.update((i, j, k))
    return [put.get(i, st) for i, st in enumerate(steps) if i not in drop]
