"""A Streamlit client without a browser: it speaks the app's own websocket protocol.

The browser and a Streamlit server talk over one websocket at `/_stcore/stream` in protobuf messages
(`streamlit.proto`): the browser sends `BackMsg`s, the server answers with `ForwardMsg`s. This module
does what the browser's connection manager does, and nothing it draws:

- connect with the subprotocol "streamlit" (the browser also passes an XSRF token and, when it
  reconnects, its old session id, as the 2nd and 3rd subprotocol entries; neither is needed here);
- open a page: `BackMsg.rerun_script` with a `ClientState` holding the link's query string and the
  page's url path (`page_name`), as a browser does on its first run;
- change a widget: `rerun_script` with the page's `page_script_hash`, the current query string (the
  app writes it back with `ForwardMsg.page_info_changed`, and the browser sends the address bar's),
  the widget's new `WidgetState` and, for a widget drawn inside an `st.fragment`, the fragment's id
  (the server then reruns only the fragment);
- a run ends with `ForwardMsg.script_finished`: FINISHED_SUCCESSFULLY or
  FINISHED_FRAGMENT_RUN_SUCCESSFULLY (FINISHED_EARLY_FOR_RERUN means another run follows at once,
  e.g. after `st.rerun()`, so the wait goes on).

Only the changed widget's state is sent: for a widget the message does not mention, the server keeps
the value of the previous run (SessionState falls back to its old state), so the result is the same
as the browser's full list. Message caching (`cached_message_hashes`) is not used: the server sends
every element in full, which is what a browser gets on its first visit, so a run costs the server
at least as much as a browser's.

Used by `python -m deploy` (warm-up of each replica) and by `bench/capacity.py` (many students).
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
import urllib.parse
from dataclasses import dataclass, field

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

from deploy.nginx import COOKIE

FINISHED = {ForwardMsg.FINISHED_SUCCESSFULLY: "full", ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY: "fragment",
            ForwardMsg.FINISHED_WITH_COMPILE_ERROR: "compile-error"}
SIDEBAR = 1                     # delta_path[0] of the sidebar's elements (0 is the main area)


@dataclass
class Widget:
    id: str
    kind: str                   # the Element oneof name: slider, checkbox, button, button_group, radio, ...
    key: str                    # the user key (the part of the id after the hash), or ""
    label: str
    proto: object               # the element's protobuf (slider, checkbox, ...)
    fragment_id: str            # "" outside a fragment
    sidebar: bool


@dataclass
class Run:
    """One script run as the client saw it."""
    seconds: float              # from sending the BackMsg to script_finished
    status: str                 # "full", "fragment", "compile-error", "disconnected", "timeout"
    messages: int = 0
    bytes: int = 0
    exceptions: list[str] = field(default_factory=list)   # st.exception elements (tracebacks on the page)
    alerts: list[str] = field(default_factory=list)       # st.info / warning / error bodies
    texts: list[str] = field(default_factory=list)        # markdown, headings, widget options, ...
    fragments: set[str] = field(default_factory=set)      # the fragments whose elements the run drew

    @property
    def ok(self) -> bool:
        return self.status in ("full", "fragment") and not self.exceptions


def widget_key(widget_id: str) -> str:
    """`$$ID-<hash>-<user key>` -> the user key ("" when the widget has none)."""
    parts = widget_id.split("-", 2)
    return parts[2] if len(parts) == 3 and widget_id.startswith("$$ID") else ""


def _texts_of(kind: str, el) -> list[str]:
    out = []
    for attr in ("body", "label", "placeholder"):
        v = getattr(el, attr, None)
        if isinstance(v, str) and v:
            out.append(v)
    if kind == "button_group":
        out.extend(o.content for o in el.options)
    elif kind in ("radio", "selectbox", "multiselect"):
        out.extend(str(o) for o in el.options)
    if kind in ("text_area", "text_input"):
        try:
            if el.HasField("value"):
                out.append(el.value)
        except ValueError:
            pass
    return out


class Session:
    """One browser tab's worth of protocol: a websocket to one Streamlit server (or a proxy)."""

    def __init__(self, base_url: str, cookie: str | None = None, timeout: float = 300.0):
        u = urllib.parse.urlsplit(base_url)
        self.http_base = f"{u.scheme}://{u.netloc}{u.path.rstrip('/')}/"
        self.ws_url = f"{'wss' if u.scheme == 'https' else 'ws'}://{u.netloc}{u.path.rstrip('/')}/_stcore/stream"
        self.cookie, self.timeout = cookie, timeout
        self.ws = None
        self.query_string = ""
        self.page_script_hash = ""
        self.pages: dict[str, str] = {}          # url path -> page_script_hash ("" is the default page)
        self.widgets: dict[str, Widget] = {}     # widget id -> Widget, as last drawn
        self._sent: dict[str, WidgetState] = {}  # widget id -> the state this page last sent it
        self._queue: asyncio.Queue = asyncio.Queue()
        self._reader: asyncio.Task | None = None
        self._lost = asyncio.Event()
        self.replica = ""                        # the proxy's X-K3-Replica answer to the handshake, if any

    async def connect(self) -> None:
        import websockets
        headers = {"Cookie": self.cookie} if self.cookie else None
        try:
            self.ws = await websockets.connect(self.ws_url, subprotocols=["streamlit"], max_size=None,
                                               additional_headers=headers, open_timeout=self.timeout,
                                               ping_interval=None)
        except BaseException:
            self._lost.set()                      # never connected counts as lost
            raise
        try:
            answer = self.ws.response.headers
            self.replica = answer.get("X-K3-Replica", "")
            for value in answer.get_all("Set-Cookie"):        # the proxy pins this tab to a replica, as a browser's
                name, _, rest = value.partition("=")
                if name.strip() == COOKIE:
                    self.cookie = f"{COOKIE}={rest.split(';')[0].strip()}"
        except AttributeError:
            pass
        self._reader = asyncio.create_task(self._read())

    async def close(self) -> None:
        if self.ws is not None:
            try:
                await self.ws.close()
            except Exception:                     # noqa: BLE001  (already gone)
                pass
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                msg = ForwardMsg()
                msg.ParseFromString(data)
                self._queue.put_nowait((len(data), msg))
        except Exception:                         # noqa: BLE001  (connection lost: the waiter sees None)
            pass
        finally:
            self._lost.set()
            self._queue.put_nowait((0, None))

    # ---- the two things a student does -------------------------------------------------------------

    async def open(self, page: str = "", query: str | dict = "") -> Run:
        """Navigate to a page (url path, "" for the default page) with a link's query string."""
        if isinstance(query, dict):
            query = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        bm = BackMsg()
        cs = bm.rerun_script
        cs.query_string = query
        cs.page_name = page
        if page in self.pages:
            cs.page_script_hash = self.pages[page]
        cs.context_info.timezone = "UTC"
        cs.context_info.locale = "en-US"
        cs.context_info.url = self.http_base + page + ("?" + query if query else "")
        self._sent.clear()
        return await self._run(bm)

    @property
    def lost(self) -> bool:
        """The websocket is gone (the server or the proxy closed it)."""
        return self._lost.is_set()

    async def wait_lost(self, timeout: float) -> bool:
        """Sleep up to `timeout` s (a student thinking); True at once if the connection drops."""
        try:
            await asyncio.wait_for(self._lost.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def find(self, key: str) -> Widget | None:
        for w in self.widgets.values():
            if w.key == key:
                return w
        return None

    async def set_widget(self, widget: Widget, state: WidgetState) -> Run:
        """The person changed one widget: rerun (only its fragment when it is in one)."""
        bm = BackMsg()
        cs = bm.rerun_script
        cs.query_string = self.query_string
        cs.page_script_hash = self.page_script_hash
        cs.widget_states.widgets.append(state)
        if widget.fragment_id:
            cs.fragment_id = widget.fragment_id
        cs.context_info.timezone = "UTC"
        cs.context_info.locale = "en-US"
        cs.context_info.url = self.http_base + "?" + self.query_string
        self._sent[state.id] = state
        return await self._run(bm)

    # ---- internals ----------------------------------------------------------------------------------

    async def _run(self, bm: BackMsg) -> Run:
        while not self._queue.empty():           # anything left from an earlier run
            n, msg = self._queue.get_nowait()
            if msg is None:
                self._queue.put_nowait((0, None))
                break
            self._handle(msg, None, {})
        t0 = time.perf_counter()
        run = Run(0.0, "timeout")
        seen: dict[str, Widget] = {}
        try:
            await self.ws.send(bm.SerializeToString())
        except Exception:                         # noqa: BLE001
            run.status = "disconnected"
            run.seconds = time.perf_counter() - t0
            return run
        deadline = t0 + self.timeout
        while True:
            try:
                n, msg = await asyncio.wait_for(self._queue.get(), max(deadline - time.perf_counter(), 0.001))
            except asyncio.TimeoutError:
                run.status = "timeout"
                break
            if msg is None:
                self._queue.put_nowait((0, None))  # stays lost for the next call too
                run.status = "disconnected"
                break
            run.messages += 1
            run.bytes += n
            done = self._handle(msg, run, seen)
            if done:
                run.status = done
                break
        run.seconds = time.perf_counter() - t0
        # the widgets on the page now: a full run redrew them all, a fragment run only its own. The
        # server redraws a widget with its default, not the value the person set (the browser keeps
        # that), so the value this session sent is put back, as the browser shows it.
        seen = {wid: _with_state(w, self._sent[wid]) if wid in self._sent else w for wid, w in seen.items()}
        if run.status == "full":
            self.widgets = seen
        elif run.status == "fragment":
            # the fragments that ran (a callback may rerun another one than the widget's, by its key): their
            # widgets are what the run drew; the others' stay
            ran = run.fragments or {bm.rerun_script.fragment_id}
            self.widgets = {k: w for k, w in self.widgets.items() if w.fragment_id not in ran}
            self.widgets.update(seen)
        else:
            self.widgets.update(seen)
        return run

    def _handle(self, msg: ForwardMsg, run: Run | None, seen: dict) -> str | None:
        t = msg.WhichOneof("type")
        if t == "new_session":
            ns = msg.new_session
            self.page_script_hash = ns.page_script_hash or self.page_script_hash
        elif t == "navigation":
            self.page_script_hash = msg.navigation.page_script_hash or self.page_script_hash
            for p in msg.navigation.app_pages:
                self.pages[p.url_pathname] = p.page_script_hash
        elif t == "page_info_changed":
            self.query_string = msg.page_info_changed.query_string
        elif t == "delta" and run is not None and msg.delta.fragment_id:
            run.fragments.add(msg.delta.fragment_id)
        if t == "delta" and msg.delta.WhichOneof("type") == "new_element":
            el = msg.delta.new_element
            kind = el.WhichOneof("type")
            sub = getattr(el, kind) if kind else None
            if sub is None:
                return None
            if run is not None:
                if kind == "exception":
                    run.exceptions.append(f"{sub.type}: {sub.message}")
                elif kind == "alert":
                    run.alerts.append(sub.body)
                run.texts.extend(_texts_of(kind, sub))
            wid = getattr(sub, "id", "") if kind != "exception" else ""
            if isinstance(wid, str) and wid.startswith("$$ID"):
                path = list(msg.metadata.delta_path)
                seen[wid] = Widget(wid, kind, widget_key(wid), getattr(sub, "label", ""), sub,
                                           msg.delta.fragment_id, bool(path) and path[0] == SIDEBAR)
        elif t == "script_finished":
            return FINISHED.get(msg.script_finished)   # None for FINISHED_EARLY_FOR_RERUN: keep waiting
        return None


def _with_state(w: Widget, s: WidgetState) -> Widget:
    """`w` showing the value `s` set (unless the app itself set one since)."""
    if getattr(w.proto, "set_value", False):
        return w
    p = type(w.proto)()
    p.CopyFrom(w.proto)
    if w.kind == "slider" and len(p.options):       # st.select_slider: labels -> option indices
        labels = list(p.options)
        del p.value[:]
        p.value.extend(float(labels.index(x)) for x in s.string_array_value.data if x in labels)
    elif w.kind == "slider":
        del p.value[:]
        p.value.extend(s.double_array_value.data)
    elif w.kind == "checkbox":
        p.value = s.bool_value
    elif w.kind == "button_group":
        del p.raw_values[:]
        p.raw_values.extend(s.string_array_value.data)
    elif w.kind in ("radio", "selectbox"):
        p.raw_value = s.string_value
    else:
        return w
    p.set_value = True
    return dataclasses.replace(w, proto=p)


# ---- a widget's next value, as a person would set it --------------------------------------------------

def next_state(w: Widget, rng) -> WidgetState | None:
    """A WidgetState that changes `w` the way one click or key press would, or None if not supported."""
    s = WidgetState(id=w.id)
    p = w.proto
    if getattr(p, "disabled", False):
        return None
    if w.kind == "slider" and len(p.options):      # st.select_slider: the options' labels
        opts = list(p.options)
        idx = [int(x) for x in (p.value if p.set_value and len(p.value) else p.default)] or [0]
        idx[0] = idx[0] + 1 if idx[0] + 1 < len(opts) else idx[0] - 1
        if not 0 <= idx[0] < len(opts) or (len(idx) > 1 and idx[0] > idx[1]):
            return None
        s.string_array_value.data.extend(opts[i] for i in idx)
    elif w.kind == "slider":
        if p.data_type not in (p.INT, p.FLOAT) or not p.step:
            return None
        cur = list(p.value) if p.set_value and len(p.value) else list(p.default)
        if not cur:
            return None
        v = cur[0] + p.step if cur[0] + p.step <= p.max else cur[0] - p.step
        cur[0] = v
        s.double_array_value.data.extend(cur)
    elif w.kind == "checkbox":
        cur = p.value if p.set_value else p.default
        s.bool_value = not cur
    elif w.kind == "button":
        s.trigger_value = True
    elif w.kind == "button_group":
        opts = [o.content for o in p.options]
        cur = list(p.raw_values) if p.set_value else [opts[i] for i in p.default if i < len(opts)]
        if p.click_mode == p.MULTI_SELECT:        # pills with several on: toggle one
            o = rng.choice(opts)
            s.string_array_value.data.extend([c for c in cur if c != o] if o in cur else cur + [o])
            return s
        others = [o for o in opts if o not in cur]
        if not others:
            return None
        s.string_array_value.data.append(rng.choice(others))
    elif w.kind in ("radio", "selectbox"):
        opts = list(p.options)
        cur = p.raw_value if p.set_value and p.HasField("raw_value") else (
            opts[p.default] if p.HasField("default") and p.default < len(opts) else None)
        others = [o for o in opts if o != cur]
        if not others:
            return None
        s.string_value = rng.choice(others)
    else:
        return None
    return s


async def warm(base_url: str, page: str = "routing", timeout: float = 300.0) -> Run:
    """Open one page once (the first run of a fresh server loads the live model) and disconnect."""
    s = Session(base_url, timeout=timeout)
    await s.connect()
    try:
        return await s.open(page)
    finally:
        await s.close()
