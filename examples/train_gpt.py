"""Train a byte-level GPT on tiny Shakespeare with funcgrad, then sample from it.

The W2 configuration (d 384, 6 layers, 6 heads, context 256, batch 16) is the default on a GPU;
on the CPU a small one (d 128, 2 layers, context 64) is used. `--model gpt2-small` trains
GPT-2 small (124M parameters: d 768, 12 layers, 12 heads, context 1024, batch 8) on the same
bytes: its vocabulary is GPT-2's 50,304 rows (50,257 padded to a multiple of 64), of which the
bytes use ids 0-255, so the shapes (and the LM head's cost) are GPT-2 small's; `--vocab 256`
drops the padding (86M parameters). AdamW with a warmup-cosine schedule and global-norm
clipping, periodic validation loss and tokens/s, checkpoint save/resume, and sampling with a
jitted KV-cache decode step.

Mixed precision (`--dtype bfloat16`): the parameters and the optimizer state stay float32 (the
master weights); the loss casts the parameters to bfloat16 (`astype`, as JAX users write it),
runs the model in bfloat16, and takes the cross-entropy of float32 logits. The gradients flow
back through the casts as float32, and AdamW updates the float32 masters.

Data parallel, one process per GPU (docs/distributed.md):

    python -m funcgrad.distributed.launch -n 2 examples/train_gpt.py --data-parallel
    torchrun --nproc_per_node=2 examples/train_gpt.py --data-parallel

Every process draws the same global batch (--batch) from the same seed and trains on its slice;
the gradients (and the loss, for the log) are averaged over the processes through NCCL, and
every process applies the same update, so the parameters stay identical and the loss curve is
that of one GPU at the same global batch. Process 0 logs, validates, checkpoints and samples.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import optim

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt

GPT2_SMALL = gpt.Config(vocab=50304, d=768, layers=12, heads=12, ctx=1024)  # GPT-2 small, 124M
DTYPES = {"float32": fnp.float32, "bfloat16": fnp.bfloat16}

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                    "tinyshakespeare.txt")


def load_data(path=DATA):
    with open(path, "rb") as f:
        raw = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int32)
    n = int(0.9 * len(raw))
    return raw[:n], raw[n:]


def batches(data, batch, ctx, rng):
    while True:
        starts = rng.integers(0, len(data) - ctx - 1, batch)
        x = np.stack([data[s:s + ctx] for s in starts])
        y = np.stack([data[s + 1:s + ctx + 1] for s in starts])
        yield x, y


def make_optimizer(steps, lr, warmup):
    schedule = optim.warmup_cosine_decay_schedule(0.0, lr, warmup, max(steps, warmup + 1),
                                                  end_value=lr / 10)
    # weight decay on matrices only (not biases, layer-norm scales or position embeddings)
    decay_mask = lambda p: funcgrad.tree_util.tree_map(lambda x: x.ndim == 2, p)
    return optim.chain(optim.clip_by_global_norm(1.0),
                       optim.adamw(schedule, b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1,
                                   mask=decay_mask))


def param_count(cfg) -> int:
    """Parameters of gpt.init_params(cfg), from the shapes alone: embeddings [vocab, d] and
    positions [ctx, d], per layer two layer norms (2d each), qkv (d x 3d + 3d), the attention
    projection (d x d + d), the MLP (d x 4d + 4d and 4d x d + d), and the final layer norm."""
    d = cfg.d
    per_layer = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (
        4 * d * d + d)
    return cfg.vocab * d + cfg.ctx * d + cfg.layers * per_layer + 2 * d


def make_loss(cfg, dtype=fnp.float32):
    """loss(params, x, y): gpt.loss_fn in float32; for a 16-bit dtype the float32 parameters
    are cast to it inside the loss (mixed precision: bf16 compute, float32 masters and
    gradients), and the cross-entropy is taken of the logits cast back to float32."""
    if dtype == fnp.float32:
        return lambda params, x, y: gpt.loss_fn(params, x, y, cfg)

    def loss(params, x, y):
        low = funcgrad.tree_util.tree_map(lambda w: w.astype(dtype), params)
        logits = gpt.forward(low, x, cfg).astype(fnp.float32)
        return fnp.mean(funcgrad.nn.softmax_cross_entropy_with_integer_labels(logits, y))
    return loss


def make_train_step(cfg, opt, dtype=fnp.float32):
    """step(params, opt_state, x, y) -> (params, opt_state, loss): the loss (computed in
    `dtype`) and its float32 gradients, the optimizer's update, the new parameters (jit it with
    donate_argnums=(0, 1))."""
    loss_fn = make_loss(cfg, dtype)

    def train_step(params, opt_state, x, y):
        loss, grads = funcgrad.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optim.apply_updates(params, updates), opt_state, loss
    return train_step


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None,
                    help="training steps (default: 3000 on a GPU, 200 on the CPU)")
    ap.add_argument("--config", choices=["w2", "small"], default=None,
                    help="the 10.8M W2 model or the small CPU one (default: w2 on a GPU)")
    ap.add_argument("--model", choices=["w2", "small", "gpt2-small"], default=None,
                    help="as --config, or gpt2-small (124M, context 1024)")
    ap.add_argument("--vocab", type=int, default=None,
                    help="embedding rows (at least 256; default: gpt2-small's 50304, else 256)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                    help="compute dtype: bfloat16 runs the model in bf16 on float32 master "
                         "weights (mixed precision); float32 (default) throughout")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None,
                    help="peak learning rate (default: 1e-3, 6e-4 for gpt2-small)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="warmup steps (default: 100; gpt2-small: 100 or a tenth of the run)")
    ap.add_argument("--eval-every", type=int, default=None,
                    help="validate every N steps (default: 250, or a quarter of a short run)")
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--checkpoint", default=None,
                    help="default: checkpoints/gpt.safetensors (gpt2-small.safetensors for it)")
    ap.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    ap.add_argument("--sample-bytes", type=int, default=200)
    ap.add_argument("--max-minutes", type=float, default=None,
                    help="stop training (then validate, save, sample) after this long")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    ap.add_argument("--plot", default="gpt_loss.png", help="loss curve (needs matplotlib)")
    ap.add_argument("--data-parallel", action="store_true",
                    help="one process per GPU (start with funcgrad.distributed.launch or "
                         "torchrun): --batch is the global batch, split over the processes")
    ap.add_argument("--log-every", type=int, default=10, help="record the loss every N steps")
    ap.add_argument("--history", default=None,
                    help="write the recorded losses and their wall-clock times here (JSON)")
    ap.add_argument("--precision", default=None, choices=["float32", "tensorfloat32"],
                    help="float32 products (default) or TF32 tensor cores for matmuls and "
                         "attention, as jax_default_matmul_precision")
    args = ap.parse_args(argv)
    if args.precision:
        funcgrad.config.update("default_matmul_precision", args.precision)
    if args.data_parallel:
        _init_distributed()
    if args.device:
        funcgrad.config.update("default_device", args.device)
    on_gpu = funcgrad.default_backend() == "cuda"
    if args.model and args.config and args.model != args.config:
        ap.error(f"--model {args.model} and --config {args.config} name different models")
    name = args.model or args.config or ("w2" if on_gpu else "small")
    big = name == "gpt2-small"
    cfg = {"w2": gpt.W2, "small": gpt.SMALL, "gpt2-small": GPT2_SMALL}[name]
    if args.vocab is not None:
        if args.vocab < 256:
            ap.error(f"--vocab {args.vocab} is below the 256 byte values the data holds")
        cfg = cfg._replace(vocab=args.vocab)
    dtype = DTYPES[args.dtype]
    steps = args.steps if args.steps is not None else (3000 if on_gpu else 200)
    batch = args.batch or (8 if big else 16 if on_gpu else 8)
    args.lr = args.lr if args.lr is not None else (6e-4 if big else 1e-3)
    if args.warmup is None:
        args.warmup = max(1, min(100, steps // 10)) if big else 100
    args.checkpoint = args.checkpoint or os.path.join(
        "checkpoints", "gpt2-small.safetensors" if big else "gpt.safetensors")
    rank, nproc = funcgrad.process_index(), funcgrad.process_count()
    if batch % nproc:
        ap.error(f"--batch {batch} is not divisible by the {nproc} processes")
    lead = rank == 0
    args.eval_every = args.eval_every or max(1, min(250, steps // 4))
    train, val = load_data()
    rng = np.random.default_rng(args.seed)
    opt = make_optimizer(steps, args.lr, args.warmup)
    params = funcgrad.device_put(gpt.init_params(cfg, args.seed))
    if args.data_parallel:   # the same start everywhere, whatever each process computed
        params = funcgrad.distributed.broadcast(params, root=0)
    opt_state = opt.init(params)
    start = 0
    if args.resume and os.path.exists(args.checkpoint):
        saved = funcgrad.io.load(args.checkpoint, like={"params": params, "opt_state": opt_state,
                                                        "step": fnp.int32(0)})
        params, opt_state = funcgrad.device_put((saved["params"], saved["opt_state"]))
        start = int(saved["step"])
        if lead:
            print(f"resumed from {args.checkpoint} at step {start}")
    n_params = sum(int(np.prod(x.shape)) for x in funcgrad.tree_util.tree_leaves(params))
    if lead:
        dp = f" ({nproc} processes x {batch // nproc})" if args.data_parallel else ""
        print(f"device {funcgrad.default_backend()}, model {name}, config {cfg}, "
              f"{n_params / 1e6:.2f}M parameters, batch {batch}{dp} x {cfg.ctx} tokens, "
              f"{steps} steps, compute {args.dtype} (float32 master weights)")

    train_step = make_train_step(cfg, opt, dtype)
    step_fn = funcgrad.jit(train_step, donate_argnums=(0, 1))
    if args.data_parallel:
        step_fn = _data_parallel_step(cfg, opt, rank, batch // nproc, dtype)
    eval_fn = funcgrad.jit(make_loss(cfg, dtype))
    train_it = batches(train, batch, cfg.ctx, rng)
    val_rng = np.random.default_rng(1234)
    val_batches = [next(batches(val, batch, cfg.ctx, val_rng)) for _ in range(args.eval_batches)]

    def val_loss():
        return float(np.mean([float(eval_fn(params, x, y)) for x, y in val_batches]))

    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional
        tqdm = None
    history, vhistory, times = [], [], []
    t0 = time.perf_counter()
    clock = _TokenClock(batch * cfg.ctx)
    if not lead:
        tqdm = None
    bar = tqdm(range(start, steps), desc="train", dynamic_ncols=True) if tqdm else range(start,
                                                                                         steps)
    for i in bar:
        if args.max_minutes is not None and _over_time(args, t0, i - start):
            (bar.write if tqdm else print)(f"time limit reached after {i - start} steps")
            steps = i
            break
        x, y = next(train_it)
        params, opt_state, loss = step_fn(params, opt_state, x, y)
        if i == start:  # the first step compiles: the tokens/s clock starts after it
            float(loss)
            clock.restart()
        else:
            clock.steps += 1
        if i % args.log_every == 0 or i == steps - 1:
            lv = float(loss)
            history.append((i, lv))
            times.append(time.perf_counter() - t0)
            if tqdm:
                bar.set_postfix(loss=f"{lv:.3f}")
        if lead and ((i + 1) % args.eval_every == 0 or i == steps - 1):
            float(loss)  # the steps so far have run: stop the clock before validating
            rate = clock.stop()
            vl = val_loss()
            vhistory.append((i, vl))
            msg = f"step {i + 1}: train loss {history[-1][1]:.4f}, val loss {vl:.4f}, " \
                  f"{time.perf_counter() - t0:.0f} s" + (
                      f", {_rate(rate)} tokens/s" if rate else "")
            (bar.write if tqdm else print)(msg)
            os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)
            funcgrad.io.save(args.checkpoint, {"params": params, "opt_state": opt_state,
                                               "step": fnp.int32(i + 1)})
            clock.restart()
    if clock.steps:
        float(loss)
        clock.stop()
    elapsed = time.perf_counter() - t0
    if not lead:
        funcgrad.distributed.shutdown()
        return
    if not vhistory or vhistory[-1][0] != steps - 1:
        vhistory.append((steps - 1, val_loss()))
    print(f"trained {steps - start} steps in {elapsed:.1f} s "
          f"({1e3 * elapsed / max(steps - start, 1):.1f} ms/step)")
    if clock.total_steps:
        print(f"tokens/s: {_rate(clock.total_tokens() / clock.total_s)} ({clock.total_steps} "
              f"steps of {batch * cfg.ctx:,} tokens in {clock.total_s:.2f} s; the first "
              f"step, which compiles, and validation excluded)")
    if vhistory:
        print(f"final validation loss: {vhistory[-1][1]:.4f} nats/byte")
    if args.history:
        import json
        with open(args.history, "w") as f:
            json.dump({"train": history, "val": vhistory, "seconds": times,
                       "processes": nproc, "batch": batch}, f)
    _plot(args.plot, history, vhistory)
    if cfg.vocab > 256:  # sample bytes only: the tied embedding's first 256 rows give their logits
        params, cfg = {**params, "wte": params["wte"][:256]}, cfg._replace(vocab=256)
    text = gpt.sample(params, cfg, b"ROMEO:\n", args.sample_bytes, funcgrad.random.PRNGKey(7))
    print("sample:\n" + text.decode("utf-8", errors="replace"))
    if args.data_parallel:
        funcgrad.distributed.shutdown()


def _rate(r):
    """tokens/s for the log: whole numbers with thousands separators, 3 digits below 100."""
    return f"{r:,.0f}" if r >= 100 else f"{r:.3g}"


class _TokenClock:
    """Training throughput: wall time of the steps between restart() and stop(), validation and
    checkpoints left out (the caller synchronises on the loss before stopping)."""

    def __init__(self, tokens_per_step):
        self.tokens_per_step = tokens_per_step
        self.steps = self.total_steps = 0
        self.total_s = 0.0
        self.mark = time.perf_counter()

    def restart(self):
        self.steps, self.mark = 0, time.perf_counter()

    def stop(self):
        """tokens/s since restart() (None when no step ran), added to the totals."""
        dt = time.perf_counter() - self.mark
        if not self.steps:
            return None
        self.total_steps += self.steps
        self.total_s += dt
        rate = self.steps * self.tokens_per_step / dt
        self.steps = 0
        return rate

    def total_tokens(self):
        return self.total_steps * self.tokens_per_step


def _over_time(args, t0, done):
    """Past --max-minutes? Processes of a data-parallel job decide together (the slowest one's
    clock, compared every --log-every steps) so that none stops while the others go on."""
    over = time.perf_counter() - t0 > 60 * args.max_minutes
    if not args.data_parallel:
        return over
    if done % args.log_every:
        return False
    flag = funcgrad.device_put(np.float32(over))
    return float(funcgrad.distributed.all_reduce(flag, op="max")) > 0


def _init_distributed():
    """Join the job from torchrun-style variables (one process when none are set)."""
    if "WORLD_SIZE" in os.environ:
        funcgrad.distributed.initialize()
    else:
        funcgrad.distributed.initialize(num_processes=1, process_id=0)


def _data_parallel_step(cfg, opt, rank, per_process, dtype=fnp.float32):
    """step(params, opt_state, x, y) for one process of a data-parallel job: loss and grads of
    its slice of the global batch (jitted), their mean over the processes (bucketed NCCL
    all-reduce), then the update (jitted), the same on every process."""
    grad_fn = funcgrad.jit(funcgrad.value_and_grad(make_loss(cfg, dtype)))

    def update(params, opt_state, grads):
        updates, opt_state = opt.update(grads, opt_state, params)
        return optim.apply_updates(params, updates), opt_state

    update_fn = funcgrad.jit(update, donate_argnums=(0, 1))
    rows = slice(rank * per_process, (rank + 1) * per_process)

    def step(params, opt_state, x, y):
        loss, grads = grad_fn(params, x[rows], y[rows])
        loss, grads = funcgrad.distributed.all_reduce((loss, grads), op="mean")
        params, opt_state = update_fn(params, opt_state, grads)
        return params, opt_state, loss
    return step


def _plot(path, history, vhistory):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(*zip(*history), label="train")
    if vhistory:
        ax.plot(*zip(*vhistory), label="validation", marker="o")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/byte)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    print(f"loss curve: {path}")


if __name__ == "__main__":
    main()
