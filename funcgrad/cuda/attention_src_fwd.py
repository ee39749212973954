"""Kernel bodies of the flash-attention forward side for attention_src's generator: the query-row
prologue, the score-tile helpers, the VEC 0 / 1 forward, stats and delta (_fwd_like), the VEC 2
forward (_fwd2: float4 broadcast shared loads, K / V fetched in Gray order through _Tile) and
delta (_delta2: o and do read straight from global memory). Each takes attention_src._Gen `g`
and appends source lines to it; the layouts are attention_src's module docstring."""
from __future__ import annotations

import math


def _operand(name):
    return f"{name.upper()}a, {name}o, {name}s0, {name}s1, {name}s2, {name}s3"

def _query_rows(g):
    """Prologue of the query-row kernels: the row tile (heaviest causal tiles first)."""
    g.emit(1, "bn = cuda.blockIdx.x", "b = bn // N", "n = bn - b * N", "kh = n // G",
           f"row0 = (cuda.gridDim.y - 1 - cuda.blockIdx.y) * {g.BR}",
           f"lim = min(S, row0 + {g.BR}) if causal else S")


def _zero(g, ind, name, n1, n2):
    g.emit(ind, f"for i in range({n1}):", f"    for j in range({n2}):",
           f"        {name}[i, j] = {g.ct}(0)")


def _store_scores(g, ind, base, var, expr=None):
    """sm[base + col * (BR + P) + row] = var[i, j] (the score tile, transposed)."""
    g.emit(ind, f"for i in range({g.MI}):", f"    for j in range({g.NJ}):",
           f"        sm[uint64({base} + ({g.col('j')}) * {g.BR + g.P} + {g.row('i')})] = "
           f"{expr or var + '[i, j]'}")


def _fwd_like(g, stats, lse_out=False, lse_in=False):
    """The forward (stats=False; lse_out: also L[b, n, t] = the rows' logsumexp) or the
    backward statistics (stats=True; lse_in: the logsumexp read from L, no q.k pass)."""
    D, BR, BC, MI, NJ, OC, TX, ct = (g.D, g.BR, g.BC, g.MI, g.NJ, g.OC, g.TX, g.ct)
    P = g.P
    QB, KB = 0, D * (BR + P)
    VB = KB + max(D * (BC + P), BC * (BR + P))
    ops = (["o", "g"] if lse_in else ["q", "k", "o", "g"]) if stats else ["q", "k", "v"]
    g.header(ops, ", La, lo" if lse_out or lse_in else "", "ST" if stats else "O")
    g.local("s", MI, NJ)
    g.local("m", MI)
    g.local("l", MI)
    _query_rows(g)
    if stats:   # delta = sum(o * do) over the value dims: both row tiles through shared memory
        g.local("dsum", MI)
        g.load_tile(1, "row0", "T", BR, [("o", "n", "HV", QB), ("g", "n", "HV", KB)])
        g.emit(1, "cuda.syncthreads()", f"for i in range({MI}):", f"    x = {ct}(0)",
               f"    for k in range({OC}):",
               f"        a_ = uint64((tx + k * {TX}) * {BR + P} + {g.row('i')})",
               f"        x += sm[a_] * sm[a_ + uint64({KB})]")
        g.group(2, "x", "sum")
        g.emit(2, "dsum[i] = x")
        g.emit(1, "cuda.syncthreads()")
    if lse_in:
        g.emit(1, f"for i in range({MI}):", f"    t = row0 + {g.row('i')}",
               "    if t < T and tx == 0:", "        sti = outo + ((b * N + n) * T + t) * 2",
               f"        ST[sti] = {g.st_out}(La[uint64(lo + (b * N + n) * T + t)])",
               f"        ST[sti + 1] = {g.st_out}(dsum[i])")
        return
    g.load_tile(1, "row0", "T", BR, [("q", "n", "H", QB)])
    g.emit(1, f"for i in range({MI}):", "    m[i] = NEG", f"    l[i] = {ct}(0)")
    if not stats:
        g.local("o", MI, OC)
        _zero(g, 1, "o", MI, OC)
    kv = [("k", "kh", "H", KB)] + ([] if stats else [("v", "kh", "HV", VB)])
    g.stream(1, "0", "lim", "S", kv)
    g.emit(2, "cuda.syncthreads()")
    g.prefetch(2, "lim", "S", kv)
    g.mm_rows_cols(2, "s", QB, BR, KB, BC, "H")
    # online softmax: row max over the row's lanes, rescale the running sums / outputs
    g.emit(2, f"for i in range({MI}):", f"    row = row0 + {g.row('i')}", "    mx = NEG",
           f"    for j in range({NJ}):", f"        col = c0 + {g.col('j')}",
           "        x = s[i, j] * sc", "        if col >= S or (causal and col > row):",
           "            x = NEG", "        s[i, j] = x", "        mx = max(mx, x)")
    g.group(3, "mx", "max")
    g.emit(3, "mn = max(m[i], mx)", f"mu = mn if mn > NEG else {ct}(0)",
           "al = math.exp(m[i] - mu)", "m[i] = mn", f"ls = {ct}(0)",
           f"for j in range({NJ}):", "    x = math.exp(s[i, j] - mu)", "    s[i, j] = x",
           "    ls += x", "l[i] = l[i] * al + ls")
    if not stats:
        g.emit(3, f"for k in range({OC}):", "    o[i, k] *= al")
    g.emit(2, "cuda.syncthreads()")
    if not stats:   # P (transposed) over the K tile, then O += P V
        _store_scores(g, 2, KB, "s")
        g.emit(2, "cuda.syncthreads()")
        g.mm_scores_out(2, [("o", KB, VB, BC)], f"min({BC}, lim - c0)")
        g.emit(2, "cuda.syncthreads()")
    _row_sums(g, g.row("i"))
    if stats:
        g.emit(2, "if t < T and tx == 0:", "    sti = outo + ((b * N + n) * T + t) * 2",
               f"    ST[sti] = {g.st_out}(m[i] + math.log(li)) if li > 0 else {g.st_out}(NEG)",
               f"    ST[sti + 1] = {g.st_out}(dsum[i])")
        return
    _store_rows(g, "m[i]" if lse_out else None, f"tx + k * {TX}")


def _row_sums(g, row, base="row0"):
    """The epilogue's start: per query row i, its softmax sum li over the row's TX lanes and
    its index t (`base` + `row`)."""
    g.emit(1, f"for i in range({g.MI}):", "    li = l[i]")
    g.group(2, "li", "sum")
    g.emit(2, f"t = {base} + {row}")


def _store_rows(g, lse, col):
    """The forward's rows: the logsumexp `lse` + log(li) (when lse is given) and o / li, slot
    k of a row holding output column `col`."""
    if lse:
        g.emit(2, "if t < T and tx == 0:",
               f"    La[uint64(lo + (b * N + n) * T + t)] = {g.out}({lse} + math.log(li)) "
               f"if li > 0 else {g.out}(NEG)")
    g.emit(2, f"inv = {g.ct}(1) / li if li > 0 else {g.ct}(0)", "if t < T:",
           "    ob = outo + ((b * T + t) * N + n) * HV", f"    for k in range({g.OC}):",
           f"        e = {col}", "        if e < HV:",
           f"            O[uint64(ob + e)] = {g.out}(o[i, k] * inv)")


def _tile_map(D, R, transposed):
    """i -> (r, d) of a tile of R rows x D dims: transposed ([d][r] in shared memory) a warp
    covers dl dims x rl rows (conflict-free stores at row stride R + 4, 32-byte global
    sectors); otherwise consecutive i are consecutive d. Returns (python function, expression
    builder)."""
    if not transposed:
        return (lambda i: (i // D, i % D)), (lambda i: (f"({i}) // {D}", f"({i}) % {D}"))
    dl = math.gcd(D, 8)
    rl = math.gcd(R, 32 // dl)
    nd = D // dl

    def f(i):
        h = i // (dl * rl)
        return (h // nd) * rl + (i // dl) % rl, (h % nd) * dl + i % dl
    return f, (lambda i: (f"(({i}) // {dl * rl} // {nd}) * {rl} + (({i}) // {dl}) % {rl}",
                          f"((({i}) // {dl * rl}) % {nd}) * {dl} + ({i}) % {dl}"))


class _Tile:
    """One tile operand of the VEC 2 forward: rows R x dims D, element i = tid + NT u of a
    thread at (r, d); where the map splits over tid and u (powers of two), the thread's part
    is computed once (names r_<n>, d_<n>) and each u adds constants."""

    def __init__(self, g, name, R, transposed):
        self.g, self.name, self.R = g, name, R
        self.total = R * g.D
        self.U = -(-self.total // g.NT)
        self.f, self.e = _tile_map(g.D, R, transposed)
        self.fn = False   # fetch through the device function fetch_<name> (fetch_fn)
        NT = g.NT
        self.split = all(
            self.f(t + NT * u) == tuple(a + b for a, b in zip(self.f(t), self.f(NT * u)))
            for t in range(NT) for u in range(self.U) if t + NT * u < self.total)

    def prologue(self, ind):
        if self.split:
            r, d = self.e("tid")
            self.g.emit(ind, f"r_{self.name} = {r}", f"d_{self.name} = {d}")

    def rd(self, ind):
        """Lines setting r, d of element u (loop variable u)."""
        if self.split:
            r, d = self.e(f"{self.g.NT} * u")
            self.g.emit(ind, f"r = r_{self.name} + {r}", f"d = d_{self.name} + {d}")
        else:
            r, d = self.e(f"tid + {self.g.NT} * u")
            self.g.emit(ind, f"r = {r}", f"d = {d}")

    def fetch(self, ind, r0, limit, op, head, width, base, xo):
        """xl[xo + u] = op[b, r0 + r, head, d] (0 outside [0, limit) x [0, width))."""
        if self.split:   # one 64-bit index, moved by one stride step an element (Gray order)
            self.fetch_gray(ind, r0, limit, op, width, xo)
            return
        self.fetch_rows(ind, f"{r0} + r", limit, op, width, xo)

    def fetch_rows(self, ind, rowexpr, limit, op, width, xo):
        """xl[xo + u] = op[b, rowexpr, head, d] (0 outside [0, limit) x [0, width)): rows
        through an expression of the tile row r (not split: once per block)."""
        g, ct = self.g, self.g.ct
        tail = self.total % g.NT != 0
        g.emit(ind, f"for u in range({self.U}):")
        self.rd(ind + 1)
        g.emit(ind + 1, f"rr = {rowexpr}", f"x = {ct}(0)",
               f"if {f'tid + {g.NT} * u < {self.total} and ' if tail else ''}rr < {limit} "
               f"and d < {width}:",
               f"    x = {ct}({op.upper()}a[uint64({op}b_ + rr * {op}s1 + d * {op}s3)])",
               f"xl[{xo} + u] = x")

    def fetch_gray(self, ind, r0, limit, op, width, xo):
        """fetch of a split map: elements in Gray-code order of u, so each index is the last
        one plus or minus one stride step (the map's r and d at one bit of u, constants after
        unrolling: one 64-bit add an element)."""
        g, ct, nm, NT, U = self.g, self.g.ct, self.name, self.g.NT, self.U
        n = 1 << max(0, (U - 1).bit_length())
        r, d = self.e(f"{NT} * u")
        rv, dv = self.e(f"{NT} * v")
        g.emit(ind, f"p_ = {op}b_ + ({r0} + r_{nm}) * {op}s1 + d_{nm} * {op}s3",
               f"nr_ = int32(min({limit} - ({r0}) - r_{nm}, {self.R}))",
               f"nd_ = int32(min({width} - d_{nm}, {g.D}))")
        if self.fn:
            g.emit(ind, f"fetch_{nm}({op.upper()}a, xl, p_, {op}s1, {op}s3, nr_, nd_, {xo})")
            return
        g.emit(ind, f"for n_ in range({n}):", "    u = n_ ^ (n_ >> 1)",
               "    v = (n_ - 1) ^ ((n_ - 1) >> 1)",
               f"    p_ += ({r} - ({rv})) * {op}s1 + ({d} - ({dv})) * {op}s3",
               f"    if u < {U}:", f"        x = {ct}(0)",
               f"        if {r} < nr_ and {d} < nd_:",
               f"            x = {ct}({op.upper()}a[uint64(p_)])",
               f"        xl[{xo} + u] = x")

    def fetch_fn(self):
        """fetch_gray's loop as the device function fetch_<name> (typed once, inlined by
        NVVM: one body however many operands and call sites share this map)."""
        g, ct, NT, U = self.g, self.g.ct, self.g.NT, self.U
        n = 1 << max(0, (U - 1).bit_length())
        r, d = self.e(f"{NT} * u")
        rv, dv = self.e(f"{NT} * v")
        g.emit(0, "", "@cuda.jit(device=True, OPTS)",
               f"def fetch_{self.name}(A, xl, p_, s1, s3, nr_, nd_, xo):",
               f"    for n_ in range({n}):", "        u = n_ ^ (n_ >> 1)",
               "        v = (n_ - 1) ^ ((n_ - 1) >> 1)",
               f"        p_ += ({r} - ({rv})) * s1 + ({d} - ({dv})) * s3",
               f"        if u < {U}:", f"            x = {ct}(0)",
               f"            if {r} < nr_ and {d} < nd_:",
               f"                x = {ct}(A[uint64(p_)])",
               "            xl[xo + u] = x")
        self.fn = True

    def put(self, ind, addr, xo):
        """sm[addr(r, d)] = xl[xo + u]."""
        g = self.g
        tail = self.total % g.NT != 0
        g.emit(ind, f"for u in range({self.U}):")
        self.rd(ind + 1)
        pre = ""
        if tail:
            g.emit(ind + 1, f"if tid + {g.NT} * u < {self.total}:")
            pre = "    "
        g.emit(ind + 1, f"{pre}sm[uint64({addr})] = xl[{xo} + u]")


def _fwd2(g, lse_out):
    """The forward of VEC 2 configurations: each thread holds MI contiguous rows x NJ
    contiguous columns of a score tile and MI rows x OC output columns (W-wide groups
    tx W + e + W TX k), and each k-step of both products reads them as float4 / float2 loads
    (Q^T, K^T and P^T stored [k][row], V row-major), conflict-free and broadcast within a warp:
    (MI + NJ) / 4 shared loads for MI NJ FMAs where VEC 0 needs MI + NJ. The softmax works in
    base 2 (log2 e folded into the scale: one FFMA and one ex2 a score); masks are one compare
    per score; K / V tiles are prefetched into registers (PF) while the current one is used.
    Causal balance (_zigzag_rows): a block holds two half tiles, one from each end, so every
    block streams the same number of key rows; a warp with no visible key in a tile skips its
    products. All 384 blocks of W2 are resident at once (3 an SM), so an SM's time was the
    sum of its blocks' tiles: heaviest-first row tiles left SMs between 58k and 99k active
    cycles (Nsight Compute). H200, 2026-11-25, W2 fwdl, same call: 50.2 -> 46.4 us (163 ->
    155 registers; bit-identical results); the skip alone (row tiles as before) 53.0, the
    zigzag without it 55.1, light tiles dispatched first 47.6 (the dispatcher's SM order:
    luck, not a rule)."""
    D, BR, BC, MI, NJ, OC, TX, ct = g.D, g.BR, g.BC, g.MI, g.NJ, g.OC, g.TX, g.ct
    W = 4 if OC % 4 == 0 else 2 if OC % 2 == 0 else 1
    QB, KB = 0, D * (BR + 4)
    VB = KB + D * (BC + 4)
    PB = VB + BC * (D + 4)
    g.header(["q", "k", "v"], ", La, lo" if lse_out else "", "O")
    for name, shape in (("s", (MI, NJ)), ("m", (MI,)), ("l", (MI,)), ("o", (MI, OC))):
        g.local(name, *shape)
    H2 = BR // 2
    zz = BR % (2 * MI) == 0   # a thread's rows in one half tile: the zigzag row tiles
    if zz:
        _zigzag_rows(g)
    else:
        _query_rows(g)
    tq, tk, tv = _Tile(g, "q", BR, True), _Tile(g, "k", BC, True), _Tile(g, "v", BC, False)
    for t in (tq, tk, tv):
        t.prologue(1)
    # the last row of this thread's warp (rows ascend within a warp, the upper half's above)
    last = f"(min(tid | 31, {g.NT - 1}) // {TX}) * {MI} + {MI - 1}"
    g.emit(1, f"wr_ = {last}", f"wl_ = wr_ + (rhi_ if wr_ >= {H2} else rlo_)" if zz else
           "wl_ = row0 + wr_")
    g.emit(1, f"c2 = {ct}(scale_ * {1 / math.log(2)!r})",
           "qb_ = qo + b * qs0 + n * qs2", "kb_ = ko + b * ks0 + kh * ks2",
           "vb_ = vo + b * vs0 + kh * vs2")
    if zz:
        tq.fetch_rows(1, f"r + (rhi_ if r >= {H2} else rlo_)", "T", "q", "H", 0)
    else:
        tq.fetch(1, "row0", "T", "q", "n", "H", QB, 0)
    tq.put(1, f"{QB} + d * {BR + 4} + r", 0)
    g.emit(1, f"for i in range({MI}):", "    m[i] = NEG", f"    l[i] = {ct}(0)")
    _zero(g, 1, "o", MI, OC)
    XV = tk.U

    def fetch(ind, r0):
        tk.fetch(ind, r0, "S", "k", "kh", "H", KB, 0)
        tv.fetch(ind, r0, "S", "v", "kh", "HV", VB, XV)
    if g.PF:
        g.emit(1, "if 0 < lim:")
        fetch(2, "0")
    g.emit(1, f"for c0 in range(0, lim, {BC}):")
    if not g.PF:
        fetch(2, "c0")
    tk.put(2, f"{KB} + d * {BC + 4} + r", 0)
    tv.put(2, f"{VB} + r * {D + 4} + d", XV)
    g.emit(2, "cuda.syncthreads()")
    if g.PF:
        g.emit(2, f"if c0 + {BC} < lim:")
        fetch(3, f"(c0 + {BC})")
    # a warp whose rows all lie above this key tile's first column (causal) has nothing to
    # add: its products run no steps (its scores stay masked: the softmax leaves m, l and o
    # as they were, bit for bit). Trip counts, not an if: the simulator's row reductions
    # synchronise the block inside the softmax, which every thread must reach
    g.emit(2, "act_ = not causal or c0 <= wl_", f"nq_ = {-(-D // g.UK)} if act_ else 0",
           f"np_ = {-(-BC // g.UK)} if act_ else 0")
    # S = Q K^T: MI rows x NJ columns a thread, both read as vectors at every k
    _zero(g, 2, "s", MI, NJ)
    g.emit(2, f"pa = uint64({QB} + ty * {MI})", f"pb = uint64({KB} + tx * {NJ})")
    g.kloop(2, "kk", D, g.vloads("av", MI, "pa") + g.vloads("bv", NJ, "pb") + [
        f"for i in range({MI}):", f"    for j in range({NJ}):",
        "        s[i, j] += av[i] * bv[j]", f"pa += uint64({BR + 4})", f"pb += uint64({BC + 4})"])
    _loop_count(g, "kk", -(-D // g.UK), "nq_")
    # online softmax in base 2; masked scores -inf
    row = "rb_ + i" if zz else f"row0 + ty * {MI} + i"
    g.emit(2, f"for i in range({MI}):", f"    row = {row}",
           "    cl = min(S, row + 1) if causal else S", "    mx = NEG",
           f"    for j in range({NJ}):", "        x = s[i, j] * c2",
           f"        if c0 + tx * {NJ} + j >= cl:", "            x = NEG", "        s[i, j] = x",
           "        mx = max(mx, x)")
    g.group(3, "mx", "max")
    g.emit(3, "mn = max(m[i], mx)", f"mu = mn if mn > NEG else {ct}(0)",
           "al = math.exp2(m[i] - mu)", "m[i] = mn", f"ls = {ct}(0)",
           f"for j in range({NJ}):", "    x = math.exp2(s[i, j] - mu)", "    s[i, j] = x",
           "    ls += x", "l[i] = l[i] * al + ls", f"for k in range({OC}):", "    o[i, k] *= al")
    # P^T: column j of this thread's rows, MI contiguous words
    pw = 4 if MI % 4 == 0 else 2 if MI % 2 == 0 else 1
    g.emit(2, f"for j in range({NJ}):",
           f"    pp = uint64({PB} + (tx * {NJ} + j) * {BR + 4} + ty * {MI})")
    if g.sim or pw == 1:
        g.emit(3, f"for i in range({MI}):", "    sm[pp + uint64(i)] = s[i, j]")
    else:
        for i0 in range(0, MI, pw):
            vals = ", ".join(f"s[{i0 + i}, j]" for i in range(pw))
            g.emit(3, f"st{pw}(sm, pp{f' + uint64({i0})' if i0 else ''}, {vals})")
    g.emit(2, "cuda.syncthreads()")
    # O += P V: MI rows of P^T and OC columns of V (W-wide groups) a key
    g.emit(2, f"pa = uint64({PB} + ty * {MI})", f"pb = uint64({VB} + tx * {W})")
    body = g.vloads("av", MI, "pa")
    for k0 in range(0, OC, W):
        off = (k0 // W) * W * TX
        ptr = f"pb + uint64({off})" if off else "pb"
        body += [x.replace("wv[", f"wv[{k0} + ") for x in g.vloads("wv", W, ptr)]
    g.kloop(2, "c", BC, body + [f"for i in range({MI}):", f"    for k in range({OC}):",
                                "        o[i, k] += av[i] * wv[k]", f"pa += uint64({BR + 4})",
                                f"pb += uint64({D + 4})"])
    _loop_count(g, "c", -(-BC // g.UK), "np_")
    g.emit(2, "cuda.syncthreads()")
    if zz:   # (the maxima m are base 2: ln 2 turns them back)
        _row_sums(g, "i", "rb_")
    else:
        _row_sums(g, f"ty * {MI} + i")
    _store_rows(g, f"m[i] * {ct}({math.log(2)!r})" if lse_out else None,
                f"(k // {W}) * {W * TX} + tx * {W} + k % {W}")


def _loop_count(g, var, n, count):
    """The last loop `for var in range(n):` emitted gets the trip count `count`."""
    for at in range(len(g.L) - 1, -1, -1):
        if g.L[at].strip() == f"for {var} in range({n}):":
            g.L[at] = g.L[at].replace(f"range({n})", f"range({count})")
            return
    raise AssertionError(f"no loop over {var}")


def _zigzag_rows(g):
    """The VEC 2 forward's row tiles (causal balance): block y of the ny row tiles holds the
    half tiles (BR / 2 rows) y and 2 ny - 1 - y, so every block has the same causal work
    (y + 1 + 2 ny - y key half tiles), whatever SM the hardware puts it on. Tile rows
    r < BR / 2 are rows rlo_ + r, the others rhi_ + r; this thread's rows are rb_ + i; the
    block streams keys up to its upper half's last row."""
    H2, MI = g.BR // 2, g.MI
    g.emit(1, "bn = cuda.blockIdx.x", "b = bn // N", "n = bn - b * N", "kh = n // G",
           "ny_ = cuda.gridDim.y", "a_ = cuda.blockIdx.y", f"rlo_ = a_ * {H2}",
           f"rhi_ = (2 * ny_ - 2 - a_) * {H2}",
           f"lim = min(S, (2 * ny_ - a_) * {H2}) if causal else S",
           f"lr_ = ty * {MI}", f"rb_ = lr_ + (rhi_ if lr_ >= {H2} else rlo_)")


def _delta2(g):
    """delta's VEC 2 form, no shared memory: the TX lanes of a row read its o and do values
    straight from global memory (dims tx + TX k; a warp's rows consecutive: rows ty + TY i),
    every load of a thread issued before the first product; the row sums as _fwd_like's
    (each lane's dims in order, then the lanes' shuffle tree)."""
    TY, TX, MI, NT, ct = g.TY, g.TX, g.MI, g.NT, g.ct
    OC = -(-g.D // TX)
    g.emit(0, "", "@cuda.jit(OPTS)",
           f"def kernel({_operand('o')}, {_operand('g')}, La, lo, ST, outo, T, S, N, G, H, HV, "
           "causal, scale_):")
    if g.sim:
        g.emit(1, f"red = cuda.shared.array({NT}, {ct})")
    g.emit(1, "tid = cuda.threadIdx.x", f"ty = tid // {TX}", f"tx = tid - ty * {TX}",
           f"xs = cuda.local.array(({MI}, {OC}), {ct})",
           f"ys = cuda.local.array(({MI}, {OC}), {ct})",
           f"ls = cuda.local.array({MI}, {ct})",
           "bn = cuda.blockIdx.x", "b = bn // N", "n = bn - b * N",
           f"row0 = cuda.blockIdx.y * {g.BR}", "ob_ = oo + b * os0 + n * os2",
           "gb_ = go + b * gs0 + n * gs2", "lb_ = lo + (b * N + n) * T",
           f"for i in range({MI}):", f"    t = row0 + ty + {TY} * i", f"    ls[i] = {ct}(0)",
           "    if t < T:", f"        ls[i] = {ct}(La[uint64(lb_ + t)])",
           f"    for k in range({OC}):", f"        d = tx + {TX} * k", f"        x = {ct}(0)",
           f"        y = {ct}(0)", "        if t < T and d < HV:",
           f"            x = {ct}(Oa[uint64(ob_ + t * os1 + d * os3)])",
           f"            y = {ct}(Ga[uint64(gb_ + t * gs1 + d * gs3)])",
           "        xs[i, k] = x", "        ys[i, k] = y",
           f"for i in range({MI}):", f"    x = {ct}(0)", f"    for k in range({OC}):",
           "        x += xs[i, k] * ys[i, k]")
    g.group(2, "x", "sum")
    g.emit(2, f"t = row0 + ty + {TY} * i", "if t < T and tx == 0:",
           "    sti = outo + ((b * N + n) * T + t) * 2", f"    ST[sti] = {g.st_out}(ls[i])",
           f"    ST[sti + 1] = {g.st_out}(x)")
