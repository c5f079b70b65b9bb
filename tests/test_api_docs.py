"""The public API (``gemkd``'s names) is documented in one style: every function has
numpydoc-like Parameters and Returns sections naming each of its parameters, and no docstring
of the API cites an issue number of a tracker that is not in the repository."""

from __future__ import annotations

import inspect
import re

import pytest

import gemkd

FUNCTIONS = sorted(n for n in gemkd.__all__ if n != "__version__"
                   and inspect.isfunction(getattr(gemkd, n)))
ISSUE = re.compile(r"\bissues? #?\d+|\(#\d+\)", re.I)


def sections(doc: str) -> dict[str, str]:
    """A numpydoc docstring's sections: title → body."""
    parts = re.split(r"^(\w[\w ]*)\n-{3,}\n", doc, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_the_api_has_functions_to_check():
    assert {"load_spec", "run_experiment", "fit_teacher", "generate"} <= set(FUNCTIONS)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_each_function_documents_every_parameter_and_its_return(name):
    fn = getattr(gemkd, name)
    doc = inspect.getdoc(fn) or ""
    found = sections(doc)
    params = [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]
    if params:
        assert "Parameters" in found, f"{name}: no Parameters section"
        listed = {n.strip() for line in found["Parameters"].splitlines()
                  if line and not line.startswith(" ") for n in line.split(",")}
        assert set(params) <= listed, f"{name}: undocumented {sorted(set(params) - listed)}"
    assert "Returns" in found, f"{name}: no Returns section"


@pytest.mark.parametrize("name", sorted(n for n in gemkd.__all__ if n != "__version__"))
def test_no_api_docstring_cites_an_issue_number(name):
    assert not ISSUE.search(inspect.getdoc(getattr(gemkd, name)) or "")
