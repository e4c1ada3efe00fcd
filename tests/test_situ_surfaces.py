"""The SiTU-GLU page's 3-D surfaces: their values against the closed forms written here, their CSV and caption,
that only this page's code imports plotly, and that the page builds the figure once per range and theme."""
import ast
import base64
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.charts.situ_glu_plane import surface_figure, surface_table
from app.situ_glu import CAP, SURFACE_POINTS, grid2d, surface_caption

ROOT = Path(__file__).resolve().parent.parent


def sig(x):
    return 0.5 * (1 + math.tanh(x / 2))                      # the logistic function, without exp overflow


def situ_ref(g, u):      # K3 report Eq. 12: [4 tanh(g/4) sigmoid(g)] * [25 tanh(u/25)]
    return 4 * math.tanh(g / 4) * sig(g) * 25 * math.tanh(u / 25)


def swiglu_ref(g, u):
    return g * sig(g) * u


def decoded(arr) -> np.ndarray:
    """A plotly array as numbers: plotly 7 sends numeric arrays as {"dtype", "bdata", "shape": "rows, cols"}."""
    if isinstance(arr, dict) and "bdata" in arr:
        shape = [int(n) for n in str(arr.get("shape", "-1")).split(",")]
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"])).reshape(shape)
    return np.asarray(arr, dtype=float)


def surfaces_of(fig) -> dict:
    """Each surface's x, y and z as numbers, by the name it starts with."""
    return {t["name"].split(" ")[0]: {k: decoded(t[k]) for k in ("x", "y", "z")}
            for t in fig.to_plotly_json()["data"]}


@pytest.mark.parametrize("R", [5.0, 50.0, 1000.0])
def test_surfaces_are_the_two_functions_on_one_grid(R):
    fig = surface_figure(grid2d(R, SURFACE_POINTS), CAP, "light")
    s = surfaces_of(fig)
    assert set(s) == {"SiTU-GLU", "SwiGLU"}
    axis = np.linspace(-R, R, 41)
    for name, ref in (("SiTU-GLU", situ_ref), ("SwiGLU", swiglu_ref)):
        assert np.allclose(s[name]["x"], axis) and np.allclose(s[name]["y"], axis)
        z = s[name]["z"]
        assert z.shape == (41, 41)
        for i, j in ((0, 0), (0, 40), (40, 0), (40, 40), (20, 20), (7, 33), (31, 12)):   # z[up, gate]
            assert z[i, j] == pytest.approx(ref(axis[j], axis[i]), rel=1e-9, abs=1e-12)
    situ, swi = s["SiTU-GLU"]["z"], s["SwiGLU"]["z"]
    assert np.abs(situ).max() <= CAP
    assert situ.max() == pytest.approx(situ_ref(R, R), rel=1e-12)                   # the corner g = u = R
    # SwiGLU's largest value is at the corner g = u = R: R·σ(R)·R, growing without bound with R
    assert swi.max() == pytest.approx(R * R * sig(R), rel=1e-12) and swi[40, 40] == swi.max()


def test_surface_figure_reads_as_a_chart_in_both_themes():
    grid = grid2d(50.0, SURFACE_POINTS)
    light, dark = (surface_figure(grid, CAP, t).layout for t in ("light", "dark"))
    assert light.font.color == "#31333f" and dark.font.color == "#fafafa"            # Streamlit's text colours
    assert dark.scene.xaxis.color == "#fafafa"
    assert [light.scene[a].title.text for a in ("xaxis", "yaxis", "zaxis")] == ["gate g", "up u", "output"]
    assert "±50" in light.title.text and "SiTU-GLU" in light.title.text and "SwiGLU" in light.title.text
    assert light.scene.xaxis.gridcolor != dark.scene.xaxis.gridcolor                 # visible on either page


def test_surface_csv_holds_every_point():
    table = surface_table(grid2d(50.0, SURFACE_POINTS))
    assert list(table.columns) == ["gate g", "up u", "SiTU-GLU", "SwiGLU"] and len(table) == 41 * 41
    axis = np.linspace(-50, 50, 41)
    assert set(np.round(table["gate g"], 9)) == set(np.round(axis, 9)) == set(np.round(table["up u"], 9))
    row = table[(np.isclose(table["gate g"], 12.5)) & (np.isclose(table["up u"], -30.0))].iloc[0]
    assert row["SiTU-GLU"] == pytest.approx(situ_ref(12.5, -30.0)) and row["SwiGLU"] == pytest.approx(swiglu_ref(12.5, -30.0))


def test_surface_caption_says_what_is_computed():
    text = surface_caption(grid2d(50.0, SURFACE_POINTS))
    assert text.startswith("Computed:") and "model/activations.py" in text and "41 × 41" in text
    assert f"{situ_ref(50, 50):.4g}" in text and "2,500" in text and "Drag" in text
    small = surface_caption(grid2d(5.0, SURFACE_POINTS))                            # SwiGLU still under the cap
    assert f"{swiglu_ref(5, 5):.4g}" in small and "widen the plane range" in small


# ---- plotly stays on this page -------------------------------------------------------------------

def plotly_imports(source: str) -> list[tuple[int, bool]]:
    """Each statement of `source` that imports plotly: its line, and whether it sits inside a function body."""
    found = []

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            names = ([a.name for a in child.names] if isinstance(child, ast.Import) else
                     [child.module or ""] if isinstance(child, ast.ImportFrom) else [])
            if any(n == "plotly" or n.startswith("plotly.") for n in names):
                found.append((child.lineno, in_function))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(source), False)
    return found


def test_only_the_surface_builder_imports_plotly():
    sources = [p for d in ("app", "views", "model") for p in sorted((ROOT / d).rglob("*.py"))] + [ROOT / "streamlit_app.py"]
    found = {str(p.relative_to(ROOT)): plotly_imports(p.read_text(encoding="utf-8")) for p in sources}
    found = {path: imports for path, imports in found.items() if imports}
    assert list(found) == ["app/charts/situ_glu_plane.py"]                  # one file ...
    assert all(inside for _, inside in found["app/charts/situ_glu_plane.py"])   # ... inside a function
    # the checker sees an import at module level and one inside a function apart
    assert plotly_imports("import plotly.graph_objects as go\ndef f():\n    from plotly import io\n") == \
        [(1, False), (3, True)]


BLOCKED = """
import importlib, pkgutil, sys
sys.modules["plotly"] = None          # every `import plotly...` now raises ImportError
import app, app.charts
for pkg in (app, app.charts):
    for m in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(m.name)
import model
for m in pkgutil.iter_modules(model.__path__, "model."):
    importlib.import_module(m.name)
print("imported", len([m for m in sys.modules if m.startswith(("app.", "model."))]))
from app.charts.situ_glu_plane import surface_figure
try:
    surface_figure({"axis": [0.0], "situ": [[0.0]], "swiglu": [[0.0]]}, 100.0)
except ImportError as e:
    print("surfaces:", e)
"""


def test_the_app_modules_import_without_plotly():
    # Streamlit imports plotly itself when it is installed (its plotly theme), so "plotly" in sys.modules says
    # nothing about the app: with plotly made unimportable, every app and model module must still import, and
    # the surface builder alone must fail.
    run = subprocess.run([sys.executable, "-c", BLOCKED], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "imported" in run.stdout and "surfaces: No module named 'plotly" in run.stdout, run.stdout


# ---- the page ------------------------------------------------------------------------------------

def test_page_draws_the_surfaces_once_per_range(monkeypatch):
    from app import situ_glu
    from app.charts import situ_glu_plane
    from tests.conftest import open_app_page
    situ_glu.cached_surfaces.clear()
    built = []
    real = situ_glu_plane.surface_figure
    monkeypatch.setattr(situ_glu_plane, "surface_figure", lambda *a, **k: built.append(a[0]["axis"][-1]) or real(*a, **k))
    at = open_app_page("views/situ_glu.py")
    assert not at.get("plotly_chart") and built == []               # drawn only once its expander is open
    at.session_state["situ_surfaces_open"] = True
    at.run()
    plots = at.get("plotly_chart")
    assert len(plots) == 1 and built == [50.0]
    fig = json.loads(plots[0].proto.spec)
    assert {t["name"].split(" ")[0] for t in fig["data"]} == {"SiTU-GLU", "SwiGLU"}
    assert decoded(fig["data"][1]["z"]).max() == pytest.approx(2500 * sig(50.0))
    assert sum("csv_situ_surfaces" in d.proto.id for d in at.get("download_button")) == 1
    assert any(c.value.startswith("Computed: both surfaces") for c in at.caption)
    at.slider(key="situ_range").set_value(20).run()                 # a control of another region
    assert not at.exception and built == [50.0]
    at.select_slider(key="situ_plane").set_value(10).run()          # the plane's range: a new figure
    assert built == [50.0, 10.0]
    assert decoded(json.loads(at.get("plotly_chart")[0].proto.spec)["data"][1]["z"]).max() == pytest.approx(100 * sig(10.0))
    at.select_slider(key="situ_plane").set_value(50).run()          # back: the figure built before
    assert built == [50.0, 10.0] and not at.exception
