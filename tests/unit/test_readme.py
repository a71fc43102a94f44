"""The README is the front door: short, with a Measured table of a few one-line rows that each
name the command behind the figure, pictures of the benchmarks that compare, and no dead links.

What it checks (issue #72): README.md has at most 250 lines; the table under its ``## Measured``
heading has at most 10 rows, each on one line of at most 320 characters, each with the command
that reproduces it (``python -m benchmarks.NAME`` or ``voiceagent ...``); the rows that compare
against Pipecat or the naive chain link their picture; at least three ``.png`` pictures are linked
and exist; and every relative link of README.md, clients/README.md and the pages under docs/
names a file that exists and, with a ``#anchor`` into a Markdown file, a heading of that file
(GitHub's slugs).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_LINES = 250
MAX_ROWS = 10
MAX_ROW_CHARS = 320
COMMAND = re.compile(r"`[^`]*(?:python -m benchmarks\.\w+|voiceagent \w+)[^`]*`")
# The pages whose links are checked as the README's are, beside it: where its readers are sent
# (every page of docs/, the dated reports and decision records included; about 0.2 s for all).
PAGES = sorted([ROOT / "clients" / "README.md", *(ROOT / "docs").rglob("*.md")], key=lambda p: p.relative_to(ROOT).as_posix())

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
TARGET = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK_TEXT = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code blanked out (a link shown as code is no
    link)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(INLINE_CODE.sub("``", line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lowercased, punctuation other than ``-``
    and ``_`` dropped, each space a ``-``."""
    text = LINK_TEXT.sub(r"\1", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor in a Markdown page, repeated headings numbered as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    """Every link and image target of a Markdown page, outside code."""
    return [m.group(1) for line in prose_lines(page.read_text()) for m in TARGET.finditer(line)]


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file is missing, or whose ``#anchor`` names no heading
    of the Markdown file it points into."""
    bad = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check offline
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            shown = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest.name
            bad.append(f"{target}: no heading #{anchor} in {shown}")
    return bad


def measured_rows() -> list[str]:
    """The lines of the table under the README's ``## Measured`` heading, header and rule left
    out; a line inside the table that is not a row (a row broken over lines) fails here."""
    lines = README.read_text().splitlines()
    start = lines.index("## Measured")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = lines[start + 1 : end]
    table = [i for i, line in enumerate(section) if line.startswith("|")]
    assert table, "no table under ## Measured"
    block = section[table[0] : table[-1] + 1]
    assert all(line.startswith("|") and line.rstrip().endswith("|") for line in block), "a Measured row runs over more than one line"
    assert re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", block[1].replace(" ", "")), "the table's second line is not its rule"
    return block[2:]


def test_the_readme_fits_its_length() -> None:
    n = len(README.read_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines (at most {MAX_LINES}): move the detail to docs/"


def test_the_measured_table_has_few_one_line_rows_each_with_its_command() -> None:
    rows = measured_rows()
    assert 0 < len(rows) <= MAX_ROWS, f"{len(rows)} Measured rows (at most {MAX_ROWS}): the rest go to docs/benchmarks.md"
    for row in rows:
        assert len(row) <= MAX_ROW_CHARS, f"a Measured row of {len(row)} characters (at most {MAX_ROW_CHARS}): {row[:80]}…"
        assert COMMAND.search(row), f"a Measured row without its command: {row[:80]}…"


def test_the_headline_rows_link_their_picture() -> None:
    headline = [row for row in measured_rows() if "Pipecat" in row or "naive chain" in row]
    assert headline, "no Measured row against Pipecat or the naive chain"
    for row in headline:
        assert re.search(r"\]\([^)]+\.png\)", row), f"a headline row without its picture: {row[:80]}…"


def test_at_least_three_pictures_are_linked_and_exist() -> None:
    pngs = {target for target in links(README) if target.endswith(".png")}
    assert len(pngs) >= 3, f"README.md links {len(pngs)} pictures: {sorted(pngs)}"
    for png in pngs:
        data = (ROOT / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", png


def test_every_relative_link_of_the_readme_resolves() -> None:
    assert broken_links(README) == []


def test_every_relative_link_of_the_docs_resolves() -> None:
    """docs/benchmarks.md (where the Measured rows went in full), docs/layout.md, clients/README.md
    and every other page under docs/."""
    assert "docs/benchmarks.md" in {p.relative_to(ROOT).as_posix() for p in PAGES}
    bad = [f"{page.relative_to(ROOT)}: {link}" for page in PAGES for link in broken_links(page)]
    assert bad == []


def test_the_link_checker_sees_what_it_should(tmp_path: Path) -> None:
    """The checker itself: a missing file and a missing heading are found; code, web links, an
    image inside a link and headings with punctuation are read as GitHub reads them."""
    (tmp_path / "other.md").write_text("# Other\n\n## `llm.route`: rules, off (measured)\n\n## Twice\n\n## Twice\n")
    (tmp_path / "pic.png").write_bytes(b"")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## What is supported?\n\n"
        "[![alt](pic.png)](other.md#other) [a](other.md#llmroute-rules-off-measured) [b](#what-is-supported)\n"
        "[c](other.md#twice-1) [web](https://example.com/x#y) `[code](missing.md)`\n"
        "```\n[fenced](missing.md)\n# not a heading\n```\n"
        "[d](missing.md) [e](other.md#nowhere) [f](#not-a-heading)\n"
    )
    assert slug("Admission: by the load the turns really cost") == "admission-by-the-load-the-turns-really-cost"
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading #nowhere in other.md",
        "#not-a-heading: no heading #not-a-heading in page.md",
    ]
