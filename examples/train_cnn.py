"""Train a small CNN on scikit-learn's 8x8 digits with funcgrad (GPU when present).

conv 3x3 (16) -> relu -> max-pool 2x2 -> conv 3x3 (32) -> relu -> max-pool 2x2 -> dense (10),
NHWC activations and HWIO kernels as in JAX/flax, trained with jit + optim.adam.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, nn, optim

DN = ("NHWC", "HWIO", "NHWC")


def init_params(rng: np.random.Generator, channels=(1, 16, 32), classes=10):
    """He-uniform kernels, zero biases: {"convs": [{"w", "b"}...], "dense": {"w", "b"}}."""
    convs = []
    for c_in, c_out in zip(channels[:-1], channels[1:]):
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    ap.add_argument("--plot", default="cnn_loss.png", help="loss curve (needs matplotlib)")
    args = ap.parse_args(argv)
    if args.device:
        funcgrad.config.update("default_device", args.device)
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
