"""The classes store (app/classes.py) on both databases it runs on: an SQLite file and a real PostgreSQL cluster
of the test session's own (conftest's postgres_url)."""
from __future__ import annotations

import threading
import uuid

import pytest
import sqlalchemy as sa

from app import classes as C


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'classes.sqlite'}"
    base = request.getfixturevalue("postgres_url")
    # a database per test: tests never see each other's classes
    name = "t" + uuid.uuid4().hex[:12]
    eng = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with eng.connect() as c:
        c.execute(sa.text(f'CREATE DATABASE "{name}"'))
    eng.dispose()
    return base.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(url, clock):
    s = C.Store(url, clock=clock)
    yield s
    s.engine.dispose()


def test_a_class_from_start_to_end(store, clock):
    info, secret = store.start("sparse-experts", 5)
    assert C.CODE.match(info.code) and info.steps == 5 and info.step == 1 and not info.lead
    assert info.expires == pytest.approx(clock() + C.CLASS_HOURS * 3600)
    # a code typed as people type it
    typed = f" {info.code[:3].lower()}-{info.code[3:]} "
    joined, ana, ana_secret = store.join(typed, "  Ana   María ")
    assert joined.id == info.id and ana.nickname == "Ana María"
    _, bo, _ = store.join(info.code, "Bo")
    store.answer(ana, 1, "16", True)
    store.answer(bo, 1, "15", False)
    store.answer(ana, 3, "4", True, truth=4.0)
    store.answer(ana, 1, "17", False)                              # a later answer replaces the first
    got = {(a.nickname, a.step): (a.answer, a.right, a.truth) for a in store.class_answers(info.id)}
    assert got == {("Ana María", 1): ("17", False, None), ("Bo", 1): ("15", False, None),
                   ("Ana María", 3): ("4", True, 4.0)}
    assert [a.step for a in store.my_answers(ana)] == [1, 3]          # a student's own answers only
    assert {a.nickname for a in store.my_answers(bo)} == {"Bo"}
    # the teacher leads; a student who reconnects (another session, another replica) finds their seat and step
    store.lead(info.id, step=3, on=True)
    store.at_step(bo, 3)
    again = store.seat(info.code, ana_secret)
    assert again is not None and again[1].id == ana.id and again[0].step == 3 and again[0].lead
    assert store.roster(info.id) == [("Ana María", 1, clock()), ("Bo", 3, clock())]
    store.end(info.id)
    assert store.find(info.code, require_open=False) is None
    assert store.seat(info.code, ana_secret) is None
    with store.engine.connect() as c:
        for table in (C.students, C.answers):
            assert c.execute(sa.select(sa.func.count()).select_from(table)).scalar_one() == 0


def test_only_a_hash_of_a_secret_is_kept_and_only_the_right_secret_opens_the_dashboard(store):
    info, secret = store.start("sparse-experts", 5)
    _, _, seat_secret = store.join(info.code, "Cy")
    assert C.SECRET.match(secret) and len(secret) >= 32
    assert store.teacher(info.code, secret) == info
    assert store.teacher(info.code, secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    assert store.teacher(info.code, seat_secret) is None               # a student's seat is not the teacher's key
    with store.engine.connect() as c:
        dumped = repr(c.execute(sa.select(C.classes)).all()) + repr(c.execute(sa.select(C.students)).all())
    assert secret not in dumped and seat_secret not in dumped


def test_a_code_expires_and_wrong_codes_are_told_apart_and_rate_limited(store, clock):
    info, _ = store.start("sparse-experts", 5)
    with pytest.raises(C.StoreError, match="no open class"):
        store.join("ZZZZZZ" if info.code != "ZZZZZZ" else "YYYYYY", "Di")
    with pytest.raises(C.StoreError, match="no open class"):
        store.join("not a code", "Di")
    clock.t += C.CLASS_HOURS * 3600 + 1
    with pytest.raises(C.StoreError, match="no open class"):
        store.join(info.code, "Di")
    for _ in range(C.WRONG_CODES_PER_MINUTE - 1):       # the expired code counted one; the two before are old
        with pytest.raises(C.StoreError, match="no open class"):
            store.join("ABCDEF", "Di")
    with pytest.raises(C.StoreError, match="Too many"):
        store.join("ABCDEF", "Di")
    clock.t += 61                                                       # a minute later it answers again
    with pytest.raises(C.StoreError, match="no open class"):
        store.join("ABCDEF", "Di")


def test_joins_per_minute_nicknames_and_a_full_class(store, clock, monkeypatch):
    info, _ = store.start("sparse-experts", 5)
    monkeypatch.setattr(C, "JOINS_PER_MINUTE", 3)
    monkeypatch.setattr(C, "MAX_STUDENTS", 4)
    for n in range(3):
        store.join(info.code, f"s{n}")
    with pytest.raises(C.StoreError, match="right now"):
        store.join(info.code, "s3")
    clock.t += 61
    with pytest.raises(C.StoreError, match="taken"):
        store.join(info.code, "s0")
    store.join(info.code, "s3")
    with pytest.raises(C.StoreError, match="full"):
        store.join(info.code, "s4")
    for bad, why in (("", "Type a nickname"), ("   ", "Type a nickname"), ("x" * 25, "at most 24"),
                     ("a\u0000b", "letters"), ("a\u202eb", "letters"), ("tab\there", None)):
        got, message = C.read_nickname(bad)
        if why is None:
            assert got == "tab here"                                     # whitespace folds to one space
        else:
            assert got is None and why in message


def test_hostile_text_is_kept_as_text(store):
    info, _ = store.start("sparse-experts", 5)
    nick = "');DROP TABLE k3_answers"
    _, seat, _ = store.join(info.code, nick)
    store.answer(seat, 1, "<script>alert(1)</script>' OR '1'='1" + "z" * 500, None)
    (a,) = store.class_answers(info.id)
    assert a.nickname == nick and a.answer.startswith("<script>") and len(a.answer) == C.MAX_ANSWER
    assert store.join(info.code, "Ed")[1].nickname == "Ed"              # the tables are all still there


def test_two_processes_on_one_database_and_concurrent_answers(url, clock):
    one, two = C.Store(url, clock=clock), C.Store(url, clock=clock)
    info, secret = one.start("attention-memory", 4)
    seats = [two.join(info.code, f"st{n:02d}")[1] for n in range(12)]
    errors = []

    def answer_all(store, mine):
        try:
            for seat in mine:
                for step in range(1, 5):
                    store.answer(seat, step, str(step * 10), step % 2 == 0, truth=float(step))
                    store.answer(seat, step, str(step), True, truth=float(step))
        except Exception as e:                       # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=answer_all, args=(s, seats[i::4])) for i, s in enumerate((one, two) * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = one.class_answers(info.id)
    assert len(got) == 12 * 4 and all(a.answer == str(a.step) and a.right for a in got)
    assert two.teacher(info.code, secret) is not None
    one.engine.dispose()
    two.engine.dispose()


def test_a_newer_schema_is_refused_and_an_unreachable_database_is_said(url, tmp_path):
    s = C.Store(url)
    s.ensure_schema()
    assert s.version() == C.SCHEMA_VERSION
    with s.engine.begin() as c:
        c.execute(C.schema.insert().values(version=C.SCHEMA_VERSION + 1))
    s.engine.dispose()
    newer = C.Store(url)
    with pytest.raises(C.Unavailable, match="newer version"):
        newer.start("sparse-experts", 3)
    newer.engine.dispose()
    gone = C.Store(f"sqlite:///{tmp_path}/no/such/folder/x.sqlite")
    with pytest.raises(C.Unavailable, match="cannot be reached"):
        gone.start("sparse-experts", 3)
    closed = C.Store("postgresql+psycopg://k3@127.0.0.1:9/postgres")       # nothing listens on port 9
    with pytest.raises(C.Unavailable, match="cannot be reached"):
        closed.find("ABCDEF")


def test_codes_and_secrets_read_from_links():
    assert C.read_code("abc-def") == "ABCDEF" and C.read_code("ABCDE0") is None     # 0 is not in the alphabet
    assert C.read_code("ABCDEFG") is None and C.read_code(None) is None
    assert C.read_secret("a" * 32) and C.read_secret("a" * 19) is None and C.read_secret("a b" * 12) is None
    codes = {C.new_code() for _ in range(200)}
    assert len(codes) == 200 and all(C.CODE.match(c) for c in codes)
