"""Expert parallelism: 896 experts sharded over G devices, the all-to-all it implies, and a real run."""
import streamlit as st

from app import live as lv_mod
from app import state, ui
from app.charts.parallel import bytes_spec, fanout_spec, rank_bytes_spec, shard_load_spec, traffic_spec
from app.parallel import (
    ASSIGN,
    DEVICE_BALANCE,
    DIVISORS,
    RUNNABLE,
    bytes_table,
    cached_routing,
    cached_traffic,
    example_note,
    expected_fanout,
    fanout,
    ffn_input_of,
    fit_note,
    process_server_soon,
    run_layer,
    shard_pairs,
    shard_tokens,
)
from app.text import md_escape
from model.config import K3Config
from model.parallel import LaunchError

TINY = K3Config.tiny()
K3, K2 = K3Config.full(), K3Config.kimi_k2()
view = state.page(
    *ui.PROMPT,
    state.Choice("g", 8, "number of devices", options=tuple(DIVISORS)),
    state.Choice("assign", "blocks", "token assignment", options=tuple(ASSIGN)),
    state.Choice("layer", 5, "layer", options=tuple(TINY.moe_layers)),
    state.Flag("dedup", False, "one copy per device"),
    state.Choice("run_g", None, "processes", options=tuple(RUNNABLE)),
    prefix="ep",
)
ui.page_header(
    "Expert parallelism",
    fit_note() + ", so the experts are split into shards, one per device, and every token's 16 chosen experts "
    "can sit on any of them: each MoE layer is an all-to-all exchange of tokens.",
    "pick 8 devices (112 experts each), look at how many devices a token needs, then press “Run it for real” "
    "to run a live MoE layer split over 8 processes and check it gives the same answer.",
)

lv = lv_mod.live()
cfg = lv.model.cfg
n = cfg.n_routed_experts
c1, c2 = st.columns([3, 2])
G = view.draw(c1.select_slider, "g", f"Devices G (divisors of {cfg.n_routed_experts})")
assign = view.draw(c2.segmented_control, "assign", "Tokens start on devices by", format_func=ASSIGN.get)
per = n // G
c1, c2, c3 = st.columns(3)
c1.metric("Experts per device", f"{per}",
          help="Computed: 896 / G. 112 per GPU on 8 GPUs is the second article's illustration, not K3's deployment: the "
          "K3 report names no expert-parallel size.")
c2.metric("Expected devices per token (uniform routing)", f"{expected_fanout(n, cfg.top_k, G):.2f}",
          help="Derived: G · (1 − C(896 − 896/G, 16) / C(896, 16)), if a token's 16 experts were uniform.")

prompt = ui.prompt_input(view)
if prompt is None:
    st.stop()
with st.spinner("Running the live model…"):
    experts = cached_routing(prompt.ids)                                          # [L, T, k]
T = experts.shape[1]
fan = fanout(experts, G, n)
c3.metric("Devices per token (live routing)", f"{fan.mean():.2f}",
          help=f"Computed: distinct devices among each token's {cfg.top_k} experts, averaged over {T} tokens × "
               f"{len(cfg.moe_layers)} layers of the live model.")
st.caption("Claim 10 (docs/REFERENCES.md): “896 experts sharded across 8 GPUs (~112 each). A token's top-16 experts "
           "can land on any shard” (“Kimi K3 Goes Trillion-Scale With Sparse MoE Efficiency”). " + example_note(G)
           + f" On your prompt a token's experts span on average {fan.mean():.2f} of {G} devices (at most "
           f"{min(G, cfg.top_k)}).")

st.subheader("Load per device, every layer")
pairs, toks = shard_pairs(experts, G, n), shard_tokens(experts, G, n)
ui.vega_chart(shard_load_spec(pairs, cfg.moe_layers, toks),
              f"Each cell: the (token, expert) pairs device r must compute in one layer for your {T} tokens, relative to an "
              f"even share ({T * cfg.top_k / G:.1f} pairs): grey is even, vermillion busier, blue idler. The busiest device "
              f"sets the layer's pace. {DEVICE_BALANCE}.",
              alt="Heatmap of the load of each device in each MoE layer, relative to an even share.", key="ep_loads")

st.subheader("Fan-out: how many devices one token visits")
ui.vega_chart(fanout_spec(fan, G, cfg.top_k, expected_fanout(n, cfg.top_k, G)),
              "Over every token and every MoE layer of the live model: the number of distinct devices holding its "
              f"{cfg.top_k} experts. The solid line is the live mean, the dashed line the expectation if the experts were "
              "chosen uniformly at random. Each extra device is one more destination for the token's latent vector.",
              alt="Bar chart of the share of tokens whose experts sit on 1, 2, ... devices.", key="ep_fanout")

@st.fragment
def layer_sections() -> None:
    st.subheader("The all-to-all traffic matrix")
    c1, c2 = st.columns([3, 2])
    layer = view.draw(c1.select_slider, "layer", "MoE layer")
    dedup = view.draw(c2.toggle, "dedup", "One copy per destination device",
                      help="Off: one row per (token, expert) pair, as this page's real run sends. On: a token's vector "
                           "goes once to a device however many of its experts live there.")
    M = cached_traffic(prompt.ids, cfg.moe_layers.index(layer), G, assign, dedup)
    local = int(M.trace())
    ui.vega_chart(traffic_spec(M, "vectors" if dedup else "pairs"),
                  f"Layer {layer}: row = the device a token starts on ({ASSIGN[assign]}: "
                  + ("consecutive positions stay together" if assign == "blocks" else "token t starts on device t mod G")
                  + "), column = the device of one of its experts. The diagonal stays on the device "
                  f"({local} of {int(M.sum())}, {local / max(1, M.sum()):.0%}); everything else crosses the network, and the "
                  "same amount comes back after the experts run (the combine).",
                  alt="Heatmap of the number of token vectors sent from each source device to each destination device.",
                  key="ep_traffic")

    st.subheader("What one token sends, at K3 scale")
    bt = bytes_table(G, float(fan.mean()))
    ui.vega_chart(bytes_spec(bt, st.context.theme.type),
                  f"Per MoE layer and per token, dispatch only (the combine sends as much back). LatentMoE projects the token "
                  f"from d = {K3.d_model:,} to l = {K3.expert_width:,} before dispatch, halving what each pair carries: "
                  f"{K3.top_k} × {K3.expert_width:,} = {K3.top_k * K3.expert_width:,} values, exactly Kimi K2's {K2.top_k} × "
                  f"{K2.d_model:,} with {K3.top_k // K2.top_k}x the experts per token. Sending one copy per device instead of "
                  "per pair cuts it further to the fan-out.",
                  alt="Horizontal bar chart of kilobytes one token sends to its experts per layer, for several schemes.",
                  key="ep_bytes")
    ui.table(bt, {"values per token": ",.0f", "KB per token (BF16)": ".1f"})
    st.caption("Derived from the published config (d, l, k) and K2's; 2 bytes per value assumes BF16 activations in "
               "transit (the report does not state it; FP8 would halve every bar). With uniform routing, (G − 1)/G of the "
               f"pairs ({(G - 1) / G:.0%} at G = {G}) leave their device.")

    # ---- run it for real ------------------------------------------------------------------------------
    st.subheader("Run it for real")
    st.markdown(
        "The button writes this MoE layer (router, projections, shared experts, all 896 experts) and your prompt's "
        "inputs to it to a temporary safetensors file, starts **G separate processes** joined by "
        "`torch.distributed` (gloo backend over 127.0.0.1), and each process loads only its own shard of experts. "
        "The processes are forked from a helper process that has imported torch once, so they start in "
        "milliseconds instead of the second or two a new Python takes to import torch. "
        "Every process routes its own tokens, sends each (token, expert) pair's latent vector to the expert's process "
        "with `all_to_all_single`, runs its local experts, sends the results back with a second `all_to_all_single`, "
        "and combines them. The gathered output is compared with the same layer run in this one process.")
    process_server_soon()
    default_run = G if G in RUNNABLE else 8
    c1, c2 = st.columns([3, 2])
    G_run = view.draw(c1.select_slider, "run_g", "Processes", default=default_run,
                      help="Divisors of 896 up to 8, one process each on this machine.")
    if G not in RUNNABLE:
        st.caption(f"{G} devices is more processes than this machine runs; the real run uses up to 8.")
    key = (prompt.ids, layer, G_run, assign)
    results = st.session_state.setdefault("ep_results", {})
    if c2.button(f"Run layer {layer} on {G_run} processes", key="ep_run", type="primary", icon=":material/play_arrow:"):
        x = ffn_input_of(prompt.ids, layer)
        with st.status(f"Starting {G_run} processes…", expanded=True) as status:
            line = st.empty()

            def progress(elapsed, finished, stages):
                status.update(label=f"Running on {G_run} processes: {elapsed:.1f} s, {finished} of {G_run} finished")
                line.caption(" · ".join(md_escape(s, 60) for s in stages))

            try:
                results[key] = run_layer(lv.model, x, layer, G_run, assign, progress=progress)
                status.update(label=f"Done: {G_run} processes in {results[key].seconds_total:.2f} s", state="complete",
                              expanded=False)
            except LaunchError as e:
                status.update(label="The processes could not complete the run", state="error", expanded=True)
                st.warning("The distributed run did not finish. What it said:", icon=":material/error:")
                st.code(str(e)[-3000:], language=None)
    if key in results:
        r = results[key]
        ok = r.max_abs_diff <= 1e-5
        (st.success if ok else st.warning)(
            f"Expert-parallel output {'equals' if ok else 'differs from'} the single-process layer: largest difference "
            f"{r.max_abs_diff:.2e} over {r.tokens} tokens × {cfg.d_model} values (tolerance 1e-5; float32, the sums run "
            f"in a different order). Rank 0's own check: {r.rank0_diff:.2e}.",
            icon=":material/check_circle:" if ok else ":material/warning:")
        c1, c2, c3 = st.columns(3)
        c1.metric("Layer time, slowest rank", f"{r.seconds_layer * 1e3:.1f} ms", help="Measured between two barriers: "
                  "route, dispatch, experts, combine.")
        c2.metric("Wall time with process start", f"{r.seconds_total:.2f} s",
                  help="From starting the processes to their exit: forking them, joining the group, loading the "
                  "shards, the layer, rank 0's single-process check." if r.forked else "Mostly starting Python and "
                  "importing torch in every process (the helper process that forks them could not start).")
        sent = int(r.ranks["bytes sent: dispatch"].sum() + r.ranks["bytes sent: combine"].sum())
        c3.metric("Bytes sent, all ranks", f"{sent:,}")
        ui.vega_chart(rank_bytes_spec(r.ranks),
                      "Measured: bytes each process sent to the others (dispatch: latent rows of "
                      f"{cfg.expert_width} float32 values plus an 8-byte expert id per pair and the count exchange; combine: "
                      "the results going back). Rows a process keeps for its own experts are not sent.",
                      alt="Stacked bar chart of bytes sent per rank, dispatch and combine.", key="ep_rank_bytes")
        ui.table(r.ranks, {"layer time (ms)": ".2f"})
    else:
        st.caption("Nothing run yet for these settings. A run takes under a second here (a few seconds more the "
                   "first time, if the helper process has not started yet).")
    # drawn only while open (opening it reruns the page): st.code's highlighter costs ~0.4 s of every page load
    torchrun = st.expander("The same code across machines (torchrun)", key="ep_torchrun", on_change="rerun")
    if torchrun.open:
        with torchrun:
            st.markdown("`model/parallel.py` is also a torchrun entry point; every machine needs the repository and the "
                        "problem file at the same path.")
            st.code("python -m model.parallel --make-problem /tmp/ep_problem.safetensors --layer 5 --tokens 64\n"
                    "torchrun --standalone --nproc-per-node 4 -m model.parallel --problem /tmp/ep_problem.safetensors\n"
                    "# two machines, 4 processes each (node-rank 1 on the second machine):\n"
                    "torchrun --nnodes 2 --nproc-per-node 4 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 \\\n"
                    "    -m model.parallel --problem /tmp/ep_problem.safetensors", language="bash")

layer_sections()
