"""The files in assets/ that the pages read, through one guarded door: a missing or damaged file is a
reason to show (naming the file as `assets/NAME`, never the server's path), not a traceback. Torch-free,
so that the app's frame can check the live instance's files on a page that never loads the model.
"""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
CHECKPOINT, CARD, TOKENIZER = "k3_tiny.safetensors", "k3_tiny.json", "tokenizer.json"
HELDOUT = "heldout_sample.txt"         # text the live model never trained on (python -m model.corpus)


class AssetError(RuntimeError):
    """A file in assets/ is missing or cannot be read; the message is for the page."""


class LiveUnavailable(AssetError):
    """The live model cannot run at all (its tokenizer is missing or damaged: no instance, trained or random,
    can read a prompt without it). app.live.live() raises it; streamlit_app.py shows it in place of the page."""


def shown(path: Path | str) -> str:
    """A file's name as a page may show it: relative to the project (assets/k3_tiny.json), else its bare name."""
    path = Path(path)
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.name


def read_json(name: str, folder: Path | None = None) -> dict | None:
    """A JSON file of assets/ (None when it is missing); AssetError when it is there but is not JSON."""
    path = (folder or ASSETS) / name
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise AssetError(f"{shown(path)} could not be read ({type(e).__name__}: the file is damaged or "
                         f"incomplete)") from e


def read_text(name: str) -> str:
    """A text file of assets/ (undecodable bytes replaced); AssetError when it is missing or unreadable."""
    path = ASSETS / name
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise AssetError(f"{shown(path)} could not be read ({type(e).__name__})") from e


def read_csv(name: str, columns: tuple[str, ...]):
    """A table of assets/ that must hold `columns`; AssetError when it is missing, damaged or lacks one."""
    import pandas as pd
    path = ASSETS / name
    try:
        df = pd.read_csv(path, keep_default_na=False)
    except (OSError, ValueError) as e:                  # pandas' parser errors are ValueErrors
        raise AssetError(f"{shown(path)} could not be read ({type(e).__name__})") from e
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise AssetError(f"{shown(path)} lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    return df


_CHECKED: dict[tuple, tuple[str, bool]] = {}
_CHECKED_LOCK = threading.Lock()


def _stamp(path: Path) -> tuple:
    try:
        st = path.stat()
        return (str(path), st.st_size, st.st_mtime_ns)
    except OSError:
        return (str(path), None, None)


def live_instance_problem(folder: Path | None = None) -> tuple[str, bool]:
    """(why the trained live instance cannot load, or "" when its files look whole; whether no instance can run
    at all). The checkpoint or its card missing, unreadable or not matching the card's checksum leaves the
    seeded random instance; a bad tokenizer leaves none. The same checks as the loader's first ones
    (model.checkpoint.load_pretrained), without torch; remembered while the files are unchanged."""
    folder = folder or ASSETS
    key = tuple(_stamp(folder / n) for n in (CHECKPOINT, CARD, TOKENIZER))
    with _CHECKED_LOCK:
        if key in _CHECKED:
            return _CHECKED[key]
    problem = _problem(folder)
    with _CHECKED_LOCK:
        if len(_CHECKED) > 8:
            _CHECKED.clear()
        _CHECKED[key] = problem
    return problem


def _problem(folder: Path) -> tuple[str, bool]:
    try:
        tok = read_json(TOKENIZER, folder)
    except AssetError as e:
        return str(e), True
    if not isinstance(tok, dict) or "model" not in tok:
        return f"{shown(folder / TOKENIZER)} is {'missing' if tok is None else 'not a tokenizer'}", True
    try:
        card = read_json(CARD, folder)
    except AssetError as e:
        return str(e), False
    if not isinstance(card, dict):
        return f"{shown(folder / CARD)} is {'missing' if card is None else 'not a training card'}", False
    path = folder / CHECKPOINT
    if not path.exists():
        return f"{shown(path)} is missing", False
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != card.get("sha256"):
        return f"{shown(path)} does not match the checksum in {CARD} (the file is damaged or was replaced)", False
    return "", False
