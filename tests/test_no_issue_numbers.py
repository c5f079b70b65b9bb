"""No source, config or script cites an issue number of the project's tracker: the tracker is not
in the repository, so a newcomer cannot follow the reference; the code says what it meant in
words (history lives in docs/notes)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: "issue 42", "issues 28", "Issue 41.6", "(#31)"
ISSUE = re.compile(r"\bissues? #?\d+|\(#\d+\)", re.I)
SKIP = {".venv", ".git", "docs", "build", "dist", "node_modules", "runs", "__pycache__"}


def _files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in SKIP or any(p.startswith(".") or p.endswith(".egg-info")
                                       for p in rel.parts[:-1]):
            continue
        if path.suffix in (".py", ".yaml", ".yml", ".sh", ".toml") and path.is_file():
            out.append(path)
    return out


def test_the_scan_reaches_the_packages():
    names = {p.relative_to(ROOT).parts[0] for p in _files()}
    assert {"transfer", "experiments", "benchmarks", "tests"} <= names


def test_no_file_cites_an_issue_number():
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in _files()
             for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if ISSUE.search(line) and p != Path(__file__).resolve()]
    assert not found, "issue numbers in the code:\n" + "\n".join(found[:20])
