"""A whole class in headless Chromium: a teacher starts a class from a shipped lesson, two students join in
browser contexts of their own (one nickname in Cyrillic with markup in it), each answers the first step's
question, the dashboard shows both answers, and when the teacher leads to the next step both students' views
follow; a student's reload finds their seat and step again."""
import time
from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import settle

pytestmark = pytest.mark.browser


def query(page) -> dict:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def sidebar(page):
    return page.locator('[data-testid="stSidebar"]')


def join(browser, server, code: str, nickname: str, errors: list):
    ctx = browser.new_context(viewport={"width": 1280, "height": 1400})
    student = ctx.new_page()
    student.on("pageerror", lambda e: errors.append(str(e)))
    student.goto(server + f"classes?class={code}")
    settle(student)
    student.get_by_role("textbox", name="Your nickname").fill(nickname)
    student.get_by_role("button", name="Join").click()
    settle(student)
    return student


def answer(student, text: str) -> None:
    box = sidebar(student).get_by_role("textbox", name="Your answer")
    box.fill(text)
    box.press("Enter")
    settle(student)
    sidebar(student).get_by_role("button", name="Check").click()
    settle(student)


def test_a_class_answers_and_follows_the_teacher(server, page, browser):
    page.goto(server + "classes")
    settle(page)
    page.get_by_role("button", name="Start a class").click()
    settle(page)
    code = query(page)["class"]
    assert len(code) == 6 and len(query(page)["teacher"]) >= 32
    main = page.locator('[data-testid="stMain"]')
    assert code in main.inner_text()

    errors: list = []
    ana = join(browser, server, code, "Ana", errors)
    bora = join(browser, server, code, "Бора <b>x</b>", errors)
    for student, nickname in ((ana, "Ana"), (bora, "Бора <b>x</b>")):
        assert urlparse(student.url).path.endswith("/routing")                # the lesson's first step
        q = query(student)
        assert q["lesson"] == "sparse-experts" and q["lesson_step"] == "1" and q["class"] == code and q["seat"]
        assert f"Class {code} as {nickname}" in sidebar(student).inner_text()    # markup shown as typed
    answer(ana, "16")
    answer(bora, "12")
    assert "Sent to your class" in sidebar(ana).inner_text()

    deadline = time.time() + 15
    while time.time() < deadline and "2 answered, 1 right" not in main.inner_text():
        time.sleep(0.5)
    text = main.inner_text()
    assert "2 answered, 1 right" in text and "Ana" in text and "Бора <b>x</b>" in text
    assert page.locator("b", has_text="x").count() == 0                    # a nickname's markup is never HTML

    page.get_by_text("Students follow my step").click()
    settle(page)
    assert "students follow" in main.inner_text()                        # the store has it, not only the switch
    page.get_by_role("button", name="Next step").click()
    settle(page)
    assert "Step 2 of 8" in main.inner_text()
    led = time.time()
    while time.time() - led < 12 and not all(query(s).get("lesson_step") == "2" for s in (ana, bora)):
        time.sleep(0.3)
    assert all(query(s).get("lesson_step") == "2" for s in (ana, bora)), "the students did not follow"
    followed = time.time() - led
    assert followed < 8, followed
    settle(ana)
    assert "Step 2 of 8" in sidebar(ana).inner_text()

    ana.reload()
    settle(ana)
    assert query(ana)["lesson_step"] == "2" and f"Class {code} as Ana" in sidebar(ana).inner_text()
    for p in (page, ana, bora):
        assert p.locator('[data-testid="stException"]').count() == 0
    assert not errors and not page.js_errors, (errors, page.js_errors)
