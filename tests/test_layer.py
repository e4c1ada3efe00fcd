"""Inside one layer: every step the page shows, recomputed here in float64 from the module's own weights and
the module input the trace recorded, against the page's data; the steps add up to the layer's output in the
trace; the router gradient against finite differences; and the page itself in AppTest (a KDA layer, an MLA
layer, the dense layer 0, bad link values)."""
import json
import math
import re

import numpy as np
import pytest
import torch

from app import layer as ly
from app.layer_data import PART_TITLES, block_of, layer_data
from app.layer_format import dims, tex
from app.layer_steps_ffn import gradient_step
from model.config import K3Config
from model.k3 import K3Model
from tests.conftest import open_app_page, outside_code

PAGE = "views/layer.py"
PROMPT = "The router sends every token to 16 of its 896 experts, and the rest stay idle."
CFG = K3Config.tiny()
KDA_MOE, MLA_MOE = 5, 7                  # 0-based: MLA sits at 3, 7, 11, ..., 91 and 92
assert CFG.layer_types[KDA_MOE] == "kda" and CFG.layer_types[MLA_MOE] == "mla"
LAYERS = (0, KDA_MOE, MLA_MOE, 12, 92)   # dense, KDA, MLA, a block seal, the last layer
f64 = torch.float64


@pytest.fixture(scope="module")
def live():
    """The model the app serves (the shipped checkpoint, or the app's own seeded fallback) and one forward
    of the Prose preset, run in inference mode as app.live runs it."""
    from model.checkpoint import CheckpointError, load_pretrained
    from model.tokenizer import Tokenizer
    try:
        model, tok = load_pretrained()
    except CheckpointError:
        tok = Tokenizer.load()
        torch.manual_seed(0)
        model = K3Model(CFG.with_(vocab_size=tok.vocab_size)).eval().requires_grad_(False)
    ids = tok.encode(PROMPT)
    with torch.inference_mode():
        out = model(torch.tensor([ids]))
    return model, out, tok.pieces(ids)


@pytest.fixture(scope="module")
def data(live):
    model, out, _ = live
    with torch.inference_mode():
        return {i: layer_data(model, out, i) for i in LAYERS}


def tokens(live):
    T = live[1].ids.shape[1]
    return (0, T // 2, T - 1)


def steps_by_key(d, t, live):
    return {s.key + ("" if s.key not in ("read", "norm") else "_" + s.part): s
            for s in ly.walk(d, t, live[0].cfg, live[2])}


def w64(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


def rms(x, eps=1e-5):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def situ(g, u):
    return (4 * np.tanh(g / 4) * sigmoid(g)) * (25 * np.tanh(u / 25))


def close(got, want, tol=2e-4):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


# ---- the model seams the page reads -------------------------------------------------------------------------

@pytest.mark.parametrize("layer", LAYERS)
def test_inspect_recomputes_exactly_what_the_forward_recorded(live, layer):
    model, out, _ = live
    with torch.inference_mode():
        parts = model.inspect(out, layer)
    for m in ("attn", "ffn"):
        close(w64(parts[m]["out"][0]), w64(out.trace.outputs[(layer, m)][0]), 1e-5)


def test_trace_records_each_read_and_partial_sum(live):
    _, out, _ = live
    tr = out.trace
    for i in LAYERS:
        for m in ("attn", "ffn"):
            srcs, names, a, h = tr.read(i, m)
            assert len(srcs) == len(names) == a.shape[-1] and names[-1] in ("emb", "partial")
            assert tr.partial_after(i, m).shape == h.shape
    with pytest.raises(KeyError):
        tr.read(93, "attn")


# ---- step 1 and 3: the two depth reads, and their RMSNorm ---------------------------------------------------

@pytest.mark.parametrize("layer", LAYERS)
def test_depth_reads_and_norms_recomputed_in_float64(live, data, layer):
    model, out, _ = live
    block = model.layers[layer]
    d = data[layer]
    for m, q, norm in (("attn", block.q_attn, block.attn_norm), ("ffn", block.q_ffn, block.ffn_norm)):
        V = d.reads[m].sources.astype(np.float64)                          # [T, S, d], recorded
        w = w64(q.gain) * w64(q.proj)
        logit = rms(V) @ w                                                 # [T, S]
        a = np.exp(logit - logit.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        h = (a[..., None] * V).sum(1)
        x = rms(h) * w64(norm.weight)
        close(d.reads[m].weights, a)
        close(d.reads[m].h, h)
        close(d.reads[m].x, x)
        close(x, w64(out.trace.module_input(layer, m)[0]))                # what the module received
        for t in tokens(live):
            s = steps_by_key(d, t, live)
            part = "read_attn" if m == "attn" else "ffn"
            close(s[f"read_{part}"].data["weights"], a[t])
            close(s[f"read_{part}"].data["h"], h[t])
            close(s[f"norm_{'attn' if m == 'attn' else 'ffn'}"].data["x"], x[t])
            assert s[f"read_{part}"].data["top"] == int(np.argmax(a[t]))


@pytest.mark.parametrize("layer", [KDA_MOE, 12, 92])
def test_the_read_sources_are_the_embedding_the_sealed_blocks_and_the_running_sum(live, data, layer):
    """Rebuilt from the embedding and the module outputs of the trace (docs/ARCHITECTURE.md §1)."""
    model, out, _ = live
    tr = out.trace
    emb = w64(model.embed.weight)[out.ids[0].numpy()]
    S = CFG.attnres_block_size
    outs = lambda i: w64(tr.outputs[(i, "attn")][0]) + w64(tr.outputs[(i, "ffn")][0])
    first = layer - layer % S
    sealed = [emb] + [sum(outs(j) for j in range(b, b + S)) for b in range(0, first, S)]
    running = sum((outs(j) for j in range(first, layer)), np.zeros_like(emb))
    d = data[layer]
    want_attn = sealed + [running] if layer % S else sealed     # a sealing layer reads before it seals
    close(d.reads["attn"].sources, np.stack(want_attn, 1))
    a = w64(tr.outputs[(layer, "attn")][0])
    after_attn = a if layer % S == 0 else running + a
    close(d.reads["ffn"].sources, np.stack(sealed + [after_attn], 1))
    assert d.reads["ffn"].names[-1] == "partial"


# ---- step 2: the attention module -----------------------------------------------------------------------------

def kda_reference(model, layer, x):
    """Kimi Delta Attention in float64 from the layer's weights (docs/ARCHITECTURE.md §2), token by token."""
    att = model.layers[layer].attn
    H, dk, P, kc = att.H, att.dk, att.P, att.kc
    W = w64(att.in_proj.weight)
    Wqkv, Wfa, Wb, Wg = W[:3 * P], W[3 * P:3 * P + dk], W[3 * P + dk:3 * P + dk + H], W[3 * P + dk + H:]
    T = x.shape[0]
    pre = np.vstack([np.zeros((kc - 1, 3 * P)), x @ Wqkv.T])
    cw = w64(att.conv.weight)[:, 0]                                        # [3P, kc], last tap = this token
    y = np.stack([(pre[t:t + kc].T * cw).sum(1) for t in range(T)])
    y = y * sigmoid(y)                                                     # SiLU
    l2 = lambda a: a / np.sqrt((a ** 2).sum(-1, keepdims=True) + 1e-6)
    q, k = l2(y[:, :P].reshape(T, H, dk)), l2(y[:, P:2 * P].reshape(T, H, dk))
    v = y[:, 2 * P:].reshape(T, H, dk)
    beta = sigmoid(x @ Wb.T)
    z = ((x @ Wfa.T) @ w64(att.W_fb.weight).T).reshape(T, H, dk)
    g = -5 * sigmoid(np.exp(w64(att.A_log))[:, None] * (z + w64(att.dt_bias)))
    S, states, o = np.zeros((H, dk, dk)), [], []
    for t in range(T):
        S = np.exp(g[t])[:, :, None] * S
        S = S + k[t][:, :, None] * (beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", S, k[t])))[:, None, :]
        states.append(S)
        o.append(np.einsum("hkv,hk->hv", S, q[t]) * dk ** -0.5)
    o = np.stack(o)
    normed = rms(o) * w64(att.o_norm.weight)
    gate = sigmoid(x @ Wg.T)
    gated = normed.reshape(T, P) * gate
    return dict(q=q, k=k, v=v, beta=beta, g=g, z=z, states=np.stack(states), o=o, normed=normed, gate=gate,
                gated=gated, out=gated @ w64(att.out_proj.weight).T)


@pytest.mark.parametrize("layer", [0, KDA_MOE, 12])
def test_kda_steps_recomputed_in_float64(live, data, layer):
    model, out, _ = live
    d = data[layer]
    ref = kda_reference(model, layer, w64(out.trace.module_input(layer, "attn")[0]))
    close(d.attn["states"], ref["states"])
    close(d.outputs["attn"], ref["out"])
    for t in tokens(live):
        s = steps_by_key(d, t, live)
        close(s["kda_qkv"].data["z"], np.stack([vec[h] for h in range(CFG.kda_heads)
                                                for vec in (ref["q"][t], ref["k"][t], ref["v"][t])]))
        close(s["kda_gate"].data["keep"], np.exp(ref["g"][t]))
        close(s["kda_gate"].data["beta"], ref["beta"][t])
        close(s["kda_state"].data["before"], ref["states"][t - 1] if t else np.zeros_like(ref["states"][0]))
        close(s["kda_state"].data["after"], ref["states"][t])
        close(s["kda_state"].data["write_check"], ref["states"][t])      # decay then write = the new state
        close(s["kda_read"].data["o"], ref["o"][t])
        close(s["kda_out"].data["normed"], ref["normed"][t].reshape(-1))
        close(s["kda_out"].data["gate"], ref["gate"][t])
        close(s["kda_out"].data["gated"], ref["gated"][t])
        close(s["kda_out"].data["out"], w64(out.trace.outputs[(layer, "attn")][0])[t])
        keep = np.exp(ref["g"][t])
        assert keep.min() > math.exp(-5) and keep.max() < 1                # the K3 bound on the decay


def mla_reference(model, layer, x):
    """Gated MLA in float64 from the layer's weights, the naive path (docs/ARCHITECTURE.md §3)."""
    att = model.layers[layer].attn
    H, n, r, vd, kv = att.H, att.nope, att.rope, att.v, att.kv_lora
    T = x.shape[0]
    q = (rms(x @ w64(att.w_dq.weight).T) * w64(att.q_norm.weight)) @ w64(att.w_uq.weight).T
    q = q.reshape(T, H, n + r)
    ckv = x @ w64(att.w_dkv.weight).T
    c, kr = rms(ckv[:, :kv]) * w64(att.kv_norm.weight), ckv[:, kv:]
    kcv = (c @ w64(att.w_ukv.weight).T).reshape(T, H, n + vd)
    k = np.concatenate([kcv[..., :n], np.repeat(kr[:, None, :], H, 1)], -1)
    v = kcv[..., n:]
    logits = np.einsum("ihc,jhc->hij", q, k) / math.sqrt(n + r)
    logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    o = np.einsum("hij,jhv->ihv", probs, v).reshape(T, H * vd)
    gate = sigmoid(x @ w64(att.w_g.weight).T)
    return dict(c=c, kr=kr, probs=probs, o=o, gate=gate, gated=gate * o, out=(gate * o) @ w64(att.w_o.weight).T)


@pytest.mark.parametrize("layer", [MLA_MOE, 92])
def test_mla_steps_recomputed_in_float64(live, data, layer):
    model, out, pieces = live
    d = data[layer]
    ref = mla_reference(model, layer, w64(out.trace.module_input(layer, "attn")[0]))
    close(d.outputs["attn"], ref["out"])
    for t in tokens(live):
        s = steps_by_key(d, t, live)
        close(s["mla_latent"].data["c"], ref["c"][t])
        close(s["mla_latent"].data["k_rope"], ref["kr"][t])
        close(s["mla_attn"].data["probs"], ref["probs"][:, t, :t + 1])
        np.testing.assert_allclose(s["mla_attn"].data["probs"].sum(-1), 1, atol=1e-5)
        assert s["mla_attn"].data["pieces"] == pieces[:t + 1]
        close(s["mla_gate"].data["o"], ref["o"][t])
        close(s["mla_gate"].data["gate"], ref["gate"][t])
        close(s["mla_gate"].data["gated"], ref["gated"][t])
        close(s["mla_gate"].data["out"], ref["out"][t])


# ---- step 3: the FFN --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layer", [KDA_MOE, MLA_MOE, 92])
def test_moe_steps_recomputed_in_float64(live, data, layer):
    model, out, _ = live
    moe = model.layers[layer].ffn
    d = data[layer]
    x = w64(out.trace.module_input(layer, "ffn")[0])
    s = sigmoid(x @ w64(moe.router.weight).T)                                # [T, E]
    b = w64(moe.router.expert_bias)
    k = CFG.top_k
    wg, wu, wd = w64(moe.w_gate), w64(moe.w_up), w64(moe.w_down)
    z = x @ w64(moe.down.weight).T
    sh = moe.shared
    shared = situ(x @ w64(sh.w_gate.weight).T, x @ w64(sh.w_up.weight).T) @ w64(sh.w_down.weight).T
    for t in tokens(live):
        st = steps_by_key(d, t, live)
        r = st["router"].data
        close(r["scores"], s[t], 1e-5)
        close(r["bias"], b, 1e-6)
        biased = np.sort(s[t] + b)[::-1]
        if biased[k - 1] - biased[k] > 1e-5:                                 # no near-tie at the cutoff
            assert set(r["indices"].tolist()) == set(np.argsort(-(s[t] + b))[:k].tolist())
        close(r["cutoff"], biased[k], 1e-5)
        idx = r["indices"]
        p = s[t][idx] / s[t][idx].sum()                                      # raw scores, renormalised
        close(r["weights"], p, 1e-5)
        close(st["moe_down"].data["z"], z[t])
        experts = np.stack([wd[i] @ situ(wg[i] @ z[t], wu[i] @ z[t]) for i in idx])   # [k, l]; [out, in]
        close(st["experts"].data["experts"], experts)
        u = (p[:, None] * experts).sum(0)
        close(st["experts"].data["u"], u)
        normed = rms(u) * w64(moe.norm.weight)
        close(st["moe_up"].data["u_normed"], normed)
        routed = normed @ w64(moe.up.weight).T
        close(st["moe_up"].data["routed"], routed)
        close(st["shared"].data["shared_norm"][t], np.linalg.norm(shared[t]))
        close(st["shared"].data["routed_norm"][t], np.linalg.norm(routed))
        close(shared[t] + routed, w64(out.trace.outputs[(layer, "ffn")][0])[t])   # m = shared + routed
        assert np.abs(d.ffn["expert_hidden"][t]).max() <= 100


def test_dense_layer0_recomputed_in_float64(live, data):
    model, out, _ = live
    ffn = model.layers[0].ffn
    x = w64(out.trace.module_input(0, "ffn")[0])
    h = situ(x @ w64(ffn.w_gate.weight).T, x @ w64(ffn.w_up.weight).T)
    for t in tokens(live):
        st = steps_by_key(data[0], t, live)
        assert "router" not in st
        close(st["dense"].data["hidden"], h[t])
        close(st["dense"].data["out"], (h @ w64(ffn.w_down.weight).T)[t])
    assert np.abs(h).max() <= 100


# ---- step 4: the steps add up to the layer's output ----------------------------------------------------------

@pytest.mark.parametrize("layer", LAYERS)
def test_the_steps_sum_to_the_layers_output_in_the_trace(live, data, layer):
    _, out, _ = live
    tr = out.trace
    d = data[layer]
    sealed = layer % CFG.attnres_block_size == 0
    assert (d.sealed is not None) == sealed
    for t in tokens(live):
        s = steps_by_key(d, t, live)
        a = s["kda_out" if d.kind == "kda" else "mla_gate"].data["out"]
        # m from the FFN's own steps: the dense output, or the shared experts plus the routed output
        m = s["dense"].data["out"] if layer == 0 else d.ffn["shared"][t] + s["moe_up"].data["routed"]
        r = s["residual"].data
        close(r["a"], a, 1e-5)
        close(r["m"], m, 1e-5)
        before = np.zeros_like(a) if sealed else r["before"]
        close(r["after"], before + a + m, 1e-5)
        if layer + 1 < CFG.num_layers:                                     # what the next layer starts from
            close(r["after"], w64(tr.snapshots[layer + 1].partial[0])[t], 1e-6)
        else:
            close(r["after"], w64(tr.depth.partial[0])[t], 1e-6)


# ---- step 5: the router gradient ------------------------------------------------------------------------------

def test_router_gradient_matches_finite_differences_in_float64():
    torch.manual_seed(3)
    cfg = K3Config.micro()
    model = K3Model(cfg).double().eval().requires_grad_(False)
    ids = torch.randint(0, cfg.vocab_size, (1, 7))
    with torch.no_grad():
        out = model(ids)
    loss, grads = model.router_gradients(out)
    want = torch.nn.functional.cross_entropy(out.logits[0, :-1], ids[0, 1:])
    assert loss == pytest.approx(float(want), rel=1e-12)                 # held routing = the forward itself

    def loss_at(layer, t, slot, eps):
        from model.moe import RouteInfo
        fixed = {}
        for i, r in out.trace.routes.items():
            s = r.scores.clone()
            if i == layer:
                s[0, t, r.indices[0, t, slot]] += eps
            raw = s.gather(-1, r.indices)
            fixed[i] = RouteInfo(s, r.indices, raw / raw.sum(-1, keepdim=True), r.cutoff, r.bias)
        state = out.trace.snapshots[1].copy()
        state.record = False
        from model.k3 import Trace
        with torch.no_grad():
            run = model._run(ids, state, Trace(cfg.num_layers, depth=state), 1, out.options, None, False,
                             fixed_routes=fixed)
        return float(torch.nn.functional.cross_entropy(run.logits[0, :-1], ids[0, 1:]))

    eps = 1e-6
    for layer, t, slot in ((1, 2, 0), (3, 0, 2), (5, 5, 3)):
        fd = (loss_at(layer, t, slot, eps) - loss_at(layer, t, slot, -eps)) / (2 * eps)
        assert float(grads[layer][0, t, slot]) == pytest.approx(fd, rel=1e-5, abs=1e-10)
    for layer, g in grads.items():
        s = out.trace.routes[layer].scores.gather(-1, out.trace.routes[layer].indices)
        assert torch.allclose((s * g).sum(-1), torch.zeros(1, 7, dtype=f64), atol=1e-12)   # p is scale-free
        assert torch.count_nonzero(g[0, -1]) == 0                        # the last token predicts nothing


def test_gradient_step_on_the_live_model(live, data):
    model, out, _ = live
    with torch.inference_mode():
        loss, grads = model.router_gradients(out)
    T = out.ids.shape[1]
    assert math.isfinite(loss) and set(grads) == set(range(1, CFG.num_layers))
    g = grads[KDA_MOE][0].numpy()
    for t in tokens(live):
        st = gradient_step(data[KDA_MOE], t, loss, g, CFG)
        np.testing.assert_array_equal(st.data["descent"], -g[t])
        assert st.data["last"] == (t == T - 1)
        s = st.data["scores"].astype(np.float64)
        assert abs(np.dot(s, g[t])) <= 1e-4 * np.abs(s * g[t]).sum() + 1e-12
    assert np.abs(g[0]).max() > 0 and np.count_nonzero(g[T - 1]) == 0
    assert "last token" in gradient_step(data[KDA_MOE], T - 1, loss, g, CFG).text


# ---- what every step says ------------------------------------------------------------------------------------

def test_every_step_cites_a_section_and_shows_k3_shapes_from_the_config(live, data):
    full = K3Config.full()
    seen = set()
    for layer in LAYERS:
        for st in ly.walk(data[layer], 3, CFG, live[2]):
            # the K3 report's own equation and section first, then the docs/ section (issue 48, item 17)
            assert st.cite.startswith("K3 report ") and "docs/ARCHITECTURE.md §" in st.cite, st.title
            for eq in re.findall(r"\bEq\.\s*(\d+)(?:–(\d+))?", st.cite + st.text):
                assert all(1 <= int(n) <= 14 for n in eq if n), st.title        # the report's Eq. 1-14 only
            assert st.shapes and st.text and st.equation and st.filled and st.caption
            assert "nan" not in st.filled and "inf" not in st.filled.replace(r"\infty", "")
            assert st.headline and "nan" not in st.headline, st.title
            for sh in st.shapes:
                assert sh.how == "published" or sh.how.startswith(("derived", "published")), sh
                seen.add((sh.name, sh.here, sh.k3))
    k3_shapes = {k3 for _, _, k3 in seen}
    # K3's values as docs/ARCHITECTURE.md §0 gives them
    for want in ("[7,168]", "[96 × 128 × 128]", "[12,288]", "[576]", "[3,584]", "[896]", "[16]",
                 "[33,792]", "[6,144]", "[16 × 3,584]", "[3,072]"):
        assert want in k3_shapes, want
    assert f"[{full.d_model:,}]" == "[7,168]"


def test_the_map_gives_each_step_its_own_headline(live, data):
    steps = ly.walk(data[KDA_MOE], 3, CFG, live[2])
    rows = ly.layer_map(steps, {"attn"}, "needs two tokens").splitlines()[2:]
    assert len(rows) == len(steps) + 1 and rows[-1].split(" | ")[3] == "needs two tokens"
    for row, st in zip(rows, steps):
        assert row.split(" | ")[3] == st.headline, st.title
    read = steps[0]
    w = data[KDA_MOE].reads["attn"].weights[3]
    assert read.headline == f"{read.data['names'][int(np.argmax(w))]} gets {w.max():.0%} of {len(w)} sources"


def test_block_of_and_seal_text():
    assert block_of(0, CFG) == (1, 0, 11) and block_of(12, CFG) == (2, 12, 23)
    assert block_of(92, CFG) == (8, 84, 92)


def test_tex_numbers():
    assert tex(0.5) == "0.500" and tex(-2.5) == "-2.50" and tex(0) == "0"
    assert tex(1.2e-7) == r"1.20\times 10^{-7}" and tex(123456) == r"1.23\times 10^{5}"
    assert dims(96, 128, 128) == "[96 × 128 × 128]"


# ---- the page ---------------------------------------------------------------------------------------------------

def charts(at) -> list[dict]:
    """Each Vega-Lite chart: its spec, with the datasets Streamlit moved out of it (Arrow) put back as frames."""
    import pyarrow as pa
    out = []
    for el in at.get("vega_lite_chart"):
        spec = json.loads(el.proto.spec)
        spec["datasets"] = {d.name: pa.ipc.open_stream(d.data.data).read_pandas() for d in el.proto.datasets}
        out.append(spec)
    return out


def notices(at):
    return " ".join(i.value for i in at.info)


def page_text(at):
    return " ".join(m.value for m in at.markdown)


def subheaders(at):
    return [s.value for s in at.subheader]


@pytest.fixture(scope="module")
def kda_page():
    return open_app_page(PAGE, {"layer": str(KDA_MOE)}, allow_errors=False)


def test_page_kda_layer_attention_part(kda_page):
    at = kda_page
    assert at.title[0].value == "Inside one layer"
    assert at.slider(key="layer_layer").value == KDA_MOE
    assert at.segmented_control(key="layer_part").value == "attention"
    text = page_text(at)
    assert "Kimi Delta Attention, then Stable LatentMoE" in text
    assert subheaders(at) == [PART_TITLES["read_attn"], PART_TITLES["attn"]]
    specs = charts(at)
    assert len(specs) == 7 and all(any(len(f) for f in s["datasets"].values()) for s in specs)
    assert len(at.get("latex")) == 7                          # one block per step: the equation, then filled in
    # the map lists every step of the layer, with a computed number each
    table = next(m.value for m in at.markdown if m.value.startswith("| | step |"))
    assert table.count("\n") == 2 + 16 - 1 and "cutoff" in table and "16. Which scores" in table
    # every step names the K3 report's equation and section, in the map and above its equation
    assert "| in the K3 report |" in table and "Eq. 13, sec 2.3.3" in table and "Eq. 6, sec 2.1.1" in table
    assert any(c.value.startswith("The equation (K3 report Eq. 8–10, sec 2.2") for c in at.caption)


def test_page_ffn_part_shows_the_router_and_the_shared_experts(kda_page):
    at = kda_page
    at.segmented_control(key="layer_part").set_value("ffn").run()
    assert not at.exception and not at.error
    assert at.query_params["part"] in ("ffn", ["ffn"])
    assert subheaders(at) == [PART_TITLES["ffn"]]
    specs = charts(at)
    assert len(specs) == 7
    router = next(s for s in specs if "ranked" in s["datasets"])
    ranked, weights = router["datasets"]["ranked"], router["datasets"]["weights"]
    assert len(ranked) == CFG.n_routed_experts and int(ranked["c"].sum()) == CFG.top_k == len(weights)
    assert abs(weights["p"].sum() - 1) < 1e-3
    assert "why they exist" in page_text(at)


def test_page_onward_part_and_the_router_gradient(kda_page):
    at = kda_page
    at.segmented_control(key="layer_part").set_value("onward").run()
    assert subheaders(at) == [PART_TITLES["residual"], PART_TITLES["learn"]]
    # the default token is the prompt's last: its router gets no gradient, and a button offers an earlier one
    assert "last token" in notices(at)
    at.button(key="layer_earlier").click().run()
    assert not at.exception
    T = len(at.pills(key="layer_token").options)
    assert at.pills(key="layer_token").value == T - 2
    assert at.query_params["token"] in (str(T - 2), [str(T - 2)])
    assert "a gradient step would raise" in page_text(at)
    grad = next(s for s in charts(at) if "descent" in s["datasets"].get("values", {}))
    assert len(grad["datasets"]["values"]) == CFG.top_k


def test_page_moves_to_an_mla_layer_and_writes_the_link(kda_page):
    at = kda_page
    at.segmented_control(key="layer_part").set_value("attention").run()
    at.slider(key="layer_layer").set_value(MLA_MOE).run()
    assert not at.exception and not at.error
    assert at.query_params["layer"] in (str(MLA_MOE), [str(MLA_MOE)])
    text = page_text(at)
    assert "gated MLA, then Stable LatentMoE" in text and "what “gated” means" in text
    assert len(charts(at)) == 5                                 # read, norm, latent, attention weights, gate
    at.button(key="layer_next").click().run()
    assert at.slider(key="layer_layer").value == MLA_MOE + 1
    at.button(key="layer_next_part").click().run()
    assert at.segmented_control(key="layer_part").value == "ffn"


def test_page_mla_layer_from_a_link():
    at = open_app_page(PAGE, {"layer": "92", "token": "3", "part": "all"}, allow_errors=False)
    assert at.slider(key="layer_layer").value == 92 and at.pills(key="layer_token").value == 3
    text = page_text(at)
    assert "gated MLA" in text and "last block" in text
    assert subheaders(at) == list(PART_TITLES.values())
    assert len(charts(at)) == 14


def test_page_layer0_is_dense_and_has_no_router():
    at = open_app_page(PAGE, {"layer": "0", "part": "all"}, allow_errors=False)
    text = page_text(at)
    assert "dense SiTU-GLU FFN" in text and "Layer 0's dense FFN" in text
    assert "Layer 0 has no router" in notices(at)
    assert len(charts(at)) == 11
    assert "sealed the token embedding as the source “emb”" in text


@pytest.mark.parametrize("params,expect", [
    ({"layer": "999", "token": "-4"}, ["layer 999", "showing 92", "token -4", "showing 0"]),
    ({"layer": "abc", "part": "everything"}, ["not a whole number", "part of the layer"]),
    ({"layer": "<b>5</b>", "bogus": "1"}, ["not a whole number", "ignored link parameters"]),
    ({"token": "100000"}, ["token 100000"]),
])
def test_page_bad_link_values_get_a_notice_not_a_traceback(params, expect):
    at = open_app_page(PAGE, params, allow_errors=False)
    text = notices(at)
    for e in expect:
        assert e in text, (e, text)
    assert "<b>" not in outside_code(text)
    assert charts(at)


def _domains(spec) -> set:
    """Every value named in a colour scale's domain anywhere in a Vega-Lite spec (legend entries)."""
    found = set()
    if isinstance(spec, dict):
        colour = spec.get("encoding", {}).get("color", {}) if isinstance(spec.get("encoding"), dict) else {}
        found |= set((colour.get("scale") or {}).get("domain") or [])
        for v in spec.values():
            found |= _domains(v)
    elif isinstance(spec, list):
        for v in spec:
            found |= _domains(v)
    return found


def _drawn_together(spec, datasets) -> list[set]:
    """The series of each view: one view's dataset, or all the datasets a layered view's parts draw."""
    out = []
    if isinstance(spec, dict):
        if "layer" in spec or "mark" in spec:
            names = {part["data"].get("name") for part in spec.get("layer", [spec]) if "data" in part}
            if "data" in spec:
                names.add(spec["data"].get("name"))
            out.append({row["series"] for n in names for row in datasets.get(n, [])
                        if isinstance(row, dict) and "series" in row})
        for k, v in spec.items():
            if k != "layer":
                out += _drawn_together(v, datasets)
    elif isinstance(spec, list):
        for v in spec:
            out += _drawn_together(v, datasets)
    return out


def test_every_series_drawn_together_is_named_in_a_legend(live, data):
    # a title or caption that speaks of "the orange line" is no help when the legend does not name it
    from app.charts.layer import step_figure
    for layer in LAYERS:
        for st in ly.walk(data[layer], 3, CFG, live[2]):
            spec = step_figure(st.key, st.data, live[2])
            if spec is None:
                continue
            for series in _drawn_together(spec, spec.get("datasets", {})):
                if len(series) > 1:
                    assert series <= _domains(spec), (st.key, series - _domains(spec))


def test_the_state_chart_is_a_picture_whose_colours_are_its_legends():
    """Each view of the KDA state is one PNG with invisible cells over it: a cell's pixels have the colour its
    value gets on the legend's scale (piecewise linear in RGB through the stops), a blank gap is transparent,
    and every cell is still there to point at with its value."""
    import base64
    import io

    from PIL import Image

    from app.charts.layer import kda_state_figure
    H, K, V, px = 2, 16, 16, 7
    rng = np.random.default_rng(3)
    d = {name: rng.normal(size=(H, K, V)) for name in ("before", "after", "change")}
    spec = kda_state_figure(d)
    assert len(spec["datasets"]["S"]) == 2 * H * K * V and len(spec["datasets"]["change"]) == H * K * V
    for view, data, names in zip(spec["hconcat"], ("S", "change"), (("before", "after"), ("change",))):
        image, cells = view["layer"][0], view["layer"][1]
        assert image["mark"]["type"] == "image" and cells["mark"]["opacity"] == 0
        scale = cells["encoding"]["color"]["scale"]
        lo, mid, hi = scale["domain"]
        assert scale["interpolate"] == "rgb" and mid == 0
        vals = np.concatenate([d[n].ravel() for n in names])
        assert lo == pytest.approx(vals.min()) and hi == pytest.approx(vals.max())
        stops = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in scale["range"]], dtype=float)
        url = image["data"]["values"][0]["url"]
        png = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGBA")
        pix = np.asarray(png)
        assert pix.shape[:2] == (view["height"], view["width"])
        for c, name in enumerate(names):
            for h, k, v in ((0, 0, 0), (1, 5, 9), (1, K - 1, V - 1)):
                value = d[name][h, k, v]
                want = [np.interp(value, [lo, 0, hi], stops[:, ch]) for ch in range(3)]
                row, col = h * (K + 1) + k, c * (V + 1) + v
                got = pix[row * px + px // 2, col * px + px // 2]
                assert np.abs(got[:3] - np.array(want)).max() <= 1 and got[3] == 255, (name, h, k, v)
        assert pix[K * px + px // 2, px // 2, 3] == 0                      # the blank row between the heads
        if len(names) == 2:
            assert pix[px // 2, V * px + px // 2, 3] == 0                  # the blank column between the panels


def test_the_router_gradient_chart_labels_every_chosen_expert():
    """It labelled every other expert: 16 rotated "expert N" labels overlapped and Vega dropped half of them."""
    from app.charts.layer import gradient_figure
    d = {"descent": np.linspace(-1, 1, 16), "indices": np.arange(100, 116), "scores": np.full(16, 0.5)}
    spec = gradient_figure(d)
    layer = spec["layer"][0] if "layer" in spec else spec
    axis = (layer.get("encoding") or spec["encoding"])["x"]["axis"]
    assert axis["labelOverlap"] is False
    labels = [r["expert"] for r in spec["datasets"]["values"]]
    assert labels == [str(i) for i in range(100, 116)] and max(map(len, labels)) <= 3
