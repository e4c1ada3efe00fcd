"""The link parameters a page declares, read from its view file without running the page.

A page declares its controls once, in its `state.page(...)` call (app/state.py); nothing else lists them. A
lesson step names a page and values for its link, so checking a step needs those declarations before the page
runs. This module reads the view file's syntax tree, runs only the top-level statements the `state.page(...)`
arguments depend on (imports, constants, a control class the page defines), and evaluates the arguments
themselves: the controls it returns are the page's own objects, with their ranges and their `parse`, never a
second copy that could drift. A view that builds a range from the live model (the Routing explorer's last
layer) loads it here too, once per process. Statements that draw (`ui.page_header(...)`) are never run.
"""
from __future__ import annotations

import ast
import builtins
import functools
import threading
from pathlib import Path

from app import state, ui  # noqa: F401 - importing app.ui registers the shared prompt and token (state.carry)

ROOT = Path(__file__).resolve().parent.parent


class DeclarationError(Exception):
    """A view file whose `state.page(...)` call cannot be found or evaluated."""


def _is_page_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "page"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "state")


def _defines(stmt: ast.stmt) -> set[str]:
    """The names a top-level statement binds."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return {stmt.name}
    targets = (stmt.targets if isinstance(stmt, ast.Assign) else
               [stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else [])
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _uses(node: ast.AST) -> set[str]:
    """The names a statement or expression reads (inside the bodies of the functions it defines too)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _declared(path: Path) -> tuple[state.Control, ...]:
    source = path.read_text(encoding="utf-8")
    body = ast.parse(source, filename=str(path)).body
    found = next(((i, node) for i, stmt in enumerate(body) for node in ast.walk(stmt) if _is_page_call(node)), None)
    if found is None:
        raise DeclarationError(f"{path.name} has no state.page(...) call")
    at, call = found
    wanted = set().union(*(_uses(a) for a in call.args)) if call.args else set()
    run: set[int] = set()
    while wanted:                                   # the statements the arguments need, and the ones those need
        name = wanted.pop()
        for i, stmt in enumerate(body[:at]):
            if i not in run and name in _defines(stmt):
                run.add(i)
                wanted |= _uses(stmt) - _defines(stmt)
    ns: dict = {"__name__": f"_k3_declarations_{path.stem}", "__file__": str(path), "__builtins__": builtins}
    try:
        for i in sorted(run):
            exec(compile(ast.Module([body[i]], type_ignores=[]), str(path), "exec"), ns)   # noqa: S102 - our own file
        expr = ast.fix_missing_locations(ast.Expression(ast.Tuple(call.args, ast.Load())))
        controls = eval(compile(expr, str(path), "eval"), ns)                               # noqa: S307 - likewise
    except Exception as e:              # noqa: BLE001 - whatever the page's own code raises, said once
        raise DeclarationError(f"the controls of {path.name} could not be read: {type(e).__name__}: {e}") from e
    if not all(isinstance(c, state.Control) for c in controls):
        raise DeclarationError(f"{path.name}: state.page(...) was given something that is not a control")
    return controls


_LOCK = threading.Lock()


@functools.lru_cache(maxsize=None)
def _controls_of(view_path: str) -> dict[str, state.Control]:
    controls = _declared(ROOT / view_path)
    names = {c.param for c in controls}
    controls = (*controls, *(c for c in state.carried() if c.param not in names))   # as state.page() adds them
    return {c.param: c for c in controls if c.link}


def link_controls(view_path: str) -> dict[str, state.Control]:
    """The page's link parameters -> their controls (the shared prompt and token included, as on every page's
    link). `view_path`: the page's file, as app.navigation lists it ("views/routing.py"). Raises
    DeclarationError when the declarations cannot be read."""
    with _LOCK:                                     # two sessions asking at once evaluate the file once
        return _controls_of(view_path)
