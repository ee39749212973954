"""Issue 31's defects, one test each: bit-identical CPU reruns, Python ints that overflow,
NaN through activations, verified checkpoint headers, interrupted saves, values captured at
trace time, deeply nested pytrees, indexing modes and messages, and static argument names."""
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import funcgrad
import funcgrad.numpy as fnp
from funcgrad import jit

SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)


def _child_env():
    """os.environ with this funcgrad first on PYTHONPATH (for the tests' subprocesses)."""
    root = os.path.dirname(os.path.dirname(funcgrad.__file__))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))


_MLP = """
import sys
import numpy as np
import funcgrad
import funcgrad.numpy as fnp
from funcgrad import nn
funcgrad.config.update("default_device", "cpu")
rng = np.random.default_rng(0)
x = rng.standard_normal((128, 784)).astype(np.float32)
y = rng.standard_normal((128, 10)).astype(np.float32)
params = [rng.standard_normal((784, 256)).astype(np.float32) * 0.05,
          np.zeros(256, np.float32),
          rng.standard_normal((256, 10)).astype(np.float32) * 0.05]

def loss(p, x, y):
    h = nn.relu(x @ p[0] + p[1])
    return fnp.mean((h @ p[2] - y) ** 2)

@funcgrad.jit
def step(p, x, y):
    g = funcgrad.grad(loss)(p, x, y)
    return [w - 0.1 * d for w, d in zip(p, g)]

for _ in range(20):
    params = step(params, x, y)
sys.stdout.write("".join(np.asarray(w).tobytes().hex() for w in params))
"""


def test_cpu_reruns_are_bit_identical():
    # issue 31.1: OpenBLAS's pool and one thread round differently; the choice between them
    # had followed measured times, so identical calls and same-seed processes differed
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 784)).astype(np.float32)
    b = rng.standard_normal((784, 256)).astype(np.float32)
    f = jit(lambda a, b: a @ b)
    dev = funcgrad.devices("cpu")[0]
    a, b = funcgrad.device_put(a, dev), funcgrad.device_put(b, dev)
    distinct = {np.asarray(f(a, b)).tobytes() for _ in range(300)}
    assert len(distinct) == 1
    env = _child_env()
    runs = [subprocess.run([sys.executable, "-c", _MLP], capture_output=True, text=True,
                           env=env, check=True).stdout for _ in range(2)]
    assert runs[0] and runs[0] == runs[1]


@given(shape=SHAPES, dtype=st.sampled_from(["int8", "uint8", "int32", "uint32"]),
       above=st.booleans())
def test_python_ints_that_do_not_fit_raise(shape, dtype, above):
    # issue 31.2: numpy's astype had wrapped them silently; JAX raises OverflowError
    info = np.iinfo(dtype)
    big = int(info.max) + 1 if above else int(info.min) - 1
    x = fnp.zeros(shape, dtype)
    msg = f"Python int {big} too large to convert to {dtype}"
    for f in (lambda: x + big, lambda: jit(lambda a: a * big)(x),
              lambda: fnp.where(x > 0, x, big), lambda: fnp.array([1, big], dtype=dtype),
              lambda: fnp.asarray(big, dtype)):
        with pytest.raises(OverflowError, match=msg + r"\n  at .*test_reliability.py"):
            f()
    if x.ndim and x.size:
        with pytest.raises(OverflowError, match=msg):
            x.at[0].set(big)
        first = (0,) * x.ndim
        assert int(x.at[first].set(int(info.max))[first]) == info.max
    assert (x + int(info.max)).dtype == dtype      # values that fit keep the weak typing
    np.testing.assert_array_equal(fnp.asarray(x, "float32") + 2 ** 40, np.full(shape, 2.0 ** 40))
    with pytest.raises(OverflowError, match="2147483648 too large to convert to int32"):
        fnp.arange(3) + 2 ** 31


_ACTIVATIONS = ["relu", "relu6", "elu", "celu", "selu", "leaky_relu", "gelu", "silu", "sigmoid",
                "softplus", "hard_tanh", "hard_sigmoid", "hard_silu", "log_sigmoid", "soft_sign",
                "mish", "sparse_plus", "sparse_sigmoid", "squareplus", "tanh", "identity"]


@given(shape=SHAPES, name=st.sampled_from(_ACTIVATIONS), seed=st.integers(0, 99))
def test_activations_propagate_nan(shape, name, seed):
    # issue 31.3: nn.relu was where(x > 0, x, 0), which turns NaN into 0 (JAX keeps NaN)
    from funcgrad import grad, nn
    f = getattr(nn, name)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    nan = rng.random(shape) < 0.3
    x[nan] = np.nan
    for y in (f(x), jit(f)(x)):
        np.testing.assert_array_equal(np.isnan(np.asarray(y)), nan)
    if name == "relu":   # JAX's gradient: 1 above 0, 0 at and below 0
        g = grad(lambda v: fnp.sum(nn.relu(v)))(np.array([-1.0, 0.0, 2.0], np.float32))
        np.testing.assert_array_equal(g, [0.0, 0.0, 1.0])
        np.testing.assert_array_equal(nn.relu(np.array([-np.inf, np.inf])), [0.0, np.inf])


def _edit_header(data: bytes, old: bytes, new: bytes) -> bytes:
    """The file with one edit inside its JSON header, the length prefix kept valid."""
    n = int.from_bytes(data[:8], "little")
    header = data[8:8 + n]
    assert header.count(old) == 1, (old, header)
    header = header.replace(old, new)
    header += b" " * (-len(header) % 8)
    return len(header).to_bytes(8, "little") + header + data[8 + n:]


def test_checkpoint_headers_are_verified(tmp_path):
    # issue 31.4: the digests covered the tensor bytes only, so an edited shape, dtype or
    # stored Python scalar loaded silently
    import json

    import safetensors.numpy

    from funcgrad import io
    path = tmp_path / "ckpt.safetensors"
    tree = {"w": fnp.arange(6, dtype="float32").reshape(2, 3), "step": 7,
            "e": np.zeros((0, 1), np.int32), "one": np.ones(1, np.uint8)}
    io.save(path, tree)
    data = path.read_bytes()
    bad = tmp_path / "bad.safetensors"
    for old, new in [(b'"shape":[2,3]', b'"shape":[3,2]'), (b'"dtype":"F32"', b'"dtype":"I32"'),
                     (b'\\"v\\":7', b'\\"v\\":8'), (b'"shape":[0,1]', b'"shape":[1,0]')]:
        bad.write_bytes(_edit_header(data, old, new))
        with pytest.raises(ValueError, match="header .* fails its SHA-256 check"):
            io.load(bad)
    # every single-bit flip of the header raises or loads what was saved
    n = int.from_bytes(data[:8], "little")
    want = io.load(path)
    for pos in range(8, 8 + n):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            bad.write_bytes(bytes(flipped))
            try:
                got = io.load(bad)
            except ValueError:
                continue
            assert got["step"] == 7 and all(
                np.asarray(got[k]).dtype == np.asarray(want[k]).dtype
                and np.asarray(got[k]).tobytes() == np.asarray(want[k]).tobytes()
                and np.shape(got[k]) == np.shape(want[k]) for k in ("w", "e", "one"))
    # a file of the previous format (tensor digests only) still loads
    header = json.loads(data[8:8 + n])
    meta = dict(header["__metadata__"], **{"funcgrad.format": "1"})
    del meta["funcgrad.header_sha256"]
    tensors = {k: np.asarray(v) for k, v in [("w", tree["w"]), ("e", tree["e"]),
                                              ("one", tree["one"])]}
    old = tmp_path / "v1.safetensors"
    safetensors.numpy.save_file(tensors, str(old), metadata=meta)
    assert io.load(old)["step"] == 7
    meta["funcgrad.format"] = "3"
    safetensors.numpy.save_file(tensors, str(old), metadata=meta)
    with pytest.raises(ValueError, match="unknown funcgrad format version '3'"):
        io.load(old)


_KILLED_SAVE = """
import os, signal, sys
import funcgrad.numpy as fnp
from funcgrad import io
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)   # dies after writing, unrenamed
io.save(sys.argv[1], {"w": fnp.zeros(1000)})
"""


def test_interrupted_saves_are_cleaned_and_saves_are_reproducible(tmp_path):
    # issue 31.5: a save killed mid-write left its .NAME.<uuid>.tmp forever, errors named the
    # temp file, and the same tree saved twice gave different bytes (metadata in hash order)
    import fcntl

    from funcgrad import io
    path = tmp_path / "ckpt.safetensors"
    io.save(path, {"w": fnp.ones(3)})
    run = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(path)], env=_child_env(),
                         check=False)
    assert run.returncode == -9
    left = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    assert len(left) == 1 and left[0].startswith(".ckpt.safetensors.")
    assert io.load(path)["w"].tolist() == [1.0, 1.0, 1.0]     # the old checkpoint is intact
    running = tmp_path / (".ckpt.safetensors." + "0" * 32 + ".tmp")  # a save still writing
    other = tmp_path / (".other.safetensors." + "1" * 32 + ".tmp")   # another path's
    running.write_bytes(b"x")
    other.write_bytes(b"x")
    with open(running, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        io.save(path, {"w": fnp.zeros(2)})
    assert sorted(os.listdir(tmp_path)) == sorted(["ckpt.safetensors", running.name, other.name])
    io.save(path, {"w": fnp.zeros(2)})
    assert sorted(os.listdir(tmp_path)) == sorted(["ckpt.safetensors", other.name])
    # errors name the user's path, not the temp file
    for target in (tmp_path / "missing" / "x.safetensors", tmp_path / "missing"):
        if target.name == "missing":
            target.mkdir()
        with pytest.raises(OSError) as info:
            io.save(target, {"w": fnp.zeros(1)})
        assert info.value.filename == str(target) and ".tmp" not in str(info.value)
        assert str(target) in str(info.value)
    # the same tree gives the same bytes
    tree = {"params": {"w": fnp.ones((2, 3)), "b": np.zeros(0, np.float16)}, "step": 3,
            "lr": 0.5, "name": "run", "opt": (None, [fnp.zeros(1, "int32")])}
    saved = set()
    for _ in range(8):
        io.save(path, tree)
        saved.add(path.read_bytes())
    assert len(saved) == 1


@given(shape=SHAPES, seed=st.integers(0, 99))
def test_closed_over_numpy_arrays_are_captured_at_trace_time(shape, seed):
    # issue 31.6: the compiled function kept a reference to the numpy array, so a later
    # c[...] = 100 changed jit(lambda v: v + c)'s results (JAX captures the value)
    from funcgrad import grad, lax
    c = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    before = c.copy()
    fs = [jit(lambda v: v + c), jit(lambda v: v * c), jit(lambda v: v + c * 2),
          jit(grad(lambda v: fnp.sum(v * c))),
          jit(lambda v: lax.scan(lambda h, _: (h + c, None), v, None, length=2)[0])]
    v = np.ones(shape, np.float32)
    want = [np.asarray(f(v)) for f in fs]
    c[...] = 100.0
    for f, w in zip(fs, want):
        np.testing.assert_array_equal(f(v), w)
    np.testing.assert_array_equal(want[0], before + 1)


@pytest.mark.parametrize("depth", [1, 64, 65, 250, 400, 900])
def test_deeply_nested_pytrees_jit(depth):
    # issue 31.7: the generated tree builder nested one bracket per level (SyntaxError at
    # 250) and its writers recursed per level (RecursionError at 400); eager tree_map and
    # JAX's jit handle 900
    from funcgrad import grad, tree_util
    tree = fnp.zeros((1, 0)), np.ones(1, np.float32)
    for i in range(depth):
        tree = [tree] if i % 3 == 0 else (tree, None) if i % 3 == 1 else {"k": tree}
    want = tree_util.tree_map(lambda x: x + 1, tree)
    for _ in range(2):   # the second call takes jit's per-call path
        got = jit(lambda t: tree_util.tree_map(lambda x: x + 1, t))(tree)
        assert tree_util.tree_structure(got) == tree_util.tree_structure(want)
        for a, b in zip(tree_util.tree_leaves(got), tree_util.tree_leaves(want)):
            np.testing.assert_array_equal(a, b)
    g = jit(grad(lambda t: fnp.sum(tree_util.tree_leaves(t)[1] * 3)))(tree)
    np.testing.assert_array_equal(tree_util.tree_leaves(g)[1], [3.0])


def _take_ref(x, idx, axis, mode, fill):
    """numpy's take for clip/wrap; JAX's fill and promise_in_bounds written out."""
    n = x.shape[axis]
    if mode in ("clip", "wrap"):
        return np.take(x, idx, axis=axis, mode=mode) if n else None
    if mode == "promise_in_bounds":
        return np.take(x, np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1), axis=axis) \
            if n else None
    ok = (idx >= -n) & (idx < n)
    padded = np.concatenate([x, np.full(x.shape[:axis] + (1,) + x.shape[axis + 1:], fill,
                                        x.dtype)], axis=axis)
    return np.take(padded, np.where(ok, np.where(idx < 0, idx + n, idx), n), axis=axis)


@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3),
       data=st.data(), mode=st.sampled_from(["clip", "wrap", "fill", "promise_in_bounds"]))
def test_indexing_modes_and_messages(shape, data, mode):
    # issue 31.8: take_along_axis reported a linearised sentinel ("index -6" for 9 on 5
    # elements); take and .at[].get did not accept JAX's out-of-bounds modes
    from funcgrad import grad
    axis = data.draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    idx = np.asarray(data.draw(st.lists(st.integers(-2 * n - 2, 2 * n + 2), max_size=4)),
                     np.int32)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = _take_ref(x, idx, axis, mode, -5.0)
    if want is None:   # clip, wrap and promise_in_bounds cannot read an empty axis
        return
    for f in (fnp.take, jit(fnp.take, static_argnames=("axis", "mode", "fill_value"))):
        np.testing.assert_array_equal(f(x, idx, axis=axis, mode=mode, fill_value=-5.0), want)
    # the gradient reaches the elements read (a filled one's is 0)
    w = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
    g = grad(lambda v: fnp.sum(w * fnp.take(v, idx, axis=axis, mode=mode, fill_value=0.0)))(x)
    ref = np.zeros_like(x)
    n_safe = max(n, 1)
    pos = {"clip": np.clip(idx, 0, n - 1), "wrap": idx % n_safe,
           "promise_in_bounds": np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1),
           "fill": np.where(idx < 0, idx + n, idx)}[mode]
    keep = (idx >= -n) & (idx < n) if mode == "fill" else np.ones(idx.shape, bool)
    wt = np.moveaxis(w, list(range(axis, axis + idx.ndim)), list(range(idx.ndim)))
    rt = np.moveaxis(ref, axis, 0)
    np.add.at(rt, pos[keep], wt[keep])
    np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-6)
    # .at[].get along the first axis: JAX's modes (indexing wraps negatives first)
    if axis == 0 and mode != "wrap":
        get_mode = {"clip": "promise_in_bounds"}.get(mode, mode)
        got = fnp.asarray(x).at[idx].get(mode="clip" if mode == "clip" else mode,
                                         fill_value=-5.0)
        np.testing.assert_array_equal(got, _take_ref(x, idx, 0, get_mode, -5.0))
    # mode None: an out-of-range index raises naming it and the axis' size
    if idx.size and ((idx < -n) | (idx >= n)).any():
        bad = int(idx[(idx < -n) | (idx >= n)][0])
        msg = rf"index {bad} is out of bounds for an axis of size {n}\b.*\n  at .*reliability"
        ia = np.expand_dims(idx, tuple(d for d in range(len(shape)) if d != axis))
        fs = [lambda: fnp.take(x, idx, axis=axis)]
        if all(s for d, s in enumerate(shape) if d != axis):   # else no index is read
            fs += [lambda: fnp.take_along_axis(x, ia, axis),
                   lambda: jit(lambda v: fnp.take_along_axis(v, ia, axis))(x)]
        for f in fs:
            with pytest.raises(IndexError, match=msg):
                f()
    with pytest.raises(IndexError, match=r"index 9 is out of bounds for an axis of size 5"):
        fnp.take_along_axis(fnp.arange(5.0), fnp.asarray([9]), axis=0)
    with pytest.raises(ValueError, match="invalid mode 'nope'"):
        fnp.take(fnp.arange(5.0), np.array([1]), mode="nope")


def test_static_arguments_that_name_no_parameter_raise():
    # issue 31.9: jit(f, static_argnames="nn") naming no parameter was ignored silently;
    # JAX raises ValueError naming the invalid argnames (and for static_argnums past the end)
    def f(x, y=1, *, mode="a"):
        return x * y if mode == "a" else x

    def pos_only(x, /, y):
        return x + y

    def kwargs(x, **kw):
        return x

    def varargs(*xs):
        return xs[0]

    line = r"\n  at .*test_reliability.py"
    with pytest.raises(ValueError, match=r"invalid argnames \{'nn'\} in static_argnames\. "
                                         r"Function does not take these args \(f\(x, y, mode\)\)\."
                                         + line):
        jit(f, static_argnames="nn")
    with pytest.raises(ValueError, match=r"static_argnums=\(2,\), but only accepts 2 "
                                         r"positional arguments \(f\(x, y, mode\)\)\." + line):
        jit(f, static_argnums=2)
    with pytest.raises(ValueError, match=r"static_argnums=\(-3,\)"):
        jit(f, static_argnums=-3)
    with pytest.raises(ValueError, match=r"\{'x'\} in static_argnames\. These are positional"):
        jit(pos_only, static_argnames="x")
    x = np.ones(2, np.float32)
    assert float(jit(f, static_argnames=("mode", "y"))(x, 3, mode="a")[0]) == 3.0
    assert float(jit(f, static_argnums=-1)(x, 2)[0]) == 2.0
    assert float(jit(kwargs, static_argnames="anything")(x)[0]) == 1.0   # **kw takes any
    assert float(jit(varargs, static_argnums=1)(x, 7)[0]) == 1.0         # *xs any position
