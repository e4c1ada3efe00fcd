"""Figures of the Inside-one-layer page: pure functions from a step's data to a small Vega-Lite spec (a dict).

Why Vega-Lite and not plotly here: the page draws one figure per step, about fifteen per interaction,
and in the browser each plotly chart costs a fixed ~60-90 ms to set up on this machine (16 small bar
charts: ~600 ms without the modebar, ~1.5 s with it), against ~10 ms for a Vega-Lite chart (16 in about
150 ms, the floor app's click is ~100 ms). Each spec keeps its data in `datasets` (name -> rows), which
`app.export.spec_frame` turns into the chart's CSV. Colours: Okabe-Ito (app.theme) and the blue-white-red diverging scale
used for signed values elsewhere; no background is set, so Streamlit's light and dark themes both apply.
"""
from __future__ import annotations

import numpy as np

from app import theme
from app.charts.vega import diverging_png, usermeta

GREY = theme.OKABE_ITO["grey"]
WIDTH = "container"  # single views fill the step row's left column (about 480 px at a 1,400-px window)
CONCAT = 460         # side-by-side panels cannot fill a container: their widths add up to about this
HEIGHT = 170
DIVERGING = {"scheme": "redblue", "reverse": True, "domainMid": 0}   # blue < 0 < red


def _f(v) -> float:
    return float(f"{float(v):.5g}")           # 5 significant digits: what a tooltip shows, a third of the JSON


def _spec(datasets: dict[str, list[dict]], body: dict, title: str) -> dict:
    fit = {"autosize": {"type": "fit-x", "contains": "padding"}} if body.get("width") == WIDTH else {}
    return {"$schema": "https://vega.github.io/schema/vega-lite/v5.json",
            "title": {"text": title, "fontSize": 13, "anchor": "start"},
            "datasets": datasets, "config": {"view": {"stroke": None}, "axis": {"labelFontSize": 10}}} | fit | body


def _vector(name: str, v, **extra) -> list[dict]:
    return [{"series": name, "channel": i, "value": _f(x)} | extra for i, x in enumerate(np.asarray(v).reshape(-1))]


def _matrix(z, rows: list[str], **extra) -> list[dict]:
    z = np.asarray(z, dtype=float)
    return [{"row": rows[r], "order": r, "channel": c, "value": _f(z[r, c])} | extra
            for r in range(z.shape[0]) for c in range(z.shape[1]) if np.isfinite(z[r, c])]


def _heat(data: str, width: int, height: int, color: dict | None = None, title: str = "value",
          xtitle: str = "channel") -> dict:
    return {"data": {"name": data}, "mark": {"type": "rect"}, "width": width, "height": height,
            "encoding": {"x": {"field": "channel", "type": "ordinal", "title": xtitle,
                               "axis": {"labelAngle": 0, "labelExpr": "datum.value % 5 ? '' : datum.label"}},
                         "y": {"field": "row", "type": "ordinal", "title": None, "sort": {"field": "order"}},
                         "color": {"field": "value", "type": "quantitative", "title": title,
                                   "scale": color or DIVERGING, "legend": {"gradientLength": max(60, height - 20)}},
                         "tooltip": [{"field": "row"}, {"field": "channel"},
                                     {"field": "value", "format": ".4f"}]}}


def _bars(data: str, width: int, height: int, colour: str | None = None, ytitle: str = "value",
          xtitle: str = "channel", group: bool = False, colours: dict | None = None) -> dict:
    enc = {"x": {"field": "channel", "type": "ordinal", "title": xtitle,
                 "axis": {"labelAngle": 0, "labelExpr": "datum.value % 5 ? '' : datum.label"}},
           "y": {"field": "value", "type": "quantitative", "title": ytitle},
           "tooltip": [{"field": "series"}, {"field": "channel"}, {"field": "value", "format": ".4f"}]}
    if group or colours:
        names = list(colours) if colours else None
        enc["color"] = {"field": "series", "type": "nominal", "title": None,
                        "scale": {"domain": names, "range": [colours[n] for n in names]} if names else {},
                        "legend": {"orient": "top", "direction": "horizontal"}}
    if group:
        enc["xOffset"] = {"field": "series", "sort": list(colours) if colours else None}
    mark = {"type": "bar"} | ({"color": colour} if colour else {})
    return {"data": {"name": data}, "mark": mark, "width": width, "height": height, "encoding": enc}


# ---- builders, one per step key -----------------------------------------------------------------------

def read_figure(d: dict, pieces=None) -> dict:
    names, w = list(d["names"]), np.asarray(d["weights"], dtype=float)
    weights = [{"source": n, "weight": _f(x), "top": i == d["top"], "label": f"{x:.1%}"}
               for i, (n, x) in enumerate(zip(names, w))]
    rows = np.vstack([d["sources"], d["h"][None, :]])
    bar = {"data": {"name": "weights"}, "width": 40 * len(names) + 20, "height": HEIGHT,
           "encoding": {"x": {"field": "source", "type": "nominal", "sort": None, "title": "source",
                              "axis": {"labelAngle": 0}},
                        "y": {"field": "weight", "type": "quantitative", "title": "weight a_s",
                              "scale": {"domain": [0, 1]}}},
           "layer": [{"mark": {"type": "bar"},
                      "encoding": {"color": {"condition": {"test": "datum.top", "value": theme.K3}, "value": GREY},
                                   "tooltip": [{"field": "source"}, {"field": "weight", "format": ".4f"}]}},
                     {"mark": {"type": "text", "dy": -7, "fontSize": 10, "color": GREY},
                      "encoding": {"text": {"field": "label"}}}]}
    heat = _heat("values", CONCAT - bar["width"] - 230, 26 * rows.shape[0])
    return _spec({"weights": weights, "values": _matrix(rows, names + ["h (the mix)"])},
                 {"hconcat": [bar, heat], "resolve": {"scale": {"color": "independent"}}},
                 "weights over the sources · the raw sources and their mix h")


def norm_figure(d: dict, pieces=None) -> dict:
    cols = {"h (before)": GREY, "x = RMSNorm(h) ⊙ γ": theme.K3}
    rows = _vector("h (before)", d["h"]) + _vector("x = RMSNorm(h) ⊙ γ", d["x"])
    return _spec({"values": rows}, _bars("values", WIDTH, HEIGHT, group=True, colours=cols),
                 "the read h and the module input x")


def kda_qkv_figure(d: dict, pieces=None) -> dict:
    z = np.asarray(d["z"], dtype=float)
    return _spec({"values": _matrix(z, list(d["rows"]))}, _heat("values", WIDTH, 22 * z.shape[0]),
                 "this token's query, key and value, per head")


def kda_gate_figure(d: dict, pieces=None) -> dict:
    keep, beta = np.asarray(d["keep"], dtype=float), np.asarray(d["beta"], dtype=float)
    heads = [f"head {h}" for h in range(keep.shape[0])]
    heat = _heat("keep", CONCAT - 250, 30 * keep.shape[0], {"scheme": "viridis", "domain": [0, 1]}, "kept (e^g)",
                 "key channel")
    betas = [{"head": h, "beta": _f(b), "label": f"{b:.3f}"} for h, b in zip(heads, beta)]
    bar = {"data": {"name": "beta"}, "width": 70, "height": 30 * keep.shape[0] + 30,
           "encoding": {"x": {"field": "head", "type": "nominal", "title": "β per head", "axis": {"labelAngle": 0}},
                        "y": {"field": "beta", "type": "quantitative", "title": None, "scale": {"domain": [0, 1]}}},
           "layer": [{"mark": {"type": "bar", "color": theme.KDA},
                      "encoding": {"tooltip": [{"field": "head"}, {"field": "beta", "format": ".4f"}]}},
                     {"mark": {"type": "text", "dy": -7, "fontSize": 10, "color": GREY},
                      "encoding": {"text": {"field": "label"}}}]}
    return _spec({"keep": _matrix(keep, heads), "beta": betas}, {"hconcat": [heat, bar]},
                 "share of the state kept per key channel (e^g) · write strength β")


# The state's colours: blue < 0 < red, piecewise linear in RGB through a light grey at 0, so that the picture
# (state_image) and the chart's legend (the same stops, "interpolate": "rgb") agree pixel for pixel.
STATE_STOPS = ("#2166ac", "#f7f7f7", "#b2182b")


def state_image(grid: np.ndarray, lo: float, hi: float, px: int) -> str:
    """A grid of values (NaN: a blank gap) as a PNG data URL, px x px pixels a cell: STATE_STOPS over
    [lo, 0, hi], transparent where blank."""
    z = np.asarray(grid, dtype=float)
    with np.errstate(invalid="ignore"):
        t = np.where(z < 0, -np.clip(z / lo, 0, 1), np.clip(z / hi, 0, 1))      # NaN stays NaN
    return diverging_png(t, STATE_STOPS, px)


def kda_state_figure(d: dict, pieces=None) -> dict:
    """Two views, not six facets (a facet is a view of its own and costs as much to draw): the states before and
    after side by side on one colour scale, the change on its own; heads stacked, one blank row between. Each
    view is one picture of its cells (1,536 rect marks cost the page's reload ~0.2 s in the browser), with
    invisible cells over it that give each value under the pointer and carry the colour legend."""
    H, K, V = np.asarray(d["before"]).shape
    rows = {"S": [], "change": []}                # short field names: ~1,500 cells per figure
    grids = {"S": np.full((H * (K + 1) - 1, 2 * (V + 1) - 1), np.nan), "change": np.full((H * (K + 1) - 1, V), np.nan)}
    for c, name in enumerate(("before", "after", "change")):
        arr = np.asarray(d[name], dtype=float)
        data = "change" if name == "change" else "S"
        col0 = 0 if name == "change" else c * (V + 1)
        rows[data] += [{"x": col0 + v, "y": h * (K + 1) + k, "x1": col0 + v + 1, "y1": h * (K + 1) + k + 1,
                        "p": name, "h": h, "k": k, "v": v, "s": _f(arr[h, k, v])}
                       for h in range(H) for k in range(K) for v in range(V)]
        for h in range(H):
            grids[data][h * (K + 1):h * (K + 1) + K, col0:col0 + V] = arr[h]
    px = 7                                        # pixels per cell

    def view(data: str, cols: int, title: str, labels: list[str]) -> dict:
        label_rows = [{"x": i * (V + 1) + V / 2, "text": t} for i, t in enumerate(labels)]
        grid = grids[data]
        lo, hi = min(float(np.nanmin(grid)), -1e-12), max(float(np.nanmax(grid)), 1e-12)
        width, height = px * cols, px * (H * (K + 1) - 1)
        return {"width": width, "height": height,
                "layer": [{"data": {"values": [{"url": state_image(grid, lo, hi, px)}]},
                           "mark": {"type": "image", "aspect": False, "smooth": False, "align": "left",
                                    "baseline": "top", "width": width, "height": height, "tooltip": None},
                           "encoding": {"url": {"field": "url", "type": "nominal"}, "x": {"value": 0},
                                        "y": {"value": 0}}},
                          {"data": {"name": data}, "mark": {"type": "rect", "opacity": 0},
                           "encoding": {"x": {"field": "x", "type": "quantitative", "axis": None,
                                              "scale": {"domain": [0, cols]}},
                                        "x2": {"field": "x1"},
                                        "y": {"field": "y", "type": "quantitative", "axis": None,
                                              "scale": {"domain": [H * (K + 1) - 1, 0]}},
                                        "y2": {"field": "y1"},
                                        "color": {"field": "s", "type": "quantitative", "title": title,
                                                  "scale": {"domain": [lo, 0, hi], "range": list(STATE_STOPS),
                                                            "interpolate": "rgb"},
                                                  "legend": {"gradientLength": 90}},
                                        "tooltip": [{"field": "p", "title": "panel"}, {"field": "h", "title": "head"},
                                                    {"field": "k", "title": "key channel"},
                                                    {"field": "v", "title": "value channel"},
                                                    {"field": "s", "title": "S", "format": ".4f"}]}},
                          {"data": {"values": label_rows}, "mark": {"type": "text", "dy": -8, "fontSize": 10,
                                                                     "color": GREY, "baseline": "bottom"},
                           "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"datum": 0},
                                        "text": {"field": "text"}}}]}
    heads = ", ".join(f"head {h}" for h in range(H))
    return _spec(rows, {"hconcat": [view("S", 2 * (V + 1) - 1, "S", ["before", "after"]),
                                    view("change", V, "change", ["change"])],
                        "resolve": {"scale": {"color": "independent"}}},
                 f"state S ({heads} stacked; rows: key, columns: value): before · after · the change")


def kda_read_figure(d: dict, pieces=None) -> dict:
    o = np.asarray(d["o"], dtype=float)
    cols = {f"o, head {h}": c for h, c in zip(range(o.shape[0]), (theme.KDA, theme.K3, theme.ACCENT, theme.MOE))}
    rows = sum((_vector(f"o, head {h}", o[h]) for h in range(o.shape[0])), [])
    return _spec({"values": rows}, _bars("values", WIDTH, HEIGHT, ytitle="o", xtitle="value channel", group=True,
                                         colours=cols), "the read o = Sᵀq per head")


def kda_out_figure(d: dict, pieces=None) -> dict:
    cols = {"RMSNorm(o)": GREY, "gated": theme.KDA}
    bars = _bars("values", WIDTH, HEIGHT, group=True, colours=cols, xtitle="channel (head × value)")
    del bars["width"], bars["height"]            # a layer's size is set once, on the layer
    gate_name = "gate σ(x W_g)"
    # one colour scale for bars and line, so the legend names the gate too (offsets stay the bars' two)
    bars["encoding"]["color"]["scale"] = {"domain": [*cols, gate_name], "range": [*cols.values(), theme.ACCENT]}
    gate = {"data": {"name": "gate"}, "mark": {"type": "line", "point": True},
            "encoding": {"x": {"field": "channel", "type": "ordinal"},
                         "y": {"field": "value", "type": "quantitative"},
                         "color": {"field": "series", "type": "nominal"},
                         "tooltip": [{"field": "series"}, {"field": "channel"}, {"field": "value", "format": ".3f"}]}}
    return _spec({"values": _vector("RMSNorm(o)", d["normed"]) + _vector("gated", d["gated"]),
                  "gate": _vector(gate_name, d["gate"])},
                 {"layer": [bars, gate], "width": WIDTH, "height": HEIGHT},
                 "the normalised read, the gate (a line, 0 to 1), and what passes")


def mla_latent_figure(d: dict, pieces=None) -> dict:
    c, kr = np.asarray(d["c"], dtype=float), np.asarray(d["k_rope"], dtype=float)
    rows = _vector("latent c", c) + [{"series": "k_R (never rotated)", "channel": len(c) + i, "value": _f(x)}
                                     for i, x in enumerate(kr)]
    return _spec({"values": rows}, _bars("values", WIDTH, HEIGHT, xtitle="cached value",
                                         colours={"latent c": theme.MLA, "k_R (never rotated)": theme.ACCENT}),
                 "the row this token adds to the latent cache")


def mla_attn_figure(d: dict, pieces=None) -> dict:
    from app.text import visible
    probs = np.asarray(d["probs"], dtype=float)
    labels = [visible(p) for p in d["pieces"]]
    colours = [theme.MLA, theme.K3, theme.ACCENT, theme.MOE]
    heads = [f"head {h}" for h in range(probs.shape[0])]
    rows = [{"head": heads[h], "position": j, "token": labels[j], "weight": _f(probs[h, j])}
            for h in range(probs.shape[0]) for j in range(probs.shape[1])]
    body = {"data": {"name": "values"}, "mark": {"type": "line", "point": True}, "width": WIDTH, "height": HEIGHT,
            "encoding": {"x": {"field": "position", "type": "quantitative", "title": "earlier token (position)",
                               "axis": {"tickMinStep": 1, "format": "d"}},
                         "y": {"field": "weight", "type": "quantitative", "title": "attention weight"},
                         "color": {"field": "head", "type": "nominal", "title": None,
                                   "scale": {"domain": heads, "range": colours[:len(heads)]},
                                   "legend": {"orient": "top", "direction": "horizontal"}},
                         "tooltip": [{"field": "head"}, {"field": "position"}, {"field": "token"},
                                     {"field": "weight", "format": ".3f"}]}}
    return _spec({"values": rows}, body, "where this token looks")


def mla_gate_figure(d: dict, pieces=None) -> dict:
    gate = np.asarray(d["gate"], dtype=float)
    top = {"data": {"name": "gate"}, "mark": "bar", "width": CONCAT - 110, "height": 90,
           "encoding": {"x": {"field": "channel", "type": "ordinal", "axis": None},
                        "y": {"field": "value", "type": "quantitative", "title": "gate", "scale": {"domain": [0, 1]}},
                        "color": {"field": "value", "type": "quantitative", "title": "gate",
                                  "scale": {"scheme": "viridis", "domain": [0, 1]}, "legend": {"gradientLength": 70}},
                        "tooltip": [{"field": "channel"}, {"field": "value", "format": ".3f"}]}}
    cols = {"o (attention read)": GREY, "gate ⊙ o (what passes)": theme.MLA}
    bottom = _bars("values", CONCAT - 110, 110, group=True, colours=cols, xtitle="channel (head × value)")
    return _spec({"gate": _vector("gate σ(x W_g)", gate),
                  "values": _vector("o (attention read)", d["o"]) + _vector("gate ⊙ o (what passes)", d["gated"])},
                 {"vconcat": [top, bottom], "resolve": {"scale": {"color": "independent"}}},
                 "the gate per channel · the read before and after it")


def dense_figure(d: dict, pieces=None) -> dict:
    return _spec({"values": _vector("hidden", d["hidden"])},
                 _bars("values", WIDTH, HEIGHT, theme.DENSE, "SiTU-GLU value", "hidden unit"),
                 "the dense FFN's hidden values for this token")


def router_figure(d: dict, pieces=None) -> dict:
    s, b = np.asarray(d["scores"], dtype=float), np.asarray(d["bias"], dtype=float)
    idx, p, cut = np.asarray(d["indices"]), np.asarray(d["weights"], dtype=float), float(d["cutoff"])
    biased = s + b
    order = np.argsort(-biased, kind="stable")
    chosen = set(int(i) for i in idx)
    ranked = [{"r": r + 1, "e": int(e), "y": _f(biased[e]), "s": _f(s[e]), "b": _f(b[e]), "c": int(e) in chosen}
              for r, e in enumerate(order)]                   # short field names: 896 rows
    weights = [{"expert": f"expert {int(i)}", "p": _f(w), "s": _f(s[i]), "b": _f(b[i])} for i, w in zip(idx, p)]
    scatter = {"data": {"name": "ranked"}, "width": 200, "height": HEIGHT,
               "layer": [{"mark": {"type": "point", "filled": True},
                          "encoding": {"x": {"field": "r", "type": "quantitative", "scale": {"type": "log"},
                                             "title": "rank by s + b (log)",
                                             "axis": {"values": [1, len(idx), 100, len(s)]}},
                                       "y": {"field": "y", "type": "quantitative", "title": "biased score s + b"},
                                       "color": {"condition": {"test": "datum.c", "value": theme.MOE},
                                                 "value": GREY},
                                       "size": {"condition": {"test": "datum.c", "value": 40}, "value": 10},
                                       "tooltip": [{"field": "e", "title": "expert"}, {"field": "r", "title": "rank"},
                                                   {"field": "y", "title": "s + b", "format": ".4f"},
                                                   {"field": "s", "format": ".4f"}, {"field": "b", "format": ".4f"},
                                                   {"field": "c", "title": "chosen"}]}},
                         {"data": {"values": [{"cut": cut, "label": f"cutoff {cut:.4f}"}]},
                          "layer": [{"mark": {"type": "rule", "strokeDash": [4, 3], "color": theme.ACCENT},
                                     "encoding": {"y": {"field": "cut", "type": "quantitative"}}},
                                    {"mark": {"type": "text", "align": "right", "dy": -6, "x": 200,
                                              "color": theme.ACCENT, "fontSize": 10},
                                     "encoding": {"y": {"field": "cut", "type": "quantitative"},
                                                  "text": {"field": "label"}}}]}]}
    bars = {"data": {"name": "weights"}, "mark": {"type": "bar", "color": theme.MOE}, "width": 150, "height": HEIGHT,
            "encoding": {"x": {"field": "expert", "type": "nominal", "sort": None, "title": None,
                               "axis": {"labelAngle": -60, "labelFontSize": 9}},
                         "y": {"field": "p", "type": "quantitative", "title": "weight p_i"},
                         "tooltip": [{"field": "expert"}, {"field": "p", "format": ".4f"},
                                     {"field": "s", "format": ".4f"}, {"field": "b", "format": ".4f"}]}}
    return _spec({"ranked": ranked, "weights": weights}, {"hconcat": [scatter, bars]},
                 "all experts by biased score, cutoff dashed · the chosen experts' weights")


def moe_down_figure(d: dict, pieces=None) -> dict:
    x, z = np.asarray(d["x"], dtype=float), np.asarray(d["z"], dtype=float)
    return _spec({"x": _vector("x", x), "z": _vector("z", z)},
                 {"hconcat": [_bars("x", 220, HEIGHT, GREY, "value", f"x: {len(x)} channels"),
                              _bars("z", 130, HEIGHT, theme.MOE, "value", f"z: {len(z)} latent channels")]},
                 "full width → latent")


def experts_figure(d: dict, pieces=None) -> dict:
    e, u = np.asarray(d["experts"], dtype=float), np.asarray(d["u"], dtype=float)
    idx, p = np.asarray(d["indices"]), np.asarray(d["weights"], dtype=float)
    rows = [f"expert {int(i)} · p {w:.3f}" for i, w in zip(idx, p)] + ["u = Σ p E(z)"]
    z = np.vstack([e, u[None, :]])
    heat = _heat("values", WIDTH, 17 * z.shape[0], xtitle="latent channel")
    heat["encoding"]["y"]["axis"] = {"labelOverlap": False, "labelFontSize": 9}
    return _spec({"values": _matrix(z, rows)}, heat,
                 "each chosen expert's output E_i(z), and their weighted sum u (last row)")


def moe_up_figure(d: dict, pieces=None) -> dict:
    panels = (("u", d["u"], GREY, "latent channel"), ("RMSNorm(u)", d["u_normed"], theme.MOE, "latent channel"),
              ("r = W_up RMSNorm(u)", d["routed"], theme.K3, "channel"))
    return _spec({name: _vector(name, v) for name, v, _, _ in panels},
                 {"hconcat": [_bars(name, 70 if len(v) <= 16 else 140, HEIGHT - 20, c, None, name)
                              for name, v, c, xt in panels], "resolve": {"scale": {"y": "independent"}}},
                 "u · RMSNorm(u): the same shape at a fixed scale · the routed output r")


def shared_figure(d: dict, pieces=None) -> dict:
    from app.text import visible
    sn, rn, t = np.asarray(d["shared_norm"]), np.asarray(d["routed_norm"]), int(d["token"])
    T = len(sn)
    labels = [visible(p) for p in (pieces or [""] * T)][:T] + [""] * max(0, T - len(pieces or []))
    rows = [{"series": name, "channel": i, "value": _f(v[i]), "token": labels[i], "this": i == t}
            for name, v in (("shared", sn), ("routed", rn)) for i in range(T)]
    body = _bars("values", WIDTH, HEIGHT, ytitle="length of the output", xtitle="token of the prompt (position)",
                 group=True, colours={"shared": theme.ACCENT, "routed": theme.MOE})
    body["encoding"]["opacity"] = {"condition": {"test": "datum.this", "value": 1}, "value": 0.4}
    body["encoding"]["tooltip"] = [{"field": "channel", "title": "position"}, {"field": "token"},
                                   {"field": "series"}, {"field": "value", "format": ".3f", "title": "length"}]
    step = max(1, -(-T // 16))
    body["encoding"]["x"]["axis"]["labelExpr"] = f"datum.value % {step} ? '' : datum.label"
    return _spec({"values": rows}, body, "length of the shared and the routed output, every token of the prompt")


def residual_figure(d: dict, pieces=None) -> dict:
    a = np.asarray(d["a"], dtype=float)
    before = np.full_like(a, np.nan) if d["before"] is None else np.asarray(d["before"], dtype=float)
    rows = np.vstack([before, a, np.asarray(d["m"], dtype=float), np.asarray(d["after"], dtype=float)])
    labels = ["partial before" if d["before"] is not None else "partial before (sealed: new block)",
              "+ a (attention)", "+ m (FFN)", "= partial after"]
    return _spec({"values": _matrix(rows, labels)}, _heat("values", WIDTH, 26 * 4),
                 "the open block's running sum, per channel")


def gradient_figure(d: dict, pieces=None) -> dict:
    g, idx, s = np.asarray(d["descent"], dtype=float), np.asarray(d["indices"]), np.asarray(d["scores"], dtype=float)
    rows = [{"expert": str(int(i)), "descent": _f(v), "s": _f(si), "raise": bool(v > 0)}
            for i, v, si in zip(idx, g, s)]
    # every chosen expert labelled (Vega dropped every other one of 16 rotated "expert N" labels as overlapping)
    body = {"data": {"name": "values"}, "mark": "bar", "width": WIDTH, "height": HEIGHT,
            "encoding": {"x": {"field": "expert", "type": "nominal", "sort": None, "title": "chosen expert",
                               "axis": {"labelAngle": 0, "labelOverlap": False, "labelFontSize": 10}},
                         "y": {"field": "descent", "type": "quantitative", "title": "−∂L/∂s (raise if > 0)",
                               "axis": {"format": ".1e"}},
                         "color": {"condition": {"test": "datum.raise", "value": theme.MOE}, "value": theme.MLA},
                         "tooltip": [{"field": "expert"},
                                     {"field": "descent", "title": "−∂L/∂s", "format": ".3e"},
                                     {"field": "s", "format": ".4f"}]}}
    return _spec({"values": rows}, body, "the direction one gradient step would move each chosen score")


FIGURES = {
    "read": read_figure, "norm": norm_figure, "kda_qkv": kda_qkv_figure, "kda_gate": kda_gate_figure,
    "kda_state": kda_state_figure, "kda_read": kda_read_figure, "kda_out": kda_out_figure,
    "mla_latent": mla_latent_figure, "mla_attn": mla_attn_figure, "mla_gate": mla_gate_figure,
    "dense": dense_figure, "router": router_figure, "moe_down": moe_down_figure, "experts": experts_figure,
    "moe_up": moe_up_figure, "shared": shared_figure, "residual": residual_figure, "gradient": gradient_figure,
}


def step_figure(key: str, data: dict, pieces=None) -> dict:
    """A step's figure, drawn on a canvas: as SVG its heat maps were thousands of DOM nodes (~2,900 on the default
    view), which the browser built on every load of the page."""
    return FIGURES[key](data, pieces) | {"usermeta": usermeta(f"layer_{key}")}

