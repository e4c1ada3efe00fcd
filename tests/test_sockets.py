"""deploy/sockets.py: the server's connections send without Nagle's algorithm (why: that module's docstring)."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deploy.sockets import nodelay_listeners

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="lists descriptors through /proc (Linux)")


def nodelay(sock: socket.socket) -> bool:
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


def listener() -> socket.socket:
    """Bound and listening as Streamlit binds its own: protocol 0, which asyncio leaves with Nagle's algorithm on."""
    sock = socket.socket(family=socket.AF_INET)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_listening_sockets_connections_send_at_once_and_nothing_else_changes():
    lst, other = listener(), listener()
    client_before = socket.create_connection(other.getsockname())
    accepted_before, _ = other.accept()
    try:
        assert not nodelay(accepted_before), "a fresh socket has Nagle's algorithm on: this test would prove nothing"
        assert nodelay_listeners() >= 2
        assert nodelay(lst) and nodelay(other)
        client = socket.create_connection(lst.getsockname())
        accepted, _ = lst.accept()
        with client, accepted:
            assert nodelay(accepted), "a connection accepted afterwards inherits the option"
            assert not nodelay(client), "a socket that does not listen keeps its own setting"
        assert not nodelay(client_before) and not nodelay(accepted_before)
        assert lst.getsockname()[1] > 0, "the listener stays open"
    finally:
        for sock in (lst, other, client_before, accepted_before):
            sock.close()


def test_serve_py_turns_it_on_for_the_socket_bound_before_it_is_imported():
    code = textwrap.dedent("""
        import socket
        lst = socket.socket(family=socket.AF_INET)
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        assert not lst.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        import serve
        print(lst.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "1"
