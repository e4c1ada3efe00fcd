"""Opening a lesson in the editor (AppTest): a lesson file opens as the draft, its steps' view values can be changed
and a bad one is named on its step; a bad file is not opened; a draft with steps no file holds is replaced only when
the teacher says so."""
from __future__ import annotations

from app import lessons as L
from app.lesson_author_ui import K_AUTHOR
from tests.conftest import open_app_page

OPEN = "k3_author_open_"


def upload(at, name: str, data: bytes):
    [box] = at.get("file_uploader")
    box.set_value((name, data, "application/toml"))
    return at.run()


def warnings(at) -> str:
    return " ".join(w.value for w in at.warning).replace("\\", "")        # md_escape's backslashes


def test_open_a_file_change_a_steps_value_and_check():
    at = open_app_page("views/lessons.py", allow_errors=False)
    path = L.LESSONS_DIR / "sparse-experts.toml"
    upload(at, path.name, path.read_bytes())
    assert not at.exception
    assert any("Opened the file `sparse-experts.toml`: 8 steps" in s.value for s in at.success)
    # the widgets show the opened lesson, under a name of its own (lessons/ has sparse-experts)
    assert at.text_input(key="k3_author_title").value == "Sparse experts in 15 minutes"
    assert at.text_input(key="k3_author_name").value == "sparse-experts-copy"
    d = at.session_state[K_AUTHOR]["draft"]
    shipped = L.load(path)
    assert [(s.page, tuple(s.params), s.note) for s in d.steps] == [(s.page, s.params, s.note) for s in shipped.steps]
    i = next(n for n, s in enumerate(d.steps) if ("scope", "only") in s.params)
    key = d.steps[i].key
    assert at.selectbox(key=f"k3_author_{key}_v_scope").value == "only"
    assert at.text_input(key=f"k3_author_{key}_v_layer").value == ""              # the page's default

    at.text_input(key=f"k3_author_{key}_v_layer").input("93").run()              # checked at once
    said = warnings(at)
    assert f"step {i + 1}: layer = 93: layer 93 is outside 0–92" in said
    line = int(said.split(f": step {i + 1}: layer = 93")[0].rsplit("line ", 1)[1])
    assert "layer = 93" in at.code[0].value.splitlines()[line - 1]               # the line of the file shown

    at.text_input(key=f"k3_author_{key}_v_layer").input("12").run()
    at.selectbox(key=f"k3_author_{key}_v_scope").set_value("").run()             # back to the page's default
    assert not at.warning and any("The lesson checks: 8 steps" in s.value for s in at.success)
    assert "params = { k = 8, layer = 12 }" in at.code[0].value
    assert any(c.value.startswith("Opens the page with `k=8`, `layer=12`") for c in at.caption)

    # the file box is empty again, so the same file opens again: over a changed draft only when asked
    assert at.get("file_uploader")[0].value is None
    upload(at, path.name, path.read_bytes())
    assert "replaces your draft (8 steps)" in warnings(at)
    at.button(key=OPEN + "replace").click().run()
    assert at.text_input(key=f"k3_author_{key}_v_layer").value == ""
    assert at.selectbox(key=f"k3_author_{key}_v_scope").value == "only"


def test_a_bad_file_is_not_opened_and_a_draft_is_replaced_only_when_asked():
    at = open_app_page("views/routing.py", {"layer": "12"})
    at.sidebar.button(key="k3_author_add").click().run()
    at.switch_page("views/lessons.py").run()
    at.text_area(key="k3_author_0_note").input("My own note.").run()

    bad = b'title = "Mine"\nsummary = "Mine."\n\n[[steps]]\npage = "routing"\nparams = { depth = 3 }\nnote = "Look."\n'
    upload(at, "mine.toml", bad)
    assert not at.exception
    assert "`mine.toml` was not opened" in warnings(at)
    assert "line 6: step 1: the page routing has no link parameter 'depth'" in warnings(at)
    kept = at.session_state[K_AUTHOR]["draft"]
    assert [(s.page, s.params, s.note) for s in kept.steps] == [("routing", [("layer", "12")], "My own note.")]

    at.selectbox(key=OPEN + "shipped").set_value("attention-memory").run()
    at.button(key=OPEN + "copy").click().run()
    assert "replaces your draft (1 step)" in warnings(at)
    assert at.session_state[K_AUTHOR]["draft"].steps[0].note == "My own note."      # asked, not replaced
    at.button(key=OPEN + "keep").click().run()
    assert "replaces your draft" not in warnings(at)
    assert at.text_area(key="k3_author_0_note").value == "My own note."

    at.button(key=OPEN + "copy").click().run()
    at.button(key=OPEN + "replace").click().run()
    assert not at.exception
    copy = L.shipped()["attention-memory"]
    d = at.session_state[K_AUTHOR]["draft"]
    assert [s.note for s in d.steps] == [s.note for s in copy.steps]
    assert at.text_area(key="k3_author_0_note").value == copy.steps[0].note          # each widget seeded anew
    assert at.text_input(key="k3_author_name").value == "attention-memory-copy"

    # opened and unchanged: another lesson replaces it without asking
    at.selectbox(key=OPEN + "shipped").set_value("sparse-experts").run()
    at.button(key=OPEN + "copy").click().run()
    assert at.text_input(key="k3_author_name").value == "sparse-experts-copy"
    assert "replaces your draft" not in warnings(at)
