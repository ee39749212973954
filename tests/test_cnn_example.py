"""examples/train_cnn.py: a short run of the digits CNN reaches a meaningful test accuracy.

The full run (1000 steps, the default) reaches >= 0.97 (0.98-0.99 over seeds) in a few seconds
to tens of seconds on a 2-core CPU; this test trains 250 steps.
"""
import os
import sys

import pytest

import funcgrad

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
sys.path.insert(0, EXAMPLES)


@pytest.fixture(autouse=True)
def _cpu():
    funcgrad.config.update("default_device", "cpu")
    yield
    funcgrad.config.update("default_device", None)


def test_digits_cnn_short_run_reaches_95_percent(capsys):
    pytest.importorskip("sklearn")
    import train_cnn
    acc = train_cnn.main(["--steps", "250", "--plot", os.devnull + ".png"])
    out = capsys.readouterr().out
    assert acc >= 0.95, out
    assert out.rstrip().splitlines()[-1] == f"test accuracy: {acc:.3f}"
    assert "device: cpu" in out and "250 steps in" in out


def test_cnn_predict_shapes_and_pooling():
    import numpy as np
    import train_cnn
    params = train_cnn.init_params(np.random.default_rng(0))
    x = np.random.default_rng(1).random((3, 8, 8, 1)).astype(np.float32)
    assert train_cnn.predict(params, x).shape == (3, 10)
    pooled = np.asarray(train_cnn.max_pool(x))
    np.testing.assert_array_equal(pooled, x.reshape(3, 4, 2, 4, 2, 1).max(axis=(2, 4)))


def test_resnet_predict_shapes_and_gradient():
    """--model resnet's network at tiny widths: logits per image, a finite gradient for every
    kernel, the synthetic images' labels in range."""
    import numpy as np
    import train_cnn
    rng = np.random.default_rng(0)
    params = train_cnn.init_resnet(rng, stages=(4, 8, 8, 8))
    assert [("proj" in b) for b in params["blocks"]] == [False, False, True, False, False,
                                                         False, False, False]
    x, y = train_cnn.synthetic_images(rng, 2, 8)
    assert x.shape == (2, 8, 8, 3) and y.min() >= 0 and y.max() < 10
    assert train_cnn.predict_resnet(params, x).shape == (2, 10)

    def loss(p):
        logits = train_cnn.predict_resnet(p, x)
        return funcgrad.numpy.mean(funcgrad.nn.softmax_cross_entropy_with_integer_labels(
            logits, y))
    grads = funcgrad.grad(loss)(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in funcgrad.tree_util.tree_leaves(grads))
