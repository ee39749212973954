"""Combine JSON-line benchmark logs (funcgrad's and the peers', from one run) into a table."""
from __future__ import annotations

import json
import sys


def load(paths):
    rows = []
    for p in paths:
        for line in open(p):
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return rows


def main(paths):
    rows = load(paths)
    figures = {}
    for r in rows:
        if "impl" in r and "value" in r:
            figures.setdefault(r["what"], {})[r["impl"]] = r["value"]
    print("| workload | funcgrad | peers (same run) | funcgrad / best peer |")
    print("|---|---|---|---|")
    for what in sorted(figures):
        f = {k: v for k, v in figures[what].items() if k.startswith("funcgrad")}
        peers = {k: v for k, v in figures[what].items() if not k.startswith("funcgrad")}
        best = min(peers.values()) if peers else None
        ours = " / ".join(f"{k.split('_', 1)[1]} {v:.3f}" for k, v in f.items())
        theirs = ", ".join(f"{k} {v:.3f}" for k, v in sorted(peers.items()))
        ratio = " / ".join(f"{v / best:.2f}x" for v in f.values()) if best else "-"
        print(f"| {what} | {ours} | {theirs} | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1:])
