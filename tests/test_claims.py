"""The Claims page data (app/claims_data.py, app/claims_architecture.py, app/claims.py): every claim of
docs/REFERENCES.md once, quoted from its article, with a verdict, and the computed values equal to what the
accounting, the cost model and the live model give (tests/test_docs.py checks the quotations against
docs/REFERENCES.md and the articles)."""
from pathlib import Path

import pytest
import torch

from app import claims as cl
from app import claims_data as cd
from app.charts import claims as charts
from model.accounting import count_params
from model.config import K3Config
from model.k3 import K3Model
from model.moe import route

ROOT = Path(__file__).resolve().parent.parent


def test_fifteen_claims_each_once():
    assert [c.number for c in cd.CLAIMS] == list(range(1, 16))
    assert len({c.text for c in cd.CLAIMS}) == 15 and len({c.title for c in cd.CLAIMS}) == 15
    assert len(cd.CHECKS) == 15


def test_claims_are_quotations_with_their_article():
    for c in cd.CLAIMS:
        assert c.quotes and all(q.text and q.article in cd.ARTICLES for q in c.quotes), c.number
        md = cd.quote_markdown(c)
        assert md.startswith("> “") and all(cd.ARTICLES[a].title in md for a in c.articles)
        assert all(q.text in c.text for q in c.quotes)
    with pytest.raises(ValueError):
        cd.Quote("a blog", "x")


@pytest.fixture(scope="module")
def checks():
    torch.manual_seed(0)
    model = K3Model(K3Config.micro()).eval().requires_grad_(False)
    with torch.inference_mode():
        out = model(torch.randint(0, 64, (1, 12)))
    return model, out, {c.claim.number: c for c in cl.check_all(model, out)}


def test_every_check_has_a_known_verdict_and_a_reason(checks):
    _, _, by = checks
    assert sorted(by) == list(range(1, 16))
    for c in by.values():
        assert c.verdict in cd.VERDICTS and c.why and c.computed
    assert by[12].verdict == "does not hold"
    assert by[13].verdict == "holds" and by[13].verdicts == ("holds", "cannot be checked here")
    # claim 6: the 75% is the layer ratio (Kimi Linear), not MLA's latent: as attributed, it does not hold
    assert by[6].verdict == "does not hold" and "2510.26692" in by[6].parts[0].why
    # claim 9: the bound holds, but MXFP8 scales each block, so overflow is not what it prevents
    assert by[9].verdict == "holds with a caveat" and "MXFP8" in by[9].why
    # claim 10: the verdict covers the arithmetic; 8 GPUs is the article's illustration
    assert by[10].verdict == "holds" and "arithmetic only" in by[10].why and "illustration" in by[10].why
    # claim 14: split, one verdict per part: the sourcing holds, "already strained" does not (0.24% of the arithmetic)
    assert [p.verdict for p in by[14].parts] == ["holds", "does not hold"]
    assert by[14].verdicts == ("holds with a caveat", "holds", "does not hold")
    assert by[14].matches({"holds"}) and by[14].matches({"does not hold"})
    assert not by[14].matches({"cannot be checked here"}) and not by[1].matches({"does not hold"})
    assert "2607.24653" in by[14].parts[1].why and "memory" in by[14].parts[1].why
    with pytest.raises(ValueError):
        cd.Check(cd.CLAIMS[0], "x", "maybe", "y")
    with pytest.raises(ValueError):
        cd.Part("x", "perhaps", "y")


def test_computed_values_equal_the_accounting(checks):
    _, _, by = checks
    p = count_params(K3Config.full())
    v = by[1].values
    assert v["total"] == p.total and v["active"] == p.active
    assert "2.78T" in by[1].computed and "104.2B" in by[1].computed and "3.75%" in by[1].computed
    assert by[3].values["sparsity"] == 56 and "56x" in by[3].computed
    assert by[6].values["layer_cut"] == pytest.approx(1 - 24 / 93) and "74.2%" in by[6].computed
    assert by[6].values["latent_cut"] == pytest.approx(1 - 576 / 24_576) and "97.7%" in by[6].computed
    assert by[7].values["ratio"] == pytest.approx(93 / 8) and "11.6x" in by[7].computed
    assert by[7].values["links"] == (17_578, 1_003) and by[7].values["vectors"] == (187, 9)
    assert by[8].values["copy_cut"] == 0.5 and "50%" in by[8].computed
    assert by[8].values["per_token"] == by[8].values["k2_per_token"] == 16 * 3584 == 8 * 7168
    assert by[10].values["per_gpu"] == 112
    assert by[12].values["lower_s"] == pytest.approx(104.19e9 * 4.25 / 8 / 4.8e12, rel=1e-3)   # 11.5 ms
    assert "11.5 ms" in by[12].computed
    assert by[4].values["mla_positions"] == list(range(4, 93, 4)) + [93]
    assert by[9].values["situ_max"] <= 100 < by[9].values["swiglu_max"]
    r = by[15].values["ratios"]
    assert r["flops"] > 1 and r["cache"] > 1 and r["seconds"] > 1
    # one function, one rounding: claim 15 shows the MoE vs MoA page's own default ratio
    from app.moe_vs_moa import cost_table, default_scenario
    table = cost_table(default_scenario())[0].set_index("cost")["ratio"]
    assert r["flops"] == table["FLOPs per answer token"]
    assert f"{table['FLOPs per answer token']:.1f}x" in by[15].computed
    # claim 14: 2 x 17,578 x 7,168 depth-attention MACs, against the accounting's active parameters
    assert by[14].values["macs"] == 2 * 17_578 * 7_168
    assert by[14].values["share"] == pytest.approx(2 * 17_578 * 7_168 / p.active)
    assert "0.24%" in by[14].computed
    # claim 10: K3's MXFP4 routed experts exceed 8 x 141 GB
    assert by[10].values["routed_bytes"] > 8 * 141e9 and by[10].values["min_gpus"] == 11
    # claim 9: a block of SwiGLU's largest values stays finite in MXFP8; the error is at most E4M3's worst
    # case under the OCP scale rule, where amax / X can reach 512 and saturates at 448: 1 - 448/512
    mx = by[9].values["mxfp8"]
    assert mx["finite"] and 0 < mx["max_rel_error"] <= 1 - 448 / 512
    assert mx["block_max"] > 448 == mx["unscaled_max"]
    assert by[2].values["context"] == 1_048_576


def test_live_parts_come_from_the_forward(checks):
    model, out, by = checks
    assert by[3].values["distinct"] == [model.cfg.top_k]
    assert by[7].values["live_links"] == out.trace.link_count == by[7].values["live_links_closed_form"]
    assert by[5].values["live_matches"]


def test_qb_weight_check_sees_a_bias():
    # a bias large enough to change choices: weights on unchanged sets stay identical, sets do change
    torch.manual_seed(0)
    model = K3Model(K3Config.micro()).eval().requires_grad_(False)
    with torch.no_grad():
        for moe in model.moe_layers():
            moe.router.expert_bias.copy_(torch.linspace(-0.3, 0.3, moe.router.expert_bias.numel()))
    with torch.inference_mode():
        out = model(torch.randint(0, 64, (1, 24)))
    r = cl.qb_weight_check(model, out)
    assert r["changed"] > 0 and r["same"] > 0
    assert r["max_diff"] < 1e-12 and r["max_raw_diff"] < 1e-12
    # and a check that can fail: weights that did use the bias would differ
    s = out.trace.scores(1)[0].double()
    idx, _, _ = route(s, out.trace.bias(1).double(), model.cfg.top_k)
    biased = (s + out.trace.bias(1).double()).gather(-1, idx)
    assert float((biased / biased.sum(-1, keepdim=True) - s.gather(-1, idx) / s.gather(-1, idx).sum(-1, keepdim=True))
                 .abs().max()) > 1e-6


def test_link_parameters():
    assert cd.parse_claim(None) == (None, None)
    assert cd.parse_claim("6") == (6, None) and cd.parse_claim("claim-6") == (6, None)
    assert cd.parse_claim("99")[0] is None and "1 to 15" in cd.parse_claim("99")[1]
    assert cd.parse_claim("<b>x</b>")[0] is None


def test_evidence_table_and_figures(checks):
    _, _, by = checks
    ev = cd.evidence_table(list(by.values())).set_index("component")
    # KDA: Kimi Linear is the same team's, and K3's changes are only in the K3 report: not "high"
    assert ev.loc["KDA", "confidence"] == "mixed" and "K3 team's own" in ev.loc["KDA", "sources"]
    assert ev.loc["Gated MLA", "confidence"] == "high" and ev.loc["Block AttnRes", "confidence"] == "self-cited"
    assert ev.loc["Stable LatentMoE", "confidence"] == "mixed"
    assert "7" in ev.loc["Block AttnRes", "claims"] and "14" in ev.loc["Block AttnRes", "claims"]
    assert "2603.15031" in ev.loc["Block AttnRes", "sources"]
    spec = charts.evidence_spec(ev.reset_index(), cd.LEVELS, "dark")
    marks = spec["datasets"]["evidence"].set_index("component")
    # placed on the axis self-cited (0) < mixed (1) < high (2), and the axis names the places
    assert marks.loc["KDA", "position"] == 1 and marks.loc["Gated MLA", "position"] == 2
    assert marks.loc["SiTU-GLU", "position"] == 0 and marks.loc["Quantile Balancing", "label"] == "claims 11"
    axis = spec["layer"][0]["encoding"]["x"]["axis"]
    assert axis["values"] == [0, 1, 2] and axis["labelExpr"] == "['self-cited', 'mixed', 'high'][datum.value]"
    colour = spec["layer"][0]["encoding"]["color"]["scale"]
    assert dict(zip(colour["domain"], colour["range"])) == {"self-cited": "#D55E00", "mixed": "#E69F00", "high": "#009E73"}
    # the sources, split into two tooltip rows, are whole: nothing of them is lost
    for comp in ev.index:
        rest = marks.loc[comp, "more"]
        assert marks.loc[comp, "sources"] + ("; " + rest if rest else "") == ev.loc[comp, "sources"]
    assert spec["layer"][-1]["mark"]["color"] == "#fafafa"                    # labels readable in dark mode
    import pandas as pd
    counts = pd.Series([1, 2, 3, 4], index=list(cd.VERDICTS))
    v = charts.verdict_spec(counts)
    bars = v["datasets"]["verdicts"]
    assert bars["verdict"].tolist() == list(cd.VERDICTS) and bars["claims"].tolist() == [1, 2, 3, 4]
    colour = v["layer"][0]["encoding"]["color"]["scale"]
    assert dict(zip(colour["domain"], colour["range"]))["does not hold"] == "#D55E00"
    assert v["layer"][0]["encoding"]["x"]["scale"]["domain"][1] > 4          # room for the count after the longest bar


def test_every_claim_has_one_registered_check_and_names_a_page_by_its_url_path():
    from app.navigation import PAGES
    assert sorted(cd.CHECKS) == [c.number for c in cd.CLAIMS] == list(range(1, 16))
    assert {c.page for c in cd.CLAIMS} - {""} <= {p.url_path for p in PAGES}
    with pytest.raises(ValueError):
        cd.check(3)(lambda ctx: None)                      # a second check for a claim is refused


# ---- issue 48: the Claims page's findings, each against the K3 report (arXiv 2607.24653 v2) ----------------

REFS = (ROOT / "docs" / "REFERENCES.md").read_text(encoding="utf-8")


def _row(n: int) -> str:
    import re
    return re.search(rf"^\| {n} \| [AB](?:, [AB])* \|.*$", REFS, re.M).group(0)


def test_claim_11_is_judged_in_three_parts(checks):
    # output weights untouched: holds; "tracking historical selection quantiles": Eq. 14 takes one step's margins
    # (an average over steps is only App. D's optional refinement); "uniform hardware cluster load": MoonEP's job
    _, _, by = checks
    c = by[11]
    assert [p.verdict for p in c.parts] == ["holds", "does not hold", "does not hold"]
    assert "output weights" in c.parts[0].label and "historical" in c.parts[1].label and "cluster" in c.parts[2].label
    assert "Eq. 14" in c.parts[1].why and "one training step" in c.parts[1].why and "App. D" in c.parts[1].why
    assert "MoonEP" in c.parts[2].why and "5.2.1" in c.parts[2].why and "App. E" in c.parts[2].why
    assert c.values["spare_bound"] == 896 // 8 == 112 and c.values["shard_spread"] >= 1
    assert "leaves the output weights alone" not in c.claim.title


def test_claim_13_is_titled_by_the_articles_2_5x_and_links_no_page(checks):
    _, _, by = checks
    c = by[13]
    assert "2.5x efficiency" in c.claim.title and "less compute" not in c.claim.title
    assert [p.verdict for p in c.parts] == ["holds", "cannot be checked here"]
    assert "bundles" in c.parts[0].label and "Figure 7" in c.parts[0].why and "3.2" in c.parts[0].why
    assert c.claim.page == ""                          # no page of the app shows the 2.5x (the model card did not)


def test_claim_6_is_split_into_the_75_percent_and_the_latent(checks):
    _, _, by = checks
    c = by[6]
    assert [p.verdict for p in c.parts] == ["does not hold", "holds"]
    assert "75%" in c.parts[0].label and "24" in c.parts[1].label and "rotary" in c.parts[1].label
    assert c.values["n_mla"] == 24 and c.values["live_mla_matches"] and "2.1.2" in c.parts[1].why


def test_claim_9_gives_the_reports_reasons_not_a_divergence(checks):
    # the report motivates SiTU by outliers and overflow risk in low precision (sec 2.3.2); MXFP8 from
    # post-training on (sec 4.1.4); nothing of ours says SwiGLU diverges (only the quotation does)
    _, _, by = checks
    c = by[9]
    ours = c.why + c.computed + _row(9)
    assert "SwiGLU diverges" not in ours
    assert "2.3.2" in c.why and "outlier" in c.why and "4.1.4" in c.why and "post-training" in c.why
    assert c.verdict == "holds with a caveat"


def test_claim_14_part_one_is_about_sourcing_and_holds(checks):
    _, _, by = checks
    first = by[14].parts[0]
    assert first.verdict == "holds" and "cannot be checked here" in first.why and "results" in first.why


def test_every_claim_cites_the_report_by_equation_and_section():
    import re
    eqs = {}
    for c in cd.CLAIMS:
        assert c.cite.startswith("K3 report ") and ("sec " in c.cite or "Figure" in c.cite), c.number
        nums = set()
        for a, b in re.findall(r"Eq\. (\d+)(?:[–-](\d+))?", c.cite):
            nums |= set(range(int(a), int(b or a) + 1))
        assert nums <= set(range(1, 15)), (c.number, nums)           # the report numbers Eq. 1-14 in sec 2
        eqs[c.number] = nums
        assert c.report in _row(c.number), c.number                   # docs/REFERENCES.md cites the same places
    # the mechanisms' equations: KDA 1-2, gated MLA 7, AttnRes 8-10, LatentMoE 11, SiTU-GLU 12, routing and QB 13-14
    assert eqs[5] == {1, 2} and eqs[6] == {7} and eqs[7] == eqs[14] == {8, 9, 10} and eqs[9] == {12}
    assert eqs[11] == {13, 14} and eqs[3] == {11, 13} and eqs[8] == {11}
    assert not re.search(r"equation numbers?[^.]*(unknown|not known|do not give)", REFS, re.I)


def test_claim_12_shows_the_moe_vs_moa_pages_step_and_deepeps_published_timings(checks):
    from app.moe_vs_moa import cost_table, default_scenario, show, step_breakdown
    _, _, by = checks
    c = by[12]
    s = default_scenario()
    step = cost_table(s)[1].step_seconds                            # what the page shows as K3's "one step"
    assert c.values["step_s"] == step and f"**{show(step, 'seconds')}**" in c.computed
    # the difference from the weights alone (28.5 ms) is the cache at the page's 32K-token prompt
    k3 = step_breakdown(s).set_index("part")["ms at the bandwidth"].iloc[:2]
    assert c.values["k3_s"] * 1e3 == pytest.approx(k3.iloc[0]) and c.values["cache_s"] * 1e3 == pytest.approx(k3.iloc[1])
    assert c.values["k3_s"] + c.values["cache_s"] == pytest.approx(step)
    assert f"{c.values['k3_s'] * 1e3:.1f} ms of weights" in c.computed and "cache" in c.computed
    # the link lands on the section that shows it
    assert c.claim.page == "moe-vs-moa" and c.claim.where == "What one decode step reads"
    assert f'st.subheader("{c.claim.where}")' in (ROOT / "views" / "moe_vs_moa.py").read_text(encoding="utf-8")
    # DeepEP's published low-latency kernels: 77 us dispatch + 114 us combine per layer at EP 8, labelled published
    assert cd.DEEPEP["dispatch_s"] == 77e-6 and cd.DEEPEP["combine_s"] == 114e-6 and cd.DEEPEP["ep"] == 8
    assert c.values["deepep_layer_s"] == pytest.approx(191e-6) and "**77 us**" in c.computed and "**114 us**" in c.computed
    assert "published by DeepSeek" in c.computed and "github.com/deepseek-ai/DeepEP" in c.computed
    assert c.values["moe_layers"] == 92 and c.values["deepep_forward_s"] == pytest.approx(92 * 191e-6)
    k3_values, deepep_values = c.values["values_per_token"]
    assert k3_values == 16 * 3584 == deepep_values == 8 * 7168     # the same volume per token: a fair yardstick
    assert "DeepEP" in _row(12) and "github.com/deepseek-ai/DeepEP" in REFS


def test_the_review_table_has_the_claims_row():
    assert "## Review" in REFS and "| page | statements checked | changed |" in REFS
    assert any(line.startswith("| Claims |") for line in REFS.splitlines())
