"""Expert parallelism: shard bookkeeping, the all-to-all traffic matrix, bytes at K3 scale, and a real
torch.distributed run (gloo, separate processes) that must equal the single-process LatentMoE layer."""
import numpy as np
import pytest
import torch

from app.charts.parallel import bytes_spec, fanout_spec, rank_bytes_spec, shard_load_spec, traffic_spec
from app.parallel import (
    DIVISORS,
    RUNNABLE,
    bytes_table,
    expected_fanout,
    fanout,
    run_layer,
    shard_of,
    shard_pairs,
    shard_tokens,
    traffic,
)
from model.config import K3Config
from model.k3 import K3Model
from model.moe import LatentMoE
from model.parallel import LaunchError, launch_local, load_full_layer, load_shard, shard_bounds, token_owner, write_problem


def test_divisors_and_shards():
    assert DIVISORS[:6] == [1, 2, 4, 7, 8, 14] and DIVISORS[-1] == 896 and len(DIVISORS) == 16
    assert RUNNABLE == [1, 2, 4, 7, 8]
    assert shard_bounds(896, 8, 0) == (0, 112) and shard_bounds(896, 8, 7) == (784, 896)   # claim 10: 112 each
    with pytest.raises(ValueError):
        shard_bounds(896, 3, 0)
    assert shard_of(np.array([0, 111, 112, 895]), 8).tolist() == [0, 0, 1, 7]


def test_token_owner():
    assert token_owner(10, 4).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
    assert token_owner(10, 4, "round_robin").tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    assert token_owner(3, 4).tolist() == [0, 1, 2]                     # a rank may hold no token
    with pytest.raises(ValueError):
        token_owner(3, 2, "random")


def test_fanout_and_loads_on_known_routing():
    # 2 layers, 3 tokens, top-4 of 896 experts over 8 shards of 112
    e = np.array([[[0, 1, 2, 3], [0, 112, 224, 336], [895, 784, 1, 113]],
                  [[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 120]]])
    assert fanout(e, 8).tolist() == [[1, 4, 3], [1, 1, 2]]
    pairs = shard_pairs(e, 8)
    assert pairs.shape == (2, 8) and (pairs.sum(1) == 12).all()
    assert pairs[0].tolist() == [6, 2, 1, 1, 0, 0, 0, 2]
    assert shard_tokens(e, 8)[0].tolist() == [3, 2, 1, 1, 0, 0, 0, 1]
    M = traffic(e[0], 8, "round_robin")                                 # token t starts on device t
    assert M.sum() == 12 and M[0, 0] == 4 and M[1].tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    D = traffic(e[0], 8, "round_robin", dedup=True)
    assert D.sum() == fanout(e, 8)[0].sum() == 8 and D[2, 7] == 1 and D[2, 0] == 1


def test_expected_fanout():
    assert expected_fanout(896, 16, 1) == pytest.approx(1.0)
    assert expected_fanout(896, 16, 896) == pytest.approx(16.0)          # every expert its own device
    rng = np.random.default_rng(0)
    sims = [len({e // 112 for e in rng.choice(896, 16, replace=False)}) for _ in range(4000)]
    assert expected_fanout(896, 16, 8) == pytest.approx(np.mean(sims), abs=0.03)


def test_bytes_at_k3_scale():
    df = bytes_table(8, 7.0).set_index("what is sent")
    latent = df.loc["K3 latent (published design): k x l", "values per token"]
    assert latent == 16 * 3584 == 57_344
    assert df.loc["Kimi K2: k x d", "values per token"] == latent               # claim 8: same as K2's 8 x 7168
    assert df.loc["K3 experts at full width: k x d", "values per token"] == 2 * latent
    assert df.loc["K3 latent (published design): k x l", "KB per token (BF16)"] == pytest.approx(114.688)
    live = [i for i in df.index if "live" in i][0]
    assert df.loc[live, "values per token"] == 7.0 * 3584


def test_bytes_chart_keeps_the_table_order_labels_and_colours():
    spec = bytes_spec(bytes_table(8, 7.0))
    bars = spec["datasets"]["bytes"].set_index("what")
    assert list(bars.index)[0] == "K3 experts at full width: k x d"          # first row on top: the y order is the data's
    assert len(bars) == 5 and spec["layer"][0]["encoding"]["y"]["sort"] is None
    assert bars.loc["K3 latent (published design): k x l", "label"] == "57,344 values = 114.7 KB"   # 16 x 3,584 x 2 B
    assert bars.loc["K3 experts at full width: k x d", "kb"] == pytest.approx(16 * 7168 * 2 / 1000)
    colour = spec["layer"][0]["encoding"]["color"]["scale"]
    hue = dict(zip(colour["domain"], colour["range"]))
    assert hue[bars.loc["Kimi K2: k x d", "kind"]] == "#999999"                # K2 grey, K3 blue, full width orange
    assert hue[bars.loc["K3 latent (published design): k x l", "kind"]] == "#0072B2"
    assert hue[bars.loc["K3 experts at full width: k x d", "kind"]] == "#E69F00"
    assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"][1] > 229.376      # room for the longest bar's label


KNOWN = np.array([[[0, 1, 2, 3], [0, 112, 224, 336], [895, 784, 1, 113]],        # 2 layers, 3 tokens, top-4
                  [[5, 6, 7, 8], [5, 6, 7, 8], [5, 6, 7, 120]]])


def test_load_chart_cells_are_pairs_over_an_even_share():
    spec = shard_load_spec(shard_pairs(KNOWN, 8), [4, 5], shard_tokens(KNOWN, 8))
    cells = spec["datasets"]["loads"]
    assert len(cells) == 2 * 8
    first = cells[cells["layer"] == 4].sort_values("device")
    assert first["pairs"].tolist() == [6, 2, 1, 1, 0, 0, 0, 2]
    assert first["tokens"].tolist() == [3, 2, 1, 1, 0, 0, 0, 1]
    # 12 pairs over 8 devices: an even share is 1.5 pairs
    np.testing.assert_allclose(first["ratio"], [4, 4 / 3, 2 / 3, 2 / 3, 0, 0, 0, 4 / 3])
    enc = spec["encoding"]
    assert enc["color"]["scale"]["domain"] == [0, 1, 2] and enc["color"]["scale"]["range"][1] == "#dddddd"   # even: grey
    assert enc["y"]["scale"]["reverse"] is True and enc["y"]["scale"]["domain"] == [3.5, 5.5]              # first layer on top
    assert enc["x"]["title"] == "device (shard of 112 experts)"
    assert shard_load_spec(shard_pairs(KNOWN, 7), [4, 5], shard_tokens(KNOWN, 7))["encoding"]["x"]["title"] == \
        "device (shard of 128 experts)"


def test_fanout_chart_bars_and_both_reference_lines():
    fan = fanout(KNOWN, 8)                                                # [[1, 4, 3], [1, 1, 2]]
    spec = fanout_spec(fan, 8, 4, expected_fanout(896, 4, 8))
    bars = spec["datasets"]["fanout"]
    assert bars["devices"].tolist() == [1, 2, 3, 4]                       # at most min(G, k) devices
    assert bars["token_layers"].tolist() == [3, 1, 1, 1]
    np.testing.assert_allclose(bars["share"], [1 / 2, 1 / 6, 1 / 6, 1 / 6])
    lines = spec["datasets"]["lines"].set_index("what")
    assert lines.loc["live routing, mean", "label"] == "live mean 2.00"   # 12 devices over 6 (token, layer)s
    # uniform: 4 of 896 experts, shards of 112, each missed with probability C(784, 4) / C(896, 4)
    miss = np.prod([(784 - i) / (896 - i) for i in range(4)])
    assert lines.loc["uniform routing, expected", "x"] == pytest.approx(8 * (1 - miss))
    rule = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "rule")["encoding"]
    dash = dict(zip(rule["strokeDash"]["scale"]["domain"], rule["strokeDash"]["scale"]["range"]))
    assert dash["uniform routing, expected"] != [1, 0] and dash["live routing, mean"] == [1, 0]   # dashed vs solid
    labels = [layer for layer in spec["layer"] if layer["mark"]["type"] == "text"]
    assert len(labels) == 2 and set(lines["side"]) <= {"left", "right"} and sorted(lines["row"]) == [0, 1]


def test_traffic_chart_counts_every_pair_and_writes_small_matrices():
    spec = traffic_spec(traffic(KNOWN[0], 8, "round_robin"), "pairs")
    cells = spec["datasets"]["traffic"]
    assert len(cells) == 64 and cells["count"].sum() == 12
    at = lambda s, d: int(cells[(cells["source"] == s) & (cells["destination"] == d)]["count"].iloc[0])
    assert at(0, 0) == 4 and [at(1, d) for d in range(8)] == [1, 1, 1, 1, 0, 0, 0, 0]
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["rect", "text"]    # counts written in the cells
    assert spec["layer"][0]["encoding"]["y"]["scale"]["reverse"] is True              # device 0 on top
    # 896 devices: only the cells with traffic (at most one per pair), on a background of the colour of 0
    rng = np.random.default_rng(1)
    e = np.stack([rng.choice(896, 16, replace=False) for _ in range(20)])
    big = traffic_spec(traffic(e, 896), "pairs")
    assert len(big["datasets"]["traffic"]) <= 20 * 16 and big["datasets"]["traffic"]["count"].sum() == 20 * 16
    assert (big["datasets"]["traffic"]["count"] > 0).all()
    assert [layer["mark"]["type"] for layer in big["layer"]] == ["rect", "rect"]
    assert big["layer"][0]["mark"]["color"] == big["layer"][1]["encoding"]["color"]["scale"]["range"][0]


def micro_problem(tmp_path, dtype=torch.float32, tokens=10):
    torch.manual_seed(3)
    cfg = K3Config.micro()
    moe = LatentMoE(cfg).eval().to(dtype)
    with torch.no_grad():
        moe.router.weight.normal_(0, 0.5)
        moe.router.expert_bias.normal_(0, 0.1)
    x = torch.randn(tokens, cfg.d_model, dtype=dtype)
    return moe, x, write_problem(tmp_path / "p.safetensors", moe, x)


def test_problem_file_round_trip_and_shards(tmp_path):
    moe, x, path = micro_problem(tmp_path)
    full, x2 = load_full_layer(path)
    assert torch.equal(x2, x)
    with torch.no_grad():
        torch.testing.assert_close(full(x.unsqueeze(0))[0], moe(x.unsqueeze(0))[0], rtol=0, atol=0)
    shard, _ = load_shard(path, 2, 4)                     # experts 8..11 of 16, read as a slice
    assert (shard.lo, shard.hi) == (8, 12) and shard.w_gate.shape[0] == 4
    assert torch.equal(shard.w_down, moe.w_down[8:12])


@pytest.mark.parametrize("world,assign", [(2, "blocks"), (4, "round_robin")])
def test_distributed_run_equals_single_process(tmp_path, world, assign):
    """Spawns `world` real processes joined by torch.distributed (gloo) over 127.0.0.1."""
    moe, x, path = micro_problem(tmp_path)
    run = launch_local(path, world, assign, timeout_s=240)
    with torch.no_grad():
        ref, info = moe(x.unsqueeze(0))
    assert run.y.shape == x.shape
    assert float((run.y - ref[0]).abs().max()) <= 1e-5
    assert run.result["max_abs_diff"] <= 1e-5 and run.result["world"] == world
    ranks = run.result["ranks"]
    cfg = moe.cfg
    # what each rank sent adds up to the routing: every (token, expert) pair goes to its expert's shard
    sent = np.array([r["pairs_to"] for r in ranks])                                    # [world, world]
    owner = token_owner(x.shape[0], world, assign).numpy()
    expected = np.zeros((world, world), dtype=int)
    np.add.at(expected, (np.repeat(owner, cfg.top_k), info.indices[0].reshape(-1).numpy() // (16 // world)), 1)
    np.testing.assert_array_equal(sent, expected)
    row = cfg.latent_dim * 4
    for r in ranks:
        remote = sum(c for j, c in enumerate(r["pairs_to"]) if j != r["rank"])
        assert r["bytes_dispatch"] == remote * (row + 8) + (world - 1) * 8
        back = sum(expected[j, r["rank"]] for j in range(world) if j != r["rank"])
        assert r["bytes_combine"] == back * row
        assert r["tokens"] == int((owner == r["rank"]).sum())


def test_run_layer_of_a_model_and_a_failing_start(tmp_path):
    torch.manual_seed(0)
    model = K3Model(K3Config.micro()).eval()
    x = torch.randn(6, model.cfg.d_model)
    r = run_layer(model, x, 3, 2)
    assert r.max_abs_diff <= 1e-5 and r.G == 2 and len(r.ranks) == 2
    assert r.ranks["bytes sent: dispatch"].sum() > 0
    stacked = rank_bytes_spec(r.ranks)["datasets"]["ranks"]
    assert len(stacked) == 2 * 2 and set(stacked["part"]) == {"dispatch", "combine"}
    assert stacked.groupby("part")["bytes"].sum()["dispatch"] == r.ranks["bytes sent: dispatch"].sum()
    with pytest.raises(LaunchError, match="divide"):
        run_layer(model, x, 3, 3)                          # 3 does not divide 16 experts
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(LaunchError, match="exited with code"):
        launch_local(tmp_path / "junk.safetensors", 1, timeout_s=120)
