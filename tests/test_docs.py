"""README is the front door and the docs link only to what the repository holds.

Why: README grew to 742 lines of reference and history; docs moved between folders; links to
``../shared`` pointed outside a clone. These checks keep the front door short, every relative
link in README.md and docs/**/*.md pointing at a file or folder of the repository, and README
stating the test command that CI (``.ci/run``) runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 200
# [text](target) and [text](target "title"); images too. Code spans are removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
EXTERNAL = ("http://", "https://", "mailto:", "ftp://")


def markdown_files() -> list[Path]:
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def relative_links(text: str) -> list[str]:
    """The link targets of a Markdown text outside code, without their anchors; external
    URLs and in-page anchors are left out."""
    text = CODE_SPAN.sub("", FENCE.sub("", text))
    out = []
    for target in LINK.findall(text):
        if target.startswith(EXTERNAL) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        if path:
            out.append(path)
    return out


def test_relative_links_ignore_code_anchors_and_urls():
    text = ("[a](docs/x.md#part) [b](https://e.org/y) [c](#here) `[d](no.md)`\n"
            "```\n[e](fenced.md)\n```\n![f](img/p.png)")
    assert relative_links(text) == ["docs/x.md", "img/p.png"]


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_readme_prose_lines_are_readable():
    """Prose and code lines stay under ~120 characters; only table rows may be wider."""
    long = [(n, len(line)) for n, line in
            enumerate(README.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > 120 and not line.lstrip().startswith("|")]
    assert not long, f"README.md lines over 120 characters (line, length): {long}"


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_exists(doc: Path):
    missing = [t for t in relative_links(doc.read_text(encoding="utf-8"))
               if not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to missing paths: {missing}"


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_link_leaves_the_repository(doc: Path):
    """A clone must stand on its own: no link resolves outside the repository root."""
    outside = [t for t in relative_links(doc.read_text(encoding="utf-8"))
               if not (doc.parent / t).resolve().is_relative_to(ROOT)]
    assert not outside, f"{doc.relative_to(ROOT)} links outside the repository: {outside}"


def test_readme_states_the_ci_test_command():
    """.ci/run runs `make <target>`; README shows that command."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    commands = re.findall(r"^\s*(make \S+)\s*$", ci, re.M)
    assert commands, ".ci/run runs no make target"
    readme = README.read_text(encoding="utf-8")
    for command in commands:
        assert re.search(rf"^{re.escape(command)}\b", readme, re.M), (
            f"README.md does not state {command!r}, the command .ci/run runs")
