"""The README and docs/: links and anchors resolve, the README stays a front door, every command has a page.

Pure: reads Markdown files, starts no process.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from ddpcheck.commands import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

README_MAX_LINES = 400
# The set-up commands, verbatim: CI (.ci/run) runs the second.
SETUP_COMMANDS = [
    "pip install torch==2.13.0 -e . && ddpcheck allreduce",
    "pip install torch==2.13.0 -e '.[test]' && python -m pytest",
]
FORBIDDEN = ["DESIGN.md", "../shared"]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target ends at whitespace (a title may follow) or ')'.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+).+?\1")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped but '-' and '_', spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file, repeated headings numbered as GitHub does (-1, -2)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links_in(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link and image outside code."""
    found = []
    for number, line in prose_lines(text):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            found.append((number, match.group(1)))
    return found


def links(path: Path) -> list[tuple[int, str]]:
    return links_in(path.read_text(encoding="utf-8"))


def test_slug_follows_github() -> None:
    assert slug("Baselines: slower than it was, or than the hardware should be?") == (
        "baselines-slower-than-it-was-or-than-the-hardware-should-be"
    )
    assert slug("A report to look at: `--html` and `ddpcheck show`") == (
        "a-report-to-look-at---html-and-ddpcheck-show"
    )
    assert slug("What --baseline costs") == "what---baseline-costs"
    assert slug("`ddpcheck all_reduce`") == "ddpcheck-all_reduce"
    assert slug("See [the page](other.md#x)") == "see-the-page"


def test_links_helpers_skip_code() -> None:
    assert [target for _, target in links_in("a [x](b.md) `[y](c.md)` ![i](d.png)")] == ["b.md", "d.png"]
    assert links_in("```\n[x](inside.md)\n```\n[y](outside.md#h)") == [(4, "outside.md#h")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    broken = []
    for number, target in links(page):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        destination = (page.parent / unquote(file_part)).resolve() if file_part else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not destination.is_file():
            broken.append(f"{where}: no such file")
        elif anchor and destination.suffix == ".md" and unquote(anchor) not in anchors(destination):
            broken.append(f"{where}: no heading with anchor #{anchor} in {destination.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move reference text to docs/"
    )


# Every command has a page of its own, docs/<command>.md (`compare` shares its page with --baseline).
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_a_page_linked_from_the_readme(command: str) -> None:
    page = DOCS / f"{command}.md"
    assert page.is_file(), f"no docs page for `ddpcheck {command}`: {page.relative_to(ROOT)}"
    assert f"ddpcheck {command}" in page.read_text(encoding="utf-8")
    readme_targets = {target.partition("#")[0] for _, target in links(README)}
    assert f"docs/{page.name}" in readme_targets, f"README.md does not link docs/{page.name}"


def test_readme_links_every_docs_page() -> None:
    readme_targets = {target.partition("#")[0] for _, target in links(README)}
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if f"docs/{p.name}" not in readme_targets]
    assert not unlinked, f"README.md links none of: {', '.join(unlinked)}"


def test_every_screenshot_is_shown() -> None:
    shown = {
        (page.parent / target).resolve()
        for page in PAGES
        for _, target in links(page)
        if target.endswith(".png") and not EXTERNAL.match(target)
    }
    unused = [p.name for p in sorted(DOCS.glob("*.png")) if p.resolve() not in shown]
    assert not unused, f"screenshots no page shows: {', '.join(unused)}"


@pytest.mark.parametrize("command", SETUP_COMMANDS)
def test_readme_has_the_setup_commands_verbatim(command: str) -> None:
    assert f"```bash\n{command}\n```" in README.read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_outside_the_project(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert not [word for word in FORBIDDEN if word in text]


def _usage_block() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("```\n", text.index("## Launching")) + 4
    return text[start : text.index("```", start)]


def test_the_readme_usage_block_lists_every_command_and_option() -> None:
    """Every command has its lines, with its own options; the shared ones in LAUNCH, SPEED, OUTPUT, FLEET."""
    from ddpcheck.command import parameters
    from ddpcheck.commands import COMMANDS
    from ddpcheck.launcher.options import LaunchOptions
    from ddpcheck.report.compare import BaselineOptions
    from ddpcheck.report.fleet import FleetOptions
    from ddpcheck.report.outputs import OutputOptions

    def spelling(p) -> str:
        return p.flag.flags[0] if p.flag.flags else f"--{p.name.replace('_', '-')}"

    block = _usage_block()
    # A command's lines: its own, and the indented continuations that follow it.
    lines: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        if line.startswith("ddpcheck "):
            current = line.split()[1]
            lines[current] = line
        elif current and line.startswith("   "):
            lines[current] += line
        else:
            current = None
    assert set(lines) == set(COMMANDS)
    for name, command in COMMANDS.items():
        for p in parameters(command.options):
            shown = p.flag.metavar if p.flag.argument else spelling(p)
            assert re.search(rf"(?<![\w-]){re.escape(shown)}(?![\w-])", lines[name]), (name, shown)
        groups = {"OUTPUT": OutputOptions}
        if command.ranked:
            groups["LAUNCH"] = LaunchOptions
            groups["FLEET"] = FleetOptions
            if command.measures:
                groups["SPEED"] = BaselineOptions
        for group, options in groups.items():
            assert f"[{group}]" in lines[name], (name, group)
            section = next(line for line in block.splitlines() if line.startswith(f"{group}:"))
            following = block[block.index(section) :]
            for p in parameters(options):
                assert spelling(p) in following, (group, spelling(p))
        if command.budgeted:  # --budget: listed in FLEET, naming the commands that take it
            fleet = block[block.index("FLEET:") :]
            assert "--budget SECONDS" in fleet and name in fleet.split("--budget SECONDS")[1], name
