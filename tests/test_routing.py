"""Routing explorer data and charts, without Streamlit: grid geometry, click mapping, re-routing plans,
changed-choice counts, fingerprints, held-out summaries, sparsity, URL parsing, safe labels."""
import base64
import json
import math

import numpy as np
import pytest
import torch

from app import routing as rt
from app import routing_cache as cache
from app import routing_text as words
from app.charts.routing import (
    CHANGED_SERIES,
    PREDICTION_PANELS,
    changed_spec,
    fingerprint_image,
    fingerprint_spec,
    fingerprint_table,
    grid_chosen,
    grid_spec,
    predictions_spec,
)
from app.routing_heldout import expert_on_heldout, heldout_key, heldout_summary, load_heldout, model_code_digest, save_heldout
from app.routing_sparsity import active_params, sparsity
from app.text import chip_label, chip_labels, token_text, visible
from model.accounting import count_params
from model.config import K3Config
from model.k3 import K3Model, K3Output, RoutingOverride, Trace
from model.moe import RouteInfo, route

FULL = K3Config.full()
TINY = K3Config.tiny()


@pytest.fixture(scope="module")
def micro():
    torch.manual_seed(0)
    model = K3Model(K3Config.micro()).eval().requires_grad_(False)
    with torch.inference_mode():
        base = model(torch.randint(0, 64, (1, 10)))
    return model, base


def fake_output(E=896, T=3, k=16, override=None, seed=0) -> K3Output:
    """One routed layer (layer 1) with E experts, routed by the real router function."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(1, T, E, generator=g)
    bias = (torch.rand(E, generator=g) - 0.5) * 0.1
    idx, w, cut = route(scores, bias, k, override)
    trace = Trace(num_layers=2)
    trace.routes[1] = RouteInfo(scores, idx, w, cut, bias)
    return K3Output(torch.zeros(1, T, 8), trace, None)


# ---- grid geometry and clicks --------------------------------------------------------------------

def test_shards_are_bands_of_four_rows():
    labels = rt.shard_labels()
    assert len(labels) == 8
    assert labels[0] == "shard 0: experts 0–111" and labels[7] == "shard 7: experts 784–895"
    grid = rt.layer_grid(fake_output(), 1, 0)          # the cells the page draws
    for s in range(8):
        members = grid[grid["shard"] == s]
        assert len(members) == 112 and all(rt.shard_of(e) == s for e in members["expert"])
        assert set(members["row"]) == {4 * s, 4 * s + 1, 4 * s + 2, 4 * s + 3}
    assert set(zip(grid["row"], grid["col"])) == {(r, c) for r in range(32) for c in range(28)}


def pick(*experts):
    """What st.vega_lite_chart(on_select=...) returns after clicks on the grid's squares."""
    return {"selection": {"pick": [{"expert": e} for e in experts]}}


def test_selection_event_maps_to_expert():
    assert rt.expert_from_selection(pick(300)) == 300
    assert rt.expert_from_selection(pick(1, 2)) == 2                           # the last click wins
    assert rt.expert_from_selection(pick(0)) == 0 and rt.expert_from_selection(pick(895)) == 895
    for bad in (896, -1, 2.5, True, float("nan"), "7", None):
        assert rt.expert_from_selection(pick(bad)) is None, bad
    for empty in (None, {}, {"selection": {"pick": []}}, {"selection": {"pick": {}}}, {"selection": None}, "junk",
                  {"selection": {"other": [{"expert": 3}]}}, {"selection": {"pick": ["x"]}}):
        assert rt.expert_from_selection(empty) is None

    class Attr:  # Streamlit's selection state also reads by attribute
        selection = type("S", (), {"pick": [{"expert": 7}]})()
    assert rt.expert_from_selection(Attr()) == 7


def test_grid_spec_places_every_expert_in_its_cell():
    from app.charts.routing import CELL, GRID_PAD, cell_centre, grid_frame
    grid = rt.layer_grid(fake_output(), 1, 0)
    spec = grid_spec(grid)
    experts = spec["datasets"]["experts"]
    assert list(experts["expert"]) == list(range(896))
    assert (experts["col"] == experts["expert"] % 28).all() and (experts["row"] == experts["expert"] // 28).all()
    f = grid_frame(896)
    assert f["rows"] == 32 and spec["width"] == f["width"] and spec["height"] == f["height"]
    # a cell's pixel centre: the x and y scales map one grid unit to CELL px from the padded corner
    x0, y0 = f["x"][0], f["y"][0]
    assert abs(f["width"] - (f["x"][1] - x0) * CELL) < 1 and abs(f["height"] - (f["y"][1] - y0) * CELL) < 1
    assert cell_centre(0) == (GRID_PAD["left"] - x0 * CELL, GRID_PAD["top"] - y0 * CELL)
    assert cell_centre(29) == (cell_centre(1)[0], cell_centre(1)[1] + CELL)      # one row down
    # the clickable layer carries the selection "pick" on the expert id, and the colour legend
    layer = next(l for l in spec["layer"] if l.get("params"))
    assert layer["params"][0]["name"] == "pick" and layer["params"][0]["select"]["fields"] == ["expert"]
    assert layer["encoding"]["color"]["field"] == "prob"
    load = next(l for l in grid_spec(grid, "load")["layer"] if l.get("params"))
    assert load["encoding"]["color"]["field"] == "load_class"


def test_grid_spec_is_the_same_for_every_layer_and_token():
    # the browser keeps a chart whose spec is unchanged and swaps its data: only the datasets may differ
    out = fake_output(T=3)
    a = grid_spec(rt.layer_grid(out, 1, 0), "probability", selected=None)
    b = grid_spec(rt.layer_grid(out, 1, 2, knocked=(4,)), "probability", selected=11)
    assert {k: v for k, v in a.items() if k != "datasets"} == {k: v for k, v in b.items() if k != "datasets"}
    assert not a["datasets"]["experts"].equals(b["datasets"]["experts"])


# ---- the per-layer grid ----------------------------------------------------------------------------

def test_grid_outlines_exactly_the_chosen_experts():
    ov = RoutingOverride(top_k=16, knocked_out=(3, 4, 5), forced=(9,))
    out = fake_output(override=ov)
    grid = rt.layer_grid(out, 1, 0, knocked=ov.knocked_out, forced=ov.forced)
    chosen = set(out.trace.experts(1)[0, 0].tolist())
    assert set(grid.loc[grid["chosen"], "expert"]) == chosen and len(chosen) == 16
    assert grid.loc[9, "status"] == "forced" and grid.loc[9, "slot"] == 0
    assert (grid.loc[[3, 4, 5], "status"] == "knocked out").all()
    assert np.isclose(grid["weight"].sum(), 1.0)
    # free slots go to the best biased scores among the experts that may compete
    free = grid[~grid["expert"].isin([3, 4, 5, 9])].sort_values("biased", ascending=False)
    assert set(free["expert"][:15]) == chosen - {9}
    spec = grid_spec(grid, selected=9)
    experts = spec["datasets"]["experts"]
    assert set(grid_chosen(spec)) == chosen                          # outlined and glowing: the chosen
    assert set(experts.loc[experts["knocked"], "expert"]) == {3, 4, 5}
    assert list(experts.loc[experts["selected"], "expert"]) == [9]
    assert experts.loc[9, "line"].startswith("forced (slot 1)")
    # each overlay layer draws the rows its filter keeps
    filters = [l["transform"][0]["filter"] for l in spec["layer"] if l.get("transform")]
    assert filters == ["datum.chosen", "datum.chosen", "datum.knocked", "datum.selected"]


def test_load_classes_are_thirds_of_the_busiest():
    assert rt.load_classes(np.array([0, 1, 2, 3, 4, 5, 6])) == ["idle", "low", "low", "mid", "mid", "high", "high"]
    assert rt.load_classes(np.array([0, 0])) == ["idle", "idle"]
    assert rt.load_classes(np.array([1, 0])) == ["high", "idle"]
    out = fake_output(T=5)
    grid = rt.layer_grid(out, 1, 0)
    assert grid["load"].sum() == 5 * 16                  # every (token, slot) pair lands on one expert
    import pandas as pd
    loads = np.array([0, 1, 2, 3, 4, 5, 6])
    assert words.load_ranges(pd.DataFrame({"load": loads, "load_class": rt.load_classes(loads)})) == \
        "none 0, low 1–2, mid 3–4, high 5–6 tokens"


# ---- re-routing plans -------------------------------------------------------------------------------

def test_plans_resume_from_the_first_touched_layer():
    default = rt.Rerouting()
    assert default.override(TINY) is None and default.plan(46, TINY) is None
    s = rt.Rerouting(top_k=4)
    start, routing = s.plan(46, TINY)
    assert start == 46 and routing == RoutingOverride(top_k=4)
    assert s.plan(0, TINY)[0] == 1                        # layer 0 is dense: start at the first MoE layer
    only = rt.Rerouting(top_k=4, scope="only")
    assert only.plan(46, TINY) == (46, {46: RoutingOverride(top_k=4)})
    assert only.plan(0, TINY) is None
    assert only.applies_at(46, 47, TINY) is None and s.applies_at(46, 47, TINY) is not None
    dense = rt.Rerouting(dense=True, knocked_out=(1, 2))
    assert dense.k(896) == 894 and dense.override(TINY).top_k == 894
    dense.override(TINY).resolve(896, 16)                 # valid for the model


def test_normalise_fixes_what_the_model_would_reject():
    s, notes = rt.normalise(rt.Rerouting(top_k=2, knocked_out=(5, 900, 5), forced=(5, 6, 7, 8)), TINY)
    assert s.knocked_out == (5,) and s.forced == (6, 7) and len(notes) == 2
    s.override(TINY).resolve(896, 16)
    s, notes = rt.normalise(rt.Rerouting(top_k=500, scope="sideways"), TINY)
    assert s.top_k == rt.MAX_TOP_K and s.scope == "from" and not notes


# ---- what changed -----------------------------------------------------------------------------------

def test_changed_choices_match_an_independent_count(micro):
    model, base = micro
    with torch.inference_mode():
        new = model.resume(base, 2, routing={2: RoutingOverride(top_k=2, knocked_out=(0, 1))})
    token = 7
    df = rt.changed_choices(base, new, token, 2)
    assert list(df["layer"]) == [2, 3, 4, 5]
    for row in df.itertuples():
        before = base.trace.routes[row.layer].indices[0, token].tolist()
        after = new.trace.routes[row.layer].indices[0, token].tolist()
        assert row.dropped == sum(1 for e in before if e not in after)
        assert row.added == sum(1 for e in after if e not in before)
        assert (row.k_before, row.k_after) == (len(before), len(after))
    assert df.loc[df["layer"] == 2, "k_after"].item() == 2
    assert df.loc[df["layer"] == 2, "dropped"].item() >= 2
    same = rt.changed_choices(base, base, token, 1)
    assert (same[["dropped", "added"]] == 0).all().all()


def test_fingerprint_shape_and_marks(micro):
    model, base = micro
    with torch.inference_mode():
        new = model.resume(base, 3, routing=RoutingOverride(top_k=2))
    layers, probs, mask = rt.fingerprint(new, 4)
    assert layers == [1, 2, 3, 4, 5]
    assert probs.shape == mask.shape == (5, 16)
    assert list(mask.sum(1)) == [4, 4, 2, 2, 2]
    for i, layer in enumerate(layers):
        assert set(np.nonzero(mask[i])[0]) == set(new.trace.experts(layer)[0, 4].tolist())
        assert np.allclose(probs[i], new.trace.scores(layer)[0, 4].numpy())


def test_fingerprint_of_the_live_shape():
    out = fake_output()
    layers, probs, mask = rt.fingerprint(out, 2)
    assert probs.shape == (1, 896) and mask.sum() == 16


def test_top_predictions_are_sorted_probabilities(micro):
    _, base = micro
    df = rt.top_predictions(base, 3, lambda ids: [f"<{i}>" for i in ids])
    assert list(df["rank"]) == [1, 2, 3, 4, 5]
    assert (np.diff(df["prob"]) <= 0).all() and df["prob"].sum() <= 1
    assert df["id"][0] == int(base.logits[0, 3].argmax())


def spec_without_data(s: dict) -> str:
    return json.dumps({k: v for k, v in s.items() if k != "datasets"}, sort_keys=True)


def test_changed_spec_pairs_each_layer_with_its_two_counts():
    import pandas as pd
    diff = pd.DataFrame({"layer": [46, 47, 48], "dropped": [3, 0, 1], "added": [3, 2, 0],
                         "k_before": 16, "k_after": 16})
    s = changed_spec(diff)
    rows = s["datasets"]["changed"]
    assert list(rows["layer"]) == [46, 46, 47, 47, 48, 48]
    assert list(rows["series"]) == list(CHANGED_SERIES) * 3
    assert list(rows["experts"]) == [3, 3, 0, 2, 1, 0]
    other = changed_spec(diff.assign(layer=[1, 2, 3], added=[16, 16, 16]))
    assert spec_without_data(s) == spec_without_data(other)      # the browser keeps the chart


def test_predictions_spec_keeps_both_panels_on_one_scale():
    import pandas as pd
    before = pd.DataFrame({"rank": [1, 2, 3], "prob": [0.5, 0.2, 0.1]})
    after = pd.DataFrame({"rank": [1, 2, 3], "prob": [0.3, 0.3, 0.2]})
    s = predictions_spec(before, after, ["a", "␣", "␣"], ["<b>", "b", "c"])
    rows = s["datasets"]["predictions"]
    assert list(rows["panel"]) == [PREDICTION_PANELS[0]] * 3 + [PREDICTION_PANELS[1]] * 3
    assert list(rows["label"][:3]) == ["a", "␣", "␣ (2)"]           # alike tokens stay two bars
    assert list(rows["token"][3:]) == ["<b>", "b", "c"]              # canvas text: no escaping needed
    assert list(rows["room"]) == pytest.approx([1.35 * 0.5] * 6)     # room for the largest label, both panels
    assert s["facet"]["column"]["sort"] == list(PREDICTION_PANELS)
    other = predictions_spec(after, before, ["x"] * 3, ["y", "z", "w"])
    assert spec_without_data(s) == spec_without_data(other)
    # the panel titles' size lives in the config alone (a facet's own header would override it), so presenter
    # mode's config (ui.presenter_spec, what ui.vega_chart draws in presenter mode) enlarges them
    from app.ui import presenter_spec
    assert "header" not in s["facet"]["column"]
    big = presenter_spec(s)
    assert big["config"]["header"]["labelFontSize"] > s["config"]["header"]["labelFontSize"]


def test_fingerprint_image_encodes_probability_and_choice_per_pixel():
    import io

    from PIL import Image
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(896), size=92).astype(np.float32)
    probs[5, 7] = 1.0
    mask = np.zeros_like(probs, bool)
    mask[np.arange(92), rng.integers(0, 896, 92)] = True
    url = fingerprint_image(probs, mask)
    img = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGBA"))  # as drawn
    assert img.shape == (92, 896, 4)                                # one pixel per layer and expert
    near = mask.copy()                                              # a chosen expert is drawn 3 columns wide
    near[:, 1:] |= mask[:, :-1]
    near[:, :-1] |= mask[:, 1:]
    plain = ~near
    assert np.abs(img[..., 3][plain].astype(float) - probs[plain] * 0.9 * 255).max() <= 0.5 + 1e-6
    assert (img[..., :3][plain] == 128).all()
    if not near[5, 7]:
        assert img[5, 7, 3] == round(0.9 * 255)
    assert (img[near] == (0xD5, 0x5E, 0x00, 255)).all()             # Okabe-Ito vermillion, opaque
    s = fingerprint_spec(list(range(1, 93)), probs, mask)
    rows = s["datasets"]["rows"]                                    # one band per layer, to point at
    assert list(rows["layer"]) == list(range(1, 93)) and (rows["chosen"] == 1).all()
    for layer, experts, chances in zip(rows["layer"], rows["experts"], rows["probs"]):
        (e,) = np.flatnonzero(mask[layer - 1])
        assert experts == str(e) and chances == f"{probs[layer - 1, e]:.3f}"
    table = fingerprint_table(list(range(1, 93)), probs, mask)
    assert len(table) == 92 * 896 and table["chosen"].sum() == 92
    assert table.loc[(table["layer"] == 6) & (table["expert"] == 7), "router probability"].item() == 1.0
    other = fingerprint_spec(list(range(1, 93)), probs[::-1], mask[::-1])
    assert spec_without_data(s) == spec_without_data(other)


def test_fingerprint_bands_list_each_layers_experts_most_probable_first():
    probs = np.tile(np.linspace(0, 1, 896), (3, 1))          # expert e has probability e / 895 in every layer
    mask = np.zeros_like(probs, bool)
    mask[0, [3, 800, 40]] = True                              # three chosen: listed 800, 40, 3
    mask[1] = True                                            # dense: all 896, the first 16 named
    rows = fingerprint_spec([1, 2, 3], probs, mask)["datasets"]["rows"]
    assert list(rows["chosen"]) == [3, 896, 0]
    assert rows["experts"][0] == "800, 40, 3" and rows["probs"][0] == f"{800 / 895:.3f} – {3 / 895:.3f}"
    assert rows["experts"][1].startswith("895, 894, 893") and rows["experts"][1].endswith("and 880 more (all in the CSV)")
    assert rows["experts"][2] == "" and rows["probs"][2] == "–"


def test_expert_tables(micro):
    model, base = micro
    pieces = [f"t{i}" for i in range(10)]
    df = rt.expert_on_prompt(base, 2, 5, pieces, n=4)
    col = base.trace.scores(2)[0, :, 5].numpy()
    assert list(df["position"]) == list(np.argsort(-col, kind="stable")[:4])     # counted from 0, as the link
    ids = list(range(3, 63)) * 2                              # 120 tokens
    h = heldout_summary(model, ids, chunk=32, keep=3, batch=2)
    assert len(h.ids) == 120 and h.layers == (1, 2, 3, 4, 5)
    assert h.top_pos.shape == h.top_prob.shape == h.top_chose.shape == (5, 16, 3)
    assert (np.diff(h.top_prob, axis=2) <= 0).all()
    assert (h.chosen_count.sum(1) == 120 * 4).all()           # each token chose 4 experts per layer
    table = expert_on_heldout(h, 3, 7, lambda ids: [f"<{i}>" for i in ids])
    assert len(table) == 3 and table["in context"][0].count("[") == 1


def test_a_saved_held_out_summary_is_read_back_only_when_it_fits(micro, tmp_path):
    model, _ = micro
    ids = list(range(3, 63)) * 2
    h = heldout_summary(model, ids, chunk=32, keep=3, batch=2)
    key = heldout_key("ab" * 32, "code", "the sample")
    path = tmp_path / "cache" / "heldout.safetensors"
    save_heldout(h, path, key)
    assert [p.name for p in path.parent.iterdir()] == [path.name]          # no temporary file left
    back = load_heldout(path, key, h.ids, h.layers, 16)
    for name in ("top_pos", "top_prob", "top_chose", "chosen_count"):
        assert np.array_equal(getattr(back, name), getattr(h, name)) and getattr(back, name).dtype == getattr(h, name).dtype
    assert back.ids == h.ids and back.layers == h.layers
    # another checkpoint, sample or setting is another key; another tokenisation or model does not fit
    assert heldout_key("cd" * 32, "code", "the sample") != key != heldout_key("ab" * 32, "code", "the sample.")
    assert heldout_key("ab" * 32, "code 2", "the sample") != key != heldout_key("ab" * 32, "code", "the sample", keep=4)
    assert load_heldout(path, heldout_key("cd" * 32, "code", "the sample"), h.ids, h.layers, 16) is None
    assert load_heldout(path, key, h.ids[:-1] + (7,), h.layers, 16) is None
    assert load_heldout(path, key, h.ids, h.layers[1:], 16) is None
    assert load_heldout(path, key, h.ids, h.layers, 32) is None
    assert load_heldout(tmp_path / "missing.safetensors", key, h.ids, h.layers, 16) is None
    # a damaged file, and one whose positions point outside the sample
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(path.read_bytes()[:-100])
    assert load_heldout(damaged, key, h.ids, h.layers, 16) is None
    damaged.write_bytes(b"\xff" * 64)
    assert load_heldout(damaged, key, h.ids, h.layers, 16) is None
    bad = HeldOutLike(h, top_pos=np.full_like(h.top_pos, len(ids)))
    save_heldout(bad, path, key)
    assert load_heldout(path, key, h.ids, h.layers, 16) is None


def test_the_model_code_digest_follows_every_source_file(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    (tmp_path / "notes.txt").write_text("not code")
    first = model_code_digest(tmp_path)
    (tmp_path / "notes.txt").write_text("changed, still not code")
    assert model_code_digest(tmp_path) == first
    (tmp_path / "b.py").write_text("y = 3\n")
    assert model_code_digest(tmp_path) != first
    (tmp_path / "b.py").write_text("y = 2\n")
    assert model_code_digest(tmp_path) == first
    (tmp_path / "c.py").write_text("")
    assert model_code_digest(tmp_path) != first


def HeldOutLike(h, **changed):
    from dataclasses import replace
    return replace(h, **changed)


def test_the_live_held_out_summary_is_kept_across_starts(monkeypatch, tmp_path):
    """The first heldout() of a process routes the sample and keeps the summary on disk; a later process (here: the
    cache cleared) reads it back instead of routing the sample again, and gets the same summary."""
    monkeypatch.setattr(cache, "CACHE_DIR", tmp_path)
    (tmp_path / "heldout-0123456789abcdef.safetensors").write_bytes(b"an earlier model's summary")
    cache.heldout.clear()
    first = cache.heldout()
    kept = list(tmp_path.glob("heldout-*.safetensors"))
    assert len(kept) == 1 and kept[0].name != "heldout-0123456789abcdef.safetensors"

    def refuse(*a, **k):
        raise AssertionError("routed the held-out sample again")
    monkeypatch.setattr(cache, "heldout_summary", refuse)
    cache.heldout.clear()
    second = cache.heldout()
    assert second.ids == first.ids and np.array_equal(second.top_pos, first.top_pos)
    assert np.array_equal(second.top_prob, first.top_prob) and np.array_equal(second.chosen_count, first.chosen_count)
    cache.heldout.clear()


# ---- sparsity ----------------------------------------------------------------------------------------

def test_active_params_follow_k():
    for cfg in (FULL, TINY):
        p = count_params(cfg)
        assert active_params(cfg, {}) == (p.total, p.active)
        assert active_params(cfg, {l: cfg.top_k for l in cfg.moe_layers})[1] == p.active
        dense = active_params(cfg, {l: cfg.n_routed_experts for l in cfg.moe_layers})[1]
        assert dense == p.total - cfg.vocab_size * cfg.d_model        # everything but the embedding lookup
    assert round(active_params(FULL, {})[1] / 1e9, 1) == 104.2
    sp = sparsity(rt.Rerouting(top_k=8), 46, TINY)
    assert sp["k"] == 8 and sp["layers"] == 47 and math.isclose(sp["sparsity"], 112)
    assert sp["full_active"] < active_params(FULL, {})[1]
    assert sparsity(rt.Rerouting(), 46, TINY)["layers"] == 0
    # K3 (Table 1): a shared expert is a GLU of hidden 3,072 on d = 7,168, a routed one on the latent 3,584, so it
    # holds 2 routed experts' weights, and a token at top-16 uses (16 + 2 x 2) / (896 + 2 x 2) of a layer's
    sp = sparsity(rt.Rerouting(), 46, TINY)
    assert sp["shared_per_routed_full"] == 2 and (sp["full_width"], sp["latent_width"]) == (7168, 3584)
    assert math.isclose(sp["expert_share_full"], 20 / 900)


# ---- labels -----------------------------------------------------------------------------------------

def test_labels_make_whitespace_visible_and_markup_inert():
    assert visible(" the") == "␣the" and visible("\n") == "↵" and visible("") == "∅"
    assert visible("\u202e") == "⟨U+202E⟩"
    assert chip_label("<script>") == r"\<script\>"
    assert token_text("<b>x</b>") == "<b>x</b>"              # chart text: shown as typed, never markup
    assert token_text("\n" + "x" * 40) == "↵" + "x" * 23 + "…"
    labels = [chip_label(p) for p in (" ", "\n", "\t", "  ")]
    assert all(labels) and len(set(labels)) == 4


def test_chip_labels_are_distinct_even_when_pieces_repeat():
    pieces = ["a", " b", "a", " b", "a", "<i>"]
    labels = chip_labels(pieces)
    assert len(set(labels)) == len(labels)
    assert labels[0] == chip_label("a")              # a first occurrence is unchanged
    assert labels[2] == "a (2)" and labels[4] == "a (3)" and labels[3] == chip_label(" b") + " (2)"
    # no invisible character to come along when a label is copied (zero-width spaces told repeats apart before)
    assert all(ch.isprintable() for lab in labels for ch in lab)


def test_a_piece_of_a_character_says_which_bytes_it_holds():
    """Every byte-level piece of "Grüße 日本語 🐱" showed as the same "�" chip."""
    from app.live import live, prepare_prompt
    text = "Grüße 日本語 🐱"
    prompt = prepare_prompt(text, live().tokenizer)
    labels = chip_labels(prompt.pieces)
    assert "\ufffd" not in "".join(labels)
    for ch in "üß日本語🐱":                                  # every byte of every character is accounted for
        n = len(ch.encode("utf-8"))
        held = [p for p in prompt.pieces if ch in p]
        assert held and all(p == ch or f"{ch}[" in p for p in held), (ch, held)
        if held != [ch]:
            assert any(p.endswith(f"/{n}]") for p in held)
    assert len(set(labels)) == len(labels)


def test_expert_tables_are_plain_and_formatted():
    import pandas as pd
    df = pd.DataFrame({"position": [3, 1], "token": ["a", "b"], "router probability": [0.12345, 0.5],
                       "chose it": [True, False]})
    from app.text import text_table
    t, right = text_table(df, rt.TABLE_FORMATS)
    assert list(t["position"]) == ["3", "1"] and list(t["router probability"]) == ["0.123", "0.500"]
    assert list(t["chose it"]) == ["✓", "–"] and right == ["position", "router probability"]


def test_heldout_soon_starts_the_routing_once_in_the_background(monkeypatch, caplog):
    import threading
    calls = []
    done = threading.Event()

    def fake():
        calls.append(threading.current_thread().name)
        done.set()
        raise RuntimeError("no model here")          # a failure is logged, never raised into the page
    monkeypatch.setattr(cache, "heldout", fake)
    monkeypatch.setitem(cache._SOON, "started", False)
    assert cache.heldout_soon() is True and cache.heldout_soon() is False
    assert done.wait(10)
    from app import jobs
    assert jobs.settle(timeout=10)
    assert calls == [jobs.WORKER]                      # once, and not on the caller's thread
    assert "no model here" in caplog.text


def test_the_grid_caption_says_why_an_unchosen_expert_can_be_brighter():
    import pandas as pd
    grid = pd.DataFrame({"prob": [0.9, 0.2, 0.5, 0.1], "chosen": [False, True, True, False]})
    note = words.brighter_note(grid)
    assert "1 unchosen expert is brighter" in note and "bias" in note
    assert words.brighter_note(grid.assign(chosen=[True, False, True, False])) == ""     # chosen by probability alone


def test_one_display_of_a_piece_for_chips_tables_and_captions():
    """app.text.token_text (captions) and app.routing.visible (tables, charts) disagreed: " the" kept a plain space
    in one and showed ␣ in the other, and a zero-width space vanished from captions. Chart labels had a display of
    their own too, and a chip showed a backtick where a caption showed ˋ."""
    for piece in (" the", "\n", "\t x", "a\u200bb", "  ", ""):
        assert token_text(piece) == visible(piece), piece
    assert token_text("x`y") == "xˋy" and token_text("a\u200bb") == "a⟨U+200B⟩b"
    for piece in ("x`y", "\n" + "`" * 40, " the"):                 # a chip reads as the caption does
        assert chip_label(piece) == token_text(piece), piece
