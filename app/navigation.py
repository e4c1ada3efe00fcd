"""The pages of the app, in the order of the guided path. A page is listed here once it is built."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageSpec:
    path: str        # file under pages/, relative to the project root
    title: str
    icon: str
    url_path: str
    section: str


PAGES = (
    PageSpec("pages/overview.py", "Overview", ":material/hub:", "overview", "Start here"),
    PageSpec("pages/routing.py", "Routing explorer", ":material/grid_view:", "routing", "Routing"),
    PageSpec("pages/attention.py", "Hybrid attention & memory", ":material/memory:", "attention", "Attention"),
    PageSpec("pages/attnres.py", "Attention Residuals", ":material/stacks:", "attnres", "Attention"),
    PageSpec("pages/situ.py", "SiTU-GLU vs SwiGLU", ":material/show_chart:", "situ-glu", "Mixture of experts"),
    PageSpec("pages/balance.py", "Load balancing lab", ":material/balance:", "balance", "Mixture of experts"),
    PageSpec("pages/parallel.py", "Expert parallelism", ":material/lan:", "parallel", "Mixture of experts"),
    PageSpec("pages/quant.py", "Quantization lab", ":material/grain:", "quantization", "Precision & cost"),
    PageSpec("pages/moa.py", "MoE vs Mixture of Agents", ":material/groups:", "moe-vs-moa", "Precision & cost"),
    PageSpec("pages/claims.py", "Claims", ":material/fact_check:", "claims", "Precision & cost"),
    PageSpec("pages/model_card.py", "Model card", ":material/badge:", "model-card", "About"),
)
