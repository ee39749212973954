"""Start one process per GPU with torchrun's environment: python -m funcgrad.distributed.launch.

    python -m funcgrad.distributed.launch -n 2 examples/train_gpt.py --data-parallel

Each process gets MASTER_ADDR=127.0.0.1, a free MASTER_PORT, WORLD_SIZE=n, RANK=LOCAL_RANK=i,
LOCAL_WORLD_SIZE=n, and NCCL_NVLS_ENABLE=0 unless the variable is already set (NCCL's NVLink
multicast stays off). If a process fails, the others fail through the rendezvous within its
timeouts; the launcher stops whatever is still running 30 s later and returns the first
non-zero exit code. One host only: on several hosts, start the processes with torchrun or a
scheduler (srun) and the same variables.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def launch(n: int, cmd: list, grace: float = 30.0, env: dict | None = None) -> int:
    """Run `cmd` in n processes (ranks 0..n-1); returns 0, or the first non-zero exit code."""
    if n < 1:
        raise ValueError(f"need at least one process, got {n}")
    base = dict(os.environ if env is None else env)
    base.setdefault("NCCL_NVLS_ENABLE", "0")
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(n),
                LOCAL_WORLD_SIZE=str(n))
    procs = [subprocess.Popen(cmd, env={**base, "RANK": str(i), "LOCAL_RANK": str(i)})
             for i in range(n)]
    first_bad, deadline = 0, None
    while True:
        codes = [p.poll() for p in procs]
        bad = [c for c in codes if c not in (None, 0)]
        if bad and not first_bad:
            first_bad, deadline = bad[0], time.monotonic() + grace
        if all(c is not None for c in codes):
            return first_bad
        if deadline is not None and time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
            return first_bad
        time.sleep(0.1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m funcgrad.distributed.launch",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--nproc_per_node", "--nproc-per-node", type=int, required=True,
                    help="processes to start (one per GPU)")
    ap.add_argument("-m", dest="module", action="store_true",
                    help="run the target as a module (python -m target)")
    ap.add_argument("target", help="script (or module with -m)")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = [sys.executable] + (["-m"] if a.module else []) + [a.target] + a.args
    return launch(a.nproc_per_node, cmd)


if __name__ == "__main__":
    sys.exit(main())
