"""A short seeded random walk over the app in the browser (bench/random_walk.py runs the long one): whatever a
curious student clicks, types, reloads or reopens, every page stays alive, with no exception box, no traceback
text and no JavaScript error."""
import pytest

from bench.random_walk import walk

STEPS = 30


@pytest.mark.parametrize("seed", [3])
def test_a_random_walk_leaves_every_page_alive(server, browser, seed):
    w = walk(server, browser, STEPS, seed)
    assert len(w.steps) == STEPS
    kinds = {what.split()[0] for what, _ in w.steps}
    assert {"click", "reload"} <= kinds, kinds                   # the walk did walk
    assert not w.problems, w.problems
    assert not w.js_errors, w.js_errors
