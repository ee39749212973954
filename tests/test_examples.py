"""The example programs: digits MLP accuracy, GPT KV-cache decoding, GPT training and resume."""
import os
import sys

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
sys.path.insert(0, EXAMPLES)

import gpt

TINY = gpt.Config(vocab=256, d=32, layers=2, heads=4, ctx=16)


@pytest.fixture(autouse=True)
def _cpu():
    funcgrad.config.update("default_device", "cpu")
    yield
    funcgrad.config.update("default_device", None)


def test_digits_mlp_reaches_95_percent(capsys):
    pytest.importorskip("sklearn")
    import train_mlp
    acc = train_mlp.main(["--steps", "600", "--plot", os.devnull + ".png"])
    assert acc >= 0.95
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("test accuracy: 0.9")


def test_digits_mlp_steps_per_call_follows_the_same_trajectory(capsys):
    # 7 steps per jitted call (a lax.scan), 53 steps: 7 full calls and one of 4
    pytest.importorskip("sklearn")
    import train_mlp
    one = train_mlp.main(["--steps", "53", "--plot", os.devnull + ".png"])
    first = capsys.readouterr().out
    seven = train_mlp.main(["--steps", "53", "--steps-per-call", "7",
                            "--plot", os.devnull + ".png"])
    second = capsys.readouterr().out

    def final_loss(out):
        return next(ln for ln in out.splitlines() if "final loss" in ln).split("final loss")[1]
    assert one == seven and final_loss(first) == final_loss(second)
    with pytest.raises(SystemExit):
        train_mlp.main(["--steps-per-call", "3", "--optimizer", "sgd"])


def test_kv_cache_decode_matches_full_forward():
    params = funcgrad.device_put(gpt.init_params(TINY, seed=3))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, TINY.vocab, (2, 10)).astype(np.int32)
    full = np.asarray(gpt.forward(params, fnp.asarray(tokens), TINY))
    step = funcgrad.jit(gpt.decode_step, static_argnums=(4,))
    cache = gpt.init_cache(TINY, 2)
    for pos in range(tokens.shape[1]):
        logits, cache = step(params, cache, fnp.asarray(tokens[:, pos]),
                             fnp.asarray(pos, fnp.int32), TINY)
        np.testing.assert_allclose(np.asarray(logits), full[:, pos], rtol=2e-4, atol=2e-4)
    assert step.stats()["traces"] == 1  # one trace serves every position


def test_gpt_training_loss_falls_and_resumes(tmp_path, capsys, monkeypatch):
    import train_gpt
    monkeypatch.setattr(train_gpt.gpt, "SMALL", TINY)
    ck = str(tmp_path / "ck.safetensors")
    common = ["--config", "small", "--batch", "4", "--eval-every", "20", "--eval-batches", "1",
              "--sample-bytes", "8", "--checkpoint", ck, "--plot", str(tmp_path / "p.png"),
              "--lr", "3e-3", "--warmup", "5"]
    train_gpt.main(["--steps", "40"] + common)
    out = capsys.readouterr().out
    vals = [float(line.split("val loss ")[1].split(",")[0]) for line in out.splitlines()
            if "val loss" in line]
    assert len(vals) == 2 and vals[1] < vals[0] < 5.6
    assert os.path.exists(ck)
    train_gpt.main(["--steps", "50", "--resume"] + common)
    out = capsys.readouterr().out
    assert "resumed from" in out and "at step 40" in out
    assert "trained 10 steps" in out
