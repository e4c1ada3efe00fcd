"""The process server that forks the ranks of a local expert-parallel run (model/fork_server.py): the same
answer as ranks started as new processes and as the single-process layer, a failing rank's exit code, a
hanging run killed by its timeout, and no server or rank left behind when the app goes away."""
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from model import fork_server
from model.parallel import ROOT, LaunchError, free_port, launch_local
from tests.test_parallel import micro_problem


def state_of(pid: int) -> str | None:
    """The process's state letter (R, S, Z, ...), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def children_of(pid: int) -> list[int]:
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        kids.append(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    return kids


def gone(pid: int, within: float = 10.0) -> bool:
    """Exited (gone, or a zombie of a parent that is not ours to reap) within `within` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if state_of(pid) in (None, "Z"):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def server():
    s = fork_server.server()
    assert s is not None, fork_server.failed()
    yield s


def test_forked_ranks_give_the_spawned_ranks_and_the_single_process_answer(tmp_path, server):
    moe, x, path = micro_problem(tmp_path, tokens=12)
    forked = launch_local(path, 4, "round_robin", timeout_s=120, fork=True)
    spawned = launch_local(path, 4, "round_robin", timeout_s=240, fork=False)
    assert forked.forked and not spawned.forked
    with torch.no_grad():
        ref, info = moe(x.unsqueeze(0))
    assert float((forked.y - ref[0]).abs().max()) <= 1e-5
    assert forked.result["max_abs_diff"] <= 1e-5
    torch.testing.assert_close(forked.y, spawned.y, rtol=0, atol=0)        # same code, one thread each
    sent = np.array([r["pairs_to"] for r in forked.result["ranks"]])
    assert sent.tolist() == [r["pairs_to"] for r in spawned.result["ranks"]]
    assert sent.sum() == x.shape[0] * moe.cfg.top_k                         # every (token, expert) pair once
    assert [r["experts"] for r in forked.result["ranks"]] == [[0, 4], [4, 8], [8, 12], [12, 16]]
    assert "[rank 3] done" in forked.logs[3] and "[rank 0] done:" in forked.logs[0]
    assert children_of(server.proc.pid) == []                               # every rank reaped


def test_a_failing_rank_reports_its_exit_code_and_the_server_serves_on(tmp_path, server):
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(LaunchError, match=r"exited with code 1:[\s\S]*Traceback"):
        launch_local(tmp_path / "junk.safetensors", 2, timeout_s=60, fork=True)
    assert fork_server.server() is server and children_of(server.proc.pid) == []
    _, _, path = micro_problem(tmp_path)
    assert launch_local(path, 2, timeout_s=60, fork=True).result["max_abs_diff"] <= 1e-5


def test_a_hanging_run_is_killed_at_its_timeout(tmp_path, server):
    # every rank joins the group, then blocks opening a FIFO that no one writes: a hang inside a rank
    os.mkfifo(tmp_path / "never.safetensors")
    t0 = time.perf_counter()
    with pytest.raises(LaunchError, match="did not finish within 2 s"):
        launch_local(tmp_path / "never.safetensors", 2, timeout_s=2, fork=True)
    assert time.perf_counter() - t0 < 15
    assert children_of(server.proc.pid) == []                               # killed and reaped: no zombies


def test_a_page_that_stops_mid_run_leaves_no_rank(tmp_path, server):
    # Streamlit stops a page's script by raising inside it, here inside the progress callback
    os.mkfifo(tmp_path / "never.safetensors")
    seen = []

    def progress(elapsed, finished, stages):
        seen.append(stages)
        if elapsed > 0.5:
            raise KeyboardInterrupt("the page was stopped")
    with pytest.raises(KeyboardInterrupt):
        launch_local(tmp_path / "never.safetensors", 2, timeout_s=60, progress=progress, fork=True)
    assert seen[-1] == ["[rank 0] loading its shard", "[rank 1] loading its shard"]    # both were inside the hang
    assert children_of(server.proc.pid) == []
    _, _, path = micro_problem(tmp_path)
    assert launch_local(path, 2, timeout_s=60, fork=True).forked                          # and the server serves on


def test_the_server_kills_a_run_past_its_own_deadline(tmp_path, server):
    # without the client cancelling: two ranks told the world has three wait for the third until killed
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "3"}
    ranks = [{"argv": ["--problem", str(tmp_path / "unused.safetensors")], "log": str(tmp_path / f"r{r}.log"),
              "env": env | {"RANK": str(r)}} for r in range(2)]
    run = fork_server.ForkedRanks(server, ranks, timeout_s=1.0)
    try:
        deadline = time.monotonic() + 15
        while None in run.codes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert run.codes() == [-9, -9]                                      # SIGKILL, by the server
        assert all(gone(pid, 0.1) for pid in run.pids)
    finally:
        run.stop()
    assert run.timed_out


def test_server_and_ranks_exit_when_the_app_goes_away(tmp_path):
    os.mkfifo(tmp_path / "never.safetensors")
    app = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import threading, time
        from model import fork_server
        from model.parallel import launch_local
        s = fork_server.server()
        threading.Thread(target=launch_local, args=({str(tmp_path / 'never.safetensors')!r}, 2),
                         kwargs={{"timeout_s": 600, "fork": True}}, daemon=True).start()
        print(s.proc.pid, flush=True)
        time.sleep(600)
        """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(app.stdout.readline())
        deadline = time.monotonic() + 20
        while len(ranks := children_of(server_pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(ranks) == 2                                              # the run is under way
    finally:
        app.kill()                                                          # no atexit, no goodbye
        app.wait()
    assert gone(server_pid)
    assert all(gone(pid) for pid in ranks)
