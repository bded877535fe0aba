"""matplotlib figures as SVG text to inline in the page: the one module that touches matplotlib.

No pyplot: its global state and GUI backend probing cost start-up time and nothing here needs
them. A figure is drawn straight onto the SVG canvas.
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import matplotlib
from matplotlib.backends.backend_svg import FigureCanvasSVG
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

# Text stays text (not paths): far smaller, selectable, and the browser's own sans-serif draws
# it, so no font is embedded or fetched. A fixed hash salt makes the same report give the same
# file byte for byte (ids in the SVG are otherwise random).
STYLE: dict[str, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "ddpcheck",
    "svg.image_inline": True,
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
FAIL_COLOUR = "#d62728"


@contextmanager
def figure(width_in: float = 7.0, height_in: float = 3.6) -> Iterator[Figure]:
    """A fresh figure under the house style; leave it to `to_svg` afterwards."""
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        FigureCanvasSVG(fig)
        yield fig


def to_svg(fig: Figure, titles: dict[str, str] | None = None) -> str:
    """The figure as an inline <svg> element; `titles` maps an artist's gid to its hover text.

    matplotlib writes an artist with a gid as <g id="GID">: a <title> as that group's first
    child is what every browser shows on hover, with no script.
    """
    buffer = io.StringIO()
    with matplotlib.rc_context(STYLE):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    # The XML prolog and DOCTYPE belong to a standalone file, not to an element inside HTML.
    text = text[text.index("<svg") :]
    # Its RDF metadata names namespaces by URL and says nothing a reader needs.
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
    for gid, title in (titles or {}).items():
        text = re.sub(
            rf'(<g id="{re.escape(gid)}"[^>]*>)',
            lambda m, t=title: f"{m.group(1)}<title>{html.escape(t)}</title>",
            text,
            count=1,
        )
    # Scale with the page instead of a fixed size in points.
    return re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="chart"', text, count=1)


def hover(artist: Any, gid: str, title: str, titles: dict[str, str]) -> None:
    """`artist` shows `title` on hover once to_svg is given `titles` (its gid names it there)."""
    artist.set_gid(gid)
    titles[gid] = title


def heat_map(fig: Figure, values: Any, cmap: str, top: float, label: str, aspect: str | None = None) -> Any:
    """`values` (rows x columns) as one image from 0 to `top` with its colour bar; the axes, to draw on.

    An image, not one shape per cell: matplotlib resamples it to the figure's pixels, so a
    64-rank matrix stays a few KB and 1,024 nodes weigh what 64 do.
    """
    ax = fig.add_subplot()
    ax.grid(False)
    norm = Normalize(0.0, top)
    image = ax.imshow(values, cmap=cmap, norm=norm, interpolation="nearest", origin="upper", aspect=aspect)
    fig.colorbar(image, ax=ax, shrink=0.8).set_label(label)
    return ax


def size_label(n: float) -> str:
    """1024 -> '1K', as the terminal's size column writes message sizes."""
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"
