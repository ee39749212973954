"""Train a 64-128-10 MLP on scikit-learn's 8x8 digits with funcgrad (GPU when present)."""
from __future__ import annotations

import argparse
import time

import numpy as np

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import lax, nn, optim


def init_params(rng: np.random.Generator, sizes=(64, 128, 10)):
    """He-uniform weights, zero biases: a list of {"w", "b"} dicts."""
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        lim = np.sqrt(6.0 / n_in)
        params.append({"w": rng.uniform(-lim, lim, (n_in, n_out)).astype(np.float32),
                       "b": np.zeros(n_out, np.float32)})
    return params


def predict(params, x):
    for layer in params[:-1]:
        x = nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss(params, x, y):
    """Mean softmax cross-entropy of integer labels y."""
    return fnp.mean(nn.softmax_cross_entropy_with_integer_labels(predict(params, x), y))


def sgd_step(params, x, y, lr):
    """One plain SGD step, written directly in funcgrad (--optimizer sgd)."""
    value, grads = funcgrad.value_and_grad(loss)(params, x, y)
    new = funcgrad.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return new, value


def make_adam_step(opt):
    """One step of an optax-style optimizer (--optimizer adam, the default)."""
    def step(params, opt_state, x, y):
        value, grads = funcgrad.value_and_grad(loss)(params, x, y)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optim.apply_updates(params, updates), opt_state, value
    return step


def make_adam_steps(opt):
    """k Adam steps per jitted call (--steps-per-call k): lax.scan over k stacked batches.

    One call then pays the per-call host cost (argument handling, and on the GPU the copies in
    and out of the CUDA graph) once for k steps; the training trajectory is the same.
    """
    one = make_adam_step(opt)

    def steps(params, opt_state, xs, ys):
        def body(carry, batch):
            params, opt_state, value = one(carry[0], carry[1], batch[0], batch[1])
            return (params, opt_state), value
        (params, opt_state), values = lax.scan(body, (params, opt_state), (xs, ys))
        return params, opt_state, values
    return steps


def load_digits(seed: int):
    from sklearn.datasets import load_digits as _load
    from sklearn.model_selection import train_test_split
    d = _load()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int32)
    return train_test_split(x, y, test_size=0.25, random_state=seed, stratify=y)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    ap.add_argument("--steps-per-call", type=int, default=1,
                    help="Adam steps per jitted call (a lax.scan over stacked batches)")
    ap.add_argument("--lr", type=float, default=None, help="default: 1e-3 adam, 0.1 sgd")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    ap.add_argument("--plot", default="mlp_loss.png", help="loss curve (needs matplotlib)")
    args = ap.parse_args(argv)
    if args.device:
        funcgrad.config.update("default_device", args.device)
    x_tr, x_te, y_tr, y_te = load_digits(args.seed)
    rng = np.random.default_rng(args.seed)
    params = funcgrad.device_put(init_params(rng))
    lr = args.lr or (1e-3 if args.optimizer == "adam" else 0.1)
    k = args.steps_per_call
    if k < 1 or (k > 1 and args.optimizer != "adam"):
        ap.error("--steps-per-call must be >= 1, and > 1 only with --optimizer adam")
    if args.optimizer == "adam":
        opt = optim.adam(lr)
        opt_state = opt.init(params)
        step = funcgrad.jit(make_adam_step(opt) if k == 1 else make_adam_steps(opt))
    else:
        step = funcgrad.jit(sgd_step)
        lr32 = np.float32(lr)
    print(f"device: {funcgrad.default_backend()}; train {len(x_tr)}, test {len(x_te)} examples; "
          f"{args.optimizer} lr {lr}")
    try:
        from tqdm import trange
    except ImportError:  # tqdm is optional
        trange = range
    history = []
    t0 = time.perf_counter()
    for i in trange(0, args.steps, k):
        n = min(k, args.steps - i)   # the last call may run fewer steps
        if k > 1:   # the same batches, in the same order, as one step per call would draw
            idx = np.stack([rng.integers(0, len(x_tr), args.batch) for _ in range(n)])
            params, opt_state, values = step(params, opt_state, x_tr[idx], y_tr[idx])
            values = np.asarray(values)
        elif args.optimizer == "adam":
            idx = rng.integers(0, len(x_tr), args.batch)
            params, opt_state, value = step(params, opt_state, x_tr[idx], y_tr[idx])
            values = [value]
        else:
            idx = rng.integers(0, len(x_tr), args.batch)
            params, value = step(params, x_tr[idx], y_tr[idx], lr32)
            values = [value]
        for j in range(n):
            if (i + j) % 50 == 0 or i + j == args.steps - 1:
                history.append((i + j, float(values[j])))
    dt = time.perf_counter() - t0
    logits = np.asarray(funcgrad.jit(predict)(params, x_te))
    acc = float(np.mean(np.argmax(logits, axis=1) == y_te))
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
