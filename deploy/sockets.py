"""Nagle's algorithm off on the server's listening socket, so that every connection it accepts sends at once.

Streamlit binds its listening socket itself (`socket.socket(family)`, protocol 0), and asyncio turns Nagle's
algorithm off only on sockets whose protocol is IPPROTO_TCP, so uvicorn's connections keep it on. A response
written in two parts, headers and then the body (every static file), then waits on a kept-alive connection until
the client acknowledges the first part, which a client delays by up to 40 ms on Linux (up to 200 ms on Windows). A
browser's first visit fetches ~60 script files over six connections: measured here, a kept-alive request for a
small script took 43-45 ms with Nagle's algorithm on and 2-3 ms with it off, and a fresh server's first visit to the
Routing explorer 2.45-2.62 s against 2.74-3.07 s (docs/PERFORMANCE.md). nginx's kept-alive connections to the
replicas meet the same wait.

serve.py calls `nodelay_listeners()` when uvicorn imports it, after Streamlit has bound the socket and before it
accepts a connection; Linux copies the option from a listening socket to each connection it accepts.
"""
from __future__ import annotations

import os
import socket

FDS = "/proc/self/fd"


def nodelay_listeners() -> int:
    """Turn Nagle's algorithm off on every listening TCP socket of this process; returns how many. Where the
    process's descriptors cannot be listed (not Linux), nothing changes and 0 is returned."""
    try:
        fds = [int(name) for name in os.listdir(FDS)]
    except OSError:
        return 0
    done = 0
    for fd in fds:
        try:
            dup = os.dup(fd)                             # closing a duplicate leaves the server's own open
        except OSError:                                  # closed since it was listed (the listing's own)
            continue
        try:
            sock = socket.socket(fileno=dup)
        except OSError:                                  # not a socket
            os.close(dup)
            continue
        try:
            if (sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM
                    and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                done += 1
        except OSError:
            pass
        finally:
            sock.close()
    return done
