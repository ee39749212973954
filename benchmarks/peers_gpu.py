# Copied from the team's shared/bench (peer definitions of WORKLOADS.md); run beside bench_gpu.py.
"""Peer figures on a GPU: JAX (jit) and PyTorch (eager) on workloads W1-W5 of WORKLOADS.md,
plus the machine's ceilings and what plain numba.cuda reaches. Prints one JSON line per figure.
The numba part needs numpy < 2.5 (numba-cuda 0.30 uses np.row_stack)."""
import json, os, sys, time, math
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import numpy as np

def emit(**kw):
    print(json.dumps(kw), flush=True)

def timeit(fn, sync, warm=3, reps=20):
    for _ in range(warm):
        fn()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); sync(); ts.append(time.perf_counter() - t)
    return float(np.median(ts))

# ---------------- torch ----------------
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
tsync = torch.cuda.synchronize
emit(what="versions", torch=torch.__version__, gpu=torch.cuda.get_device_name(0), python=sys.version.split()[0])

# copy bandwidth
x = torch.empty(2**28, dtype=torch.float32, device=dev).uniform_()
y = torch.empty_like(x)
t = timeit(lambda: y.copy_(x), tsync)
emit(what="ceiling_copy_GBps", value=2 * x.numel() * 4 / t / 1e9)
del x, y
# sgemm
for tf32 in (False, True):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.randn(8192, 8192, device=dev); b = torch.randn(8192, 8192, device=dev)
    t = timeit(lambda: a @ b, tsync, reps=10)
    emit(what="ceiling_matmul_TFLOPs", tf32=tf32, value=2 * 8192**3 / t / 1e12)
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(4096, 4096, device=dev); b = torch.randn(4096, 4096, device=dev)
t = timeit(lambda: a @ b, tsync, reps=10)
emit(what="W4_matmul4096_ms", impl="torch_fp32", value=t * 1e3)

# W3 elementwise gelu(x*a+b), 2^26 floats
n = 2**26
xe = torch.randn(n, device=dev); ae = torch.randn(n, device=dev); be = torch.randn(n, device=dev)
f = lambda: torch.nn.functional.gelu(xe * ae + be, approximate="tanh")
t = timeit(f, tsync)
emit(what="W3_elementwise_ms", impl="torch_eager", value=t * 1e3, min_bytes=4 * n * 4)

# W1 MLP
def torch_mlp(batch, sizes, steps_reps=20):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xb = torch.randn(batch, sizes[0], device=dev); yb = torch.randint(0, sizes[-1], (batch,), device=dev)
    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward(); opt.step()
    return timeit(step, tsync, reps=steps_reps)
emit(what="W1_mlp_step_ms", impl="torch_eager", value=torch_mlp(512, [784, 1024, 1024, 10]) * 1e3)
emit(what="W5_tiny_step_ms", impl="torch_eager", value=torch_mlp(32, [64, 64, 1 + 1]) * 1e3)

# W2 GPT
V, D, L, H, T, B = 256, 384, 6, 6, 256, 16
class Block(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1 = torch.nn.LayerNorm(D); s.qkv = torch.nn.Linear(D, 3 * D); s.proj = torch.nn.Linear(D, D)
        s.ln2 = torch.nn.LayerNorm(D); s.fc = torch.nn.Linear(D, 4 * D); s.fc2 = torch.nn.Linear(4 * D, D)
    def forward(s, x):
        q, k, v = s.qkv(s.ln1(x)).split(D, dim=-1)
        sh = lambda t: t.view(B, T, H, D // H).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(sh(q), sh(k), sh(v), is_causal=True)
        x = x + s.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + s.fc2(torch.nn.functional.gelu(s.fc(s.ln2(x)), approximate="tanh"))
class GPT(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.wte = torch.nn.Embedding(V, D); s.wpe = torch.nn.Embedding(T, D)
        s.blocks = torch.nn.ModuleList([Block() for _ in range(L)]); s.lnf = torch.nn.LayerNorm(D)
    def forward(s, idx):
        x = s.wte(idx) + s.wpe(torch.arange(T, device=dev))
        for b in s.blocks: x = b(x)
        return s.lnf(x) @ s.wte.weight.T
gpt = GPT().to(dev)
opt = torch.optim.AdamW(gpt.parameters(), lr=3e-4)
idx = torch.randint(0, V, (B, T), device=dev); tgt = torch.randint(0, V, (B, T), device=dev)
def gstep():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(gpt(idx).view(-1, V), tgt.view(-1)); loss.backward(); opt.step()
emit(what="W2_gpt_step_ms", impl="torch_eager", value=timeit(gstep, tsync, reps=10) * 1e3,
     params=sum(p.numel() for p in gpt.parameters()))
del gpt, opt
torch.cuda.empty_cache()

# ---------------- JAX ----------------
try:
    import jax, jax.numpy as jnp, optax
    emit(what="versions", jax=jax.__version__, optax=optax.__version__, devices=str(jax.devices()))
    jsync = lambda: None
    def jt(fn, *a, reps=20):
        out = fn(*a); jax.block_until_ready(out)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter(); out = fn(*a); jax.block_until_ready(out); ts.append(time.perf_counter() - t0)
        return float(np.median(ts))
    key = jax.random.PRNGKey(0)
    xj = jax.random.normal(key, (n,)); aj = jax.random.normal(key, (n,)); bj = jax.random.normal(key, (n,))
    g = jax.jit(lambda x, a, b: jax.nn.gelu(x * a + b, approximate=True))
    emit(what="W3_elementwise_ms", impl="jax_jit", value=jt(g, xj, aj, bj) * 1e3)
    del xj, aj, bj
    for prec in ("highest", "default"):
        with jax.default_matmul_precision(prec):
            A = jax.random.normal(key, (4096, 4096)); Bm = jax.random.normal(key, (4096, 4096))
            mm = jax.jit(lambda a, b: a @ b)
            emit(what="W4_matmul4096_ms", impl=f"jax_jit_{prec}", value=jt(mm, A, Bm, reps=10) * 1e3)

    def jax_mlp(batch, sizes, prec):
        keys = jax.random.split(key, len(sizes))
        params = [(jax.random.normal(keys[i], (sizes[i], sizes[i + 1])) * 0.02, jnp.zeros(sizes[i + 1])) for i in range(len(sizes) - 1)]
        def loss(p, x, y):
            h = x
            for i, (w, b) in enumerate(p):
                h = h @ w + b
                if i < len(p) - 1: h = jax.nn.relu(h)
            return optax.softmax_cross_entropy_with_integer_labels(h, y).mean()
        opt = optax.adam(1e-3); st = opt.init(params)
        @jax.jit
        def step(p, s, x, y):
            l, gr = jax.value_and_grad(loss)(p, x, y)
            u, s = opt.update(gr, s, p)
            return optax.apply_updates(p, u), s, l
        x = jax.random.normal(key, (batch, sizes[0])); y = jax.random.randint(key, (batch,), 0, sizes[-1])
        with jax.default_matmul_precision(prec):
            return jt(step, params, st, x, y)
    for prec in ("highest", "default"):
        emit(what="W1_mlp_step_ms", impl=f"jax_jit_{prec}", value=jax_mlp(512, [784, 1024, 1024, 10], prec) * 1e3)
        emit(what="W5_tiny_step_ms", impl=f"jax_jit_{prec}", value=jax_mlp(32, [64, 64, 2], prec) * 1e3)

    def jax_gpt(prec):
        ks = iter(jax.random.split(key, 100))
        nrm = lambda *s: jax.random.normal(next(ks), s) * 0.02
        blk = lambda: dict(ln1=(jnp.ones(D), jnp.zeros(D)), qkv=(nrm(D, 3 * D), jnp.zeros(3 * D)), proj=(nrm(D, D), jnp.zeros(D)),
                          ln2=(jnp.ones(D), jnp.zeros(D)), fc=(nrm(D, 4 * D), jnp.zeros(4 * D)), fc2=(nrm(4 * D, D), jnp.zeros(D)))
        p = dict(wte=nrm(V, D), wpe=nrm(T, D), blocks=[blk() for _ in range(L)], lnf=(jnp.ones(D), jnp.zeros(D)))
        def ln(x, gb):
            m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
            return (x - m) * jax.lax.rsqrt(v + 1e-5) * gb[0] + gb[1]
        def fwd(p, idx):
            x = p["wte"][idx] + p["wpe"][None]
            mask = jnp.tril(jnp.ones((T, T), bool))
            for b in p["blocks"]:
                qkv = ln(x, b["ln1"]) @ b["qkv"][0] + b["qkv"][1]
                q, k, v = jnp.split(qkv, 3, axis=-1)
                sh = lambda t: t.reshape(B, T, H, D // H).transpose(0, 2, 1, 3)
                q, k, v = sh(q), sh(k), sh(v)
                att = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(D // H)
                att = jax.nn.softmax(jnp.where(mask, att, -1e30), axis=-1)
                a = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
                x = x + a @ b["proj"][0] + b["proj"][1]
                hdn = jax.nn.gelu(ln(x, b["ln2"]) @ b["fc"][0] + b["fc"][1], approximate=True)
                x = x + hdn @ b["fc2"][0] + b["fc2"][1]
            return ln(x, p["lnf"]) @ p["wte"].T
        def loss(p, idx, tgt):
            return optax.softmax_cross_entropy_with_integer_labels(fwd(p, idx), tgt).mean()
        opt = optax.adamw(3e-4); st = opt.init(p)
        @jax.jit
        def step(p, s, idx, tgt):
            l, gr = jax.value_and_grad(loss)(p, idx, tgt)
            u, s = opt.update(gr, s, p)
            return optax.apply_updates(p, u), s, l
        idx = jax.random.randint(key, (B, T), 0, V); tgt = jax.random.randint(key, (B, T), 0, V)
        with jax.default_matmul_precision(prec):
            return jt(step, p, st, idx, tgt, reps=10)
    for prec in (("highest", "default") if os.environ.get("PEERS_JAX_GPT", "1") == "1" else ()):
        emit(what="W2_gpt_step_ms", impl=f"jax_jit_{prec}", value=jax_gpt(prec) * 1e3)
except Exception as e:
    emit(what="jax_error", error=repr(e)[:500])

# ---------------- numba.cuda ----------------
try:
    import numba
    from numba import cuda
    try:
        import numba_cuda; ncv = numba_cuda.__version__
    except Exception:
        ncv = None
    emit(what="versions", numba=numba.__version__, numba_cuda=ncv)
    @cuda.jit
    def noop(a):
        pass
    d = cuda.device_array(1, dtype=np.float32)
    noop[1, 1](d); cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000): noop[1, 1](d)
    cuda.synchronize(); emit(what="numba_launch_us", value=(time.perf_counter() - t0) / 2000 * 1e6)
    cfg = noop[1, 1]
    t0 = time.perf_counter()
    for _ in range(2000): cfg(d)
    cuda.synchronize(); emit(what="numba_launch_cfg_us", value=(time.perf_counter() - t0) / 2000 * 1e6)
    import math as m
    @cuda.jit(fastmath=True)
    def gelu_k(x, a, b, o):
        i = cuda.grid(1)
        if i < o.size:
            u = x[i] * a[i] + b[i]
            o[i] = 0.5 * u * (1.0 + m.tanh(0.7978845608 * (u + 0.044715 * u * u * u)))
    hx = np.random.randn(n).astype(np.float32)
    dx = cuda.to_device(hx); da = cuda.to_device(hx); db = cuda.to_device(hx); do = cuda.device_array_like(dx)
    k = gelu_k[(n + 255) // 256, 256]
    t = timeit(lambda: k(dx, da, db, do), cuda.synchronize)
    emit(what="W3_elementwise_ms", impl="numba_fused_kernel", value=t * 1e3)
    TPB = 32
    @cuda.jit
    def tiled(A, B, C):
        sA = cuda.shared.array((TPB, TPB), numba.float32); sB = cuda.shared.array((TPB, TPB), numba.float32)
        x, y = cuda.grid(2); tx = cuda.threadIdx.x; ty = cuda.threadIdx.y
        acc = numba.float32(0.)
        for i in range(A.shape[1] // TPB):
            sA[ty, tx] = A[y, tx + i * TPB]; sB[ty, tx] = B[ty + i * TPB, x]
            cuda.syncthreads()
            for j in range(TPB): acc += sA[ty, j] * sB[j, tx]
            cuda.syncthreads()
        C[y, x] = acc
    N = 4096
    hA = np.random.randn(N, N).astype(np.float32)
    dA = cuda.to_device(hA); dB = cuda.to_device(hA); dC = cuda.device_array((N, N), np.float32)
    kk = tiled[(N // TPB, N // TPB), (TPB, TPB)]
    t = timeit(lambda: kk(dA, dB, dC), cuda.synchronize, reps=5)
    emit(what="W4_matmul4096_ms", impl="numba_naive_tiled32", value=t * 1e3)
except Exception as e:
    import traceback; emit(what="numba_error", error=traceback.format_exc()[-800:])
