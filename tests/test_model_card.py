"""The Model card's data: the config table and the training log it plots."""
import numpy as np
import pandas as pd
import pytest

from app.charts.model_card import bias_spec, training_spec
from app.model_card import config_table
from model.evaluate import CLASSES, char_class, mutual_information, unigram_cross_entropy


def test_config_table_keeps_counts_and_marks_shrunk_widths():
    df = config_table().set_index("field")
    for f in ("num_layers", "n_routed_experts", "top_k", "n_shared_experts", "attnres_block_size"):
        assert df.loc[f, "same"] == "✓", f
    assert df.loc["d_model", "same"] == "shrunk" and df.loc["d_model", "Kimi K3"] == "7168"
    assert df.loc["n_routed_experts", "K3 value is"] == "published"
    assert df.loc["latent_dim", "K3 value is"] == "published"          # Table 1, routed_expert_hidden_size


def test_training_chart_marks_the_quantised_phase():
    log = pd.DataFrame({"step": range(10), "loss": np.linspace(8, 5, 10), "val_loss": [7.9] + [""] * 8 + [5.1],
                        "quant": [0] * 7 + [1] * 3, "max_mean_load": 1.2, "dead_experts": 0.0,
                        "bias_spread": 0.1})
    spec = training_spec(log, unigram=6.0)
    data = spec["datasets"]
    # validation only where it was measured: a line through its two points, not one broken at the gaps
    assert data["validation"]["step"].tolist() == [0, 9] and data["validation"]["val_loss"].tolist() == [7.9, 5.1]
    assert data["phase"][["start", "end"]].values.tolist() == [[7, 9]]
    assert data["unigram"]["unigram"].tolist() == [6.0] and data["unigram"]["label"].tolist() == ["unigram baseline"]
    # the 25-step mean over the first 10 steps: the mean of 8 .. 5 is 6.5 at step 9, 8 at step 0
    mean = data["log"].set_index("step")["loss_mean"]
    assert mean[0] == pytest.approx(8) and mean[9] == pytest.approx(6.5)
    assert data["log"]["max_mean_load"].tolist() == [1.2] * 10
    # two panels on one step axis: the loss with the baseline above, the expert load below
    top, bottom = spec["vconcat"]
    assert top["title"]["text"].startswith("cross-entropy") and bottom["title"]["text"] == "expert load balance"
    assert spec["resolve"]["scale"]["x"] == "shared"
    drawn = lambda panel: {l["encoding"]["color"]["datum"] for l in panel["layer"] if l["mark"]["type"] == "line"}
    assert drawn(top) == {"training loss", "training loss (25-step mean)", "validation loss"}
    assert drawn(bottom) == {"max/mean expert load (worst layer)", "experts with no token in the batch (mean per layer)"}
    assert any(l["data"]["name"] == "phase" and l["mark"]["type"] == "rect" for l in bottom["layer"])
    assert training_spec(log.assign(quant=0))["datasets"]["phase"].empty
    assert training_spec(log)["datasets"]["unigram"].empty
    assert bias_spec(log)["datasets"]["bias"]["bias_spread"].tolist() == [0.1] * 10


def test_evaluation_measures():
    assert [char_class(p) for p in (" the", " 42", ")", "\n  ", " def")] == ["word", "digit", "punct", "space", "keyword"]
    rng = np.random.default_rng(0)
    classes = rng.integers(0, len(CLASSES), 4000)
    # experts chosen by class carry all the class information; random experts carry none
    by_class = np.stack([classes * 10 + j for j in range(4)], 1)
    random = rng.integers(0, 64, (4000, 4))
    assert mutual_information(classes, by_class, 64) > 2.0
    assert mutual_information(classes, random, 64) < 0.05
    train = np.array([0, 0, 0, 1])
    # add-one smoothing over a 3-token vocabulary: p(0) = 4/7
    assert np.isclose(unigram_cross_entropy(train, np.array([0]), 3), -np.log(4 / 7))


def test_balanced_floor_matches_the_binomial_and_shrinks_with_more_tokens():
    from app.model_card import balanced_floor
    small, big = balanced_floor(1024), balanced_floor(65536)
    # one layer, 1,024 tokens: mean load 18.3, std 4.2; the max of 896 such loads sits ~3 std above
    assert 1.6 < small["median_layer"] < 2.0 and small["worst_layer"] > small["median_layer"]
    assert 1.0 < big["median_layer"] < 1.15 < small["median_layer"]
    one = balanced_floor(16384, n_experts=4, top_k=4, layers=1)   # every token picks every expert
    assert one["median_layer"] == one["worst_layer"] == 1.0


def test_top_next_is_the_softmax_top_five_and_the_table_shows_it():
    # top_next against the logits computed here by a separate forward: the same 5 tokens, their
    # softmax probabilities, most likely first; the card's table makes spaces and newlines visible.
    import torch

    from app.model_card import next_token_table
    from model.config import K3Config
    from model.evaluate import top_next
    from model.k3 import K3Model
    from model.tokenizer import Tokenizer
    tok = Tokenizer.load()
    torch.manual_seed(0)
    model = K3Model(K3Config.tiny()).eval()
    prompt = "    for i in range("
    got = top_next(model, tok, prompt)
    with torch.no_grad():
        logits = model(torch.tensor([tok.encode(prompt)])).logits[0, -1].double()
    p = torch.softmax(logits, -1)
    order = torch.argsort(p, descending=True)[:5]
    assert [g["piece"] for g in got] == [tok.decode([int(i)]) for i in order]
    assert [g["prob"] for g in got] == [round(float(p[i]), 4) for i in order]
    table = next_token_table({"code": {"prompt": prompt, "top5": [{"piece": "\n  ", "prob": 0.5},
                                                                   {"piece": " the", "prob": 0.25}]}})
    assert table.iloc[0]["prompt"] == "code: ␣␣␣␣for i in range("
    assert table.iloc[0]["#1"] == "↵␣␣  50%" and table.iloc[0]["#2"] == "␣the  25%"


def test_cross_entropy_on_windows_against_a_loop_over_tokens():
    # model.evaluate's batched windows against log-softmax picked token by token, window by window
    import torch

    from model.config import K3Config
    from model.evaluate import CHUNK, cross_entropy_on_windows, window_starts
    from model.k3 import K3Model
    torch.manual_seed(0)
    cfg = K3Config.micro()
    model = K3Model(cfg).eval()
    data = np.random.default_rng(3).integers(0, cfg.vocab_size, 6 * CHUNK + 5).astype(np.uint16)
    got = cross_entropy_on_windows(model, data, n_windows=4, batch=3)
    starts = window_starts(len(data) - 1, 4)
    assert len(set(starts)) == 4 and all(s % CHUNK == 0 and s + CHUNK + 1 <= len(data) for s in starts)
    nll = []
    with torch.no_grad():
        for s in starts:
            ids = torch.tensor(data[s:s + CHUNK + 1].astype(np.int64))
            logp = torch.log_softmax(model(ids[None, :-1], record=False).logits[0].double(), -1)
            nll += [-float(logp[t, ids[t + 1]]) for t in range(CHUNK)]
    assert got["tokens"] == 4 * CHUNK and got["windows"] == 4
    assert abs(got["cross_entropy"] - np.mean(nll)) < 1e-4


def test_card_sentences_read_the_evidence():
    from app.model_card import corpus_parts, next_token_reading
    layout = [{"piece": p, "prob": 0.1} for p in ("\n", " \"", "\n  ", " the", ",")]
    words = [{"piece": p, "prob": 0.1} for p in (" value", " argument", " the", "\n", " default")]
    got = next_token_reading({"prose": {"prompt": "x", "top5": layout}, "code": {"prompt": "y", "top5": words}})
    assert got.startswith("after prose it mostly predicts layout (4 of its 5")
    assert got.endswith("after code 4 of its 5 guesses are words, names or numbers")
    assert corpus_parts({}) is None
    parts = corpus_parts({"kinds": {"docstring": 1, "guide": 3}})
    assert parts.startswith("docstrings of the standard library (25%)") and "(75%)" in parts


def test_held_out_summary_states_both_splits_and_the_replaced_instance():
    from app.model_card import held_out_summary
    assert held_out_summary({"trained": {}}) is None                        # an evaluation file of before
    win = lambda ce: {"cross_entropy": ce, "tokens": 16384, "windows": 128}
    ev = {"held_out_tokens": 16384, "trained": {"cross_entropy": 4.1},
          "held_out_windows": {"trained": {"whole_split": win(4.2), "earlier_split": win(4.3)},
                               "untrained": {"whole_split": win(8.8), "earlier_split": win(8.9)},
                               "unigram": {"whole_split": 6.5, "earlier_split": 6.7}}}
    text = held_out_summary(ev)
    assert "**4.20**" in text and "untrained 8.80, unigram 6.50" in text and "**4.30**" in text
    ev["previous_instance"] = {"tokens_seen": 827392, "train_tokens": 1010000, "first_tokens_cross_entropy": 4.87,
                               "held_out_windows": {"whole_split": win(5.6), "earlier_split": win(5.0)}}
    text = held_out_summary(ev)
    assert "827,392 tokens seen" in text and "5.60 and 5.00" in text and "4.87 against 4.10 now" in text
    assert "unwrapped" not in text                                       # trained on the text as written
    ev["held_out_windows"]["as_trained"] = {"unwrapped_prose": True, "trained": win(3.6), "unigram": 6.9}
    text = held_out_summary(ev)
    assert "in that form: **3.60** (unigram 6.90)" in text and "**4.20**" in text


def test_corpus_parts_name_the_documentation_package_version_where_the_card_records_it():
    from app.model_card import corpus_parts
    kinds = {"docstring": 1, "manual": 1, "code": 1, "guide": 1}
    assert "Debian's python3.11-doc) (25%)" in corpus_parts({"kinds": kinds})       # an older card: no version
    text = corpus_parts({"kinds": kinds, "guide_package": "python3.11-doc 3.11.2-6+deb12u8"})
    assert "Debian's python3.11-doc 3.11.2-6+deb12u8) (25%)" in text and text.count("python3.11-doc") == 1
    assert corpus_parts({}) is None


def test_training_phases_tell_a_continued_run_phase_by_phase():
    from app.model_card import training_phases, unwrapped_from_step
    assert training_phases({"steps": 1300, "lr": 0.003}) is None           # one run: told in one sentence
    assert unwrapped_from_step({"steps": 1300, "lr": 0.003}) is None
    first = {"steps": 1300, "lr": 0.003, "seed": 0, "train_minutes": 344.1, "quant_from_step": 909,
             "untrained_val_loss": 8.8146, "final_val_loss": 3.655, "unwrapped_prose": False}
    second = {"steps": 180, "lr": 0.001, "seed": 1, "train_minutes": 34.3, "quant_from_step": 0,
              "start_val_loss": 3.7743, "final_val_loss": 3.6126, "unwrapped_prose": True}
    text = training_phases({"continued_from": first, "continuation": second})     # a card before "phases"
    assert text.startswith("two phases. First 1,300 steps (peak learning rate 0.003, seed 0")
    assert "quantisation-aware from step 909" in text and "as written, hard-wrapped: validation loss 8.81 → 3.65" in text
    assert "for 180 steps (peak learning rate 0.001, seed 1" in text and "quantisation-aware throughout" in text
    assert text.index("as written") < text.index("unwrapped") and text.endswith("3.77 → 3.61")
    assert training_phases({"phases": [first, second]}) == text
    second["corpus_fingerprint"] = "b5e38766b51d9d73"
    third = {"steps": 200, "lr": 0.001, "seed": 3, "train_minutes": 50.2, "quant_from_step": 0, "router_lr_multiple": 10.0,
             "start_val_loss": 3.675, "final_val_loss": 3.66, "unwrapped_prose": True, "corpus_fingerprint": "b5e38766b51d9d73"}
    text = training_phases({"phases": [first, second, third]})
    assert text.startswith("three phases.") and text.count("`--init-from` continued") == 2
    assert "for 200 steps (peak learning rate 0.001, the routers' learning rate 10 times that, seed 3" in text
    assert "on the same text: validation loss 3.67 → 3.66" in text
    assert "learning rate 10 times" not in text[:text.index("200 steps")]
    # same form, but a corpus rebuilt from another revision of the documentation package: not "the same text"
    rebuilt = training_phases({"phases": [first, second, third | {"corpus_fingerprint": "2c378d41027df539"}]})
    assert "on the same text" not in rebuilt and "rebuilt from the Debian documentation package" in rebuilt
    assert "so the corpus fingerprint does): validation loss 3.67 → 3.66" in rebuilt
    # routers of some layers only: the card names them
    some = training_phases({"phases": [first, second, third | {"router_layers": [33, 92]}]})
    assert "the routers' learning rate 10 times that in MoE layers 33-92, seed 3" in some
    # a phase that slows the routers down gives its own reason, not the faster routers' one
    fourth = third | {"steps": 165, "router_lr_multiple": 0.5, "start_val_loss": 3.756, "final_val_loss": 3.7049}
    text = training_phases({"phases": [first, second, third, fourth]})
    assert text.startswith("four phases.") and text.count("`--init-from` continued") == 3
    assert text.count("learn faster than the experts") == 1 and "learning rate 0.5 times that" in text
    assert text.endswith("3.76 → 3.70, so that the routing the phase before learned changes slowly while the "
                         "experts and the rest of the model adapt to it")
    assert unwrapped_from_step({"phases": [first, second, third]}) == 1300


def test_card_page_draws_its_training_charts_with_vega():
    import json

    from app.model_card import load_json, train_log
    from tests.conftest import open_app_page, vega_datasets
    at = open_app_page("views/model_card.py")
    assert not at.get("plotly_chart")
    found = {json.loads(el.proto.spec)["usermeta"]["chart"]: vega_datasets(el) for el in at.get("vega_lite_chart")}
    assert list(found) == ["model_card_training", "model_card_bias"]
    log, ev = train_log(), load_json("k3_tiny_eval.json")
    training = found["model_card_training"]
    assert len(training["log"]) == len(log) and training["log"]["step"].tolist() == log["step"].tolist()
    assert training["unigram"]["unigram"].tolist() == [ev["unigram_cross_entropy"]]
    assert training["phase"]["start"].tolist() == [log.loc[log["quant"] == 1, "step"].min()]
    assert len(training["validation"]) == pd.to_numeric(log["val_loss"], errors="coerce").notna().sum()
    downloads = [d for d in at.get("download_button") if "CSV" in d.proto.label]
    assert len(downloads) >= 2
    # the greedy continuations verbatim (their line breaks and indentation kept), as plain text, not st.code
    from app.ui import VERBATIM
    shown = [t.value.removeprefix(VERBATIM) for t in at.text]
    for g in ev["greedy_samples"]:
        assert (g["prompt"] + g["text"]).rstrip() in shown          # trailing blanks are not drawn anyway
    for entry in ev["next_tokens"].values():
        assert (entry["prompt"] + entry["greedy"]).rstrip() in shown
    assert not at.code


def _layers(spec: dict):
    for panel in spec.get("vconcat", [spec]):
        yield from panel["layer"]


def test_training_charts_point_through_bands_not_a_voronoi_per_step():
    """Pointing at a curve reads a band of steps (hover_bands), not a nearest-point selection, whose Voronoi
    diagram is a path per logged step; the bands tile the logged steps and carry the logged values."""
    n = 1480
    log = pd.DataFrame({"step": range(1, n + 1), "loss": np.linspace(8, 4, n), "val_loss": "", "quant": 0,
                        "max_mean_load": 1.5, "dead_experts": 0.0, "bias_spread": np.linspace(0, 1, n)})
    for spec, bands in ((training_spec(log), "log_hover"), (bias_spec(log), "bias_hover")):
        for layer in _layers(spec):
            for param in layer.get("params", []):
                assert not param["select"].get("nearest"), param["name"]
        hover = spec["datasets"][bands]
        assert 100 <= len(hover) <= 250                               # about one band per 4 px, not one per step
        assert hover["x0"].iloc[0] == 1 and hover["x1"].iloc[-1] == n
        assert (hover["x0"].to_numpy()[1:] == hover["x1"].to_numpy()[:-1]).all()       # no gaps, no overlaps
        source = spec["datasets"]["log" if bands == "log_hover" else "bias"].set_index("step")
        for col in ("loss", "bias_spread"):
            if col in hover:
                assert (hover[col].to_numpy() == source.loc[hover["step"], col].to_numpy()).all()
        assert sum(l.get("data", {}).get("name") == bands for l in _layers(spec)) == (2 if bands == "log_hover" else 1)
        # the chart's CSV has the log, not the bands (or the drawn samples) copied from it
        from app.export import spec_frame
        assert bands not in set(spec_frame(spec)["dataset"]) and "log_thin" not in set(spec_frame(spec)["dataset"])
    # the raw training loss is drawn at every step; the smoothed curves at about 400 of the steps, their own values
    spec = training_spec(log)
    lines = {l["encoding"]["color"]["datum"]: l["data"]["name"] for l in _layers(spec) if l["mark"]["type"] == "line"}
    assert lines["training loss"] == "log" and lines["validation loss"] == "validation"
    assert {lines[n] for n in lines if n not in ("training loss", "validation loss")} == {"log_thin"}
    drawn, full = spec["datasets"]["log_thin"], spec["datasets"]["log"].set_index("step")
    assert 300 <= len(drawn) <= 400 and drawn["step"].iloc[[0, -1]].tolist() == [1, n]
    for col in ("loss_mean", "max_mean_load", "dead_experts"):
        assert (drawn[col].to_numpy() == full.loc[drawn["step"], col].to_numpy()).all()
