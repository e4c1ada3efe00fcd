"""The pages of the app, in the order of the guided path. A page is listed here once it is built."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageSpec:
    path: str        # file under views/, relative to the project root
    title: str
    icon: str
    url_path: str
    section: str


PAGES = (
    PageSpec("views/overview.py", "Overview", ":material/hub:", "overview", "Start here"),
    PageSpec("views/routing.py", "Routing explorer", ":material/grid_view:", "routing", "Mixture of experts"),
    PageSpec("views/layer.py", "Inside one layer", ":material/layers:", "layer", "Mixture of experts"),
    PageSpec("views/balance.py", "Load balancing lab", ":material/balance:", "balance", "Mixture of experts"),
    PageSpec("views/parallel.py", "Expert parallelism", ":material/lan:", "parallel", "Mixture of experts"),
    PageSpec("views/situ_glu.py", "SiTU-GLU vs SwiGLU", ":material/show_chart:", "situ-glu", "Mixture of experts"),
    PageSpec("views/quantization.py", "Quantization lab", ":material/grain:", "quantization", "Mixture of experts"),
    PageSpec("views/attention.py", "Hybrid attention & memory", ":material/memory:", "attention", "Attention"),
    PageSpec("views/attnres.py", "Attention Residuals", ":material/stacks:", "attnres", "Attention"),
    PageSpec("views/moe_vs_moa.py", "MoE vs Mixture of Agents", ":material/groups:", "moe-vs-moa", "Cost and claims"),
    PageSpec("views/claims.py", "Claims", ":material/fact_check:", "claims", "Cost and claims"),
    PageSpec("views/model_card.py", "Model card", ":material/badge:", "model-card", "About"),
    PageSpec("views/glossary.py", "Glossary", ":material/menu_book:", "glossary", "About"),
    PageSpec("views/lessons.py", "Lessons", ":material/school:", "lessons", "Teaching"),
    PageSpec("views/classes.py", "Classes", ":material/groups:", "classes", "Teaching"),
)
