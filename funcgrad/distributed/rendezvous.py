"""The rendezvous: a small key-value store and barriers served over TCP by process 0.

It exists to start a job and to notice when one of its processes is gone; it is not a data
transport (collectives go through NCCL, funcgrad/cuda/nccl.py). Standard library only.

Protocol: newline-delimited JSON over two connections per process. The *control* connection
carries requests (`set`, `get`, `barrier`, `leave`), each answered once; the *watch* connection
carries the process's heartbeats to the server and the server's failure notices back. A process
whose connections close without `leave`, or whose heartbeats stop for `heartbeat_timeout`
seconds, is *failed*: every pending and later `get`/`barrier` of the others raises a
`RendezvousError` naming it, and every watch connection is told (the NCCL watchdog in
distributed/process.py aborts its communicators on that notice). A barrier that some ranks
never reach raises after its timeout, naming them.
"""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time


class RendezvousError(RuntimeError):
    """A process of the job failed, never arrived, or the coordinator is unreachable."""


def _send(sock, msg: dict):
    sock.sendall((json.dumps(msg) + "\n").encode())


class _Lines:
    """Reads newline-delimited JSON messages from a socket (None at end of stream)."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def read(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def _ranks(rs) -> str:
    return "[" + ", ".join(str(r) for r in sorted(rs)) + "]"


class Server:
    """The coordinator's store, run on a thread pool inside process 0.

    Example:
        >>> s = Server("127.0.0.1", 0, num_processes=1)
        >>> c = Client("127.0.0.1", s.port, rank=0, num_processes=1, timeout=5)
        >>> c.set("k", "v"); c.get("k")
        'v'
        >>> c.barrier("done"); c.close(); s.close()
    """

    def __init__(self, host: str, port: int, num_processes: int,
                 heartbeat_timeout: float = 20.0):
        self.n, self.heartbeat_timeout = int(num_processes), float(heartbeat_timeout)
        self.cond = threading.Condition()
        self.kv: dict = {}
        self.barriers: dict = {}
        self.joined: set = set()
        self.left: set = set()
        self.failed: dict = {}          # rank -> why
        self.watchers: dict = {}        # rank -> (socket, lock)
        self.conns: set = set()
        self.timed_out: dict = {}       # barrier -> the timeout message every waiter gets
        self.waiting = 0                # requests being waited on (answered before close)
        self.sock = socket.create_server((host, port), reuse_port=False, backlog=1024)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, name="funcgrad-rendezvous", daemon=True).start()

    # connections ------------------------------------------------------------------------------

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.cond:
                self.conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        lines, rank = _Lines(conn), None
        try:
            hello = lines.read()
            if not hello or hello.get("op") != "hello":
                return
            rank, role = int(hello["rank"]), hello["role"]
            err = self._check_hello(rank, int(hello["num_processes"]), role)
            _send(conn, {"ok": err is None, "error": err})
            if err is not None:
                rank = None
                return
            if role == "watch":
                self._watch(rank, conn, lines)
            else:
                self._control(rank, conn, lines)
        except (OSError, ValueError, KeyError):
            pass
        finally:
            conn.close()
            with self.cond:
                self.conns.discard(conn)
            if rank is not None:
                self._lost(rank, "its connection to the coordinator closed (the process "
                                 "exited or was killed)")

    def _check_hello(self, rank, n, role):
        if n != self.n:
            return (f"process {rank} says num_processes={n}, the coordinator has {self.n}; "
                    "every process must pass the same num_processes")
        if not 0 <= rank < self.n:
            return f"process_id {rank} is out of range for num_processes={self.n}"
        with self.cond:
            if role == "control":
                if rank in self.joined:
                    return f"process_id {rank} connected twice; each process needs its own id"
                self.joined.add(rank)
                self.cond.notify_all()
        return None

    def _watch(self, rank, conn, lines):
        with self.cond:
            self.watchers[rank] = (conn, threading.Lock())
            failed = dict(self.failed)
        for r, why in failed.items():
            self._notify(rank, r, why)
        conn.settimeout(self.heartbeat_timeout)
        while True:
            try:
                msg = lines.read()
            except TimeoutError:
                self._lost(rank, f"no heartbeat for {self.heartbeat_timeout:g} s (the process "
                                 "hangs or its host is unreachable)")
                return
            if msg is None:
                return

    def _control(self, rank, conn, lines):
        while True:
            msg = lines.read()
            if msg is None:
                return
            op = msg.get("op")
            try:
                if op == "set":
                    with self.cond:
                        self.kv[msg["key"]] = msg["value"]
                        self.cond.notify_all()
                    reply = {"ok": True}
                elif op == "get":
                    reply = {"ok": True, "value": self._get(msg["key"], float(msg["timeout"]))}
                elif op == "barrier":
                    self._barrier(rank, msg["name"], float(msg["timeout"]))
                    reply = {"ok": True}
                elif op == "leave":
                    with self.cond:
                        self.left.add(rank)
                        self.cond.notify_all()
                    _send(conn, {"ok": True})
                    return
                else:
                    reply = {"ok": False, "error": f"unknown request {op!r}"}
            except RendezvousError as e:
                reply = {"ok": False, "error": str(e)}
            _send(conn, reply)

    # failures ---------------------------------------------------------------------------------

    def _lost(self, rank, why):
        with self.cond:
            if rank in self.left or rank in self.failed or self.closed:
                return
            self.failed[rank] = why
            self.cond.notify_all()
            others = [r for r in self.watchers if r != rank]
        for r in others:
            self._notify(r, rank, why)

    def _notify(self, to, rank, why):
        sock, lock = self.watchers.get(to, (None, None))
        if sock is None:
            return
        try:
            with lock:
                _send(sock, {"event": "failed", "rank": rank, "why": why})
        except OSError:
            pass

    def _failure(self) -> str | None:
        if not self.failed:
            return None
        return "; ".join(f"process {r} failed: {why}" for r, why in sorted(self.failed.items()))

    # waits --------------------------------------------------------------------------------------

    def _wait(self, done, timeout, on_timeout, waiting_for):
        deadline = time.monotonic() + timeout
        with self.cond:
            self.waiting += 1
            try:
                while not done():
                    why = self._failure()
                    if why:
                        raise RendezvousError(f"{why} (while waiting for {waiting_for})")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise RendezvousError(on_timeout())
                    self.cond.wait(min(left, 1.0))
            finally:
                self.waiting -= 1
                self.cond.notify_all()

    def _never_joined(self) -> str:
        missing = set(range(self.n)) - self.joined
        return f"; processes {_ranks(missing)} never connected" if missing else ""

    def _get(self, key, timeout):
        self._wait(lambda: key in self.kv, timeout,
                   lambda: f"key {key!r} was not set within {timeout:g} s{self._never_joined()}",
                   f"key {key!r}")
        return self.kv[key]

    def _barrier(self, rank, name, timeout):
        with self.cond:
            arrived = self.barriers.setdefault(name, set())
            arrived.add(rank)
            self.cond.notify_all()

        def done():
            if name in self.timed_out:   # another process's wait timed out: the same answer
                raise RendezvousError(self.timed_out[name])
            gone = self.left - arrived
            if gone:
                raise RendezvousError(f"processes {_ranks(gone)} shut down before reaching "
                                      f"barrier {name!r}")
            return len(arrived) == self.n

        def on_timeout():
            missing = set(range(self.n)) - arrived
            msg = self.timed_out[name] = (
                f"barrier {name!r} timed out after {timeout:g} s: processes {_ranks(missing)} "
                f"of {self.n} did not arrive{self._never_joined()}")
            self.cond.notify_all()
            return msg
        self._wait(done, timeout, on_timeout, f"barrier {name!r}")

    def wait_all_left(self, timeout: float):
        """Wait (up to timeout) until every process left or failed (the coordinator's exit)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.left | set(self.failed)) < len(self.joined):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self.cond.wait(min(left, 0.2))

    def close(self):
        """Stop serving: the listening socket and every connection close (a client still
        connected then sees the coordinator gone)."""
        deadline = time.monotonic() + 2.0
        with self.cond:   # let waiting requests (failing with this process) be answered first
            while self.waiting and time.monotonic() < deadline:
                self.cond.wait(0.05)
        time.sleep(0.05)
        self.closed = True
        with self.cond:
            conns = list(self.conns)
        for sock in [self.sock, *conns]:
            # shutdown wakes a thread blocked in accept/recv; close alone may not
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class Client:
    """One process's connections to the coordinator (control requests + a heartbeat thread).

    `on_failure(message)` is called once, from the watch thread, when the coordinator reports a
    failed process or stops answering.
    """

    def __init__(self, host: str, port: int, rank: int, num_processes: int, timeout: float,
                 heartbeat_interval: float = 2.0, on_failure=None):
        self.address, self.rank, self.n = f"{host}:{port}", int(rank), int(num_processes)
        self.failure: str | None = None
        self.on_failure = on_failure
        self._lock = threading.Lock()
        self._closing = False
        self._barriers: dict = {}   # name -> times used (each use is a barrier of its own)
        deadline = time.monotonic() + timeout
        self.ctl = self._connect(host, port, deadline, "control")
        self.watch = self._connect(host, port, deadline, "watch")
        self._lines = _Lines(self.ctl)
        self._beat = threading.Event()
        threading.Thread(target=self._heartbeat, args=(heartbeat_interval,), daemon=True,
                         name="funcgrad-heartbeat").start()
        threading.Thread(target=self._listen, daemon=True, name="funcgrad-watch").start()

    def _connect(self, host, port, deadline, role):
        last = None
        while True:
            try:
                left = max(0.05, deadline - time.monotonic())
                sock = socket.create_connection((host, port), timeout=min(left, 5.0))
                break
            except OSError as e:     # the coordinator may not be listening yet: retry
                last = e
                if time.monotonic() >= deadline:
                    raise RendezvousError(
                        f"process {self.rank} could not reach the coordinator at "
                        f"{self.address} before the timeout ({last}); is process 0 running "
                        "and the address reachable from this host?") from None
                time.sleep(0.05)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(max(1.0, deadline - time.monotonic()))
        _send(sock, {"op": "hello", "rank": self.rank, "role": role,
                     "num_processes": self.n})
        try:
            reply = _Lines(sock).read()
        except OSError as e:
            raise RendezvousError(f"coordinator at {self.address} did not answer: {e}") from None
        if not reply or not reply.get("ok"):
            sock.close()
            raise RendezvousError((reply or {}).get("error") or
                                  f"coordinator at {self.address} closed the connection")
        sock.settimeout(None)
        return sock

    # watch ----------------------------------------------------------------------------------

    def _heartbeat(self, interval):
        while not self._beat.wait(interval):
            try:
                _send(self.watch, {"op": "beat"})
            except OSError:
                return

    def _listen(self):
        lines = _Lines(self.watch)
        while True:
            try:
                msg = lines.read()
            except (OSError, ValueError):
                msg = None
            if msg is None:
                if not self._closing:
                    self._fail(f"lost the coordinator at {self.address} (process 0 exited, "
                               "or the network failed)")
                return
            if msg.get("event") == "failed":
                self._fail(f"process {msg['rank']} failed: {msg['why']}")

    def _fail(self, why):
        if self.failure is None:
            self.failure = why
            if self.on_failure is not None:
                self.on_failure(why)

    # requests -------------------------------------------------------------------------------

    def _request(self, msg: dict, timeout: float | None):
        with self._lock:
            try:
                self.ctl.settimeout(None if timeout is None else timeout + 10.0)
                _send(self.ctl, msg)
                reply = self._lines.read()
            except TimeoutError:
                raise RendezvousError(f"the coordinator at {self.address} did not answer "
                                      f"{msg['op']!r} within {timeout:g} s") from None
            except OSError as e:
                reply, err = None, e
            else:
                err = None
        if reply is None:
            raise RendezvousError(f"lost the coordinator at {self.address} during "
                                  f"{msg['op']!r} (process 0 exited, or the network failed)"
                                  + (f": {err}" if err else ""))
        if not reply.get("ok"):
            raise RendezvousError(reply.get("error"))
        return reply.get("value")

    def set(self, key: str, value):
        """Store a JSON-able value under key."""
        self._request({"op": "set", "key": key, "value": value}, 30.0)

    def get(self, key: str, timeout: float = 300.0):
        """The value under key, waiting up to timeout seconds for some process to set it."""
        return self._request({"op": "get", "key": key, "timeout": timeout}, timeout)

    def barrier(self, name: str, timeout: float = 300.0):
        """Return once every process reached barrier `name`; RendezvousError naming the
        processes missing after timeout seconds, or failed meanwhile."""
        k = self._barriers[name] = self._barriers.get(name, 0) + 1
        try:
            self._request({"op": "barrier", "name": f"{name}#{k}", "timeout": timeout}, timeout)
        except RendezvousError as e:
            raise RendezvousError(str(e).replace(f"{name}#{k}", name)) from None

    def close(self, leave: bool = True):
        """Leave the job (a clean exit, not a failure) and close the connections."""
        self._closing = True
        self._beat.set()
        if leave:
            try:
                self._request({"op": "leave"}, 10.0)
            except RendezvousError:
                pass
        for s in (self.ctl, self.watch):
            try:
                s.close()
            except OSError:
                pass
