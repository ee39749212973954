"""Elementwise fusion for jit on CUDA: one generated kernel per cluster (compile/clustering.py).

A cluster is a set of elementwise equations (plus broadcasts of their operands and iotas) that
produce values of one shape. Its kernel reads each external operand once per element — full,
broadcast (through the broadcast_in_dim's index map) or a baked-in scalar literal — computes
every member in registers and writes only the values needed outside the cluster. Shapes are
kernel arguments, so clusters of the same structure (every layer of a network) share one
compiled kernel.
"""
from __future__ import annotations

import os

import numpy as np

from funcgrad import prims as P
from funcgrad.backends import kernel_files
from funcgrad.compile import switches
from funcgrad.compile.clustering import Cluster, external_inputs, fusible, is_view_bcast  # noqa: F401
from funcgrad.compile.clustering import plan_steps as _plan_steps
from funcgrad.core import Lit, Var
from funcgrad.core.dtypes import dtype_kind
from funcgrad.cuda.elementwise import (
    compute_t,
    coordinates,
    helper_source,
    load,
    rounded,
    scalar,
    store,
)

# ---------------------------------------------------------------------------------------------
# code generation
# ---------------------------------------------------------------------------------------------

def _lit(val, dtype) -> str:
    """A literal operand in the compute type of `dtype` (a 16-bit float's value, rounded to
    its dtype, written as the float32 it is exactly)."""
    d = np.dtype(dtype)
    if d.name in ("bfloat16", "float16"):
        val, d = np.asarray(val).astype(d).astype(np.float32), np.dtype(np.float32)
    return kernel_files.literal(val, d, compute_t(d))


# clusters up to this many equations take two elements per thread and iteration; larger ones
# have loads enough in flight already, and doubling their source doubles their compile time
UNROLL_MAX_EQNS = 32
UNROLL = 2
IDX32_LIMIT = 2 ** 31   # clusters smaller than this compute coordinates in 32 bits
VEC = int(os.environ.get("FUNCGRAD_FUSED_VEC", "4"))  # neighbouring elements a thread takes
switches.register(__name__, "UNROLL_MAX_EQNS", "UNROLL", "VEC")
#   (vec_width) ...
VEC_MAX_EQNS = 64   # ... in flat clusters up to this size: AdamW's packs (W2: three parameters
#   of a shape per kernel, 57 equations), whose one element a thread kept too few loads in flight
VEC_EQNS_PER_OPERAND = 4   # ... while they stay memory-bound: AdamW's packs have ~2.5 equations
#   an array read or written; a Threefry cluster (~70 equations on 9 arrays) computes, and its
#   four copies took 4.2-4.5 s to lower against 0.65 s for one (numba's front end, dev VM)
VEC_WIDE_OPERANDS = 16   # clusters with more arrays read or written take at most 2 neighbours:
#   a pack of three AdamW updates (12 arrays in, 9 out) of [384, 1536] took 14.4 us with 4
#   (3.4 TB/s), 11.5 with 2 (4.3 TB/s) and 18.3 with 1; one update (8 arrays) 4.9 / 4.8 / 7.1;
#   three of [384] 3.65 / 2.88 / 2.78 (H200, 2026-11-25, CUPTI medians of 20 replays)


class FusedKernel:
    """Generated source for one cluster and one layout of its operands.

    Each external operand is read as "flat" (C-contiguous with the cluster's shape: index i),
    "flatv" (flat, its first element aligned for a vector load of `vec` elements), "scalar"
    (one element) or "strided" (through output coordinates and the buffer's own strides:
    broadcasts, transposes and other views are read in place, never copied).
    """

    def __init__(self, cluster: Cluster, layout: dict, idx32: bool = False, vec: int = 1,
                 vout: tuple = (), vector: bool = True):
        self.cluster = cluster
        self.inputs = external_inputs(cluster)
        self.layout = layout  # var -> "flat" | "flatv" | "strided" | "scalar"
        self.idx32 = idx32    # fewer than 2^31 elements: coordinates by 32-bit division
        self.vec = vec        # neighbouring elements a thread takes (vec_width)
        self.vout = vout or (False,) * len(cluster.outputs)   # outputs stored as vectors
        self.vector = vector  # vector accesses (vecmem) for "flatv" and vout; False (the
        #                       simulator): the same kernel with scalar accesses
        self.per_thread = 1     # elements a thread takes per loop iteration (set by _generate)
        self.coords = False     # whether the kernel takes the shape (set by _generate)
        self.source = self._generate()

    def _generate(self):
        c = self.cluster
        rank = len(c.shape)
        pname = {v: f"in{k}" for k, v in enumerate(self.inputs)}
        need_coords = needs_coords(c, self.layout.values())
        self.coords = need_coords
        helpers = set()

        last = rank - 1

        def coord(d, lane):
            """Coordinate d of the element `lane` places after the thread's first (coordinate
            kernels taking last-axis neighbours: only the last coordinate moves)."""
            return f"(c{d} + {lane})" if lane and d == last else f"c{d}"

        def body(ix, tp, lane=0):
            """Lines computing every member for element `ix` (coordinates c0, c1, ..., the last
            plus `lane`) into names `tp`0, `tp`1, ...; returns (lines, names)."""
            names, lines = {}, []

            def read(v, dims_map):
                p = pname[v]
                mode = self.layout[v]
                if mode == "flatv" and self.vector:
                    return load(v.aval.dtype, f"{p}_v[{lane}]")
                if mode in ("flat", "flatv"):
                    at = f"{p}_o + {ix}"
                elif mode == "scalar":
                    at = f"{p}_o"
                else:
                    at = " + ".join([p + "_o"] + [f"{coord(d, lane)} * {p}_s{j}"
                                                  for j, d in enumerate(dims_map)
                                                  if v.aval.shape[j] != 1])
                return load(v.aval.dtype, f"{p}[{at}]")

            for k, e in enumerate(c.eqns):
                dt = e.out.aval.dtype
                out = f"{tp}{k}"
                if e.prim is P.iota_p:
                    lines.append(f"{out} = {compute_t(dt)}"
                                 f"({coord(e.params['dimension'], lane)})")
                elif is_view_bcast(e, c.members):
                    x = e.inputs[0]
                    if not isinstance(x, Var):
                        lines.append(f"{out} = {_lit(x.val, dt)}")
                    else:
                        lines.append(f"{out} = {read(x, e.params['broadcast_dimensions'])}")
                else:
                    args = []
                    for x in e.inputs:
                        if isinstance(x, Lit):
                            args.append(_lit(x.val, x.aval.dtype))
                        elif x in names:
                            args.append(names[x])
                        else:
                            args.append(read(x, tuple(range(rank))))
                    src_dt = e.inputs[0].aval.dtype if e.inputs else dt
                    expr, used = scalar(e.prim.name, args, src_dt, dt, e.params)
                    helpers.update(used)
                    # each value is cast to its compute type (its dtype; float16 computes in
                    # float32), so integers wrap at every step as in numpy, not only when stored;
                    # bfloat16 values are rounded to bfloat16 (what a store would keep)
                    lines.append(f"{out} = {rounded(dt, expr)}")
                names[e.out] = out
            return lines, names

        def stores(ix, names):
            return [f"out{j}[out{j}_o + {ix}] = {store(o.aval.dtype, names[o])}"
                    for j, o in enumerate(c.outputs)]

        # the shape only where coordinates are computed: flat kernels of equal structure share
        # one source whatever the rank (an optimizer's updates of vectors and matrices)
        sig = ["n"] + [f"s{d}" for d in range(rank) if need_coords]
        for v in self.inputs:
            p = pname[v]
            sig += [p, f"{p}_o"]
            if self.layout[v] == "strided":
                sig += [f"{p}_s{j}" for j in range(v.aval.ndim)]
        for j in range(len(c.outputs)):
            sig += [f"out{j}", f"out{j}_o"]
        V = self.vec
        lines = [f"@cuda.jit({{opts}})\ndef kernel({', '.join(sig)}):",
                 f"    i = cuda.grid(1){f' * {V}' if V > 1 else ''}",
                 f"    step = cuda.gridsize(1){f' * {V}' if V > 1 else ''}", "    while i < n:"]
        if V > 1:
            # V neighbours per thread (along the last axis: one coordinate computation), each
            # flat operand read and each output written by one vector access where aligned.
            # One element a thread kept ~1 MB in flight on an H200, about a third of what its
            # bandwidth needs: W2's bias + GELU kernels ran at ~1.6 TB/s
            self.per_thread = V
            coords = coordinates(rank, "c", "s", self.idx32) if need_coords else []
            # flat kernels take any size: the last group's lanes past n re-read element i (a
            # vector load there stays inside its aligned 16 bytes, so inside the allocation)
            # and are not stored; coordinate kernels' V divides the last dim
            tail = not need_coords
            ixs = ["i"] + [f"i{k}" if tail else f"(i + {k})" for k in range(1, V)]
            if tail:
                coords += [f"i{k} = i + {k} if i + {k} < n else i" for k in range(1, V)]
            if self.vector:
                coords += [f"{pname[v]}_v = ldv{V}({pname[v]}, {pname[v]}_o + i)"
                           for v in self.inputs if self.layout[v] == "flatv"]
            bodies, names = [], []
            for k in range(V):
                b, nm = body(ixs[k], "t" if k == 0 else f"u{k}_", k)
                bodies += b
                names.append(nm)
            lines += [f"        {x}" for x in coords + bodies]
            vec_out = [j for j in range(len(c.outputs)) if self.vout[j] and self.vector]
            plain = [j for j in range(len(c.outputs)) if j not in vec_out]

            def put(j, k):
                o = c.outputs[j]
                return f"out{j}[out{j}_o + {ixs[k]}] = {store(o.aval.dtype, names[k][o])}"

            full = []
            for j in vec_out:
                o = c.outputs[j]
                vals = ", ".join(store(o.aval.dtype, nm[o]) for nm in names)
                full.append(f"stv{V}(out{j}, out{j}_o + i, {vals})")
            if tail and vec_out:
                lines += [f"        if i + {V} <= n:"] + [f"            {x}" for x in full]
                lines += ["        else:"] + [f"            {put(j, 0)}" for j in vec_out]
                for k in range(1, V):
                    lines += [f"            if i + {k} < n:"] + [
                        f"                {put(j, k)}" for j in vec_out]
            else:
                lines += [f"        {x}" for x in full]
            lines += [f"        {put(j, 0)}" for j in plain]
            for k in range(1, V):
                if tail and plain:
                    lines += [f"        if i + {k} < n:"] + [f"            {put(j, k)}"
                                                             for j in plain]
                elif plain:
                    lines += [f"        {put(j, k)}" for j in plain]
            lines.append("        i += step")
        elif need_coords or len(c.eqns) > UNROLL_MAX_EQNS:
            coords = []
            if need_coords:
                coords = coordinates(rank, "c", "s", self.idx32)
            b, names = body("i", "t")
            lines += [f"        {x}" for x in coords + b + stores("i", names)]
            lines.append("        i += step")
        else:
            # U elements per iteration (past the end, the extra ones re-read the first's):
            # U times the loads in flight per thread, which memory-bound kernels need to reach
            # the copy bandwidth (W3 on an H200: 0.308 ms with 1, 0.297-0.305 with 2, 0.352
            # with 4)
            U = UNROLL
            self.per_thread = U
            bodies, names = [], []
            for k in range(U):
                b, nm = body("i" if k == 0 else f"i{k}", "t" if k == 0 else f"u{k}_")
                bodies += b
                names.append(nm)
            for k in range(1, U):
                lines += [f"        j{k} = i + {k} * step",
                          f"        i{k} = j{k} if j{k} < n else i"]
            lines += [f"        {x}" for x in bodies + stores("i", names[0])]
            for k in range(1, U):
                lines += [f"        if j{k} < n:"] + [f"            {x}"
                                                      for x in stores(f"i{k}", names[k])]
            lines.append(f"        i += {U} * step")
        head = ""
        if V > 1 and self.vector and ("flatv" in self.layout.values() or any(self.vout)):
            head = f"from funcgrad.cuda.vecmem import ldv{V}, stv{V}\n"
        return head + helper_source(helpers, "{opts}") + "\n\n" + "\n".join(lines) + "\n"

    def args(self, bufs: list, outs: list) -> list:
        """Kernel arguments for operand buffers (aligned with self.inputs) and outputs."""
        c = self.cluster
        a = [int(np.prod(c.shape))] + (list(c.shape) if self.coords else [])
        for v, b in zip(self.inputs, bufs):
            a += [b.arr(), b.offset]
            if self.layout[v] == "strided":
                a += list(b.strides)
        for o in outs:
            a += [o.arr(), o.offset]
        return a




def plan_steps(expr):
    """The clustering of funcgrad/compile/clustering.py, with rematerialization, clusters over
    MAX_EQNS split into packs of identical parts (fewer kernel sources to compile)."""
    return _plan_steps(expr, rematerialize=True, pack=True)


def needs_coords(c: Cluster, modes) -> bool:
    """Whether c's kernel computes coordinates: an operand read "strided" (`modes`: the
    operands' layouts) or an iota."""
    return "strided" in modes or any(e.prim is P.iota_p for e in c.eqns)


def vec_width(c: Cluster, coords: bool = True) -> int:
    """Neighbouring elements a thread of c's kernel takes: the largest of VEC, 2, 1 dividing
    the last dim (coordinate kernels: the neighbours share every other coordinate), VEC for
    flat kernels (whatever their size); at most 2 for clusters of over VEC_WIDE_OPERANDS arrays;
    1 for clusters over UNROLL_MAX_EQNS (flat ones: VEC_MAX_EQNS, or more than
    VEC_EQNS_PER_OPERAND equations an operand), whose source would grow."""
    n = len(c.eqns)
    if not c.shape or n > (UNROLL_MAX_EQNS if coords else VEC_MAX_EQNS):
        return 1
    ops = len(external_inputs(c)) + len(c.outputs)
    if not coords and n > UNROLL_MAX_EQNS and n > VEC_EQNS_PER_OPERAND * ops:
        return 1
    top = min(VEC, 2) if ops > VEC_WIDE_OPERANDS else VEC   # registers: see VEC_WIDE_OPERANDS
    if not coords:   # any size (the last group is partial): one source for every shape
        return top
    return next(v for v in (top, 2, 1) if v <= top and c.shape[-1] % v == 0)


def aligned(buf, v: int, sim: bool) -> bool:
    """buf's first element may start a vector access of v elements (vecmem: at most 16 bytes,
    numbers only; the simulator's scalar stand-in needs only the offset)."""
    nb = buf.dtype.itemsize * v
    if nb > 16 or dtype_kind(buf.dtype) not in "fiu" or buf.offset % v:
        return False
    return sim or (buf.block.ptr() + buf.offset * buf.dtype.itemsize) % nb == 0


def layout_of(v, buf, shape) -> str:
    if buf.size == 1:
        return "scalar"
    if tuple(buf.shape) == tuple(shape) and buf.is_contiguous():
        return "flat"
    return "strided"


def run_cluster(cache: dict, c: Cluster, env: dict):
    """Launch cluster c's kernel on the values in env (its outputs go to env): the kernel for
    the operands' layouts comes from `cache` (one per plan), compiled once per source."""
    from funcgrad.cuda import arrays, runtime
    inputs = external_inputs(c)
    bufs = [env[v] for v in inputs]
    layout = tuple(layout_of(v, b, c.shape) for v, b in zip(inputs, bufs))
    n = int(np.prod(c.shape))
    idx32 = n < IDX32_LIMIT
    pool = arrays.pool()
    outs = [pool.empty(o.aval.shape, o.aval.dtype) for o in c.outputs]
    coords = needs_coords(c, layout)
    vec = vec_width(c, coords)
    sim = runtime.SIM
    vout = tuple(aligned(o, vec, sim) for o in outs) if vec > 1 else ()
    if vec > 1 and not coords and not all(vout):
        vec, vout = 1, ()   # flat kernels: neighbours only with vector stores
    if vec > 1:
        layout = tuple("flatv" if m == "flat" and aligned(b, vec, sim) else m
                       for m, b in zip(layout, bufs))
    key = (id(c), layout, idx32, vec, vout)
    k = cache.get(key)
    if k is None:
        fk = FusedKernel(c, dict(zip(inputs, layout)), idx32, vec, vout, not sim)
        k = cache[key] = (fk, runtime.fused_kernel(fk.source))
    fk, kern = k
    if n:
        blocks, threads = runtime.grid_1d(-(-n // fk.per_thread))
        kern[blocks, threads, runtime.stream()](*fk.args(bufs, outs))
    for o, b in zip(c.outputs, outs):
        env[o] = b
