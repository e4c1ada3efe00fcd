"""The Model card's data: the config table and the training log it plots."""
import pandas as pd

from app.charts.model_card import training_figure
from app.model_card import config_table
from model.evaluate import CLASSES, char_class, mutual_information, unigram_cross_entropy
import numpy as np


def test_config_table_keeps_counts_and_marks_shrunk_widths():
    df = config_table().set_index("field")
    for f in ("num_layers", "n_routed_experts", "top_k", "n_shared_experts", "attnres_block_size"):
        assert df.loc[f, "same"] == "✓", f
    assert df.loc["d_model", "same"] == "shrunk" and df.loc["d_model", "Kimi K3"] == "7168"
    assert df.loc["n_routed_experts", "K3 value is"] == "published"
    assert df.loc["latent_dim", "K3 value is"] == "published"          # Table 1, routed_expert_hidden_size


def test_training_figure_marks_the_quantised_phase():
    log = pd.DataFrame({"step": range(10), "loss": np.linspace(8, 5, 10), "val_loss": [7.9] + [""] * 8 + [5.1],
                        "quant": [0] * 7 + [1] * 3, "max_mean_load": 1.2, "dead_experts": 0.0,
                        "bias_spread": 0.1})
    fig = training_figure(log, unigram=6.0)
    names = [t.name for t in fig.data]
    assert "validation loss" in names and len(fig.data[names.index("validation loss")].x) == 2
    assert any(s.x0 == 7 for s in fig.layout.shapes)


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
