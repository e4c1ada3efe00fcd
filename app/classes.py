"""Classes: a teacher runs a lesson with a class, students join with a short code and a nickname, and their
answers are kept in a database. Pure (no Streamlit): the store's operations (its tables: app/classes_schema.py)
and the checks of what a person types. The pages are views/classes.py (start, join, the teacher's dashboard) and
the lesson's panel (app/lessons_ui.py).

The database is SQLAlchemy's: an SQLite file by default (one process, no set-up), or the URL in the environment
variable K3_DATABASE_URL (PostgreSQL when the app runs as replicas: `python -m deploy` passes the variable on to
every replica). The app creates the schema and records its version in `k3_schema`; a database written by a newer
version of the app is refused rather than misread.

What is kept: for a class, its code, its lesson, the step the teacher leads to, when it expires, and a hash of
the teacher's secret (the secret is in the teacher's link only); for a student, the nickname, the step, and a
hash of the seat's secret (in the student's link, so a reload or another replica finds the student again); for
an answer, the text typed or the option picked, right or wrong, and for a question read from the student's own
view the value that view computed. No other personal data. Every statement is SQLAlchemy Core with bound
parameters.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import threading
import time
import unicodedata
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from app.classes_schema import (
    CODE_LENGTH,
    MAX_ANSWER,
    MAX_NICKNAME,
    SCHEMA_VERSION,
    answers,
    classes,
    meta,
    schema,
    students,
)

DB_ENV = "K3_DATABASE_URL"
DEFAULT_DB = Path(__file__).resolve().parent.parent / "var" / "classes.sqlite"

# A code is read aloud and typed by a class: no 0/O, 1/I/L, and 31**6 ~ 8.9e8 of them against guessing.
CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE = re.compile(rf"^[{CODE_ALPHABET}]{{{CODE_LENGTH}}}$")
SECRET = re.compile(r"^[A-Za-z0-9_-]{20,64}$")       # secrets.token_urlsafe(24) is 32 characters
CLASS_HOURS = 12                                       # a class's code works this long after its start
MAX_STUDENTS = 200
# joins: a class takes at most JOINS_PER_MINUTE; one process answers at most WRONG_CODES_PER_MINUTE joins
# with an unknown or expired code (guessing codes gets slow, a class typing theirs is not held up)
JOINS_PER_MINUTE = 80
WRONG_CODES_PER_MINUTE = 30


class StoreError(Exception):
    """Something a person should be told (a wrong code, a nickname taken, the database unreachable)."""


class Unavailable(StoreError):
    """The database cannot be reached or read: the lesson features say so, the rest of the app works."""


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def read_code(raw) -> str | None:
    """A typed class code as stored (upper case, spaces and hyphens dropped), or None if it cannot be one."""
    s = re.sub(r"[\s-]", "", str(raw or ""))[:CODE_LENGTH + 4].upper()
    return s if CODE.match(s) else None


def read_secret(raw) -> str | None:
    s = str(raw or "")
    return s if SECRET.match(s) else None


def read_nickname(raw) -> tuple[str | None, str]:
    """A nickname as kept (spaces folded, NFC) and "" , or None and why it cannot be one."""
    s = " ".join(unicodedata.normalize("NFC", str(raw or "")).split())
    if not s:
        return None, "Type a nickname first."
    if len(s) > MAX_NICKNAME:
        return None, f"A nickname has at most {MAX_NICKNAME} characters."
    if any(unicodedata.category(ch)[0] == "C" for ch in s):
        return None, "A nickname can hold letters, digits, spaces and punctuation only."
    return s, ""


@dataclass(frozen=True)
class ClassInfo:
    id: int
    code: str
    lesson: str
    steps: int
    step: int
    lead: bool
    expires: float
    lesson_toml: str | None = None      # the lesson's file, when it was written in the app


@dataclass(frozen=True)
class Seat:
    id: int
    class_id: int
    nickname: str
    step: int


@dataclass(frozen=True)
class Answer:
    nickname: str
    step: int
    answer: str
    right: bool | None
    truth: float | None
    at: float


class _Window:
    """How many events in the last `seconds`, per key, in this process."""

    def __init__(self, seconds: float = 60.0):
        self.seconds, self.events, self.lock = seconds, {}, threading.Lock()

    def hit(self, key: str, most: int, now: float) -> bool:
        """Count one event; False if `most` already happened within the window (the event is not counted)."""
        with self.lock:
            q = self.events.setdefault(key, deque())
            while q and q[0] <= now - self.seconds:
                q.popleft()
            if len(q) >= most:
                return False
            q.append(now)
            return True


class Store:
    """The classes and answers in one database. Thread-safe (SQLAlchemy's pool); every method raises
    Unavailable when the database cannot be reached."""

    def __init__(self, url: str, clock=time.time):
        self.url, self.clock = url, clock
        kwargs: dict = {"pool_pre_ping": True}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"timeout": 10, "check_same_thread": False}
        else:
            kwargs["connect_args"] = {"connect_timeout": 3}
        self.engine = sa.create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        self.wrong_codes = _Window()
        self._ready = False
        self._ready_lock = threading.Lock()

    # ---- schema ------------------------------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the tables of this version (once per process), or refuse a database of a newer version."""
        if self._ready:
            return
        with self._ready_lock, self._begin() as c:
            if self._ready:
                return
            meta.create_all(c)
            found = c.execute(sa.select(schema.c.version)).scalars().all()
            if not found:
                c.execute(schema.insert().values(version=SCHEMA_VERSION))
            elif max(found) > SCHEMA_VERSION:
                raise Unavailable(f"The classes database was written by a newer version of the app (schema "
                                  f"{max(found)}; this one reads {SCHEMA_VERSION}).")
            self._ready = True

    def version(self) -> int:
        with self._begin() as c:
            return int(c.execute(sa.select(sa.func.max(schema.c.version))).scalar_one())

    def _begin(self):
        return _Guarded(self.engine)

    # ---- a class ----------------------------------------------------------------------------------------------

    def start(self, lesson: str, steps: int, lesson_toml: str | None = None) -> tuple[ClassInfo, str]:
        """A new class of the lesson: its record and the teacher's secret (kept nowhere but in the link). A lesson
        written in the app comes with its file's text (`lesson_toml`), so every replica can read it."""
        self.ensure_schema()
        now = self.clock()
        secret = secrets.token_urlsafe(24)
        with self._begin() as c:
            c.execute(classes.delete().where(classes.c.expires < now - 24 * 3600))     # long gone: cleared
            for _ in range(8):
                code = new_code()
                if c.execute(sa.select(classes.c.id).where(classes.c.code == code)).first() is None:
                    break
            else:                                                                       # pragma: no cover
                raise StoreError("No free class code was found; try again.")
            c.execute(classes.insert().values(
                code=code, lesson=lesson, lesson_toml=lesson_toml, steps=int(steps), teacher_hash=_hash(secret),
                step=1, lead=False, created=now, expires=now + CLASS_HOURS * 3600))
        return self.find(code, require_open=False), secret

    def find(self, code: str, require_open: bool = True) -> ClassInfo | None:
        """The class of a code (None if there is none, or it has expired and `require_open`)."""
        self.ensure_schema()
        with self._begin() as c:
            row = c.execute(sa.select(classes).where(classes.c.code == code)).mappings().first()
        if row is None or (require_open and row["expires"] < self.clock()):
            return None
        return ClassInfo(row["id"], row["code"], row["lesson"], row["steps"], row["step"], bool(row["lead"]),
                         row["expires"], row["lesson_toml"])

    def teacher(self, code: str, secret: str) -> ClassInfo | None:
        """The class if `secret` is its teacher's (compared as hashes, in constant time), else None."""
        self.ensure_schema()
        with self._begin() as c:
            row = c.execute(sa.select(classes.c.teacher_hash).where(classes.c.code == code)).first()
        if row is None or not secrets.compare_digest(row[0], _hash(secret)):
            return None
        return self.find(code, require_open=False)

    def lead(self, class_id: int, step: int | None = None, on: bool | None = None) -> None:
        """The teacher moves the class to `step` and/or starts or stops leading (students follow the step)."""
        values = {}
        if step is not None:
            values["step"] = int(step)
        if on is not None:
            values["lead"] = bool(on)
        if values:
            with self._begin() as c:
                c.execute(classes.update().where(classes.c.id == class_id).values(**values))

    def end(self, class_id: int) -> None:
        """End the class: it, its students and their answers are deleted."""
        with self._begin() as c:
            c.execute(answers.delete().where(answers.c.class_id == class_id))
            c.execute(students.delete().where(students.c.class_id == class_id))
            c.execute(classes.delete().where(classes.c.id == class_id))

    # ---- a student --------------------------------------------------------------------------------------------

    def join(self, code_raw, nickname_raw) -> tuple[ClassInfo, Seat, str]:
        """Join a class: its record, the student's seat and the seat's secret (for the student's link).
        Raises StoreError with what to tell the student."""
        now = self.clock()
        code = read_code(code_raw)
        nickname, why = read_nickname(nickname_raw)
        if nickname is None:
            raise StoreError(why)
        info = self.find(code) if code else None
        if info is None:
            if not self.wrong_codes.hit("wrong", WRONG_CODES_PER_MINUTE, now):
                raise StoreError("Too many joins with a wrong code just now; wait a minute and try again.")
            raise StoreError("There is no open class with that code: check it with your teacher (six letters and "
                             "digits).")
        secret = secrets.token_urlsafe(24)
        with self._begin() as c:
            recent = c.execute(sa.select(sa.func.count()).select_from(students).where(
                students.c.class_id == info.id, students.c.joined > now - 60)).scalar_one()
            if recent >= JOINS_PER_MINUTE:
                raise StoreError("Many students are joining this class right now; try again in a minute.")
            total = c.execute(sa.select(sa.func.count()).select_from(students).where(
                students.c.class_id == info.id)).scalar_one()
            if total >= MAX_STUDENTS:
                raise StoreError(f"This class is full ({MAX_STUDENTS} students).")
        try:
            with self._begin() as c:
                sid = c.execute(students.insert().values(
                    class_id=info.id, nickname=nickname, seat_hash=_hash(secret), step=info.step, joined=now,
                    seen=now)).inserted_primary_key[0]
        except IntegrityError:
            raise StoreError("That nickname is taken in this class; pick another.") from None
        return info, Seat(sid, info.id, nickname, info.step), secret

    def seat(self, code: str, secret: str) -> tuple[ClassInfo, Seat] | None:
        """The student whose seat's secret this is, in the class of `code` (None if none, or the class ended)."""
        self.ensure_schema()
        with self._begin() as c:
            row = c.execute(sa.select(students, classes.c.code).join(classes).where(
                students.c.seat_hash == _hash(secret), classes.c.code == code)).mappings().first()
        if row is None:
            return None
        info = self.find(code, require_open=False)
        if info is None:
            return None
        return info, Seat(row["id"], row["class_id"], row["nickname"], row["step"])

    def at_step(self, seat: Seat, step: int) -> None:
        """The student is on `step` now (the dashboard's "who is where")."""
        with self._begin() as c:
            c.execute(students.update().where(students.c.id == seat.id).values(step=int(step), seen=self.clock()))

    def answer(self, seat: Seat, step: int, text: str, right: bool | None, truth: float | None = None) -> None:
        """Keep the student's answer to a step (a later one replaces it)."""
        text = str(text)[:MAX_ANSWER]
        values = dict(answer=text, right=right, truth=truth, at=self.clock())
        update = (answers.update().where(answers.c.student_id == seat.id, answers.c.step == step).values(**values))
        with self._begin() as c:
            if c.execute(update).rowcount:
                return
        try:
            with self._begin() as c:
                c.execute(answers.insert().values(class_id=seat.class_id, student_id=seat.id, step=step, **values))
        except IntegrityError:                      # the same student's answer arrived twice at once: the later wins
            with self._begin() as c:
                c.execute(update)

    def my_answers(self, seat: Seat) -> list[Answer]:
        with self._begin() as c:
            rows = c.execute(sa.select(answers).where(answers.c.student_id == seat.id)
                             .order_by(answers.c.step)).mappings().all()
        return [Answer(seat.nickname, r["step"], r["answer"], r["right"], r["truth"], r["at"]) for r in rows]

    # ---- the dashboard ----------------------------------------------------------------------------------------

    def roster(self, class_id: int) -> list[tuple[str, int, float]]:
        """(nickname, step, last seen) of every student, by nickname."""
        with self._begin() as c:
            rows = c.execute(sa.select(students.c.nickname, students.c.step, students.c.seen)
                             .where(students.c.class_id == class_id).order_by(students.c.nickname)).all()
        return [tuple(r) for r in rows]

    def class_answers(self, class_id: int) -> list[Answer]:
        with self._begin() as c:
            rows = c.execute(sa.select(students.c.nickname, answers.c.step, answers.c.answer, answers.c.right,
                                       answers.c.truth, answers.c.at)
                             .join(students, students.c.id == answers.c.student_id)
                             .where(answers.c.class_id == class_id)
                             .order_by(answers.c.step, students.c.nickname)).all()
        return [Answer(*r) for r in rows]


class _Guarded:
    """A transaction whose database errors become Unavailable (with the reason kept for the log)."""

    def __init__(self, engine):
        self.engine, self.ctx = engine, None

    def __enter__(self):
        try:
            self.ctx = self.engine.begin()
            return self.ctx.__enter__()
        except SQLAlchemyError as e:
            raise Unavailable(_unavailable(e)) from e

    def __exit__(self, kind, value, tb):
        try:
            done = self.ctx.__exit__(kind, value, tb)
        except IntegrityError:
            raise
        except SQLAlchemyError as e:
            raise Unavailable(_unavailable(e)) from e
        if isinstance(value, IntegrityError):
            return done
        if isinstance(value, SQLAlchemyError):
            raise Unavailable(_unavailable(value)) from value
        return done


def _unavailable(e: Exception) -> str:
    return f"The classes database cannot be reached ({type(e).__name__})."


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")      # readers (dashboards) do not wait for a writer (an answer)
    cur.close()


def database_url() -> str:
    """The database of this process: K3_DATABASE_URL, or the SQLite file under var/."""
    url = os.environ.get(DB_ENV, "").strip()
    if url:
        return url
    DEFAULT_DB.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{DEFAULT_DB}"


_store: Store | None = None
_store_lock = threading.Lock()


def store() -> Store:
    """This process's store (one engine and pool, shared by every session)."""
    global _store
    with _store_lock:
        if _store is None:
            _store = Store(database_url())
        return _store
