"""Expert parallelism: shard bookkeeping, the all-to-all traffic matrix, bytes at K3 scale, and a real
torch.distributed run (gloo, separate processes) that must equal the single-process LatentMoE layer."""
import numpy as np
import pytest
import torch

from app.charts.parallel import bytes_figure, fanout_figure, rank_bytes_figure, shard_load_figure, traffic_figure
from app.parallel import (DIVISORS, RUNNABLE, bytes_table, expected_fanout, fanout, run_layer, shard_of, shard_pairs,
                          shard_tokens, traffic)
from model.config import K3Config
from model.k3 import K3Model
from model.moe import LatentMoE
from model.parallel import (LaunchError, launch_local, load_full_layer, load_shard, shard_bounds, token_owner,
                            write_problem)


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
    assert len(bytes_figure(df.reset_index()).data[0].y) == 5


def test_figures_have_every_cell():
    rng = np.random.default_rng(1)
    e = np.stack([np.stack([rng.choice(896, 16, replace=False) for _ in range(5)]) for _ in range(3)])
    f = shard_load_figure(shard_pairs(e, 8), [1, 2, 3], shard_tokens(e, 8))
    assert np.array(f.data[0].z).shape == (3, 8)
    assert len(fanout_figure(fanout(e, 8), 8, 16, expected_fanout(896, 16, 8)).data[0].x) == 8
    assert np.array(traffic_figure(traffic(e[0], 8), "pairs").data[0].z).shape == (8, 8)


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
    assert len(rank_bytes_figure(r.ranks).data) == 2
    with pytest.raises(LaunchError, match="divide"):
        run_layer(model, x, 3, 3)                          # 3 does not divide 16 experts
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(LaunchError, match="exited with code"):
        launch_local(tmp_path / "junk.safetensors", 1, timeout_s=120)
