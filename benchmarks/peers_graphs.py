# Copied from the team's shared/bench (peer definitions of WORKLOADS.md); run beside bench_gpu.py.
"""Expert-level anchor: PyTorch with the whole training step captured in a CUDA graph (W1, W5, W2)."""
import json, time
import numpy as np, torch
def emit(**kw): print(json.dumps(kw), flush=True)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
def graphed(model, opt, make_loss, reps=50):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            opt.zero_grad(set_to_none=True); l = make_loss(); l.backward(); opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        l = make_loss(); l.backward(); opt.step()
    for _ in range(5): g.replay()
    torch.cuda.synchronize(); ts = []
    for _ in range(reps):
        t = time.perf_counter(); g.replay(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3
def mlp(sizes, batch):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2: layers.append(torch.nn.ReLU())
    m = torch.nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, capturable=True)
    x = torch.randn(batch, sizes[0], device=dev); y = torch.randint(0, sizes[-1], (batch,), device=dev)
    return graphed(m, opt, lambda: torch.nn.functional.cross_entropy(m(x), y))
emit(what="W1_mlp_step_ms", impl="torch_cudagraph", value=mlp([784, 1024, 1024, 10], 512))
emit(what="W5_tiny_step_ms", impl="torch_cudagraph", value=mlp([64, 64, 2], 32))
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
        s.register_buffer("pos", torch.arange(T))
    def forward(s, idx):
        x = s.wte(idx) + s.wpe(s.pos)
        for b in s.blocks: x = b(x)
        return s.lnf(x) @ s.wte.weight.T
gpt = GPT().to(dev)
opt = torch.optim.AdamW(gpt.parameters(), lr=3e-4, capturable=True)
idx = torch.randint(0, V, (B, T), device=dev); tgt = torch.randint(0, V, (B, T), device=dev)
emit(what="W2_gpt_step_ms", impl="torch_cudagraph",
     value=graphed(gpt, opt, lambda: torch.nn.functional.cross_entropy(gpt(idx).view(-1, V), tgt.view(-1)), reps=20))
