"""The linked token/expert view (app/charts/linked.py): the browser answers it alone, so the spec must carry
both selections and the filters that use them, and its data must be the layer's routing."""
import json

import numpy as np
import torch

from app import routing as rt
from app.charts.linked import linked_figure, token_labels
from model.config import K3Config
from model.k3 import K3Model


def _walk(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_spec_links_tokens_and_experts_without_the_server():
    torch.manual_seed(0)
    cfg = K3Config.micro()
    model = K3Model(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 9))
    with torch.inference_mode():
        out = model(ids)
    layer = cfg.moe_layers[0]
    pieces = [f"p{i}" if i != 4 else "p1" for i in range(9)]          # a repeated piece keeps its own label
    pairs = rt.layer_pairs(out, layer, pieces)
    loads = rt.expert_loads(pairs, cfg.n_routed_experts)
    spec = linked_figure(pairs, loads, pieces)
    json.dumps({k: v for k, v in spec.items() if k != "datasets"})    # plain JSON but the data frames
    params = {p["name"]: p for p in spec["params"]}
    assert set(params) == {"expert", "token"}
    assert all(p["select"]["on"] == "pointerover" for p in params.values())
    filters = [n["filter"]["param"] for n in _walk(spec) if isinstance(n.get("filter"), dict) and "param" in n["filter"]]
    assert sorted(filters) == ["expert", "token"]
    data = {name: df.to_dict(orient="records") for name, df in spec["datasets"].items()}
    k = out.trace.experts(layer).shape[-1]
    assert len(data["pairs"]) == 9 * k and len(data["experts"]) == cfg.n_routed_experts
    assert sum(e["load"] for e in data["experts"]) == 9 * k
    chosen = out.trace.experts(layer)[0].numpy()
    for row in data["pairs"]:                                          # each pair is a real routing choice
        assert row["expert"] in chosen[row["token"]]
        assert row["row"] * rt.GRID_COLS + row["col"] == row["expert"]
    labels = [t["label"] for t in data["tokens"]]
    assert labels == token_labels(pieces) and len(set(labels)) == len(labels)
    np.testing.assert_allclose(sorted(r["weight"] for r in data["pairs"] if r["token"] == 0),
                               sorted(out.trace.weights(layer)[0, 0].tolist()), rtol=1e-6)
