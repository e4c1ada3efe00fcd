"""What the Routing explorer builds from a run, kept beside it (app.live.derived): one builder per region of
the page (run_view for the results, layer_view_of for the layer view), which the page draws and the
idle-time prefetch calls on the runs one nudge away (build_ahead, layer_ahead), so a nudge finds its charts
built and their data converted, not only its run computed. No Streamlit calls: this runs on the background
jobs' thread too."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app import routing as rt
from app import ui
from app.charts import routing as charts
from app.charts.linked import linked_figure
from app.live import derived, forward, live
from app.routing_cache import heldout_ready, heldout_table
from app.text import token_text
from model.k3 import RunOptions

VIEW = "views/routing.py"


def _cfg():
    return live().model.cfg


def changed_chart(base, run, token: int, start: int, note: str | None):
    def make():
        diff = rt.changed_choices(base, run, token, start)
        return diff, charts.changed_spec(diff, note)
    return derived(run, ("changed", token, start, note), make)


def predictions_chart(base, run, token: int, theme: str | None, rerouted: bool) -> dict:
    def make():
        pieces_of = live().tokenizer.pieces
        before, after = rt.top_predictions(base, token, pieces_of), rt.top_predictions(run, token, pieces_of)
        return charts.predictions_spec(before, after, [token_text(p) for p in before["piece"]],
                                [token_text(p) for p in after["piece"]], theme)
    return derived(run, ("predictions", token, theme, rerouted), make)


def fingerprint_chart(run, token: int) -> dict:
    # the spec only (its image is ~0.1 MB); the CSV's numbers are read again from the run if asked for
    return derived(run, ("fingerprint", token), lambda: charts.fingerprint_spec(*rt.fingerprint(run, token)))


def layer_grid(run, layer: int, token: int, marks: tuple):
    return derived(run, ("grid", layer, token, marks), lambda: rt.layer_grid(run, layer, token, *marks))


def grid_chart(run, layer: int, token: int, marks: tuple, colour_by: str, expert: int) -> dict:
    grid = layer_grid(run, layer, token, marks)
    return derived(run, ("grid_spec", layer, token, marks, colour_by, expert), lambda: charts.grid_spec(grid, colour_by, expert))


def linked_chart(run, layer: int, pieces) -> dict:
    def make():
        pairs = rt.layer_pairs(run, layer, pieces)
        return linked_figure(pairs, rt.expert_loads(pairs, _cfg().n_routed_experts), pieces)
    return derived(run, ("linked", layer), make)


def prompt_table(run, layer: int, expert: int, pieces) -> str:
    return derived(run, ("prompt_table", layer, expert), lambda: ui.table_markdown(
        rt.expert_on_prompt(run, layer, expert, list(pieces)), rt.TABLE_FORMATS))


@dataclass(frozen=True)
class RunView:
    """What the results region shows of a run for one token: what the re-routing changed (its rows and chart),
    the next-token predictions and the routing fingerprint."""
    diff: Any
    changed: dict
    predictions: dict
    fingerprint: dict


def run_view(base, run, token: int, start: int, note: str | None, theme: str | None, rerouted: bool) -> RunView:
    diff, changed = changed_chart(base, run, token, start, note)
    return RunView(diff, changed, predictions_chart(base, run, token, theme, rerouted), fingerprint_chart(run, token))


@dataclass(frozen=True)
class LayerView:
    """What the layer view shows of a run at one layer: the grid (its rows and chart), the linked view and the
    expert panel's table of the prompt, for the expert in the panel."""
    grid: Any
    grid_spec: dict
    linked: dict
    prompt_table: str
    expert: int


def layer_view_of(prompt, run, layer: int, token: int, marks: tuple, colour_by: str, picked: int | None) -> LayerView:
    expert = picked if picked is not None else rt.chosen_at(run, layer, token)[0]     # the token's first expert
    return LayerView(layer_grid(run, layer, token, marks), grid_chart(run, layer, token, marks, colour_by, expert),
                     linked_chart(run, layer, prompt.pieces), prompt_table(run, layer, expert, prompt.pieces), expert)


def marks_of(settings: rt.Rerouting, layer: int) -> tuple:
    ov = settings.applies_at(layer, layer, _cfg())
    return (ov.knocked_out, ov.forced) if ov else ((), ())


def build_ahead(prompt, token: int, layer: int, colour_by: str, picked: int | None, theme: str | None):
    """then(nudged settings, run) for app.routing_cache.prefetch_neighbours: the page's own builders (run_view, layer_view_of)
    on a prefetched re-run, with their data frames converted. Runs on the background jobs' thread: everything it
    needs from the session is captured here."""
    base = forward(prompt.ids)

    def build(nudged: rt.Rerouting, run) -> None:
        rv = run_view(base, run, token, nudged.plan(layer, _cfg())[0], None, theme, True)
        lv_ = layer_view_of(prompt, run, layer, token, marks_of(nudged, layer), colour_by, picked)
        for spec in (rv.changed, rv.predictions, rv.fingerprint, lv_.grid_spec, lv_.linked):
            ui.arrow_spec(spec)
    return build


def layer_ahead(prompt, token: int, layer: int, colour_by: str, picked: int | None):
    """then(base) for the prefetch: the layer view at another layer of the model's own routing (the next or the
    previous one), built by layer_view_of as the page would."""
    def build(base) -> None:
        lv_ = layer_view_of(prompt, base, layer, token, ((), ()), colour_by, picked)
        for spec in (lv_.grid_spec, lv_.linked):
            ui.arrow_spec(spec)
        if heldout_ready():
            heldout_table(layer, lv_.expert)
    return build


def step_ahead(prompt, token: int | None, params: dict[str, str], theme: str | None) -> list[tuple]:
    """The re-run a lesson step on this page would show for `prompt`, and the page's charts of it, as
    app.live.prefetch_for's runs: [(from_layer, options, then(run))], or [] when the step's view re-routes nothing.
    `params`: the step's link values, read by the page's own declared controls (app.page_controls), defaults for
    the rest, as the page would read the link."""
    from app.page_controls import link_controls
    controls = link_controls(VIEW)
    v = {name: c.default for name, c in controls.items()}
    for name, raw in params.items():
        if name in controls:
            value, _ = controls[name].parse(raw)
            if value is not None:
                v[name] = value
    cfg = _cfg()
    settings = rt.normalise(rt.Rerouting(v["k"], v["bias"], v["dense"], tuple(v["ko"]), tuple(v["force"]),
                                         v["scope"]), cfg)[0]
    layer = v["layer"]
    plan = settings.plan(layer, cfg)
    if plan is None:
        return []
    if token is None or not 0 <= token < len(prompt.ids):
        token = len(prompt.ids) - 1                 # as the page starts a new prompt: at its last token
    build = build_ahead(prompt, token, layer, v["colour"], v["expert"], theme)
    return [(plan[0], RunOptions(plan[1]), lambda run: build(settings, run))]
