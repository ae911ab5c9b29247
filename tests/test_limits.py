"""Issue 28: the limits of numeric options are declared once (idaudit.core.limits.LIMITS) and every
command, request and file reader refuses with the same check and the same words."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from idaudit.core import limits
from idaudit.core.errors import IdauditError, command_line

SRC = Path(__file__).resolve().parents[1] / "src" / "idaudit"


@pytest.mark.parametrize("name,inside,outside", [
    ("n_eval", [10, np.int64(11), 10**9], [9, 10.0, True, "10", None]),
    ("bootstrap", [0, 5], [-1, 0.5, False]),
    ("test_fraction", [0.5, 1e-9, 1 - 1e-9, np.float32(0.3)], [0, 1, -0.1, float("nan"), "0.5"]),
    ("rho", [0.95, 0.3], [0.0, 1.0, float("inf")]),
    ("lamb", [0.0, 1.0, 0.5], [-1e-12, 1.0000001]),
    ("n_views", [2, 64], [1, 65, 3.0]),
    ("image_size", [16, 512, 224], [15, 513]),
    ("gallery", [5], [4]),
])
def test_each_limit_holds_inside_and_refuses_outside(name, inside, outside):
    for value in inside:
        assert limits.check(name, value) is value
    for value in outside:
        with pytest.raises(IdauditError, match=f"^{name} must "):  # the library's spelling
            limits.check(name, value)


def test_the_words_of_each_kind_of_limit():
    """Each in both spellings: the library's parameter, the command line's flag."""
    cases = {("n_eval", 5): "--n-eval must be an integer ≥ 10, got 5",
             ("rho", 1.5): "--rho must lie strictly between 0 and 1, got 1.5",
             ("lamb", 2.0): "--lamb must lie in [0, 1], got 2.0",
             ("image_size", 8): "--image-size must lie in [16, 512] pixels, got 8",
             ("bootstrap", "x"): "--bootstrap must be an integer ≥ 0, got 'x'"}
    for (name, value), text in cases.items():
        with pytest.raises(IdauditError) as err:
            limits.check(name, value)
        assert str(err.value) == name + text[2 + len(name):]  # "n_eval must be …"
        with command_line():
            assert str(err.value) == text
    with pytest.raises(IdauditError, match="consistency needs at least two runs, got 1"):
        limits.check_runs(1)


def test_no_module_words_a_declared_limit_by_hand():
    """The phrasings of limits.Limit.text appear in limits.py alone (the other modules call
    limits.check), so a limit cannot be changed in one place and not another."""
    phrasings = re.compile(r"must lie strictly between|must lie in \[(0, 1|2, 64|16, 512)\]|"
                           r"at least two runs|must be an integer ≥ (0|1|5|10)\b")
    found = [f"{p.relative_to(SRC)}:{i}" for p in sorted(SRC.rglob("*.py")) if p.name != "limits.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if phrasings.search(line)]
    assert not found, found
