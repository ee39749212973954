"""Checkpoints: pytrees saved to and loaded from safetensors files, written atomically.

A file is a plain safetensors file (so other safetensors readers open it): each array leaf is a
tensor named by its path in the tree (``params.layers.0.w``). The ``__metadata__`` holds the
tree structure as JSON (containers, None, Python scalars and strings, and which tensor each
array leaf is), a SHA-256 digest of every tensor's bytes and one of the header (the metadata
and every tensor's name, dtype and shape), so that a truncated, corrupted or edited file is
detected and raises ``ValueError`` instead of returning partial or wrong data. Files of the
previous format (1: tensor digests only, before 2026-12-02) still load.

Example:
    >>> import os, tempfile, funcgrad.numpy as fnp
    >>> from funcgrad import io
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
    >>> io.save(path, {"params": {"w": fnp.ones((2, 2))}, "step": 10})
    >>> io.load(path)["step"]
    10
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import sys
import uuid
from typing import Any

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.core import SUPPORTED_DTYPES, ArrayBase, Tracer
from funcgrad.tree_util import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    PyTreeKind,
    SequenceKey,
    _entry_keys,
    _one_level,
    keystr,
    tree_flatten_with_path,
    tree_unflatten,
)

__all__ = ["load", "save"]

_FORMAT_KEY, _TREE_KEY, _DIGEST_KEY = "funcgrad.format", "funcgrad.tree", "funcgrad.sha256"
_HEADER_KEY = "funcgrad.header_sha256"
_FORMAT = "2"          # 2: the header digest; 1 (still loaded): tensor digests only
_FORMATS = ("1", "2")
_DICT_KINDS = (PyTreeKind.DICT, PyTreeKind.ORDEREDDICT, PyTreeKind.DEFAULTDICT)
_PY_SCALARS = (bool, int, float, str)


def _safetensors():
    try:
        import safetensors.numpy
    except ImportError as e:  # pragma: no cover - an install problem
        raise ImportError("funcgrad.io needs the safetensors package: "
                          "pip install safetensors") from e
    return safetensors.numpy


# ---------------------------------------------------------------------------------------------
# names and structure
# ---------------------------------------------------------------------------------------------

def _entry(k) -> str:
    if isinstance(k, DictKey):
        return str(k.key)
    if isinstance(k, SequenceKey):
        return str(k.idx)
    if isinstance(k, GetAttrKey):
        return k.name
    if isinstance(k, FlattenedIndexKey):
        return str(k.key)
    return str(k)


# safetensors' dtype names of the 16- and 8-bit floats its numpy loader does not map (it writes
# them: BF16 for bfloat16, F8_E4M3 for float8_e4m3fn...), beside the ones it does
_ST_DTYPES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
              "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
              "F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64",
              "U64": "uint64", "I32": "int32", "U32": "uint32", "I16": "int16", "U16": "uint16",
              "I8": "int8", "U8": "uint8", "BOOL": "bool", "C64": "complex64"}


def _load_tensors(data: bytes) -> dict:
    """safetensors.numpy.load, reading BF16 and F8 tensors too (as ml_dtypes arrays)."""
    from safetensors import deserialize
    out = {}
    for name, v in deserialize(data):
        dt = _ST_DTYPES.get(v["dtype"])
        if dt is None:
            raise ValueError(f"tensor {name!r} has dtype {v['dtype']}, which funcgrad does "
                             f"not read")
        out[name] = np.frombuffer(v["data"], dtype=np.dtype(dt)).reshape(v["shape"])
    return out


def _leaf_names(paths) -> list[str]:
    """Tensor names for leaf paths: dotted (``a.b.0``), or Python-like accessors if dotted
    names would collide (e.g. keys that contain dots)."""
    names = [".".join(_entry(k) for k in p) or "value" for p in paths]
    if len(set(names)) != len(names):
        names = [keystr(p) or "value" for p in paths]
    return names


def _is_array_leaf(x) -> bool:
    return isinstance(x, (ArrayBase, np.ndarray, np.generic))


def _encode_key(k):
    if isinstance(k, str):
        return ["s", k]
    if isinstance(k, (bool, np.bool_)):
        return ["b", bool(k)]
    if isinstance(k, (int, np.integer)):
        return ["i", int(k)]
    raise TypeError(f"funcgrad.io.save: dict keys must be str, int or bool, got "
                    f"{type(k).__name__} {k!r}")


def _decode_key(k):
    kind, value = k
    return {"s": str, "b": bool, "i": int}[kind](value)


def _encode(node, names: dict, path=()):
    """The JSON structure of a pytree; array leaves refer to their tensor by name."""
    children, nd = _one_level(node)
    if nd.is_leaf():
        if _is_array_leaf(node):
            if isinstance(node, Tracer):
                raise TypeError("funcgrad.io.save: cannot save a traced value (inside jit/grad"
                                "/vmap); return it from the transformed function first")
            return {"t": "array", "name": names[path],
                    "numpy": isinstance(node, (np.ndarray, np.generic))}
        if isinstance(node, _PY_SCALARS):
            return {"t": "py", "name": names[path], "v": node}
        raise TypeError(f"funcgrad.io.save: cannot save a leaf of type {type(node).__name__} "
                        f"at {keystr(path) or 'the root'}")
    keys = _entry_keys(nd)
    kids = [_encode(c, names, path + (k,)) for c, k in zip(children, keys)]
    kind = nd.kind
    if kind == PyTreeKind.NONE:
        return {"t": "none"}
    if kind in _DICT_KINDS:
        return {"t": "dict", "k": [_encode_key(k) for k in nd.entries()], "c": kids}
    if kind == PyTreeKind.LIST:
        return {"t": "list", "c": kids}
    if kind == PyTreeKind.TUPLE:
        return {"t": "tuple", "c": kids}
    cls = nd.type
    entry = {"t": "custom", "type": f"{cls.__module__}:{cls.__qualname__}", "c": kids}
    if kind == PyTreeKind.NAMEDTUPLE:
        entry.update(t="namedtuple", f=list(cls._fields))
    return entry


def _find_class(spec: str):
    """A class named ``module:qualname`` from an already-imported module, else None."""
    module, _, qualname = spec.partition(":")
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def _decode(node, leaves: dict):
    t = node["t"]
    if t == "array":
        arr = leaves[node["name"]]
        return np.array(arr) if node.get("numpy") else fnp.asarray(arr)
    if t == "py":
        return node["v"]
    if t == "none":
        return None
    kids = [_decode(c, leaves) for c in node["c"]]
    if t == "dict":
        return {_decode_key(k): v for k, v in zip(node["k"], kids)}
    if t == "list":
        return kids
    if t == "tuple":
        return tuple(kids)
    if t == "namedtuple":
        cls = _find_class(node["type"])
        if cls is not None and tuple(getattr(cls, "_fields", ())) == tuple(node["f"]):
            return cls(*kids)
        return dict(zip(node["f"], kids))  # the class is not imported: keep the fields
    raise ValueError(f"funcgrad.io.load: the checkpoint contains a custom pytree node "
                     f"({node.get('type')}); pass like= a tree of that structure to load it")


# ---------------------------------------------------------------------------------------------
# save
# ---------------------------------------------------------------------------------------------

def _contiguous(x) -> np.ndarray:
    """x as a C-contiguous numpy array (0-d stays 0-d, unlike np.ascontiguousarray)."""
    a = np.asarray(x)
    return a if a.flags.c_contiguous else a.copy(order="C")


def _digest(arr: np.ndarray) -> str:
    return hashlib.sha256(_contiguous(arr).tobytes()).hexdigest()


def _header_digest(meta: dict, tensors: dict) -> str:
    """SHA-256 of the header's meaning: every metadata entry but this digest, and each
    tensor's name, dtype and shape (offsets need none: the tensor digests cover the bytes)."""
    body = {"metadata": {k: v for k, v in meta.items() if k != _HEADER_KEY},
            "tensors": {n: [a.dtype.name, list(a.shape)] for n, a in tensors.items()}}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _serialize(tree) -> list:
    """The file's bytes, as [length and header, tensor data]: safetensors' layout, with the
    header's metadata keys in sorted order so that the same tree gives the same bytes
    (safetensors writes them in a hash map's order, which changes from call to call)."""
    pairs, _ = tree_flatten_with_path(tree)
    names = dict(zip([p for p, _ in pairs], _leaf_names([p for p, _ in pairs])))
    structure = _encode(tree, names)
    array_pairs = [(p, x) for p, x in pairs if _is_array_leaf(x)]
    tensors = {}
    for p, x in array_pairs:
        arr = _contiguous(x)
        if arr.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"funcgrad.io.save: leaf {keystr(p)} has unsupported dtype "
                            f"{arr.dtype}")
        tensors[names[p]] = arr
    metadata = {_FORMAT_KEY: _FORMAT,
                _TREE_KEY: json.dumps(structure, separators=(",", ":")),
                _DIGEST_KEY: json.dumps({n: _digest(a) for n, a in tensors.items()},
                                        separators=(",", ":"), sort_keys=True)}
    metadata[_HEADER_KEY] = _header_digest(metadata, tensors)
    payload = _safetensors().save(tensors, metadata=metadata)
    n = int.from_bytes(payload[:8], "little")
    header = json.loads(payload[8:8 + n].decode("utf-8"))
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)      # safetensors pads the header to 8 bytes
    return [len(text).to_bytes(8, "little") + text, memoryview(payload)[8 + n:]]


def _leftovers(path: str) -> list:
    """Temp files of earlier saves to `path` (``.NAME.<32 hex>.tmp`` beside it)."""
    directory, base = os.path.split(os.path.abspath(path))
    pattern = re.compile(r"\." + re.escape(base) + r"\.[0-9a-f]{32}\.tmp")
    return [f for f in glob.glob(os.path.join(glob.escape(directory), "." + glob.escape(base)
                                              + ".*.tmp"))
            if pattern.fullmatch(os.path.basename(f))]


def _remove_leftovers(path: str) -> None:
    """Removes what interrupted saves to `path` left (a process killed mid-write keeps its
    temp file); a save still running holds a lock on its file and is left alone."""
    for f in _leftovers(path):
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            if _try_lock(fd):
                os.unlink(f)
        except OSError:
            pass
        finally:
            os.close(fd)


def _try_lock(fd: int) -> bool:
    """An exclusive lock on fd without waiting (True where locks do not exist)."""
    try:
        import fcntl
    except ImportError:     # pragma: no cover - not POSIX
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _open_temp(path: str):
    """(fd, name) of a new locked temp file beside `path`, one no cleanup has removed."""
    directory = os.path.dirname(os.path.abspath(path))
    while True:
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
        _try_lock(fd)
        if os.fstat(fd).st_nlink:   # another save's cleanup may have removed it before
            return fd, tmp
        os.close(fd)


def _user_error(err: OSError, path: str, tmp: str | None) -> OSError:
    """err naming the user's path instead of the temp file (same OSError subclass)."""
    if err.errno is None or (tmp is not None and err.filename not in (None, tmp)):
        return err
    new = OSError(err.errno, f"{err.strerror} (funcgrad.io.save)", path)
    new.__cause__ = err
    return new


def save(path: str | os.PathLike, tree: Any) -> None:
    """Saves a pytree to a safetensors file, atomically.

    The bytes go to a temporary file in the same directory (``.NAME.<uuid>.tmp``), are flushed
    to disk, and the file is renamed over ``path`` (``os.replace``), so ``path`` holds either
    the old checkpoint or the complete new one, never a partial write, even if the process
    dies mid-save. The temp files such killed saves left are removed by the next save to
    ``path`` (saves still running lock theirs and keep them). The same tree gives the same
    bytes.

    Args:
        path: the file to write (conventionally ``*.safetensors``).
        tree: a pytree of arrays (funcgrad or numpy; every funcgrad dtype), with dicts (str or
            int keys), lists, tuples, NamedTuples, None, and Python bool/int/float/str leaves.
            Custom registered nodes are saved too but can only be loaded with ``like=``.

    Raises:
        TypeError: a leaf cannot be saved (a tracer, an object, an unsupported dtype).
        OSError: the file cannot be written (the error names ``path``, not the temp file).

    Example:
        >>> import os, tempfile, funcgrad.numpy as fnp
        >>> path = os.path.join(tempfile.mkdtemp(), "params.safetensors")
        >>> save(path, {"w": fnp.zeros((3, 2)), "b": fnp.zeros(2)})
    """
    path = os.fspath(path)
    chunks = _serialize(tree)  # all errors about the tree surface before any file is touched
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        _remove_leftovers(path)
        fd, tmp = _open_temp(path)
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        if isinstance(e, OSError):
            err = _user_error(e, path, tmp)
            if err is not e:
                raise err from e
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    """Makes the rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# load
# ---------------------------------------------------------------------------------------------

def _read_checked(path: str):
    """(tensors by name, metadata) of a file, after every integrity check has passed."""
    with open(path, "rb") as f:
        data = f.read()

    def bad(why):
        return ValueError(f"funcgrad.io.load: {path} is not a valid checkpoint (truncated or "
                          f"corrupted?): {why}")

    _safetensors()   # a clear ImportError when the package is missing
    from safetensors import SafetensorError
    try:
        tensors = _load_tensors(data)
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n].decode("utf-8"))  # valid: safetensors checked it
    except (SafetensorError, ValueError) as e:  # ValueError covers JSON and UTF-8 errors
        raise bad(e) from None
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise bad("__metadata__ is not a mapping")
    if not any(str(k).startswith("funcgrad.") for k in meta):
        return tensors, None  # written by another tool: a flat dict of tensors
    version = meta.get(_FORMAT_KEY)
    if version not in _FORMATS:
        raise bad(f"unknown funcgrad format version {version!r} (this funcgrad reads "
                  f"{', '.join(_FORMATS)})")
    if (version == "1") == (_HEADER_KEY in meta):
        raise bad(f"format {version} " + ("has no header digest" if version != "1" else
                                         "carries a header digest"))
    if version != "1" and meta[_HEADER_KEY] != _header_digest(meta, tensors):
        raise bad("the header (metadata, tensor names, dtypes or shapes) fails its SHA-256 "
                  "check")
    try:
        structure = json.loads(meta[_TREE_KEY])
        digests = json.loads(meta[_DIGEST_KEY])
    except (ValueError, KeyError, TypeError) as e:
        raise bad(f"unreadable metadata: {e}") from None
    if not isinstance(digests, dict) or set(digests) != set(tensors):
        raise bad("the tensors do not match the checksum table")
    for name, arr in tensors.items():
        if _digest(arr) != digests[name]:
            raise bad(f"tensor {name!r} fails its SHA-256 check")
    return tensors, structure


def _leaf_values(structure, tensors) -> dict:
    """Stored leaves by name: ("array", tensor) or ("py", Python value)."""
    out = {}

    def walk(node):
        t = node.get("t")
        if t == "array":
            out[node["name"]] = ("array", tensors[node["name"]])
        elif t == "py":
            out[node["name"]] = ("py", node["v"])
        for c in node.get("c", ()):
            walk(c)
    walk(structure)
    return out


def _restore_like(path, like, tensors, structure):
    pairs, treedef = tree_flatten_with_path(like)
    names = _leaf_names([p for p, _ in pairs])
    try:
        stored = _leaf_values(structure, tensors) if structure is not None else {
            n: ("array", a) for n, a in tensors.items()}
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"funcgrad.io.load: {path} is not a valid checkpoint (corrupted tree "
                         f"structure: {e!r})") from None
    leaves = []
    for (p, tmpl), name in zip(pairs, names):
        where = keystr(p) or "the root"
        kind, value = stored.get(name, (None, None))
        if isinstance(tmpl, _PY_SCALARS):
            if kind != "py":
                raise ValueError(f"funcgrad.io.load: {path} has no Python value {name!r} for "
                                 f"{where} (like= has {tmpl!r})")
            leaves.append(value)
            continue
        if getattr(tmpl, "dtype", None) is None:
            raise TypeError(f"funcgrad.io.load: like= leaf at {where} is a "
                            f"{type(tmpl).__name__}; use arrays, ShapedArrays or Python scalars")
        if kind != "array":
            raise ValueError(f"funcgrad.io.load: {path} has no array {name!r} for {where}")
        want_shape, want_dtype = tuple(np.shape(tmpl)), np.dtype(tmpl.dtype)
        if tuple(value.shape) != want_shape or value.dtype != want_dtype:
            raise ValueError(f"funcgrad.io.load: {name!r} in {path} is {value.dtype.name}"
                             f"{list(value.shape)} but like= expects {want_dtype.name}"
                             f"{list(want_shape)} at {where}")
        leaves.append(np.array(value) if isinstance(tmpl, (np.ndarray, np.generic))
                      else fnp.asarray(value))
    extra = sorted(set(stored) - set(names))
    if extra:
        raise ValueError(f"funcgrad.io.load: {path} has entries that like= lacks: "
                         f"{', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}")
    return tree_unflatten(treedef, leaves)


def load(path: str | os.PathLike, like: Any = None) -> Any:
    """Loads a pytree saved by :func:`save` (or any safetensors file).

    Every check (file size, the header's checksum, per-tensor checksums, and with ``like``
    the structure, shapes and dtypes) passes before anything is returned.

    Args:
        path: the file.
        like: optional template pytree (e.g. freshly initialized params and optimizer state, or
            ShapedArrays): the result gets its exact structure (custom nodes included), and each
            leaf must have the template leaf's shape and dtype. Without it the saved structure
            is rebuilt (NamedTuples whose class is not imported come back as dicts); a file
            from another tool loads as a flat ``{name: array}`` dict.

    Returns:
        The pytree, with funcgrad arrays (numpy arrays where numpy arrays were saved).

    Raises:
        ValueError: the file is truncated, corrupted or edited (a shape, dtype or stored Python
            value changed), or does not match ``like``.
        FileNotFoundError: there is no file at ``path``.

    Example:
        >>> import os, tempfile, funcgrad.numpy as fnp
        >>> path = os.path.join(tempfile.mkdtemp(), "params.safetensors")
        >>> params = {"w": fnp.ones((3, 2))}
        >>> save(path, params)
        >>> load(path, like=params)["w"].shape
        (3, 2)
    """
    path = os.fspath(path)
    tensors, structure = _read_checked(path)
    if like is not None:
        return _restore_like(path, like, tensors, structure)
    if structure is None:
        return {name: fnp.asarray(a) for name, a in tensors.items()}
    try:
        return _decode(structure, tensors)
    except (KeyError, TypeError, IndexError) as e:
        raise ValueError(f"funcgrad.io.load: {path} is not a valid checkpoint (corrupted tree "
                         f"structure: {e!r})") from None
