"""The classes database's tables (SQLAlchemy Core) and the widths they give a code, a nickname and an answer.
app/classes.py creates them and records SCHEMA_VERSION in `k3_schema`; a database of a newer version is refused."""
from __future__ import annotations

import sqlalchemy as sa

SCHEMA_VERSION = 1
CODE_LENGTH = 6
MAX_NICKNAME = 24
MAX_ANSWER = 200                                       # app.lessons.MAX_TYPED

meta = sa.MetaData()
schema = sa.Table("k3_schema", meta, sa.Column("version", sa.Integer, nullable=False))
classes = sa.Table(
    "k3_classes", meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("code", sa.String(CODE_LENGTH), nullable=False, unique=True),
    sa.Column("lesson", sa.String(40), nullable=False),
    sa.Column("lesson_toml", sa.Text, nullable=True),      # a lesson written in the app (not a file of lessons/)
    sa.Column("steps", sa.Integer, nullable=False),
    sa.Column("teacher_hash", sa.String(64), nullable=False),
    sa.Column("step", sa.Integer, nullable=False, default=1),           # the step the teacher leads to
    sa.Column("lead", sa.Boolean, nullable=False, default=False),       # students follow the teacher's step
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("expires", sa.Float, nullable=False),
)
students = sa.Table(
    "k3_students", meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("class_id", sa.Integer, sa.ForeignKey("k3_classes.id", ondelete="CASCADE"), nullable=False),
    sa.Column("nickname", sa.String(MAX_NICKNAME), nullable=False),
    sa.Column("seat_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("step", sa.Integer, nullable=False, default=1),
    sa.Column("joined", sa.Float, nullable=False),
    sa.Column("seen", sa.Float, nullable=False),
    sa.UniqueConstraint("class_id", "nickname"),
)
answers = sa.Table(
    "k3_answers", meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("class_id", sa.Integer, sa.ForeignKey("k3_classes.id", ondelete="CASCADE"), nullable=False),
    sa.Column("student_id", sa.Integer, sa.ForeignKey("k3_students.id", ondelete="CASCADE"), nullable=False),
    sa.Column("step", sa.Integer, nullable=False),
    sa.Column("answer", sa.String(MAX_ANSWER), nullable=False),
    sa.Column("right", sa.Boolean, nullable=True),     # None: not checkable (nothing picked, not a number)
    sa.Column("truth", sa.Float, nullable=True),       # a question read from the view: what the student's view said
    sa.Column("at", sa.Float, nullable=False),
    sa.UniqueConstraint("student_id", "step"),
)
sa.Index("k3_answers_by_class", answers.c.class_id, answers.c.step)
sa.Index("k3_students_by_class", students.c.class_id)
