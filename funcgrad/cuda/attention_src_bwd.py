"""Kernel bodies of the flash-attention backward for attention_src's generator: dq, dkv and the
merged backward (dkv's work plus each key tile's dQ partial, _dkv(merged=True)), and the sum of
the dQ partials (_dqsum). Each takes attention_src._Gen `g` and appends source lines to it; the
layouts are attention_src's module docstring."""
from __future__ import annotations

from funcgrad.cuda.attention_src_fwd import _query_rows, _Tile, _zero


def _dq(g):
    D, BR, BC, MI, NJ, OC, TX, ct = (g.D, g.BR, g.BC, g.MI, g.NJ, g.OC, g.TX, g.ct)
    P = g.P
    QB, GB = 0, D * (BR + P)
    KB = 2 * D * (BR + P)
    VB = KB + D * (BC + P)
    g.header(["q", "k", "v", "g"], ", ST, sto", "DQ")
    for name, shape in (("s", (MI, NJ)), ("p", (MI, NJ)), ("o", (MI, OC)), ("lse", (MI,)),
                        ("dl", (MI,))):
        g.local(name, *shape)
    _query_rows(g)
    g.load_tile(1, "row0", "T", BR, [("q", "n", "H", QB), ("g", "n", "HV", GB)])
    # this thread's rows' logsumexp / delta (-inf lse -> +inf: its probabilities come out 0)
    g.emit(1, f"for i in range({MI}):", f"    t = row0 + {g.row('i')}",
           "    lse[i] = POS", f"    dl[i] = {ct}(0)", "    if t < T:",
           "        sti = sto + ((b * N + n) * T + t) * 2",
           f"        x = {ct}(ST[sti])", "        lse[i] = POS if x == NEG else x",
           f"        dl[i] = {ct}(ST[sti + 1])")
    _zero(g, 1, "o", MI, OC)
    kv = [("k", "kh", "H", KB), ("v", "kh", "HV", VB)]
    g.stream(1, "0", "lim", "S", kv)
    g.emit(2, "cuda.syncthreads()")
    g.prefetch(2, "lim", "S", kv)
    g.mm_rows_cols(2, "s", QB, BR, KB, BC, "H")
    g.mm_rows_cols(2, "p", GB, BR, VB, BC, "HV")
    g.emit(2, "cuda.syncthreads()")
    # dS = P * (dP - delta), P = exp(s q.k - lse) (masked: 0), stored transposed over V
    g.emit(2, f"for i in range({MI}):", f"    row = row0 + {g.row('i')}",
           f"    for j in range({NJ}):", f"        col = c0 + {g.col('j')}",
           "        x = math.exp(s[i, j] * sc - lse[i])",
           "        if col >= S or (causal and col > row):", f"            x = {ct}(0)",
           f"        sm[uint64({VB} + ({g.col('j')}) * {BR + P} + {g.row('i')})] = "
           "x * (p[i, j] - dl[i])")
    g.emit(2, "cuda.syncthreads()")
    g.mm_scores_out(2, [("o", VB, KB, BC)], f"min({BC}, lim - c0)")
    g.emit(2, "cuda.syncthreads()")
    g.emit(1, f"for i in range({MI}):", f"    t = row0 + {g.row('i')}", "    if t < T:",
           "        ob = outo + ((b * T + t) * N + n) * H", f"        for k in range({OC}):",
           f"            d = tx + k * {TX}", "            if d < H:",
           f"                DQ[uint64(ob + d)] = {g.out}(o[i, k] * sc)")


def _dkv(g, merged=False):
    """dK and dV of a key tile (queries streamed). merged (attention_bwd): also this tile's
    dQ partial dS K per query tile into DQP, laid out [tile][B, rows, N, H] with rows T - rs,
    rs the first streamed query row (dqsum adds the tiles up). dK / dV of key row s, head kh
    go to DKV[outo / ovo + (b S + s) ors + kh ohs + d] (runtime strides: attention_dkv's
    [B, S, K, H + Hv] or the packed [B, T, N + 2K, H] rows)."""
    D, BR, BC, MI, NJ, OC, TX, ct = (g.D, g.BR, g.BC, g.MI, g.NJ, g.OC, g.TX, g.ct)
    P = g.P
    tiles = None
    if merged:   # (BR == BC: the dQ product shares the dK / dV products' device function)
        g.fn = True
        g.cb = bool(g.vec) and BR % 4 == 0
        g.device_fns()
        if g.cb and g.PF and BC <= g.NT:   # the forward's Gray-order fetch, one device function
            tiles = _Tile(g, "q", BC, True), _Tile(g, "q", BC, True)
            if tiles[0].split:
                tiles[0].fetch_fn()
                tiles[1].fn = True
    # cb: V^T rows unpadded (V is only read along rows: no conflicts), the query statistics in
    # the padding of P^T's rows (words BR, BR + 1): 5 blocks an SM fit at W2's (32, 32), D 64
    pack = g.cb and g.vec == 2
    VR = BR if pack else BR + P
    KB, VB = 0, D * (BR + P)
    QB = VB + D * VR
    GB = QB + D * (BC + P)
    PB = GB + D * (BC + P)
    DB = PB + BC * (BR + P)
    LB = DB + BC * (BR + P)
    lse_at, dl_at = ((lambda j: f"{PB} + ({j}) * {BR + P} + {BR}"),
                     (lambda j: f"{PB} + ({j}) * {BR + P} + {BR + 1}")) if pack else \
        ((lambda j: f"{LB} + {j}"), (lambda j: f"{LB + BC} + {j}"))
    g.header(["q", "k", "v", "g"], ", ST, sto" + (", DQP, dqpo" if merged else ""), "DKV",
             ", ovo, ors, ohs")
    MQ = BC // g.TY   # merged: dQ rows (queries) per thread (= MI)
    regs = [("s", (MI, NJ)), ("p", (MI, NJ)), ("dk", (MI, OC)), ("dv", (MI, OC))]
    for name, shape in regs + ([("dq", (MQ, OC))] if merged else []):
        g.local(name, *shape)
    g.emit(1, "KH = N // G", "bk = cuda.blockIdx.x", "b = bk // KH", "kh = bk - b * KH",
           f"row0 = cuda.blockIdx.y * {BR}", f"start = (row0 // {BC}) * {BC} if causal else 0")
    if merged:   # the partial rows of the key tiles before this one, and of this one
        g.emit(1, "pr = 0", "for j_ in range(cuda.blockIdx.y):",
               f"    pr += max(0, T - ((j_ * {BR}) // {BC}) * {BC}) if causal else T",
               "nq = max(0, T - start)", "dqb = dqpo + (cuda.gridDim.x // KH) * pr * N * H")
    g.load_tile(1, "row0", "S", BR, [("k", "kh", "H", KB), ("v", "kh", "HV", VB, VR)])
    _zero(g, 1, "dk", MI, OC)
    _zero(g, 1, "dv", MI, OC)
    g.emit(1, "for gi in range(G):", "    n = kh * G + gi")
    qg = [("q", "n", "H", QB), ("g", "n", "HV", GB)]
    st = ["t = c0 + j", "lse_ = POS", f"dl_ = {ct}(0)", f"if j < {BC} and t < T:",
          "    sti = sto + ((b * N + n) * T + t) * 2", f"    x = {ct}(ST[sti])",
          "    lse_ = POS if x == NEG else x", f"    dl_ = {ct}(ST[sti + 1])"]
    if tiles:   # Q and dO (same map: one r_q, d_q)
        tiles[0].prologue(2)
        g.emit(2, "qb_ = qo + b * qs0 + n * qs2", "gb_ = go + b * gs0 + n * gs2")

        def fetch(ind, r0):
            tiles[0].fetch(ind, r0, "T", "q", "n", "H", QB, 0)
            tiles[1].fetch(ind, r0, "T", "g", "n", "HV", GB, tiles[0].U)
        g.emit(2, "if start < T:")
        fetch(3, "start")
    if BC <= g.NT:   # the query rows' statistics loaded beside the tile (one latency, not two)
        pre = ["    j = tid"] + ["    " + x for x in st]
        if tiles:
            g.emit(2, f"for c0 in range(start, T, {BC}):", *pre)
            tiles[0].put(3, f"{QB} + d * {BC + P} + r", 0)
            tiles[1].put(3, f"{GB} + d * {BC + P} + r", tiles[0].U)
        else:
            g.stream(2, "start", "T", "T", qg, pre)
        g.emit(3, f"if tid < {BC}:", f"    sm[{lse_at('tid')}] = lse_",
               f"    sm[{dl_at('tid')}] = dl_")
    else:
        g.stream(2, "start", "T", "T", qg)
        g.emit(3, f"for j in range(tid, {BC}, {g.NT}):", *("    " + x for x in st),
               f"    sm[{lse_at('j')}] = lse_", f"    sm[{dl_at('j')}] = dl_")
    g.emit(3, "cuda.syncthreads()")
    if tiles:
        g.emit(3, f"if c0 + {BC} < T:")
        fetch(4, f"(c0 + {BC})")
    else:
        g.prefetch(3, "T", "T", qg)
    g.mm_rows_cols(3, "s", KB, BR, QB, BC, "H")
    g.mm_rows_cols(3, "p", VB, VR - P, GB, BC, "HV")
    # P^T and dS^T tiles ([query][key]); masked (query before key) entries 0
    g.emit(3, f"for j in range({NJ}):", f"    cj = {g.col('j')}", f"    lse_ = sm[{lse_at('cj')}]",
           f"    dl_ = sm[{dl_at('cj')}]", "    col = c0 + cj",
           f"    for i in range({MI}):", f"        r = {g.row('i')}",
           "        x = math.exp(s[i, j] * sc - lse_)",
           "        if causal and col < row0 + r:", f"            x = {ct}(0)")
    if g.vec and not g.sim and MI % 4 == 0:   # this thread's MI contiguous rows: float4 stores
        g.emit(5, "s[i, j] = x", "p[i, j] = x * (p[i, j] - dl_)")
        for i0 in range(0, MI, 4):
            at = f"cj * {BR + P} + ty * {MI} + {i0}"
            for base, arr in ((PB, "s"), (DB, "p")):
                vals = ", ".join(f"{arr}[{i0 + i}, j]" for i in range(4))
                g.emit(4, f"st4(sm, uint64({base} + {at}), {vals})")
    else:
        g.emit(5, f"sm[uint64({PB} + cj * {BR + P} + r)] = x",
               f"sm[uint64({DB} + cj * {BR + P} + r)] = x * (p[i, j] - dl_)")
    g.emit(3, "cuda.syncthreads()")
    g.mm_scores_out(3, [("dv", PB, GB, BC), ("dk", DB, QB, BC)], f"min({BC}, T - c0)")
    if merged:
        _dq_partial(g, 3, MQ, KB, DB)
    g.emit(3, "cuda.syncthreads()")
    g.emit(1, f"for i in range({MI}):", f"    s_ = row0 + {g.row('i')}", "    if s_ < S:",
           "        ob = (b * S + s_) * ors + kh * ohs",
           f"        for k in range({OC}):", f"            d = tx + k * {TX}",
           "            if d < H:",
           f"                DKV[uint64(outo + ob + d)] = {g.out}(dk[i, k] * sc)",
           "            if d < HV:",
           f"                DKV[uint64(ovo + ob + d)] = {g.out}(dv[i, k])")


def _dq_partial(g, ind, MQ, KB, DB):
    """dq[i, k] = sum_r dS[q(i), r] K[r, tx + TX k] over this tile's keys (dS^T read across
    its rows), written unscaled to the tile's partial rows c0 + q(i) - start."""
    BR, TX, OC, P = g.BR, g.TX, g.OC, g.P
    qrow = (lambda i: f"ty * {MQ} + {i}") if g.vec else (lambda i: f"ty + {i} * {g.TY}")
    ri = BR + P if g.vec else g.TY * (BR + P)
    _zero(g, ind, "dq", MQ, OC)
    g.so_call(ind, "dq", f"{DB} + ({qrow(0)}) * {BR + P}", ri, 1, KB, BR, f"min({BR}, S - row0)")
    g.emit(ind,
           f"for i in range({MQ}):", f"    t = c0 + {qrow('i')}", "    if t < T:",
           "        ob = dqb + ((b * nq + t - start) * N + n) * H",
           f"        for k in range({OC}):", f"            d = tx + k * {TX}",
           "            if d < H:", "                DQP[uint64(ob + d)] = dq[i, k]")


def dqsum_shape(nh, sim):
    """(threads, elements per thread E) of the dQ-partials sum over rows of nh values."""
    nt = 8 if sim else 128
    return nt, max(1, min(4, -(-nh // nt)))


def _dqsum(g, NT, E, U=8):
    """dq[b, t] = scale * (the partials of key tiles 0, 1, ... that reach row t, in order):
    one block of NT threads per (b, t) row, a thread's E values NT apart. The loads of U tiles
    x E values are issued before their adds (a load-add chain keeps one load in flight per
    thread: 1.2 TB/s on an H200). Row (b, t) goes to DQ[outo + (b T + t) ors ...] (ors: N H,
    or (N + 2K) H in the packed layout)."""
    BR, BC, ct = g.BR, g.BC, g.ct
    g.emit(0, "", "@cuda.jit(OPTS)",
           "def kernel(DQP, dqpo, DQ, outo, ors, T, N, H, J, causal, scale_):")
    g.emit(1, f"xs = cuda.local.array(({U}, {E}), {ct})", f"acc = cuda.local.array({E}, {ct})",
           "bt = cuda.blockIdx.x", "b = bt // T", "t = bt - b * T", "B_ = cuda.gridDim.x // T",
           "NH = N * H", f"sc = {ct}(scale_)",
           # key tiles whose first streamed query row ((j * BR) // BC) * BC is <= t
           f"jn = min(J, -(-((t // {BC} + 1) * {BC}) // {BR})) if causal else J",
           f"for i0 in range(cuda.threadIdx.x, NH, {NT * E}):",
           f"    for e in range({E}):", f"        acc[e] = {ct}(0)",
           "    pr = 0", f"    for j0 in range(0, jn, {U}):", f"        for u in range({U}):",
           "            if j0 + u < jn:",
           f"                rs = (((j0 + u) * {BR}) // {BC}) * {BC} if causal else 0",
           "                at = dqpo + (B_ * pr + b * (T - rs) + t - rs) * NH + i0",
           f"                for e in range({E}):", f"                    xs[u, e] = {ct}(0)",
           f"                    if i0 + e * {NT} < NH:",
           f"                        xs[u, e] = DQP[uint64(at + e * {NT})]",
           "                pr += T - rs", f"        for u in range({U}):",
           "            if j0 + u < jn:", f"                for e in range({E}):",
           "                    acc[e] += xs[u, e]",
           f"    for e in range({E}):", f"        if i0 + e * {NT} < NH:",
           f"            DQ[uint64(outo + bt * ors + i0 + e * {NT})] = {g.out}(acc[e] * sc)")
