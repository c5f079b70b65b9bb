"""README is the front door and the docs link only to what the repository holds.

Why: README grew to 742 lines of reference and history; docs moved between folders; links to
a data folder beside the repository pointed outside a clone. These checks keep the front door
short, every relative link in README.md and docs/**/*.md pointing at a file or folder of the
repository, no tracked file naming that folder (the real logs ship in datasets/), and README
stating the test command that CI (``.ci/run``) runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
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


# the folder beside the repository that the real logs and notes once came from: written in
# pieces so that this file does not name it
SIBLING = "shared"
OUTSIDE = re.compile(rf"\.\./{SIBLING}\b|\b{SIBLING}/(?:data|docs)\b"  # ../x, x/data, x/docs
                     rf"|[\"']{SIBLING}[\"']\s*/")  # a path built in code: ... / "x" / ...


def source_files() -> list[Path]:
    """Every *.py, *.md, *.yaml and Makefile git tracks or would track (not ignored)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z",
                          "--", "*.py", "*.md", "*.yaml", "Makefile", "*/Makefile"],
                         cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in sorted(set(out.decode().split("\0"))) if name and
            (ROOT / name).is_file()]


def test_outside_pattern_finds_the_sibling_folder():
    assert OUTSIDE.search(f"read ../{SIBLING} first") and OUTSIDE.search(f"{SIBLING}/data/x")
    assert OUTSIDE.search(f"see {SIBLING}/docs/plan.md")
    assert OUTSIDE.search(f'ROOT.parent / "{SIBLING}" / "data"')
    assert not OUTSIDE.search(f"{SIBLING} tables, a {SIBLING}_trunk, not_{SIBLING}/data")
    assert not OUTSIDE.search(f'datasets/x, "{SIBLING}": 1, {SIBLING.upper()}_TABLES')


def test_no_file_names_a_folder_outside_the_clone():
    """A clone stands on its own: no code, test, config, doc or Makefile reads or cites a folder
    beside the repository."""
    files = source_files()
    assert any(f.name == "conftest.py" for f in files)  # the listing is the repository's
    hits = [f"{f.relative_to(ROOT)}:{n}: {line.strip()}" for f in files
            for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace")
                                     .splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, "files name a folder outside the repository:\n" + "\n".join(hits)
