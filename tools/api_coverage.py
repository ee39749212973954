"""Count funcgrad's public names against JAX's: jax.numpy, lax, nn, top level and friends.

JAX's names come from the installed `jax` when it imports (its modules' public attributes), else
from the lists checked in under tools/jax_names/ (JAX 0.10.0's public names, read from the
`from ... import` lines of its __init__ modules at tag jax-v0.10.0). A JAX name counts as covered
when the matching funcgrad module has an attribute of that name.

Usage:
    python tools/api_coverage.py              # a Markdown table of the counts
    python tools/api_coverage.py --missing    # also list the missing names per module
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# (JAX module, funcgrad module, name-list file)
PAIRS = [
    ("jax.numpy", "funcgrad.numpy", "jax.numpy.txt"),
    ("jax.numpy.linalg", "funcgrad.numpy.linalg", "jax.numpy.linalg.txt"),
    ("jax.numpy.fft", "funcgrad.numpy.fft", "jax.numpy.fft.txt"),
    ("jax.lax", "funcgrad.lax", "jax.lax.txt"),
    ("jax.nn", "funcgrad.nn", "jax.nn.txt"),
    ("jax.nn.initializers", "funcgrad.nn.initializers", "jax.nn.initializers.txt"),
    ("jax.tree", "funcgrad.tree", "jax.tree.txt"),
    ("jax", "funcgrad", "jax.txt"),
]


def _listed(fname: str) -> list[str]:
    with open(os.path.join(HERE, "jax_names", fname)) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def _installed(modname: str) -> list[str] | None:
    try:
        mod = importlib.import_module(modname)
    except Exception:  # noqa: BLE001 - jax absent or broken: fall back to the lists
        return None
    return sorted(n for n in dir(mod) if not n.startswith("_"))


def _funcgrad_module(modname: str):
    try:
        return importlib.import_module(modname)
    except ImportError:
        parent, _, attr = modname.rpartition(".")
        return getattr(importlib.import_module(parent), attr, None)


def coverage(use_installed: bool = True) -> list[tuple[str, str, int, int, list[str], str]]:
    """(jax module, funcgrad module, covered, total, missing names, source) per pair."""
    rows = []
    for jax_mod, fg_mod, fname in PAIRS:
        names = _installed(jax_mod) if use_installed else None
        source = f"installed jax {_jax_version()}" if names is not None else "JAX 0.10.0 list"
        if names is None:
            names = _listed(fname)
        mod = _funcgrad_module(fg_mod)
        have = [n for n in names if mod is not None and hasattr(mod, n)]
        missing = [n for n in names if n not in have]
        rows.append((jax_mod, fg_mod, len(have), len(names), missing, source))
    return rows


def _jax_version() -> str:
    try:
        import jax
        return jax.__version__
    except Exception:  # noqa: BLE001
        return "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--missing", action="store_true", help="list the missing names")
    ap.add_argument("--lists", action="store_true",
                    help="use the checked-in JAX 0.10.0 lists even when jax is installed")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(HERE))
    rows = coverage(use_installed=not args.lists)
    print("| JAX module | funcgrad module | covered | of | share |")
    print("|---|---|---:|---:|---:|")
    for jax_mod, fg_mod, have, total, _, _ in rows:
        print(f"| `{jax_mod}` | `{fg_mod}` | {have} | {total} | {100 * have / total:.0f}% |")
    print(f"\nJAX names from: {rows[0][5]}")
    if args.missing:
        for jax_mod, _, _, _, missing, _ in rows:
            print(f"\n{jax_mod} missing ({len(missing)}): {' '.join(missing)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
