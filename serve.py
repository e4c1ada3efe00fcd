"""The K3 Explorer server: `python -m streamlit run serve.py` (the README's start command; deploy/ starts every
replica so).

It serves streamlit_app.py's pages exactly as `streamlit run streamlit_app.py` does, and first, before it answers
anyone, prepares what a fresh server's first visitor would otherwise wait for on that visit (app/warm.py
`before_first_visit`: the pages' libraries, the live model, its compiled kernels, the held-out routing, the default
views that take longest), 6-8 s on this machine once per start. A shared link to the Routing explorer opened on a
server just started then waits for none of it (docs/PERFORMANCE.md, first visits).
`streamlit run` finds `app` below, an st.App, and serves it with uvicorn, which accepts connections once the
lifespan's start-up has returned: the health check answers when the server is ready, not before.
K3_WARM=0 (the tests' servers) skips the preparation, and the server starts at once.
"""
from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager

import streamlit as st

from deploy.sockets import nodelay_listeners

_LOG = logging.getLogger("k3.serve")
# uvicorn imports this file after Streamlit has bound the listening socket and before it accepts anyone: from here on
# every connection sends without Nagle's wait (deploy/sockets.py; a first visit's ~60 script files, ~0.4 s)
nodelay_listeners()


@asynccontextmanager
async def _lifespan(_app):
    from app import warm
    t0 = time.perf_counter()
    done = await asyncio.to_thread(warm.before_first_visit)       # the event loop stays free meanwhile
    if done:
        failed = {k: v for k, v in done.items() if isinstance(v, str)}
        _LOG.warning("K3 Explorer: ready for the first visit in %.1f s%s", time.perf_counter() - t0,
                     "".join(f"; {k} failed ({v}): pages compute it themselves" for k, v in failed.items()))
    yield


app = st.App("streamlit_app.py", lifespan=_lifespan)
