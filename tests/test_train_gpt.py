"""examples/train_gpt.py's real-size model (--model gpt2-small) and mixed precision (--dtype)."""
import math
import os
import sys

import numpy as np
import pytest

import funcgrad
import funcgrad.numpy as fnp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import gpt
import train_gpt

TINY = gpt.Config(vocab=256, d=32, layers=2, heads=4, ctx=16)


@pytest.fixture(autouse=True)
def _cpu():
    funcgrad.config.update("default_device", "cpu")
    yield
    funcgrad.config.update("default_device", None)


def _args(tmp_path):
    return ["--batch", "4", "--eval-batches", "1", "--sample-bytes", "8",
            "--checkpoint", str(tmp_path / "ck.safetensors"), "--plot", str(tmp_path / "p.png"),
            "--lr", "3e-3", "--warmup", "5"]


def _val_losses(out):
    return [float(line.split("val loss ")[1].split(",")[0]) for line in out.splitlines()
            if "val loss" in line]


@pytest.mark.parametrize("cfg", [TINY, gpt.Config(vocab=300, d=24, layers=3, heads=2, ctx=8)])
def test_param_count_is_that_of_init_params(cfg):
    leaves = funcgrad.tree_util.tree_leaves(gpt.init_params(cfg))
    assert train_gpt.param_count(cfg) == sum(x.size for x in leaves)


def test_gpt2_small_is_124m_parameters():
    cfg = train_gpt.GPT2_SMALL
    assert (cfg.d, cfg.layers, cfg.heads, cfg.ctx, cfg.head_dim) == (768, 12, 12, 1024, 64)
    assert cfg.vocab >= 256 and cfg.vocab % 64 == 0
    assert train_gpt.param_count(cfg) == 124_475_904  # GPT-2 small's 124M (nanoGPT's count)
    assert train_gpt.param_count(cfg._replace(vocab=256)) == 86_039_040  # bytes only


def test_bfloat16_loss_computes_in_bf16_with_float32_gradients():
    params = funcgrad.device_put(gpt.init_params(TINY, seed=1))
    rng = np.random.default_rng(0)
    x, y = (fnp.asarray(rng.integers(0, 256, (2, TINY.ctx)).astype(np.int32)) for _ in "xy")
    loss16 = train_gpt.make_loss(TINY, fnp.bfloat16)
    text = str(funcgrad.make_jaxpr(loss16)(params, x, y))
    dots = [ln for ln in text.splitlines() if "dot_general" in ln]
    assert dots and all("bf16[" in ln for ln in dots)
    l16, g16 = funcgrad.value_and_grad(loss16)(params, x, y)
    l32, g32 = funcgrad.value_and_grad(train_gpt.make_loss(TINY))(params, x, y)
    assert l16.dtype == np.float32 and abs(float(l16) - float(l32)) < 0.05
    assert float(l16) != float(l32)  # it did round to bfloat16 somewhere
    for a, b in zip(funcgrad.tree_util.tree_leaves(g16), funcgrad.tree_util.tree_leaves(g32)):
        assert a.dtype == np.float32 and a.shape == b.shape
        a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
        if np.linalg.norm(b) > 1e-6:  # the same direction within bf16 rounding
            assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.95


def test_bfloat16_training_loss_is_finite_and_falls(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(train_gpt.gpt, "SMALL", TINY)
    train_gpt.main(["--config", "small", "--dtype", "bfloat16", "--steps", "30",
                    "--eval-every", "15"] + _args(tmp_path))
    out = capsys.readouterr().out
    assert "compute bfloat16 (float32 master weights)" in out
    vals = _val_losses(out)
    assert len(vals) == 2 and all(math.isfinite(v) for v in vals) and vals[1] < vals[0] < 5.6
    assert "tokens/s" in out.split("val loss")[1] and "tokens/s: " in out
    from safetensors.numpy import load_file
    saved = load_file(str(tmp_path / "ck.safetensors"))  # the masters and moments stay float32
    assert {v.dtype for k, v in saved.items() if k.startswith(("params.", "opt_state.1.0.mu"))} \
        == {np.dtype(np.float32)}


def test_gpt2_small_path_pads_the_vocabulary_and_samples_bytes(tmp_path, capsys, monkeypatch):
    # gpt2-small's code path at a tiny size: 320 embedding rows, 256 of them bytes
    monkeypatch.setattr(train_gpt, "GPT2_SMALL", gpt.Config(vocab=320, d=32, layers=1, heads=2,
                                                            ctx=16))
    train_gpt.main(["--model", "gpt2-small", "--steps", "12", "--eval-every", "6"]
                   + _args(tmp_path))
    out = capsys.readouterr().out
    assert "model gpt2-small" in out and "vocab=320" in out
    vals = _val_losses(out)
    assert len(vals) == 2 and vals[1] < vals[0] < math.log(320) + 0.1
    assert out.split("sample:\n")[1].startswith("ROMEO:\n")


def test_bad_model_flags_are_refused(capsys):
    with pytest.raises(SystemExit):
        train_gpt.main(["--model", "gpt2-small", "--config", "w2"])
    assert "name different models" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_gpt.main(["--model", "gpt2-small", "--vocab", "200"])
    assert "below the 256 byte values" in capsys.readouterr().err
