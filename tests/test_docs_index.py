"""The README is a front page and the docs an index by audience (issue 30): the README starts with the two commands
and stays under 250 lines, every page under docs/ is reachable from docs/README.md, and no relative link in the
README or the docs points at a file that is not there."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RAW = ("gpu", "serving-cpu")  # raw outputs beside the measurement records: linked as folders, not page by page
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if p.relative_to(DOCS).parts[0] not in RAW)


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_the_readme_starts_with_the_two_commands_and_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)
    first_block = lines.index("```sh")
    assert first_block < 8, "the two commands come right after the title and its sentence"
    commands = lines[first_block + 1:lines.index("```", first_block + 1)]
    assert [c.split()[0] for c in commands] == ["./scripts/envkit-main.sh", "./scripts/test.sh"]
    for c in commands:
        assert (ROOT / c.split()[0]).is_file()


def test_every_page_under_docs_is_reachable_from_the_index():
    index = DOCS / "README.md"
    targets = {(index.parent / t.split("#")[0]).resolve() for t in _links(index)}
    unlisted = [p.relative_to(DOCS).as_posix() for p in _pages()
                if p != index and p.resolve() not in targets and p.parent.resolve() not in targets]
    assert unlisted == [], f"add these to docs/README.md under their audience: {unlisted}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *_pages()], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_at_files_that_exist(page):
    broken = [t for t in _links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"
