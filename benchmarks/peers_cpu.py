# Copied from the team's shared/bench (peer definitions of WORKLOADS.md); run beside bench_gpu.py.
"""CPU anchors for the embedded default (no GPU): one Adam step of an MLP, JAX-CPU jit vs HIPS autograd vs hand-written numpy.
C1: 64-128-128-10, batch 128 (digits-sized).  C2: 784-512-512-10, batch 256.
`--only jax` runs JAX-CPU alone; `--reps N` sets the timed steps per figure (bench_cpu.py --pair).
JAX's step donates its parameters and optimizer state (donate_argnums=(0, 1)), as funcgrad's does in bench_cpu.py; `--no-donate` leaves that out."""
import argparse, json, time, sys
import numpy as np
_ap = argparse.ArgumentParser(); _ap.add_argument("--only", default=None); _ap.add_argument("--reps", type=int, default=50); _ap.add_argument("--no-donate", dest="donate", action="store_false")
ARGS = _ap.parse_args()
def emit(**kw): print(json.dumps(kw), flush=True)
def med(fn, reps=ARGS.reps, warm=5):
    for _ in range(warm): fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3
SIZES = {"C1": ([64, 128, 128, 10], 128), "C2": ([784, 512, 512, 10], 256)}
rng = np.random.default_rng(0)
for name, (sizes, batch) in SIZES.items():
    ps = [(rng.standard_normal((a, b)).astype(np.float32) * 0.05, np.zeros(b, np.float32)) for a, b in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32); y = rng.integers(0, sizes[-1], batch)
    # JAX
    import jax, jax.numpy as jnp, optax
    def loss(p, x, y):
        h = x
        for i, (w, b) in enumerate(p):
            h = h @ w + b
            if i < len(p) - 1: h = jax.nn.relu(h)
        return optax.softmax_cross_entropy_with_integer_labels(h, y).mean()
    opt = optax.adam(1e-3); st = opt.init(ps)
    def step(p, s, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y); u, s = opt.update(g, s, p); return optax.apply_updates(p, u), s, l
    step = jax.jit(step, donate_argnums=(0, 1) if ARGS.donate else ())
    state = [ps, st]
    def js():
        state[0], state[1], l = step(state[0], state[1], x, y); jax.block_until_ready(l)
    emit(what=f"{name}_step_ms", impl="jax_cpu_jit", value=med(js))
    if ARGS.only == "jax":
        continue
    # autograd
    import autograd.numpy as anp
    from autograd import value_and_grad
    def aloss(p, x, y):
        h = x
        for i, (w, b) in enumerate(p):
            h = anp.dot(h, w) + b
            if i < len(p) - 1: h = anp.maximum(h, 0.0)
        h = h - anp.max(h, axis=1, keepdims=True)
        lp = h - anp.log(anp.sum(anp.exp(h), axis=1, keepdims=True))
        return -anp.mean(lp[anp.arange(len(y)), y])
    vg = value_and_grad(aloss)
    ap = [list(t) for t in ps]; m = [[np.zeros_like(a) for a in t] for t in ap]; v = [[np.zeros_like(a) for a in t] for t in ap]; tt = [0]
    def astep():
        l, g = vg(ap, x, y); tt[0] += 1
        for i in range(len(ap)):
            for j in range(2):
                m[i][j] = 0.9 * m[i][j] + 0.1 * g[i][j]; v[i][j] = 0.999 * v[i][j] + 0.001 * g[i][j] ** 2
                ap[i][j] = ap[i][j] - 1e-3 * (m[i][j] / (1 - 0.9 ** tt[0])) / (np.sqrt(v[i][j] / (1 - 0.999 ** tt[0])) + 1e-8)
    emit(what=f"{name}_step_ms", impl="hips_autograd", value=med(astep))
    # hand-written numpy forward+backward (a floor for an unfused numpy interpreter)
    hp = [list(t) for t in ps]
    def nstep():
        hs = [x]; h = x
        for i, (w, b) in enumerate(hp):
            h = h @ w + b
            if i < len(hp) - 1: h = np.maximum(h, 0); 
            hs.append(h)
        z = h - h.max(1, keepdims=True); e = np.exp(z); pr = e / e.sum(1, keepdims=True)
        pr[np.arange(batch), y] -= 1; g = pr / batch
        for i in reversed(range(len(hp))):
            w, b = hp[i]
            gw = hs[i].T @ g; gb = g.sum(0)
            if i > 0:
                g = (g @ w.T) * (hs[i] > 0)
            hp[i][0] = w - 1e-3 * gw; hp[i][1] = b - 1e-3 * gb
    emit(what=f"{name}_step_ms", impl="numpy_handwritten_sgd", value=med(nstep))
