"""A process server for model.parallel's local runs: one long-lived helper process that imports torch
once and forks the ranks of each run from itself.

Starting a rank as a new Python process costs ~1-2 s on a small machine, almost all of it `import torch`;
a rank forked from a process that has already imported it starts in milliseconds, and is still a real,
separate process that joins torch.distributed (gloo) like any other. The app starts the server with
`python -m model.fork_server` (not `multiprocessing`: under Streamlit its children would re-import the
running page script, which the script runner makes `__main__`).

The server itself computes nothing with torch: forking a process whose intra-op or OpenMP thread pools
have started can leave a child waiting on a lock held by a thread that was not copied. It runs with
OMP_NUM_THREADS=1 and every rank sets torch's threads to 1 again.

Protocol: one JSON object per line, requests on the server's stdin, replies on its stdout.

    <- {"ready": pid}                                       once torch is imported
    -> {"op": "run", "timeout_s": t, "ranks": [{"argv": [...], "env": {...}, "log": path}, ...]}
    <- {"started": [pid, ...]}
    <- {"exit": r, "code": c}          as each rank ends (c < 0: killed by signal -c)
    <- {"done": true, "timed_out": bool}
    -> {"op": "cancel"}                kills the run under way; its "exit"s and "done" follow

Rank r runs `model.parallel.main(argv)` with `env` added to its environment and its output in `log`, as
`python -m model.parallel ARGV` would. A run's ranks share one process group, which a timeout or a cancel
kills whole; the server reaps every rank it forked. It exits when its stdin closes (the app went away),
and a rank dies with the server (PR_SET_PDEATHSIG), so neither outlives the app.
"""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 60.0          # a cold start imports torch from a cold disk cache
PR_SET_PDEATHSIG = 1            # linux/prctl.h


class Lines:
    """JSON messages from a pipe, one a line, read without blocking past `timeout`."""

    def __init__(self, fd: int):
        self.fd, self.buf, self.eof = fd, b"", False

    def read(self, timeout: float) -> list[dict]:
        """The messages that arrive within `timeout` s (at most one read); [] and self.eof at the end."""
        if b"\n" not in self.buf and not self.eof and select.select([self.fd], [], [], timeout)[0]:
            chunk = os.read(self.fd, 65536)
            self.eof = not chunk
            self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        return [json.loads(s) for s in lines if s.strip()]


def _send(fd: int, msg: dict) -> None:
    os.write(fd, (json.dumps(msg) + "\n").encode())


# ---- the server ----------------------------------------------------------------------------------

def _rank(spec: dict, pgid: int, reply_fd: int, server_pid: int) -> None:
    """In a forked child: become one rank of the run, then leave without running the server's cleanup."""
    code = 1
    try:
        os.setpgid(0, pgid)
        _die_with_parent(server_pid)
        log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.close(reply_fd)
        os.environ.update(spec["env"])
        import torch
        torch.set_num_threads(1)
        from model.parallel import main
        code = main(spec["argv"]) or 0
    except SystemExit as e:             # argparse's errors, as `python -m` would report them
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException:               # noqa: BLE001 - the traceback goes to the rank's log, like python's
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _die_with_parent(server_pid: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server_pid:  # the server died before prctl took effect
            os._exit(1)


def _kill(pgid: int, pids: list[int], codes: list[int | None]) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid, c in zip(pids, codes):     # not reaped yet, so still ours even if the group call missed it
        if c is None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _run(req: dict, requests: Lines, reply_fd: int) -> bool:
    """One run: fork its ranks, report each exit, kill them on timeout or cancel. False when stdin closed."""
    pids: list[int] = []
    pgid, me = 0, os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    for spec in req["ranks"]:
        pid = os.fork()
        if pid == 0:
            _rank(spec, pgid, reply_fd, me)
        pgid = pgid or pid
        try:
            os.setpgid(pid, pgid)       # also here, so the group exists before either side runs on
        except (PermissionError, ProcessLookupError):
            pass                        # the child got there first, or already left
        pids.append(pid)
    _send(reply_fd, {"started": pids})
    codes: list[int | None] = [None] * len(pids)
    deadline = time.monotonic() + float(req.get("timeout_s", 300))
    stop, timed_out, alive = False, False, True
    while None in codes:
        for r, pid in enumerate(pids):
            if codes[r] is None:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[r] = os.waitstatus_to_exitcode(status)
                    _send(reply_fd, {"exit": r, "code": codes[r]})
        if None not in codes:
            break
        if stop:
            time.sleep(0.005)
            continue
        msgs = requests.read(0.02)
        if requests.eof:
            alive = False
        if time.monotonic() > deadline:
            timed_out = True
        if not alive or timed_out or any(m.get("op") == "cancel" for m in msgs):
            _kill(pgid, pids, codes)
            stop = True
    _send(reply_fd, {"done": True, "timed_out": timed_out})
    return alive


def serve() -> None:
    reply_fd = os.dup(1)
    os.dup2(2, 1)                       # anything printed by accident goes to stderr, not into the replies
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    # the ranks compute one MoE layer on the torch path: each would start numba for its kernels (model/fast.py),
    # ~0.6 s a process, where the whole run takes ~0.3 s (bench/controls.py: 0.31 -> 2.69 s with them)
    os.environ["K3_FAST"] = "0"
    # what every rank imports (torch, torch.distributed, safetensors, the model); no torch compute here
    import model.parallel  # noqa: F401
    _send(reply_fd, {"ready": os.getpid()})
    requests = Lines(0)
    while not requests.eof:
        for req in requests.read(3600):
            if req.get("op") == "run" and not _run(req, requests, reply_fd):
                return
            if req.get("op") == "ping":
                _send(reply_fd, {"pong": True})


# ---- the client (in the app) ---------------------------------------------------------------------

class ServerError(RuntimeError):
    pass


class ForkServer:
    """The app's handle on one server process; one run at a time."""

    def __init__(self, ready_timeout_s: float = READY_TIMEOUT_S):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.proc = subprocess.Popen([sys.executable, "-m", "model.fork_server"], cwd=ROOT, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        self.replies = Lines(self.proc.stdout.fileno())
        self.pending: list[dict] = []
        self.lock = threading.Lock()
        ready = self.wait_for("ready", ready_timeout_s)
        if ready is None:
            self.close()
            raise ServerError("the process server did not start")

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.replies.eof

    def send(self, msg: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise ServerError(f"the process server is gone: {e}") from e

    def messages(self, timeout: float = 0.0) -> list[dict]:
        """What arrived (waiting up to `timeout` s when nothing had), oldest first."""
        msgs, self.pending = self.pending + self.replies.read(0.0 if self.pending else timeout), []
        if self.replies.eof and not msgs:
            raise ServerError("the process server exited")
        return msgs

    def wait_for(self, key: str, timeout: float) -> dict | None:
        """The first message with `key`; the ones after it stay for the next reader."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                msgs = self.messages(min(left, 0.5))
            except ServerError:
                return None
            for i, m in enumerate(msgs):
                if key in m:
                    self.pending = msgs[i + 1:] + self.pending
                    return m
        return None

    def close(self, timeout: float = 5.0) -> None:
        """Close its stdin (it kills a run under way and exits), and kill it if it does not."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class ForkedRanks:
    """The ranks of one run on a ForkServer, with the interface launch_local polls: codes(), stop()."""

    def __init__(self, server: ForkServer, ranks: list[dict], timeout_s: float):
        self.server = server
        server.lock.acquire()
        try:
            server.send({"op": "run", "timeout_s": timeout_s, "ranks": ranks})
            started = server.wait_for("started", 30.0)
            if started is None:
                raise ServerError("the process server did not start the ranks")
        except BaseException:
            server.lock.release()
            raise
        self.pids: list[int] = started["started"]
        self._codes: list[int | None] = [None] * len(self.pids)
        self.finished = False
        self.timed_out = False

    def _take(self, msgs: list[dict]) -> None:
        for m in msgs:
            if "exit" in m:
                self._codes[m["exit"]] = m["code"]
            if m.get("done"):
                self.finished, self.timed_out = True, m["timed_out"]

    def codes(self) -> list[int | None]:
        if not self.finished:
            self._take(self.server.messages(0.0))
        return list(self._codes)

    def stop(self, timeout: float = 10.0) -> None:
        """Kill what still runs, wait until the server has reaped every rank; then the server is free."""
        try:
            if not self.finished:
                if None in self._codes:
                    self.server.send({"op": "cancel"})
                deadline = time.monotonic() + timeout
                while not self.finished and time.monotonic() < deadline:
                    self._take(self.server.messages(0.2))
            if not self.finished:
                raise ServerError("the process server did not stop the ranks")
        except ServerError:
            _discard(self.server)       # its ranks die with it (PR_SET_PDEATHSIG)
        finally:
            self.server.lock.release()


RETRY_S = 60.0                  # after a failed start, callers fall back for this long before another try
_lock = threading.Lock()
_server: dict = {"server": None, "failed": None, "failed_at": -RETRY_S}


def server(start: bool = True) -> ForkServer | None:
    """The process server of this process, started on first use (a caller meanwhile waits for that start);
    None when it cannot start (the reason in `failed()`) or, with start=False, when none runs."""
    with _lock:
        s = _server["server"]
        if s is not None and s.alive():
            return s
        if s is not None:
            s.close()
            _server["server"] = None
        if not start or time.monotonic() - _server["failed_at"] < RETRY_S:
            return None
        try:
            _server["server"] = ForkServer()
            _server["failed"] = None
        except (OSError, ServerError) as e:
            _server["failed"], _server["failed_at"] = str(e), time.monotonic()
        return _server["server"]


def failed() -> str | None:
    return _server["failed"]


def _discard(s: ForkServer) -> None:
    with _lock:
        if _server["server"] is s:
            _server["server"] = None
    s.close(timeout=1.0)


@atexit.register
def shutdown() -> None:
    with _lock:
        s, _server["server"] = _server["server"], None
    if s is not None:
        s.close()


if __name__ == "__main__":
    serve()
