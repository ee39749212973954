"""Kernel sources of the linalg primitives: one thread per matrix (or per right-hand column).

Small dense factorizations written for correctness: each thread runs the textbook algorithm on
its own matrix in global memory (Cholesky, substitution, LU with partial pivoting, Householder
QR as LAPACK's geqr2/org2r, cyclic Jacobi for eigh, one-sided Jacobi for the SVD). Arithmetic
is in the operand's dtype. `{ct}` is the compute type, `{eps}` its machine epsilon and `{tiny}`
a value below which an off-diagonal entry counts as zero.
"""
from __future__ import annotations

CHOLESKY = """
@cuda.jit({opts})
def kernel(a, ao, out, B, n):
    b = cuda.grid(1)
    step = cuda.gridsize(1)
    while b < B:
        base = b * n * n
        ok = True
        for j in range(n):
            for i in range(j):
                out[base + i * n + j] = 0
            d = (a[ao + base + j * n + j] + a[ao + base + j * n + j]) * {ct}(0.5)
            for k in range(j):
                d -= out[base + j * n + k] * out[base + j * n + k]
            if not (d > 0):
                ok = False
                break
            ljj = math.sqrt(d)
            out[base + j * n + j] = ljj
            for i in range(j + 1, n):
                s = (a[ao + base + i * n + j] + a[ao + base + j * n + i]) * {ct}(0.5)
                for k in range(j):
                    s -= out[base + i * n + k] * out[base + j * n + k]
                out[base + i * n + j] = s / ljj
        if not ok:
            for i in range(n * n):
                out[base + i] = math.nan
        b += step
"""

# one thread per (matrix, right-hand column); T = op(triangle of a)
TRISOLVE = """
@cuda.jit({opts})
def kernel(a, ao, bm, bo, x, B, m, nc, lower, trans, unit):
    t = cuda.grid(1)
    step = cuda.gridsize(1)
    low = (lower != 0) != (trans != 0)
    while t < B * nc:
        mat = t // nc
        col = t - mat * nc
        abase = ao + mat * m * m
        bbase = mat * m * nc
        for ii in range(m):
            i = ii if low else m - 1 - ii
            s = bm[bo + bbase + i * nc + col]
            lo = 0 if low else i + 1
            hi = i if low else m
            for k in range(lo, hi):
                tik = a[abase + k * m + i] if trans != 0 else a[abase + i * m + k]
                s -= tik * x[bbase + k * nc + col]
            if unit != 0:
                x[bbase + i * nc + col] = s
            else:
                x[bbase + i * nc + col] = s / a[abase + i * m + i]
        t += step
"""

LU = """
@cuda.jit({opts})
def kernel(a, ao, out, B, n):
    b = cuda.grid(1)
    step = cuda.gridsize(1)
    while b < B:
        base = b * (n + 2) * n
        for i in range(n * n):
            out[base + i] = a[ao + b * n * n + i]
        for i in range(n):
            out[base + (n + 1) * n + i] = i
        for k in range(n):
            p = k
            best = abs(out[base + k * n + k])
            for i in range(k + 1, n):
                v = abs(out[base + i * n + k])
                if v > best:
                    best = v
                    p = i
            out[base + n * n + k] = p
            if p != k:
                for j in range(n):
                    tmp = out[base + k * n + j]
                    out[base + k * n + j] = out[base + p * n + j]
                    out[base + p * n + j] = tmp
                tmp = out[base + (n + 1) * n + k]
                out[base + (n + 1) * n + k] = out[base + (n + 1) * n + p]
                out[base + (n + 1) * n + p] = tmp
            pivot = out[base + k * n + k]
            if pivot != 0:
                for i in range(k + 1, n):
                    out[base + i * n + k] = out[base + i * n + k] / pivot
            for i in range(k + 1, n):
                lik = out[base + i * n + k]
                for j in range(k + 1, n):
                    out[base + i * n + j] -= lik * out[base + k * n + j]
        b += step
"""

# out: (m, k + n); the R block [0, m) x [k, k + n) is the working copy of a; tau: (B, r)
QR = """
@cuda.jit({opts})
def kernel(a, ao, out, tau, B, m, n, k):
    b = cuda.grid(1)
    step = cuda.gridsize(1)
    w = k + n
    r = min(m, n)
    while b < B:
        base = b * m * w
        for i in range(m):
            for j in range(n):
                out[base + i * w + k + j] = a[ao + b * m * n + i * n + j]
        for j in range(r):
            alpha = out[base + j * w + k + j]
            xn = {ct}(0)
            for i in range(j + 1, m):
                xn += out[base + i * w + k + j] * out[base + i * w + k + j]
            tj = {ct}(0)
            if xn > 0:
                beta = -math.copysign(math.sqrt(alpha * alpha + xn), alpha)
                tj = (beta - alpha) / beta
                sc = 1 / (alpha - beta)
                for i in range(j + 1, m):
                    out[base + i * w + k + j] *= sc
                out[base + j * w + k + j] = beta
                for c in range(j + 1, n):
                    s = out[base + j * w + k + c]
                    for i in range(j + 1, m):
                        s += out[base + i * w + k + j] * out[base + i * w + k + c]
                    s *= tj
                    out[base + j * w + k + c] -= s
                    for i in range(j + 1, m):
                        out[base + i * w + k + c] -= s * out[base + i * w + k + j]
            tau[b * r + j] = tj
        for i in range(m):
            for c in range(k):
                out[base + i * w + c] = 1 if i == c else 0
        for jj in range(r):
            j = r - 1 - jj
            tj = tau[b * r + j]
            if tj != 0:
                for c in range(k):
                    s = out[base + j * w + c]
                    for i in range(j + 1, m):
                        s += out[base + i * w + k + j] * out[base + i * w + c]
                    s *= tj
                    out[base + j * w + c] -= s
                    for i in range(j + 1, m):
                        out[base + i * w + c] -= s * out[base + i * w + k + j]
        for i in range(m):
            for j in range(min(i, n)):
                out[base + i * w + k + j] = 0
        b += step
"""

# work: (B, n, n) scratch; out: (n + 1, n) = [V; w]
EIGH = """
@cuda.jit({opts})
def kernel(a, ao, out, work, B, n, lower):
    b = cuda.grid(1)
    step = cuda.gridsize(1)
    while b < B:
        ab = ao + b * n * n
        wb = b * n * n
        ob = b * (n + 1) * n
        for i in range(n):
            for j in range(n):
                src = i * n + j if (lower != 0 and i >= j) or (lower == 0 and i <= j) else j * n + i
                work[wb + i * n + j] = a[ab + src]
                out[ob + i * n + j] = 1 if i == j else 0
        for sweep in range(60):
            done = True
            for p in range(n):
                for q in range(p + 1, n):
                    apq = work[wb + p * n + q]
                    app = work[wb + p * n + p]
                    aqq = work[wb + q * n + q]
                    if abs(apq) <= {tiny} or abs(apq) <= {eps} * math.sqrt(abs(app * aqq)):
                        continue
                    done = False
                    theta = (aqq - app) / (2 * apq)
                    t = 1 / (abs(theta) + math.sqrt(theta * theta + 1))
                    if theta < 0:
                        t = -t
                    c = 1 / math.sqrt(t * t + 1)
                    s = t * c
                    for k in range(n):
                        akp = work[wb + k * n + p]
                        akq = work[wb + k * n + q]
                        work[wb + k * n + p] = c * akp - s * akq
                        work[wb + k * n + q] = s * akp + c * akq
                    for k in range(n):
                        apk = work[wb + p * n + k]
                        aqk = work[wb + q * n + k]
                        work[wb + p * n + k] = c * apk - s * aqk
                        work[wb + q * n + k] = s * apk + c * aqk
                    for k in range(n):
                        vkp = out[ob + k * n + p]
                        vkq = out[ob + k * n + q]
                        out[ob + k * n + p] = c * vkp - s * vkq
                        out[ob + k * n + q] = s * vkp + c * vkq
            if done:
                break
        for i in range(n):
            out[ob + n * n + i] = work[wb + i * n + i]
        for i in range(n):                       # ascending eigenvalues (selection sort)
            j = i
            for l in range(i + 1, n):
                if out[ob + n * n + l] < out[ob + n * n + j]:
                    j = l
            if j != i:
                tmp = out[ob + n * n + i]
                out[ob + n * n + i] = out[ob + n * n + j]
                out[ob + n * n + j] = tmp
                for k in range(n):
                    tmp = out[ob + k * n + i]
                    out[ob + k * n + i] = out[ob + k * n + j]
                    out[ob + k * n + j] = tmp
        fix_signs(out, ob, n, n, n, out, ob, 0, n)
        b += step
"""

# the sign convention of funcgrad.prims.linalg_spectral.fix_signs: column j of u (rows x cols, row
# stride ru) and column j of v (vrows rows, row stride rv) flip so that the entry of largest
# magnitude of u's column (the first on ties) is positive
FIX_SIGNS = """
@cuda.jit(device=True)
def fix_signs(u, ub, rows, cols, ru, v, vb, vrows, rv):
    for j in range(cols):
        best = {ct}(0)
        neg = False
        for i in range(rows):
            x = u[ub + i * ru + j]
            if abs(x) > best:
                best = abs(x)
                neg = x < 0
        if neg:
            for i in range(rows):
                u[ub + i * ru + j] = -u[ub + i * ru + j]
            for i in range(vrows):
                v[vb + i * rv + j] = -v[vb + i * rv + j]
"""

# one-sided Jacobi on W = a (m >= n) or a^T (m < n), R x k with R = max(m, n), k = min(m, n);
# acc (k x k) accumulates the rotations. work: (B, R, k), acc: (B, k, k) scratch;
# out: (m + 1 + n, k) = [U; s; V]
SVD = """
@cuda.jit({opts})
def kernel(a, ao, out, work, acc, B, m, n):
    b = cuda.grid(1)
    step = cuda.gridsize(1)
    R = max(m, n)
    k = min(m, n)
    tall = m >= n
    while b < B:
        ab = ao + b * m * n
        wb = b * R * k
        cb = b * k * k
        ob = b * (m + 1 + n) * k
        for i in range(R):
            for j in range(k):
                work[wb + i * k + j] = a[ab + i * n + j] if tall else a[ab + j * n + i]
        for i in range(k):
            for j in range(k):
                acc[cb + i * k + j] = 1 if i == j else 0
        for sweep in range(60):
            done = True
            for p in range(k):
                for q in range(p + 1, k):
                    al = {ct}(0)
                    be = {ct}(0)
                    ga = {ct}(0)
                    for i in range(R):
                        wp = work[wb + i * k + p]
                        wq = work[wb + i * k + q]
                        al += wp * wp
                        be += wq * wq
                        ga += wp * wq
                    if abs(ga) <= {tiny} or abs(ga) <= {eps} * math.sqrt(al * be):
                        continue
                    done = False
                    zeta = (be - al) / (2 * ga)
                    t = 1 / (abs(zeta) + math.sqrt(1 + zeta * zeta))
                    if zeta < 0:
                        t = -t
                    c = 1 / math.sqrt(1 + t * t)
                    s = c * t
                    for i in range(R):
                        wp = work[wb + i * k + p]
                        wq = work[wb + i * k + q]
                        work[wb + i * k + p] = c * wp - s * wq
                        work[wb + i * k + q] = s * wp + c * wq
                    for i in range(k):
                        vp = acc[cb + i * k + p]
                        vq = acc[cb + i * k + q]
                        acc[cb + i * k + p] = c * vp - s * vq
                        acc[cb + i * k + q] = s * vp + c * vq
            if done:
                break
        sb = ob + m * k
        for j in range(k):
            nrm = {ct}(0)
            for i in range(R):
                nrm += work[wb + i * k + j] * work[wb + i * k + j]
            out[sb + j] = math.sqrt(nrm)
        for i in range(k):                      # descending singular values
            j = i
            for l in range(i + 1, k):
                if out[sb + l] > out[sb + j]:
                    j = l
            if j != i:
                tmp = out[sb + i]
                out[sb + i] = out[sb + j]
                out[sb + j] = tmp
                for r in range(R):
                    tmp = work[wb + r * k + i]
                    work[wb + r * k + i] = work[wb + r * k + j]
                    work[wb + r * k + j] = tmp
                for r in range(k):
                    tmp = acc[cb + r * k + i]
                    acc[cb + r * k + i] = acc[cb + r * k + j]
                    acc[cb + r * k + j] = tmp
        for j in range(k):                      # normalize; complete where s_j ~ 0
            sj = out[sb + j]
            if sj > out[sb] * {eps} * R and sj > 0:
                for i in range(R):
                    work[wb + i * k + j] /= sj
                continue
            for cand in range(R):
                for i in range(R):
                    work[wb + i * k + j] = 1 if i == cand else 0
                for rep in range(2):
                    for l in range(j):
                        d = {ct}(0)
                        for i in range(R):
                            d += work[wb + i * k + l] * work[wb + i * k + j]
                        for i in range(R):
                            work[wb + i * k + j] -= d * work[wb + i * k + l]
                nrm = {ct}(0)
                for i in range(R):
                    nrm += work[wb + i * k + j] * work[wb + i * k + j]
                nrm = math.sqrt(nrm)
                if nrm > 0.5:
                    for i in range(R):
                        work[wb + i * k + j] /= nrm
                    break
        ub = ob
        vb = ob + (m + 1) * k
        for i in range(m):
            for j in range(k):
                out[ub + i * k + j] = work[wb + i * k + j] if tall else acc[cb + i * k + j]
        for i in range(n):
            for j in range(k):
                out[vb + i * k + j] = acc[cb + i * k + j] if tall else work[wb + i * k + j]
        fix_signs(out, ub, m, k, k, out, vb, n, k)
        b += step
"""
