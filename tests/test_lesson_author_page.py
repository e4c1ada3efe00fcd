"""Writing a lesson in the app (AppTest): the sidebar's "Add this view to a lesson" keeps the page and its view,
the Lessons page's editor checks the draft with the lines of its file, and Preview follows it in the sidebar."""
from __future__ import annotations

from app.lesson_author_ui import K_AUTHOR
from tests.conftest import open_app_page


def params(at) -> dict:
    return {k: at.query_params[k][0] if isinstance(at.query_params[k], list) else at.query_params[k]
            for k in at.query_params}


def sidebar_keys(at) -> set:
    return {b.key for b in at.sidebar.button}


def test_add_a_view_write_a_note_check_and_preview():
    at = open_app_page("views/routing.py", {"layer": "12", "k": "8"}, allow_errors=False)
    assert "k3_author_add" in sidebar_keys(at)
    at.sidebar.button(key="k3_author_add").click().run()
    assert any(c.value.startswith("Step 1 added: Routing explorer with `layer=12`, `k=8`") for c in at.sidebar.caption)
    # the view's own values only: not the shared token the page writes into every link
    assert "token" in params(at)
    assert at.session_state[K_AUTHOR]["draft"].steps[0].params == [("layer", "12"), ("k", "8")]

    at.switch_page("views/lessons.py").run()
    assert not at.exception and "k3_author_add" not in sidebar_keys(at)      # no view of its own to add
    at.text_input(key="k3_author_title").input("Layer twelve").run()
    at.text_area(key="k3_author_summary").input("One layer, eight experts.").run()
    at.button(key="k3_author_check").click().run()
    warning = " ".join(w.value for w in at.warning).replace("\\", "")      # md_escape's backslashes
    assert "**Step 1 (Routing explorer)**" in warning and "step 1: note is empty" in warning
    assert "line 8: step 1" in warning                                # the note's line in the file the editor shows
    assert "note = \"\"" in at.code[0].value.splitlines()[7]

    at.text_area(key="k3_author_0_note").input("Look at **layer 12** with top-k 8.").run()
    assert not at.warning and any("The lesson checks: 1 step, 0 questions" in s.value for s in at.success)
    assert at.code[0].value.count("[[steps]]") == 1 and "params = { layer = 12, k = 8 }" in at.code[0].value

    at.button(key="k3_author_preview").click().run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Routing explorer"]
    progress = [p.proto.text for p in at.sidebar.get("progress")]
    assert progress == ["Step 1 of 1"]
    assert "Look at **layer 12** with top-k 8." in [m.value for m in at.sidebar.markdown]
    link = params(at)
    assert (link["layer"], link["k"], link["lesson"], link["lesson_step"]) == ("12", "8", "layer-twelve", "1")
    assert at.slider(key="routing_layer").value == 12 and at.slider(key="routing_k").value == 8

    at.switch_page("views/lessons.py").run()                      # the draft is still there, as written
    assert at.text_area(key="k3_author_0_note").value == "Look at **layer 12** with top-k 8."
    assert at.text_input(key="k3_author_title").value == "Layer twelve"


def test_steps_reorder_with_their_notes_and_a_question_is_written():
    at = open_app_page("views/routing.py", {"k": "4"})
    at.sidebar.button(key="k3_author_add").click().run()
    at.switch_page("views/balance.py").run()
    at.sidebar.button(key="k3_author_add").click().run()
    assert any(c.value.startswith("Step 2 added: Load balancing lab") for c in at.sidebar.caption)
    at.switch_page("views/lessons.py").run()
    at.text_area(key="k3_author_0_note").input("Routing first.").run()
    at.text_area(key="k3_author_1_note").input("Balancing second.").run()
    at.radio(key="k3_author_1_kind").set_value("choice").run()
    at.text_area(key="k3_author_1_ask").input("Which?").run()
    at.text_area(key="k3_author_1_options").input("this\n\nthat\n").run()
    at.selectbox(key="k3_author_1_answer").set_value(1).run()
    at.text_area(key="k3_author_1_explanation").input("Because.").run()
    at.button(key="k3_author_1_up").click().run()
    d = at.session_state[K_AUTHOR]["draft"]
    assert [(s.page, s.note) for s in d.steps] == [("balance", "Balancing second."), ("routing", "Routing first.")]
    assert at.text_area(key="k3_author_1_note").value == "Balancing second."   # the widget follows its step
    file = at.code[0].value
    assert file.index('page = "balance"') < file.index('page = "routing"')
    assert 'options = ["this", "that"]\nanswer = 1\nexplanation = "Because."' in file
    at.button(key="k3_author_0_remove").click().run()
    assert [s.page for s in at.session_state[K_AUTHOR]["draft"].steps] == ["balance"]


def test_start_a_class_with_the_draft_then_discard_it():
    from app import classes
    at = open_app_page("views/glossary.py", {"term": "mxfp4"})
    at.sidebar.button(key="k3_author_add").click().run()
    at.switch_page("views/lessons.py").run()
    at.text_input(key="k3_author_title").input("Four bits").run()
    at.text_area(key="k3_author_summary").input("What MXFP4 stores.").run()
    at.text_area(key="k3_author_0_note").input("Read the entry.").run()
    file = at.code[0].value
    at.button(key="k3_author_teach").click().run()
    assert not at.exception and [t.value for t in at.title] == ["Classes"]
    assert "**Step 1: Glossary.** On it now: no one." in [m.value for m in at.markdown]
    me = at.session_state["_k3_class"]
    info = classes.store().find(me["code"])
    assert me["role"] == "teacher" and (info.lesson, info.steps) == ("four-bits", 1)
    assert info.lesson_toml.rstrip("\n") == file                  # the file the editor shows (st.code drops the last \n)

    at.switch_page("views/lessons.py").run()
    at.button(key="k3_author_discard").click().run()
    assert any(i.value.startswith("No steps yet") for i in at.info)
    assert at.text_input(key="k3_author_title").value == "" and not at.session_state[K_AUTHOR]["draft"].steps
