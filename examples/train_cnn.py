"""Train a CNN with funcgrad (GPU when present): a small one on scikit-learn's 8x8 digits, or
(--model resnet) a ResNet-18-style network on larger synthetic images, reporting images/s.

digits: conv 3x3 (16) -> relu -> max-pool 2x2 -> conv 3x3 (32) -> relu -> max-pool 2x2 ->
dense (10), trained with jit + optim.adam.
resnet: 3x3 stem conv (64) and 3x3 / 2 max-pool, four stages of two basic blocks (3x3 convs,
identity or 1x1 / 2 projection shortcuts) at 64-512 channels, global average pool, dense (10),
on --px x --px synthetic images whose class is a noisy fixed pattern (so the loss falls),
trained with jit + optim.sgd(momentum=0.9) at --batch 128; on a GPU its convolutions run on
cuDNN (funcgrad.cuda.cudnn). benchmarks/bench_cnn.py times the same step beside JAX and
torch.compile.
NHWC activations and HWIO kernels as in JAX/flax.
"""
from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, nn, optim

DN = ("NHWC", "HWIO", "NHWC")


def init_params(rng: np.random.Generator, channels=(1, 16, 32), classes=10):
    """He-uniform kernels, zero biases: {"convs": [{"w", "b"}...], "dense": {"w", "b"}}."""
    convs = []
    for c_in, c_out in itertools.pairwise(channels):
        lim = np.sqrt(6.0 / (9 * c_in))
        convs.append({"w": rng.uniform(-lim, lim, (3, 3, c_in, c_out)).astype(np.float32),
                      "b": np.zeros(c_out, np.float32)})
    n_in = 2 * 2 * channels[-1]   # 8x8 halved by each of the two pools
    lim = np.sqrt(6.0 / n_in)
    dense = {"w": rng.uniform(-lim, lim, (n_in, classes)).astype(np.float32),
             "b": np.zeros(classes, np.float32)}
    return {"convs": convs, "dense": dense}


def max_pool(x, size=2):
    """size x size max pooling with stride size over the H and W axes of NHWC."""
    window = (1, size, size, 1)
    return lax.reduce_window(x, -np.inf, lax.max, window, window, "VALID")


def predict(params, x):
    """Logits for images x of shape (batch, 8, 8, 1)."""
    for layer in params["convs"]:
        x = lax.conv_general_dilated(x, layer["w"], (1, 1), "SAME", dimension_numbers=DN)
        x = max_pool(nn.relu(x + layer["b"]))
    x = fnp.reshape(x, (x.shape[0], -1))
    return x @ params["dense"]["w"] + params["dense"]["b"]


def loss(params, x, y):
    """Mean softmax cross-entropy of integer labels y."""
    return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(predict(params, x), y))


def make_step(opt):
    def step(params, opt_state, x, y):
        value, grads = funcgrad.value_and_grad(loss)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optim.apply_updates(params, updates), opt_state, value
    return step


def load_digits(seed: int):
    from sklearn.datasets import load_digits as _load
    from sklearn.model_selection import train_test_split
    d = _load()
    x = (d.data / 16.0).astype(np.float32).reshape(-1, 8, 8, 1)
    y = d.target.astype(np.int32)
    return train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)


def init_resnet(rng: np.random.Generator, stages=(64, 128, 256, 512), classes=10):
    """He-normal HWIO kernels (a block's second conv at a tenth of that), zero biases."""
    def conv(k, ci, co, scale=1.0):
        w = rng.standard_normal((k, k, ci, co)) * np.sqrt(2.0 / (k * k * ci)) * scale
        return {"w": w.astype(np.float32), "b": np.zeros(co, np.float32)}
    p = {"stem": conv(3, 3, stages[0]), "blocks": []}
    ci = stages[0]
    for si, co in enumerate(stages):
        for bi in range(2):
            blk = {"c1": conv(3, ci, co), "c2": conv(3, co, co, 0.1)}
            if ci != co:
                blk["proj"] = conv(1, ci, co)
            p["blocks"].append(blk)
            ci = co
    p["head"] = {"w": (0.1 * rng.standard_normal((ci, classes)) / np.sqrt(ci)).astype(
        np.float32), "b": np.zeros(classes, np.float32)}
    return p


def _conv(x, c, stride=1):
    k = c["w"].shape[0]
    pad = ((k // 2, k // 2), (k // 2, k // 2))
    return lax.conv_general_dilated(x, c["w"], (stride, stride), pad,
                                    dimension_numbers=DN) + c["b"]


def predict_resnet(params, x):
    """Logits for NHWC images x; a block whose channels grow halves the resolution."""
    x = nn.relu(_conv(x, params["stem"]))
    x = lax.reduce_window(x, -np.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                          ((0, 0), (1, 1), (1, 1), (0, 0)))
    for blk in params["blocks"]:
        stride = 2 if "proj" in blk else 1
        h = _conv(nn.relu(_conv(x, blk["c1"], stride)), blk["c2"])
        x = nn.relu(h + (_conv(x, blk["proj"], stride) if "proj" in blk else x))
    x = fnp.mean(x, axis=(1, 2))
    return x @ params["head"]["w"] + params["head"]["b"]


def synthetic_images(rng, n, px, classes=10):
    """n NHWC images of px x px x 3: a fixed random pattern per class plus noise."""
    patterns = rng.standard_normal((classes, px, px, 3)).astype(np.float32)
    y = rng.integers(0, classes, n).astype(np.int32)
    x = patterns[y] + rng.standard_normal((n, px, px, 3)).astype(np.float32)
    return x, y


def train_resnet(args):
    rng = np.random.default_rng(args.seed)
    params = funcgrad.device_put(init_resnet(rng))
    opt = optim.sgd(args.lr, momentum=0.9)
    opt_state = opt.init(params)

    def loss_fn(p, x, y):
        return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(predict_resnet(p, x), y))

    def step(p, s, x, y):
        value, grads = funcgrad.value_and_grad(loss_fn)(p, x, y)
        updates, s = opt.update(grads, s, p)
        return optim.apply_updates(p, updates), s, value
    step = funcgrad.jit(step, donate_argnums=(0, 1))   # params and state updated in place

    pool_n = 8 * args.batch
    x_all, y_all = synthetic_images(rng, pool_n, args.px)
    batches = [funcgrad.device_put((x_all[i:i + args.batch], y_all[i:i + args.batch]))
               for i in range(0, pool_n, args.batch)]
    from funcgrad.cuda import cudnn
    print(f"device: {funcgrad.default_backend()} (convolutions: {cudnn.backend()}); ResNet-18-"
          f"style on {args.px} px synthetic images, batch {args.batch}, sgd lr {args.lr}")
    t0 = time.perf_counter()
    params, opt_state, value = step(params, opt_state, *batches[0])
    first = float(value)
    print(f"first step (compiles): {time.perf_counter() - t0:.1f} s, loss {first:.4f}")
    for i in range(1, 6):   # warm-up: the CUDA graphs of the step are captured here
        params, opt_state, value = step(params, opt_state, *batches[i % len(batches)])
    value.block_until_ready()
    t0 = time.perf_counter()
    for i in range(6, 6 + args.steps):
        params, opt_state, value = step(params, opt_state, *batches[i % len(batches)])
    last = float(value)
    dt = time.perf_counter() - t0
    ms = 1e3 * dt / max(args.steps, 1)
    print(f"{args.steps} steps after 6 in {dt:.2f} s: {ms:.2f} ms/step, "
          f"{args.batch * args.steps / dt:.0f} images/s; loss {first:.4f} -> {last:.4f}")
    return last


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="digits", choices=("digits", "resnet"))
    ap.add_argument("--steps", type=int, default=None, help="default: 1000 (digits), 50")
    ap.add_argument("--batch", type=int, default=None, help="default: 64 (digits), 128")
    ap.add_argument("--px", type=int, default=64, help="resnet image size")
    ap.add_argument("--lr", type=float, default=None, help="default: 3e-3 (adam), 0.01 (sgd)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    ap.add_argument("--plot", default="cnn_loss.png", help="loss curve (needs matplotlib)")
    args = ap.parse_args(argv)
    if args.device:
        funcgrad.config.update("default_device", args.device)
    resnet = args.model == "resnet"
    args.steps = args.steps if args.steps is not None else (50 if resnet else 1000)
    args.batch = args.batch if args.batch is not None else (128 if resnet else 64)
    args.lr = args.lr if args.lr is not None else (0.01 if resnet else 3e-3)
    if resnet:
        return train_resnet(args)
    x_tr, x_te, y_tr, y_te = load_digits(args.seed)
    rng = np.random.default_rng(args.seed)
    params = funcgrad.device_put(init_params(rng))
    opt = optim.adam(args.lr)
    opt_state = opt.init(params)
    step = funcgrad.jit(make_step(opt))
    print(f"device: {funcgrad.default_backend()}; train {len(x_tr)}, test {len(x_te)} examples; "
          f"adam lr {args.lr}, batch {args.batch}")
    try:
        from tqdm import trange
    except ImportError:  # tqdm is optional
        trange = range
    history = []
    t0 = time.perf_counter()
    for i in trange(args.steps):
        idx = rng.integers(0, len(x_tr), args.batch)
        params, opt_state, value = step(params, opt_state, x_tr[idx], y_tr[idx])
        if i % 50 == 0 or i == args.steps - 1:
            history.append((i, float(value)))
    dt = time.perf_counter() - t0
    logits = np.asarray(funcgrad.jit(predict)(params, x_te))
    acc = float(np.mean(np.argmax(logits, axis=1) == y_te))
    if history:
        print(f"{args.steps} steps in {dt:.1f} s ({1e3 * dt / max(args.steps, 1):.2f} ms/step), "
              f"final loss {history[-1][1]:.4f}")
        _plot(args.plot, history)
    print(f"test accuracy: {acc:.3f}")
    return acc


def _plot(path, history):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # matplotlib is optional
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(*zip(*history))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    fig.tight_layout()
    fig.savefig(path)
    print(f"loss curve: {path}")


if __name__ == "__main__":
    main()
