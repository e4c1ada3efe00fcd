"""nginx configuration for K3 Explorer replicas: generated here, one definition for every use.

- `site(...)`: the http-context part (maps, the upstream of replicas, the server block). It is what
  goes into `/etc/nginx/conf.d/` on a real proxy machine (`python -m deploy --print-config`), and
  `deploy/k3-explorer.conf` is its rendering for two replicas on this machine (a test keeps that file
  equal to this function's output).
- `main(...)`: a whole nginx.conf for a private nginx that `python -m deploy` runs from a temp dir
  (pid, logs and temp files in that dir; /etc/nginx is never read or written).

What the site does, and why:

- Websockets: Streamlit's session lives on one websocket (`/_stcore/stream`); the proxy speaks HTTP/1.1
  to the replicas and passes `Upgrade`/`Connection` on, and the original `Host` (with its port:
  Streamlit accepts a websocket whose `Origin` matches `Host`).
- Long-lived connections: read/send timeouts of an hour (Streamlit pings every websocket every 30 s,
  so an idle student's socket is never idle for nginx); connect timeout 3 s, so a replica that does not
  answer is skipped quickly.
- Sticky routing per browser, balanced: a session exists in one replica's memory only, and so do the files it
  serves (CSV downloads under /media). A browser without the `k3_replica` cookie goes to the replica with the
  fewest open connections (`least_conn`: a session's websocket stays open, so that is the replica with the fewest
  sessions), and the response sets the cookie to that replica's name (`r0`, `r1`, ... in the order given); every
  later request of that browser (page, websocket, downloads) goes to the replica its cookie names, through that
  replica's own upstream, whose other replicas are its `backup`s. Hashing a random cookie over the replicas, as
  this did before, split a class of 40 as unevenly as 12 and 29 (and its interaction p95 rose with the larger
  share: 0.58 s at 21/20, 0.97 s at 12/29; bench/class_capacity.py). `ip_hash` is the alternative
  (`sticky="ip"`), but a school usually sits behind one NAT address, and then ip_hash sends every student to one
  replica. A cookie that names no replica (an old one, a forged one) counts as none: the map only ever routes to
  the upstreams written here.
- Health: open-source nginx has only *passive* checks: a replica that refuses or times out is marked
  failed for `fail_timeout` after `max_fails` errors, and the request is retried on the next replica
  (`proxy_next_upstream`; for a browser pinned to it, its backups), so a browser whose replica died reconnects to
  a live one, and the response re-pins its cookie there. Active checks
  (polling `/_stcore/health`) are the launcher's job: `python -m deploy` polls every replica and
  rewrites the upstream list with `down` on the failing ones, then reloads nginx (a reload keeps the open
  websockets on the old workers).
- Query strings pass through unchanged; request lines up to 16 KB are accepted
  (`large_client_header_buffers`), the size uvicorn (Streamlit's server) accepts, so a long link behaves
  through the proxy as it does directly.
- `X-K3-Replica` on every response names the replica that answered (for the tests and for debugging;
  remove the line to hide the internal addresses).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

COOKIE = "k3_replica"
UPSTREAM = "k3_replicas"
REPLICA_HEADER = "X-K3-Replica"


def names(servers: Sequence[str]) -> list[str]:
    """The replicas' names in the cookie: r0, r1, ... in the order given."""
    return [f"r{i}" for i in range(len(servers))]


def upstream(servers: Sequence[str], sticky: str = "cookie", down: Iterable[str] = (),
             max_fails: int = 2, fail_timeout: int = 10) -> str:
    """What depends on the replica list: the upstream of all replicas (`least_conn`, or `ip_hash`), with `sticky`
    "cookie" one upstream per replica (it, then the others as backups) and the maps from a cookie to that upstream
    and from the replica that answered to its name. Those in `down` are marked down; every replica is listed even
    when down, so that names and places stay."""
    if not servers:
        raise ValueError("at least one replica address is needed")
    if sticky not in ("cookie", "ip"):
        raise ValueError(f"sticky must be 'cookie' or 'ip', not {sticky!r}")
    down = set(down)
    if down >= set(servers):                 # never take every replica out: let passive checks decide
        down = set()

    def server(s: str, backup: bool = False) -> str:
        return (f"    server {s} max_fails={max_fails} fail_timeout={fail_timeout}s"
                + (" backup" if backup else "") + (" down;" if s in down else ";"))

    method = "least_conn;" if sticky == "cookie" else "ip_hash;"
    lines = [f"upstream {UPSTREAM} {{",
             f"    {method}",
             f"    zone {UPSTREAM} 64k;           # the connection counts, shared by nginx's workers"]
    lines += [server(s) for s in servers]
    lines += ["    keepalive 32;                  # idle HTTP/1.1 connections kept open to the replicas",
              "}"]
    pinned = names(servers) if sticky == "cookie" else []
    for name, s in zip(pinned, servers):
        lines += [f"upstream {UPSTREAM}_{name} {{", server(s)]
        lines += [server(o, backup=True) for o in servers if o != s]
        lines += ["    keepalive 8;", "}"]
    lines += [f"map $cookie_{COOKIE} $k3_upstream {{", f"    default {UPSTREAM};"]
    lines += [f"    {name} {UPSTREAM}_{name};" for name in pinned]
    # the replica that answered: the last of $upstream_addr's list (after a retry it names every one it tried)
    lines += ["}", "map $upstream_addr $k3_answered {", "    default '';"]
    lines += [f'    "~(^|, ){re.escape(s)}$" {name};' for name, s in zip(pinned, servers)]
    lines += ["}"]
    return "\n".join(lines) + "\n"


def site(listen: str, servers: Sequence[str] | None = None, sticky: str = "cookie",
         upstream_include: str | None = None, down: Iterable[str] = ()) -> str:
    """The http-context configuration. Either `servers` (the upstreams and their maps written inline) or
    `upstream_include` (a file holding them, which the launcher rewrites)."""
    if (servers is None) == (upstream_include is None):
        raise ValueError("give either servers or upstream_include")
    up = upstream(servers, sticky, down) if servers is not None else f"include {upstream_include};\n"
    return f"""\
# K3 Explorer behind nginx: N Streamlit replicas, websockets, sticky balanced sessions, passive health checks.
# Generated by deploy/nginx.py (python -m deploy --print-config); see docs/DEPLOY.md.

# "upgrade" for a websocket handshake; otherwise empty, which keeps upstream keepalive working.
map $http_upgrade $k3_connection {{
    default upgrade;
    ''      '';
}}

# The {COOKIE} cookie names the replica that answered, set whenever it named another one (or none).
map "$cookie_{COOKIE}:$k3_answered" $k3_set_cookie {{
    default '';
    "~^(r[0-9]+):\\1$" '';
    "~:(?<k3_now>r[0-9]+)$" "{COOKIE}=$k3_now; Path=/; HttpOnly; SameSite=Lax";
}}

{up}
server {{
    listen {listen};
    server_name _;

    large_client_header_buffers 4 16k;   # long links: as much as uvicorn accepts directly
    client_max_body_size 200m;           # Streamlit's own upload limit (server.maxUploadSize)

    location / {{
        proxy_pass http://$k3_upstream;  # the browser's replica, or the least busy one for a new browser
        proxy_http_version 1.1;
        proxy_set_header Upgrade $http_upgrade;
        proxy_set_header Connection $k3_connection;
        proxy_set_header Host $http_host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        proxy_set_header X-Forwarded-Proto $scheme;

        proxy_connect_timeout 3s;        # a dead or hung replica is skipped quickly
        proxy_read_timeout 1h;           # websockets live as long as the lesson (pinged every 30 s)
        proxy_send_timeout 1h;
        proxy_buffering off;             # pass messages on as they come
        proxy_next_upstream error timeout http_502 http_503 http_504;
        proxy_next_upstream_tries 0;     # try every replica before giving up

        add_header Set-Cookie $k3_set_cookie always;   # empty (not sent) while it names this replica
        add_header {REPLICA_HEADER} $upstream_addr always;
    }}
}}
"""


def main(prefix: str, site_file: str, workers: int = 1) -> str:
    """A whole nginx.conf whose pid, logs and temp files all live under `prefix` (a directory)."""
    return f"""\
# Private nginx for python -m deploy: everything under {prefix}; /etc/nginx is not used.
worker_processes {workers};
pid {prefix}/nginx.pid;
error_log {prefix}/error.log notice;
worker_shutdown_timeout 10m;   # after a reload, old workers close their websockets within 10 min
                               # (the browsers reconnect to the same replica and session)

events {{
    worker_connections 4096;   # two per websocket (browser side and replica side)
}}

http {{
    default_type application/octet-stream;
    log_format k3 '$remote_addr [$time_local] "$request" $status $body_bytes_sent '
                  'replica=$upstream_addr $request_time s';
    access_log {prefix}/access.log k3;
    client_body_temp_path {prefix}/tmp/client_body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;

    include {site_file};
}}
"""
