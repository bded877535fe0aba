"""Where a line of report text may break: never inside a number and its unit, a path or a command.

Pure: the terminal (report/terminal.py) wraps table cells and notes with these offsets instead of
rich's, which breaks at any space ('16.2' / 'KiB') and cuts a word longer than the line.
"""

from __future__ import annotations

import itertools
import re

# A number with its unit as the reports write them: '16.2 KiB', '4 B', '0.1 s', '12.5 GB/s'.
_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"
_UNIT = r"(?:[KMGTP]i?B|B|bytes?|[KMGT]?B/s|[KMG]b/s|TFLOP/s|ms|us|µs|ns|s|min|%|x)"
# A command the reader copies: 'ddpcheck postmortem /tmp/x', its options and their values.
_COMMAND = r"\bddpcheck [a-z]+(?: (?:--?[\w-]+(?: (?!-)[^\s;,]+)?|[/~.\d][^\s;,]*))*"
_ATOM = re.compile(rf"{_COMMAND}|(?<!\S)[(\[]?{_NUMBER} {_UNIT}(?![\w/])\S*|\S+")
# A table cell this short and holding a digit is one value ('exited 1', '2 / 2 / 2'): kept whole.
SHORT_CELL = 16


def atoms(text: str, whole: bool = False) -> list[tuple[int, int]]:
    """The spans of `text` no break may fall inside, in order: every word, and the multi-word ones above.

    `whole`: a table cell, one span however many words it holds when it is a short value.
    """
    spans = []
    for line_start, line in _lines(text):
        stripped = line.strip()
        if whole and len(stripped) <= SHORT_CELL and any(c.isdigit() for c in stripped):
            start = line_start + line.index(stripped)
            spans.append((start, start + len(stripped)))
            continue
        spans += [(line_start + m.start(), line_start + m.end()) for m in _ATOM.finditer(line)]
    return spans


def longest_atom(text: str, whole: bool = False) -> int:
    return max((end - start for start, end in atoms(text, whole)), default=0)


def break_offsets(line: str, width: int, whole: bool = False, cut: bool = True) -> list[int]:
    """Where to break one line (no newline in it) so that each piece fits `width`, as rich's divide_line.

    Breaks fall between atoms; an atom longer than the line breaks between its words, and a word
    longer than the line is cut at the width (in a table cell nothing else can be done) or, without
    `cut`, left whole on a line of its own: the terminal wraps it without a newline, so it copies whole.
    """
    offsets: list[int] = []
    line_start, filled = 0, False  # where the current line begins; whether an atom is on it
    for start, end in _pieces(line, width, whole):
        if filled and end - line_start > width:
            offsets.append(start)
            line_start = start
        while cut and end - line_start > width:  # a word longer than the line: cut it
            line_start += width
            offsets.append(line_start)
        filled = True
    return offsets


def _pieces(line: str, width: int, whole: bool) -> list[tuple[int, int]]:
    """The line's atoms; one too long for the line is split into its words."""
    out = []
    for start, end in atoms(line, whole):
        if end - start <= width or " " not in line[start:end]:
            out.append((start, end))
        else:
            out += [(start + m.start(), start + m.end()) for m in re.finditer(r"\S+", line[start:end])]
    return out


def _lines(text: str) -> list[tuple[int, str]]:
    out, start = [], 0
    for line in text.split("\n"):
        out.append((start, line))
        start += len(line) + 1
    return out


def fold(text: str, width: int, whole: bool = False, cut: bool = True) -> list[str]:
    """`text` as lines of at most `width` characters (see break_offsets for a longer word)."""
    lines = []
    for _, line in _lines(text):
        cuts = [0, *break_offsets(line, width, whole, cut), len(line)]
        lines += [line[a:b].strip() for a, b in itertools.pairwise(cuts)]
    return lines
