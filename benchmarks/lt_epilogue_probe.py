"""Probe: cuBLASLt epilogues (BIAS, GELU_BIAS, BGRADA, BGRADB) for exact-fp32 GEMMs at W2's
shapes, against cublasGemmEx (+ a separate bias add / column sum), alone on the GPU.

Usage: python benchmarks/lt_epilogue_probe.py [--gelu: GELU_AUX_BIAS and DGELU only]
"""
from __future__ import annotations

import numpy as np
import torch
from nvmath.bindings import cublas
from nvmath.bindings import cublasLt as lt

H = cublas.create()
LH = lt.create()
WS = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
ONE, ZERO = np.ones(1, np.float32), np.zeros(1, np.float32)
E = lt.Epilogue


def _set(fn, obj, attr, value, dtype):
    v = np.asarray([value], dtype)
    fn(obj, attr, v.ctypes.data, v.nbytes)


def timed(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps * 1e3


def lt_plan(ta, tb, m, n, k, lda, ldb, ldc, epi=E.DEFAULT, bias_ptr=0, cand=8):
    """((desc, layouts, heuristic results), count) of a column-major fp32 product with epilogue
    `epi`, up to `cand` candidates; (None, why) when cuBLASLt rejects it."""
    desc = lt.matmul_desc_create(68, 0)
    D = lt.MatmulDescAttribute
    _set(lt.matmul_desc_set_attribute, desc, D.TRANSA, ta, np.int32)
    _set(lt.matmul_desc_set_attribute, desc, D.TRANSB, tb, np.int32)
    _set(lt.matmul_desc_set_attribute, desc, D.EPILOGUE, int(epi), np.uint32)
    if bias_ptr:
        _set(lt.matmul_desc_set_attribute, desc, D.BIAS_POINTER, bias_ptr, np.uint64)
        _set(lt.matmul_desc_set_attribute, desc, D.BIAS_DATA_TYPE, 0, np.int32)
    lays = [lt.matrix_layout_create(0, *((k, m) if ta else (m, k)), lda),
            lt.matrix_layout_create(0, *((n, k) if tb else (k, n)), ldb),
            lt.matrix_layout_create(0, m, n, ldc)]
    pref = lt.matmul_preference_create()
    _set(lt.matmul_preference_set_attribute, pref,
         lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, 32 << 20, np.uint64)
    res = np.zeros(cand, lt.matmul_heuristic_result_dtype)
    cnt = np.zeros(1, np.int32)
    try:
        lt.matmul_algo_get_heuristic(LH, desc, lays[0], lays[1], lays[2], lays[2], pref, cand,
                                     res.ctypes.data, cnt.ctypes.data)
    except Exception as e:   # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"
    return (desc, lays, res[:int(cnt[0])]), int(cnt[0])


def algo_ptr(res, i):
    return res.ctypes.data + i * res.itemsize + res.dtype.fields["algo"][1]


def run_lt(p, i, A, B, C):
    desc, (la, lb, lc), res = p
    lt.matmul(LH, desc, ONE.ctypes.data, A.data_ptr(), la, B.data_ptr(), lb, ZERO.ctypes.data,
              C.data_ptr(), lc, C.data_ptr(), lc, algo_ptr(res, i), WS.data_ptr(), 32 << 20, 0)


def candidates(p, cnt, A, B, C, label):
    """µs of each of the cnt candidates of plan p on A, B -> C (inf where one fails)."""
    ts = []
    for i in range(cnt):
        try:
            ts.append(timed(lambda i=i: run_lt(p, i, A, B, C)))
        except Exception as e:   # noqa: BLE001
            ts.append(float("inf"))
            print("  fail", label, i, e)
    return ts


def run_best(p, cnt, A, B, C, name, row):
    """Time plan p's cnt candidates and run the fastest on A, B -> C (synchronized); returns
    their µs, or None after noting in `row` that there was no plan or every candidate failed."""
    if p is None or not cnt:
        row.append(f"{name}: none ({cnt})")
        return None
    ts = candidates(p, cnt, A, B, C, name)
    if min(ts) == float("inf"):
        row.append(f"{name}: all {cnt} failed")
        return None
    run_lt(p, int(np.argmin(ts)), A, B, C)
    torch.cuda.synchronize()
    return ts


def gemm_ex(ta, tb, m, n, k, A, lda, B, ldb, C, ldc):
    cublas.set_stream(H, 0)
    cublas.set_workspace(H, WS.data_ptr(), 32 << 20)
    cublas.gemm_ex(H, ta, tb, m, n, k, ONE.ctypes.data, A.data_ptr(), 0, lda, B.data_ptr(), 0,
                   ldb, ZERO.ctypes.data, C.data_ptr(), 0, ldc, 68, -1)


def forward(M, N, K):
    """Row-major out[M,N] = x[M,K] w[K,N] + b: column-major NN, m=N, n=M, bias over m."""
    x, w = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda") * 0.05
    b = torch.randn(N, device="cuda")
    out = torch.empty(M, N, device="cuda")
    ref = x @ w + b
    t_ex = timed(lambda: gemm_ex(0, 0, N, M, K, w, N, x, K, out, N))
    t_add = timed(lambda: torch.add(out, b, out=out))
    row = [f"fwd {M}x{N}x{K}: gemmEx {t_ex:.1f} us (+ bias add {t_add:.1f})"]
    for epi in (E.DEFAULT, E.BIAS, E.GELU_BIAS):
        p, cnt = lt_plan(0, 0, N, M, K, N, K, N, epi, b.data_ptr() if epi != E.DEFAULT else 0)
        ts = run_best(p, cnt, w, x, out, epi.name, row)
        if ts is None:
            continue
        want = ref if epi != E.GELU_BIAS else torch.nn.functional.gelu(ref, approximate="tanh")
        if epi == E.DEFAULT:
            want = ref - b
        err = float((out - want).abs().max() / want.abs().max())
        row.append(f"{epi.name}: first {ts[0]:.1f} best {min(ts):.1f} us ({cnt} algos, "
                   f"rel err {err:.1e})")
    print("; ".join(row), flush=True)


def wgrad(K_in, N_out, T=4096):
    """Row-major dW[K_in,N_out] = x^T dy, db = dy.sum(0): column-major m=N_out (A = dy, OP_N,
    ld N_out), n=K_in (B = x as k x n, OP_T, ld K_in): BGRADA gives db. And dW^T[N_out,K_in]
    = dy^T x: column-major m=K_in (A = x, OP_N), n=N_out (B = dy, OP_T): BGRADB gives db."""
    x, dy = torch.randn(T, K_in, device="cuda"), torch.randn(T, N_out, device="cuda")
    ref, dbref = x.T @ dy, dy.sum(0)
    out = torch.empty(K_in, N_out, device="cuda")
    outT = torch.empty(N_out, K_in, device="cuda")
    db = torch.empty(N_out, device="cuda")
    t_ex = timed(lambda: gemm_ex(0, 1, N_out, K_in, T, dy, N_out, x, K_in, out, N_out))
    t_ex2 = timed(lambda: gemm_ex(0, 1, K_in, N_out, T, x, K_in, dy, N_out, outT, K_in))
    t_sum = timed(lambda: torch.sum(dy, 0, out=db))
    xt, dyt = x.T.contiguous(), dy.T.contiguous()
    t_cx = timed(lambda: xt.copy_(x.T))
    t_cy = timed(lambda: dyt.copy_(dy.T))
    # nn: A = dy (OP_N, ld N_out), B = xt (T x K_in col-major, ld T)
    t_nn = timed(lambda: gemm_ex(0, 0, N_out, K_in, T, dy, N_out, xt, T, out, N_out))
    e_nn = float((out - ref).abs().max() / ref.abs().max())
    # tt: A = dyt (OP_T, ld T), B = x (OP_T, ld K_in)
    t_tt = timed(lambda: gemm_ex(1, 1, N_out, K_in, T, dyt, T, x, K_in, out, N_out))
    e_tt = float((out - ref).abs().max() / ref.abs().max())
    # tn: both copied
    t_tn = timed(lambda: gemm_ex(1, 0, N_out, K_in, T, dyt, T, xt, T, out, N_out))
    row = [(f"wgrad {K_in}x{N_out}x{T}: gemmEx nt {t_ex:.1f} / nt' {t_ex2:.1f} us (+ colsum "
            f"{t_sum:.1f}); nn {t_nn:.1f} (err {e_nn:.0e}, copy x {t_cx:.1f}); tt {t_tt:.1f} "
            f"(err {e_tt:.0e}, copy dy {t_cy:.1f}); tn {t_tn:.1f}")]
    for epi, args in ((E.DEFAULT, (0, 1, N_out, K_in, T, N_out, K_in, N_out, dy, x, out)),
                      (E.BGRADA, (0, 1, N_out, K_in, T, N_out, K_in, N_out, dy, x, out)),
                      (E.BGRADB, (0, 1, K_in, N_out, T, K_in, N_out, K_in, x, dy, outT))):
        ta, tb, m, n, k, lda, ldb, ldc, A, B, C = args
        db.zero_()
        p, cnt = lt_plan(ta, tb, m, n, k, lda, ldb, ldc, epi,
                         db.data_ptr() if epi != E.DEFAULT else 0)
        ts = run_best(p, cnt, A, B, C, epi.name, row)
        if ts is None:
            continue
        got = C if C is out else C.T
        err = float((got - ref).abs().max() / ref.abs().max())
        derr = float((db - dbref).abs().max() / dbref.abs().max()) if epi != E.DEFAULT else 0
        row.append(f"{epi.name}: {' '.join(f'{t:.0f}' for t in ts)} us ({cnt}; err {err:.1e}"
                   f" db {derr:.1e})")
    print("; ".join(row), flush=True)


def _set_aux(desc, aux, ld):
    """The GELU epilogues' aux matrix (the pre-activation): its pointer and leading dim."""
    D = lt.MatmulDescAttribute
    _set(lt.matmul_desc_set_attribute, desc, D.EPILOGUE_AUX_POINTER, aux.data_ptr(), np.uint64)
    _set(lt.matmul_desc_set_attribute, desc, D.EPILOGUE_AUX_LD, ld, np.int64)


def gelu_aux(M=4096, N=1536, K=384):
    """Forward fc1: D = gelu_tanh(x w + b) with aux = x w + b (GELU_AUX_BIAS), and backward:
    D = (dy w2^T) * gelu'(aux) (DGELU), against gemmEx + torch's elementwise, in float64 refs."""
    x, w = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda") * 0.1
    b = torch.randn(N, device="cuda")
    out, aux = torch.empty(M, N, device="cuda"), torch.empty(M, N, device="cuda")
    a64 = x.double() @ w.double() + b.double()
    g64 = torch.nn.functional.gelu(a64, approximate="tanh")
    t_ex = timed(lambda: gemm_ex(0, 0, N, M, K, w, N, x, K, out, N))
    t_el = timed(lambda: torch.nn.functional.gelu(out + b, approximate="tanh"))
    p, cnt = lt_plan(0, 0, N, M, K, N, K, N, E.GELU_AUX_BIAS, b.data_ptr())
    if p is None or not cnt:
        print(f"GELU_AUX_BIAS: none ({cnt})", flush=True)
        return
    _set_aux(p[0], aux, N)
    ts = candidates(p, cnt, w, x, out, "GELU_AUX_BIAS")
    run_lt(p, int(np.argmin(ts)), w, x, out)
    torch.cuda.synchronize()
    ours = torch.nn.functional.gelu(x @ w + b, approximate="tanh")
    e_lt = float(((out.double() - g64).abs() / (g64.abs() + 1e-3)).max())
    e_th = float(((ours.double() - g64).abs() / (g64.abs() + 1e-3)).max())
    e_aux = float(((aux.double() - a64).abs()).max())
    print(f"fwd GELU_AUX_BIAS {M}x{N}x{K}: {min(ts):.1f} us (first {ts[0]:.1f}) against gemmEx "
          f"{t_ex:.1f} + bias-gelu {t_el:.1f}; err (|d|/(|ref|+1e-3)) lt {e_lt:.1e} torch fp32 "
          f"{e_th:.1e}; aux abs err {e_aux:.1e}", flush=True)
    # backward: dg = dy w2^T (M x N) -> da = dg * gelu'(a), with w2 (N x K2)
    dy, w2 = torch.randn(M, K, device="cuda"), torch.randn(N, K, device="cuda") * 0.1
    da = torch.empty(M, N, device="cuda")
    dg64 = dy.double() @ w2.double().T
    a_ = a64.clone().requires_grad_(True)
    torch.nn.functional.gelu(a_, approximate="tanh").backward(dg64)
    da64 = a_.grad
    # row-major dg = dy @ w2^T: column-major m = N, n = M, k = K; A = w2 (K x N col-major...)
    t_ex2 = timed(lambda: gemm_ex(1, 0, N, M, K, w2, K, dy, K, da, N))
    p2, cnt2 = lt_plan(1, 0, N, M, K, K, K, N, E.DGELU, 0)
    if p2 is None or not cnt2:
        print(f"DGELU: none ({cnt2})", flush=True)
        return
    _set_aux(p2[0], aux, N)
    ts2 = candidates(p2, cnt2, w2, dy, da, "DGELU")
    run_lt(p2, int(np.argmin(ts2)), w2, dy, da)
    torch.cuda.synchronize()
    ref_scale = da64.abs() + 1e-3 * da64.abs().max()
    e2 = float(((da.double() - da64).abs() / ref_scale).max())
    dg = dy @ w2.T
    a32 = aux.clone().requires_grad_(True)
    torch.nn.functional.gelu(a32, approximate="tanh").backward(dg)
    e2t = float(((a32.grad.double() - da64).abs() / ref_scale).max())
    t_el2 = timed(lambda: torch.ops.aten.gelu_backward(dg, a32, approximate="tanh"))
    print(f"bwd DGELU {M}x{N}x{K}: {min(ts2):.1f} us (first {ts2[0]:.1f}) against gemmEx "
          f"{t_ex2:.1f} + gelu bwd {t_el2:.1f}; err lt {e2:.1e} torch fp32 {e2t:.1e}",
          flush=True)


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = False
    if "--gelu" in __import__("sys").argv:
        gelu_aux()
        raise SystemExit
    for s in ((4096, 1152, 384), (4096, 384, 384), (4096, 1536, 384), (4096, 384, 1536)):
        forward(*s)
    for s in ((384, 1152), (384, 384), (384, 1536), (1536, 384)):
        wgrad(*s)
