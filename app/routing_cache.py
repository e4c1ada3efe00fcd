"""The Routing explorer's calls into the live model, each answered from a cache: the re-routed run (app.live's),
the runs one nudge away computed while the server is idle, and the held-out sample's routing, once per process
and kept on disk across server starts (the only Streamlit here: st.cache_resource). The data they return is
app/routing.py's and app/routing_heldout.py's."""
from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path

import streamlit as st

from app import assets
from app.routing import TABLE_FORMATS, Rerouting, neighbours, normalise
from app.routing_heldout import (
    HeldOut,
    expert_on_heldout,
    heldout_key,
    heldout_summary,
    load_heldout,
    model_code_digest,
    save_heldout,
    summary_ids,
)
from model.k3 import K3Output, RunOptions

_LOG = logging.getLogger(__name__)


def rerouted(ids, layer: int, settings: Rerouting) -> K3Output | None:
    """The live model re-run with the settings from the first layer they touch (app.live.resume:
    model.resume reuses every earlier layer of the cached base forward); None when they change nothing."""
    from app import live
    plan = settings.plan(layer, live.live().model.cfg)
    if plan is None:
        return None
    start, routing = plan
    return live.resume(ids, start, RunOptions(routing))


def layer_run(ids, layer: int, settings: Rerouting):
    """(plan, base forward, the forward shown) of the layer view: the re-routed run when the settings change this
    layer on (Rerouting.plan; None and the base forward twice when they do not)."""
    from app import live
    base = live.forward(ids)
    plan = settings.plan(layer, live.live().model.cfg)
    if plan is None:
        return None, base, base
    return plan, base, rerouted(ids, layer, settings)     # its spinner, while it computes: app.live


def prefetch_neighbours(ids, layer: int, settings: Rerouting, expert: int | None = None, then=None,
                        first=(), last=()) -> None:
    """Ask app.live to compute, while the server is idle, the re-runs of the settings one nudge away; with
    `then`, each is followed by then(nudged settings, run) (the page building what it would show); `first` and
    `last`: functions of the base forward to call when idle too, before and after them (app.live.prefetch)."""
    from app import live
    cfg = live.live().model.cfg
    runs = []
    for n in neighbours(settings, expert):
        nudged = normalise(n, cfg)[0]
        plan = nudged.plan(layer, cfg)
        if plan is not None:
            follow = (lambda run, nudged=nudged: then(nudged, run)) if then is not None else None
            runs.append((plan[0], RunOptions(plan[1])) + ((follow,) if follow else ()))
    live.prefetch(ids, runs, first=first, last=last)


_SOON = {"started": False}
_SOON_LOCK = threading.Lock()


def heldout_soon() -> bool:
    """Queue heldout() as a background job a page will wait for (app/jobs.py, AWAITED), once per process, so
    that the held-out sample is routed while the page draws rather than after it (the Routing explorer's first
    visit on a fresh server paid ~2.6 s for it at the end). Whoever asks heldout() meanwhile waits for this
    computation (the cache computes a value once). False when it was queued before."""
    with _SOON_LOCK:
        if _SOON["started"]:
            return False
        _SOON["started"] = True
    from app import jobs
    jobs.submit(jobs.Kind.AWAITED, "the held-out sample's routing", _heldout_quietly)
    return True


def _heldout_quietly() -> None:
    try:
        heldout()
    except Exception as e:                  # noqa: BLE001 - the page calls heldout() itself and says why
        _LOG.warning("routing the held-out sample in the background failed: %s", e)


# the summary of the trained model, kept across server starts (app/routing_heldout.py); var/ is the app's own
CACHE_DIR = Path(__file__).resolve().parent.parent / "var" / "cache"


@st.cache_resource(show_spinner=False)
def heldout() -> HeldOut:
    from app.live import awaited, computing_politely, live
    from model.checkpoint import CheckpointError, read_card
    lv = live()
    text = assets.read_text(assets.HELDOUT)
    ids = lv.tokenizer.encode(text)
    cfg = lv.model.cfg
    path = key = None
    if lv.pretrained:                   # a random stand-in model is not kept: it has no checksum to key it
        try:
            key = heldout_key(read_card()["sha256"], model_code_digest(), text)
            path = CACHE_DIR / f"heldout-{key[:16]}.safetensors"
        except (CheckpointError, KeyError, TypeError):
            key = None
    held = load_heldout(path, key, summary_ids(ids), cfg.moe_layers, cfg.n_routed_experts) if key else None
    if held is None:
        # ~1,000 tokens through 93 layers, 1.6-1.9 s on this machine's one thread per computation (longer beside a
        # page being drawn), in two forwards that each let a computation that is under way or waiting go first
        # (the server's warm-up runs this unasked, beside the visitors' pages: two intra-op threads here made both
        # slower)
        with awaited():                 # the idle-time prefetch waits: the page that asks for this waits for it
            held = heldout_summary(lv.model, ids, batch=4, guard=computing_politely)
        if key:
            try:
                save_heldout(held, path, key)
                for old in path.parent.glob("heldout-*.safetensors"):       # an earlier model's or sample's
                    if old != path:
                        old.unlink(missing_ok=True)
            except OSError as e:        # a read-only folder: the next start computes it again
                _LOG.warning("the held-out summary could not be kept in %s: %s", path, e)
    _SOON["ready"] = True
    return held


def heldout_ready() -> bool:
    """Whether heldout() has been computed in this process (a page then needs no spinner for it)."""
    return _SOON.get("ready", False)


@functools.lru_cache(maxsize=512)
def heldout_table(layer: int, expert: int) -> str:
    """The expert panel's held-out table (expert_on_heldout) as the Markdown ui.table draws, written once per
    process for each (layer, expert) it is asked for (~1 KB each)."""
    from app import ui
    from app.live import live
    return ui.table_markdown(expert_on_heldout(heldout(), layer, expert, live().tokenizer.pieces), TABLE_FORMATS)
