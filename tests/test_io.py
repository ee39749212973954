"""funcgrad.io: bit-exact round trips of every dtype and of nested trees, like= templates,
truncated/corrupted files raising, atomic writes, and interop with plain safetensors."""
import collections
import math
import os

import numpy as np
import pytest
import safetensors.numpy
from safetensors import safe_open

import funcgrad.numpy as fnp
from funcgrad import io, optim
from funcgrad.core import ShapedArray
from funcgrad.tree_util import tree_leaves, tree_structure

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint32, np.bool_,
          np.int8, np.uint8]


def _values(dtype, shape, rng):
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        flat = x.reshape(-1)
        if flat.size >= 4:  # special values survive bit for bit
            flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def _bits(x):
    a = np.asarray(x)
    return a.dtype, a.shape, a.tobytes()


def _assert_same_tree(a, b):
    assert tree_structure(a) == tree_structure(b)
    for x, y in zip(tree_leaves(a), tree_leaves(b)):
        if isinstance(x, (int, float, str, bool)):
            assert type(x) is type(y) and (x == y or (math.isnan(x) and math.isnan(y)))
        else:
            assert _bits(x) == _bits(y)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_round_trip_bit_exact(tmp_path, rng, dtype):
    tree = {"matrix": fnp.asarray(_values(dtype, (5, 3), rng)),
            "scalar": fnp.asarray(_values(dtype, (), rng)),
            "empty": fnp.asarray(_values(dtype, (0, 4), rng))}
    path = tmp_path / "x.safetensors"
    io.save(path, tree)
    out = io.load(path)
    _assert_same_tree(tree, out)
    assert isinstance(out["matrix"], fnp.ndarray)
    assert out["matrix"].dtype == np.dtype(dtype)


def test_nested_tree_round_trip(tmp_path, rng):
    tree = {
        "params": {"layers": [{"w": fnp.asarray(rng.standard_normal((3, 2)).astype(np.float32)),
                               "b": fnp.zeros(2)} for _ in range(2)],
                   "embed": (fnp.ones((4, 2), fnp.float16), None)},
        "step": 1234,
        "lr": 3e-4,
        "name": "run-1",
        "done": False,
        "nothing": None,
        7: fnp.asarray([1, 2, 3], fnp.int64),
        "np": np.arange(6, dtype=np.uint32).reshape(2, 3),
    }
    path = tmp_path / "tree.safetensors"
    io.save(path, tree)
    out = io.load(path)
    _assert_same_tree(tree, out)
    assert out["nothing"] is None and out["params"]["embed"][1] is None
    assert isinstance(out["params"]["layers"], list)
    assert isinstance(out["params"]["embed"], tuple)
    assert isinstance(out["np"], np.ndarray)  # numpy leaves come back as numpy
    assert out["step"] == 1234 and out["name"] == "run-1"


def test_optimizer_state_round_trip(tmp_path):
    params = {"w": fnp.ones((3, 2)), "b": fnp.zeros(2)}
    opt = optim.adamw(1e-3)
    state = opt.init(params)
    for _ in range(2):
        u, state = opt.update({"w": fnp.full((3, 2), 0.5), "b": fnp.ones(2)}, state, params)
        params = optim.apply_updates(params, u)
    path = tmp_path / "ckpt.safetensors"
    io.save(path, {"params": params, "opt_state": state, "step": 2})
    out = io.load(path)  # the NamedTuple classes are importable: rebuilt as such
    _assert_same_tree({"params": params, "opt_state": state, "step": 2}, out)
    assert isinstance(out["opt_state"][0], optim.ScaleByAdamState)
    assert int(out["opt_state"][0].count) == 2


def test_unknown_namedtuple_comes_back_as_dict(tmp_path):
    Local = collections.namedtuple("Local", ["a", "b"])
    Local.__module__ = "module_that_is_not_imported"
    path = tmp_path / "nt.safetensors"
    io.save(path, Local(fnp.ones(1), 2))
    out = io.load(path)
    assert set(out) == {"a", "b"} and out["b"] == 2


def test_load_like_restores_structure_and_checks(tmp_path):
    params = {"w": fnp.ones((3, 2)), "b": fnp.zeros(2), "steps": 5}
    state = optim.adam(0.1).init(params)
    path = tmp_path / "like.safetensors"
    io.save(path, (params, state))
    out = io.load(path, like=(params, state))
    _assert_same_tree((params, state), out)
    abstract = ({"w": ShapedArray((3, 2), np.float32), "b": ShapedArray((2,), np.float32),
                 "steps": 0}, state)
    out = io.load(path, like=abstract)
    assert out[0]["steps"] == 5 and out[0]["w"].shape == (3, 2)
    with pytest.raises(ValueError, match="expects float32\\[4, 2\\]"):
        io.load(path, like=({**params, "w": fnp.ones((4, 2))}, state))
    with pytest.raises(ValueError, match="float64"):
        io.load(path, like=({**params, "b": fnp.zeros(2, fnp.float64)}, state))
    with pytest.raises(ValueError, match="no array"):
        io.load(path, like=({**params, "extra": fnp.zeros(1)}, state))
    with pytest.raises(ValueError, match="lacks"):
        io.load(path, like=({"w": params["w"], "b": params["b"], "steps": 5}, None))


def test_other_readers_and_foreign_files(tmp_path):
    path = tmp_path / "interop.safetensors"
    io.save(path, {"params": {"w": fnp.ones((2, 2))}, "layers": [fnp.zeros(3)]})
    with safe_open(str(path), framework="np") as f:
        assert sorted(f.keys()) == ["layers.0", "params.w"]
        np.testing.assert_array_equal(f.get_tensor("params.w"), np.ones((2, 2), np.float32))
    foreign = tmp_path / "foreign.safetensors"
    safetensors.numpy.save_file({"a": np.arange(3, dtype=np.int32)}, str(foreign))
    out = io.load(foreign)
    assert list(out) == ["a"] and out["a"].tolist() == [0, 1, 2]
    out = io.load(foreign, like={"a": fnp.zeros(3, fnp.int32)})
    assert out["a"].tolist() == [0, 1, 2]


def test_colliding_names_fall_back_to_paths(tmp_path):
    tree = {"a.b": fnp.ones(1), "a": {"b": fnp.zeros(1)}}
    path = tmp_path / "c.safetensors"
    io.save(path, tree)
    _assert_same_tree(tree, io.load(path))
    _assert_same_tree(tree, io.load(path, like=tree))


def _saved_bytes(tmp_path, rng):
    path = tmp_path / "good.safetensors"
    io.save(path, {"w": fnp.asarray(rng.standard_normal((16, 8)).astype(np.float32)),
                   "b": fnp.asarray(np.arange(8, dtype=np.int64)), "step": 3})
    return path, path.read_bytes()


def test_truncated_files_raise(tmp_path, rng):
    _, data = _saved_bytes(tmp_path, rng)
    bad = tmp_path / "bad.safetensors"
    for cut in sorted({0, 1, 7, 8, 9, 20, len(data) // 2, len(data) - 100, len(data) - 1}):
        bad.write_bytes(data[:cut])
        with pytest.raises(ValueError, match="truncated or corrupted"):
            io.load(bad)
    bad.write_bytes(data + b"\0" * 8)  # trailing bytes are corruption too
    with pytest.raises(ValueError):
        io.load(bad)


def test_corrupted_files_raise(tmp_path, rng):
    _, data = _saved_bytes(tmp_path, rng)
    header_len = int.from_bytes(data[:8], "little")
    bad = tmp_path / "bad.safetensors"
    positions = (list(range(8)) + list(range(8, 8 + header_len, 7))
                 + list(range(8 + header_len, len(data), 13)) + [len(data) - 1])
    for pos in positions:
        corrupted = bytearray(data)
        corrupted[pos] ^= 0xFF
        bad.write_bytes(bytes(corrupted))
        with pytest.raises(ValueError):
            io.load(bad)
    # a single flipped bit in the tensor data is caught by the checksum
    corrupted = bytearray(data)
    corrupted[-5] ^= 0x01
    bad.write_bytes(bytes(corrupted))
    with pytest.raises(ValueError, match="SHA-256"):
        io.load(bad)


def test_atomic_write_leaves_no_temp_files(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    io.save(path, {"w": fnp.ones(3)})
    io.save(path, {"w": fnp.zeros(3)})  # overwrite in place
    assert sorted(os.listdir(tmp_path)) == ["ckpt.safetensors"]
    assert io.load(path)["w"].tolist() == [0.0, 0.0, 0.0]

    def crash(*args):
        raise OSError("disk gone")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        io.save(path, {"w": fnp.full(3, 7.0)})
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["ckpt.safetensors"]  # temp file cleaned up
    assert io.load(path)["w"].tolist() == [0.0, 0.0, 0.0]  # the old checkpoint is intact


def test_unsaveable_trees_touch_no_file(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(TypeError, match="cannot save a leaf"):
        io.save(path, {"w": fnp.ones(1), "f": object()})
    with pytest.raises(TypeError, match="dict keys"):
        io.save(path, {(1, 2): fnp.ones(1)})
    assert os.listdir(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        io.load(path)
