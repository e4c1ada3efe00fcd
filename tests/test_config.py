"""The presets keep K3's published counts; tiny and micro change only what they may."""
import pytest

from model.config import K3Config, hybrid_schedule, provenance


def test_full_matches_published_architecture():
    c = K3Config.full()
    assert c.num_layers == 93 and c.n_kda == 69 and c.n_mla == 24
    # K3 report: MLA at 1-based positions 4, 8, ..., 92 and the final layer 93
    mla_positions = [i + 1 for i, t in enumerate(c.layer_types) if t == "mla"]
    assert mla_positions == list(range(4, 93, 4)) + [93]
    assert (c.d_model, c.n_routed_experts, c.top_k, c.n_shared_experts) == (7168, 896, 16, 2)
    assert c.latent_dim == c.d_model // 2 == 3584
    assert c.sparsity == 56
    assert c.context_length == 1_048_576
    assert c.attnres == "block" and c.attnres_blocks == [12] * 7 + [9]
    assert c.vocab_size == 163_840


@pytest.mark.parametrize("preset", [K3Config.tiny, K3Config.full])
def test_tiny_keeps_every_count_and_ratio(preset):
    t, f = K3Config.tiny(), K3Config.full()
    for name in ("num_layers", "layer_types", "n_routed_experts", "top_k", "n_shared_experts",
                 "attnres", "attnres_block_size", "first_dense_layers", "kda_conv", "kda_gate_bound",
                 "situ_beta_gate", "situ_beta_up", "activation"):
        assert getattr(t, name) == getattr(f, name), name
    assert t.latent_dim * 2 == t.d_model
    assert preset().attnres_blocks == [12] * 7 + [9]


def test_micro_has_every_mechanism():
    m = K3Config.micro()
    assert {"kda", "mla"} <= set(m.layer_types)
    assert m.layer_types[-1] == "mla" and m.first_dense_layers == 1
    assert len(m.attnres_blocks) >= 2 and m.top_k < m.n_routed_experts


def test_schedule_and_validation():
    assert hybrid_schedule(8) == ["kda", "kda", "kda", "mla"] * 2
    assert hybrid_schedule(5)[-1] == "mla"
    with pytest.raises(ValueError):
        K3Config(num_layers=3)            # layer_types of the default 93 layers
    with pytest.raises(ValueError):
        K3Config.micro().with_(top_k=0)
    with pytest.raises(ValueError):
        K3Config.micro().with_(attnres="sideways")
    assert K3Config.micro().with_(num_layers=9).layer_types[-1] == "mla"


def test_provenance_marks_published_and_derived():
    full = K3Config.full()
    kind, src = provenance(full, "n_routed_experts")
    assert kind == "published" and "2607.24653" in src
    assert provenance(full, "latent_dim")[0] == "published"              # Table 1 / routed_expert_hidden_size
    assert provenance(full, "kda_proj")[0] == "derived"
    assert provenance(K3Config.tiny(), "d_model")[0] == "chosen"


def test_to_dict_round_trips():
    c = K3Config.tiny()
    assert K3Config(**c.to_dict()) == c
