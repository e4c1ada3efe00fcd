"""`python -m deploy`: N Streamlit replicas on loopback ports behind a private nginx.

    python -m deploy                          # 2 replicas, nginx on http://127.0.0.1:8080/
    python -m deploy --replicas 4 --host 0.0.0.0 --port 80     # a class on the school network
    python -m deploy --replicas 0 --upstream 10.0.0.11:8501 --upstream 10.0.0.12:8501   # other machines
    python -m deploy --no-proxy --replicas 2 --replica-host 0.0.0.0 --base-port 8501     # an app machine
    python -m deploy --print-config --upstream 10.0.0.11:8501 --upstream 10.0.0.12:8501 # system nginx
    python -m deploy --database-url postgresql+psycopg://k3@db.school/k3    # classes in PostgreSQL

What it does: picks the replicas' ports (free loopback ports, or --base-port, --base-port + 1, ...),
starts one `streamlit run serve.py` per replica (all with one cookie secret, so the XSRF
cookie of one replica is valid on the others), waits until each answers `/_stcore/health` (which serve.py
does once it has loaded the model), opens one page on each (which queues the rest of its warm-up), writes an
nginx.conf into a fresh temp dir and runs `nginx -p DIR -c DIR/nginx.conf -e DIR/error.log -g "daemon off;"`, prints the
address, then watches:

- active health checks: every --health-interval seconds it GETs `/_stcore/health` of every replica
  (local and --upstream); after --health-fails failures in a row the replica is written `down` in the
  upstream list and nginx is reloaded (SIGHUP); when it answers again it is put back. nginx's own
  checks are passive only (max_fails/fail_timeout, and a retry on the next replica), see deploy/nginx.py;
- a local replica that exits is reported (and restarted on the same port with --restart);
- nginx exiting ends everything (exit status 1).

Classes and their answers (app/classes.py) go to --database-url (default: $K3_DATABASE_URL), passed to every
replica as K3_DATABASE_URL; without one, the replicas of this machine share the SQLite file var/classes.sqlite of
the app's folder. Replicas on several machines need a database they all reach: PostgreSQL.

Ctrl+C or SIGTERM stops nginx, then every replica (SIGTERM to its process group, SIGKILL after 10 s),
and removes the temp dir (--keep-dir keeps it, with the logs). --status-file writes a JSON description
(address, pids, ports) once serving, for scripts and tests.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from deploy import nginx

ROOT = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    print(f"[deploy {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def stop_process(proc: subprocess.Popen, grace: float = 15.0, sig: int = signal.SIGTERM) -> None:
    """Ask a process to stop (SIGTERM), wait up to `grace` seconds, then kill it."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def tree_pids(pid: int) -> list[int]:
    """A process and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_rss(pid: int) -> int:
    """Resident memory (bytes) of a process and its descendants, from /proc."""
    total = 0
    for p in tree_pids(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


def healthy(addr: str, timeout: float = 3.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{addr}/_stcore/health", timeout=timeout) as r:
            return r.read() == b"ok"
    except OSError:
        return False


@dataclass
class Replica:
    index: int
    host: str
    port: int
    log_path: Path
    local: bool = True
    proc: subprocess.Popen | None = None
    fails: int = 0
    up: bool = False
    restarts: int = 0
    rss: int = 0
    exit_reported: bool = False

    @property
    def addr(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"{host}:{self.port}"


@dataclass
class Deployment:
    replicas: list[Replica]
    host: str
    port: int
    sticky: str
    workdir: Path
    cookie_secret: str
    proxy: bool = True
    health_interval: float = 2.0
    health_fails: int = 2
    restart: bool = False
    nginx_bin: str = "nginx"
    app_dir: Path = ROOT
    database_url: str | None = None
    nginx_proc: subprocess.Popen | None = None
    stop_event: threading.Event = field(default_factory=threading.Event)
    down: set = field(default_factory=set)

    # ---- replicas -------------------------------------------------------------------------------------

    def start_replica(self, r: Replica) -> None:
        env = dict(os.environ, STREAMLIT_SERVER_COOKIE_SECRET=self.cookie_secret)
        if self.database_url:
            env["K3_DATABASE_URL"] = self.database_url
        logf = open(r.log_path, "ab")
        r.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "serve.py", "--server.headless", "true",
             "--server.address", r.host, "--server.port", str(r.port), "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=self.app_dir, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)          # own process group: Ctrl+C reaches the launcher only
        logf.close()
        r.fails, r.up, r.exit_reported = 0, False, False

    def wait_replicas(self, timeout: float) -> None:
        deadline = time.time() + timeout
        todo = [r for r in self.replicas if r.local]
        while todo and time.time() < deadline and not self.stop_event.is_set():
            for r in list(todo):
                if r.proc.poll() is not None:
                    raise RuntimeError(f"replica {r.index} ({r.addr}) exited with {r.proc.returncode}:\n"
                                       + r.log_path.read_text(errors="replace")[-2000:])
                if healthy(r.addr):
                    r.up = True
                    todo.remove(r)
                    log(f"replica {r.index} healthy at http://{r.addr}/ (pid {r.proc.pid})")
            time.sleep(0.3)
        if todo and not self.stop_event.is_set():
            raise RuntimeError("replicas not healthy after %.0f s: %s" % (timeout, ", ".join(r.addr for r in todo)))

    def warm(self) -> None:
        """Open the Routing explorer once on each local replica: loads the live model before anyone comes."""
        from deploy.protocol import warm

        async def all_of_them():
            return await asyncio.gather(*(warm(f"http://{r.addr}/") for r in self.replicas if r.local),
                                        return_exceptions=True)
        t0 = time.time()
        results = asyncio.run(all_of_them())
        for r, res in zip([r for r in self.replicas if r.local], results):
            r.rss = tree_rss(r.proc.pid)
            if isinstance(res, BaseException) or not res.ok:
                log(f"replica {r.index}: warm-up run failed: {res!r}")
            else:
                log(f"replica {r.index} warm ({res.seconds:.1f} s), resident memory {r.rss / 2**20:.0f} MB")
        log(f"warm-up took {time.time() - t0:.1f} s")

    def stop_replica(self, r: Replica, grace: float = 10.0) -> None:
        if r.proc is None or r.proc.poll() is not None:
            return
        try:
            os.killpg(r.proc.pid, signal.SIGTERM)   # the group this launcher created for the replica
        except ProcessLookupError:
            return
        try:
            r.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(r.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            r.proc.wait(timeout=5)

    # ---- nginx -----------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/"

    def write_upstreams(self) -> None:
        servers = [r.addr for r in self.replicas]
        text = nginx.upstream(servers, self.sticky, down=self.down)
        path = self.workdir / "k3-upstreams.conf"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)

    def start_nginx(self) -> None:
        (self.workdir / "tmp").mkdir(exist_ok=True)
        self.write_upstreams()
        (self.workdir / "k3-explorer.conf").write_text(
            nginx.site(f"{self.host}:{self.port}", upstream_include=str(self.workdir / "k3-upstreams.conf"),
                       sticky=self.sticky))
        (self.workdir / "nginx.conf").write_text(nginx.main(str(self.workdir), str(self.workdir / "k3-explorer.conf")))
        base = [self.nginx_bin, "-p", str(self.workdir), "-c", str(self.workdir / "nginx.conf"),
                "-e", str(self.workdir / "error.log")]
        test = subprocess.run(base + ["-t", "-q"], capture_output=True, text=True)
        if test.returncode != 0:
            raise RuntimeError(f"nginx rejected the generated config:\n{test.stderr}")
        logf = open(self.workdir / "nginx.out", "ab")
        self.nginx_proc = subprocess.Popen(base + ["-g", "daemon off;"], stdout=logf, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
        logf.close()
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.nginx_proc.poll() is not None:
                raise RuntimeError("nginx exited at start:\n" + self.tail("error.log"))
            if healthy(f"{self.url.split('//')[1].rstrip('/')}", timeout=2):
                return
            time.sleep(0.2)
        raise RuntimeError("nginx does not answer /_stcore/health:\n" + self.tail("error.log"))

    def reload_nginx(self) -> None:
        self.write_upstreams()
        if self.nginx_proc is not None and self.nginx_proc.poll() is None:
            os.kill(self.nginx_proc.pid, signal.SIGHUP)

    def stop_nginx(self) -> None:
        p = self.nginx_proc
        if p is None or p.poll() is not None:
            return
        p.terminate()                       # fast shutdown: closes the websockets now
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=5)

    def tail(self, name: str, n: int = 2000) -> str:
        try:
            return (self.workdir / name).read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # ---- watching --------------------------------------------------------------------------------------

    def check_health(self) -> None:
        changed = False
        for r in self.replicas:
            if r.local and r.proc is not None and r.proc.poll() is not None:
                if not r.exit_reported:
                    log(f"replica {r.index} ({r.addr}) exited with status {r.proc.returncode}")
                    r.exit_reported = True
                if self.restart and not self.stop_event.is_set():
                    r.restarts += 1
                    log(f"restarting replica {r.index} on {r.addr} (restart {r.restarts})")
                    self.start_replica(r)
                ok = False
            else:
                ok = healthy(r.addr, timeout=max(self.health_interval, 3.0))
            if ok:
                r.fails = 0
                if r.addr in self.down:
                    self.down.discard(r.addr)
                    log(f"replica {r.index} ({r.addr}) healthy again: back in rotation")
                    changed = True
                elif not r.up:
                    log(f"replica {r.index} ({r.addr}) healthy")
                r.up = True
            else:
                r.fails += 1
                if r.fails >= self.health_fails and r.addr not in self.down:
                    self.down.add(r.addr)
                    r.up = False
                    log(f"replica {r.index} ({r.addr}) failed {r.fails} health checks: taken out of rotation")
                    changed = True
        if changed and self.proxy:
            live = [r for r in self.replicas if r.addr not in self.down]
            if not live:
                log("no replica is healthy: all stay listed, nginx's passive checks decide")
            self.reload_nginx()

    def write_status(self, path: str | None) -> None:
        if not path:
            return
        data = {"url": self.url if self.proxy else None, "workdir": str(self.workdir),
                "nginx_pid": self.nginx_proc.pid if self.nginx_proc else None, "launcher_pid": os.getpid(),
                "replicas": [{"index": r.index, "addr": r.addr, "url": f"http://{r.addr}/", "local": r.local,
                              "pid": r.proc.pid if r.proc else None, "rss_bytes": r.rss} for r in self.replicas]}
        tmp = Path(path + ".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)

    def serve(self, status_file: str | None) -> int:
        self.write_status(status_file)
        while not self.stop_event.wait(self.health_interval):
            if self.proxy and self.nginx_proc.poll() is not None:
                log(f"nginx exited with status {self.nginx_proc.returncode}:\n" + self.tail("error.log"))
                return 1
            self.check_health()
            self.write_status(status_file)
        return 0

    def shutdown(self) -> None:
        self.stop_nginx()
        for r in self.replicas:
            if r.local:
                self.stop_replica(r)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m deploy", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=2, help="local Streamlit replicas to start (default 2)")
    ap.add_argument("--host", default="127.0.0.1", help="address nginx listens on (default 127.0.0.1; "
                                                        "0.0.0.0 for the school network)")
    ap.add_argument("--port", type=int, default=8080, help="port nginx listens on (default 8080)")
    ap.add_argument("--replica-host", default="127.0.0.1", help="address the replicas listen on (default 127.0.0.1)")
    ap.add_argument("--base-port", type=int, default=None,
                    help="replica ports base, base+1, ... (default: free ports)")
    ap.add_argument("--upstream", action="append", default=[], metavar="HOST:PORT",
                    help="a replica running elsewhere (another machine); repeat for each")
    ap.add_argument("--sticky", choices=("cookie", "ip"), default="cookie",
                    help="a new browser to the least busy replica, then kept there by a cookie (default), "
                         "or by its IP address (ip_hash)")
    ap.add_argument("--health-interval", type=float, default=2.0, help="seconds between health checks (default 2)")
    ap.add_argument("--health-fails", type=int, default=2,
                    help="failed checks in a row before a replica leaves the rotation (default 2)")
    ap.add_argument("--restart", action="store_true", help="restart a local replica that exits")
    ap.add_argument("--no-proxy", action="store_true", help="start the replicas only (for a proxy elsewhere)")
    ap.add_argument("--no-warm", action="store_true", help="do not open a page on each replica before serving")
    ap.add_argument("--database-url", default=os.environ.get("K3_DATABASE_URL") or None,
                    help="SQLAlchemy URL of the classes database every replica uses (default: $K3_DATABASE_URL, "
                         "else the app folder's SQLite file)")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx", help="the nginx binary")
    ap.add_argument("--app-dir", type=Path, default=ROOT,
                    help="the app to serve: a directory with serve.py (default this checkout)")
    ap.add_argument("--workdir", default=None, help="directory for the config and logs (default: a new temp dir)")
    ap.add_argument("--keep-dir", action="store_true", help="keep the temp dir (config, logs) at exit")
    ap.add_argument("--status-file", default=None, help="write a JSON description here once serving")
    ap.add_argument("--start-timeout", type=float, default=240.0, help="seconds to wait for the replicas")
    ap.add_argument("--print-config", action="store_true",
                    help="print the nginx site config (for /etc/nginx/conf.d/) for the replicas given and exit")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.replicas < 0:
        sys.exit("--replicas must be 0 or more")

    if args.print_config:
        servers = list(args.upstream)
        if args.replicas and not args.upstream:
            base = args.base_port or 8501
            servers = [f"{args.replica_host}:{base + i}" for i in range(args.replicas)]
        if not servers:
            sys.exit("--print-config needs --upstream HOST:PORT (or --replicas N --base-port P)")
        print(nginx.site(f"{args.host}:{args.port}" if args.host not in ("", "0.0.0.0") else str(args.port),
                         servers=servers, sticky=args.sticky), end="")
        return 0

    proxy = not args.no_proxy
    if args.replicas and not (args.app_dir / "serve.py").exists():
        sys.exit(f"no serve.py in {args.app_dir}")
    if args.replicas == 0 and not args.upstream:
        sys.exit("nothing to serve: --replicas 0 and no --upstream")
    if proxy and not shutil.which(args.nginx) and not os.path.exists(args.nginx):
        sys.exit(f"nginx not found ({args.nginx}); install Debian's: apt-get install -y nginx")
    if proxy and not port_free(args.host, args.port):
        sys.exit(f"port {args.port} on {args.host} is taken; choose another with --port")

    own_dir = args.workdir is None
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="k3-deploy-"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o755)        # nginx's workers (user nobody when run as root) use its tmp/ dir
    replicas = []
    for i in range(args.replicas):
        port = args.base_port + i if args.base_port else free_port(args.replica_host)
        if not port_free(args.replica_host, port):
            sys.exit(f"replica port {port} on {args.replica_host} is taken")
        replicas.append(Replica(i + 1, args.replica_host, port, workdir / f"replica-{i + 1}.log"))
    for j, up in enumerate(args.upstream):
        host, _, port = up.rpartition(":")
        if not host or not port.isdigit():
            sys.exit(f"--upstream wants HOST:PORT, not {up!r}")
        replicas.append(Replica(args.replicas + j + 1, host, int(port), workdir / "unused.log", local=False))

    dep = Deployment(replicas, args.host, args.port, args.sticky, workdir,
                     os.environ.get("STREAMLIT_SERVER_COOKIE_SECRET") or secrets.token_hex(32), proxy=proxy,
                     health_interval=args.health_interval, health_fails=args.health_fails,
                     restart=args.restart, nginx_bin=args.nginx, app_dir=args.app_dir,
                     database_url=args.database_url)

    def on_signal(signum, frame):
        if not dep.stop_event.is_set():
            log(f"{signal.Signals(signum).name}: stopping")
        dep.stop_event.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    rc = 0
    try:
        for r in replicas:
            if r.local:
                dep.start_replica(r)
        log(f"started {args.replicas} replica(s); logs in {workdir}")
        dep.wait_replicas(args.start_timeout)
        if not dep.stop_event.is_set() and not args.no_warm and args.replicas:
            dep.warm()
        for r in replicas:
            if not r.local and not healthy(r.addr):
                log(f"upstream {r.addr} does not answer /_stcore/health yet: it joins when it does")
                dep.down.add(r.addr)
        if proxy and not dep.stop_event.is_set():
            dep.start_nginx()
            log(f"nginx (pid {dep.nginx_proc.pid}) in front of {len(replicas)} replica(s): "
                + ", ".join(r.addr for r in replicas))
            print(f"K3 Explorer is served at {dep.url}  (Ctrl+C stops everything)", flush=True)
        elif not dep.stop_event.is_set():
            print("replicas: " + " ".join(f"http://{r.addr}/" for r in replicas if r.local)
                  + "  (Ctrl+C stops them)", flush=True)
        if not dep.stop_event.is_set():
            rc = dep.serve(args.status_file)
    except RuntimeError as e:
        log(f"error: {e}")
        rc = 1
    finally:
        dep.shutdown()
        if args.status_file:
            try:
                os.unlink(args.status_file)
            except OSError:
                pass
        if own_dir and not args.keep_dir:
            shutil.rmtree(workdir, ignore_errors=True)
        elif args.keep_dir or not own_dir:
            log(f"config and logs kept in {workdir}")
        log("stopped")
    return rc
