"""Server-rendered SVG charts as geometry: rectangles and a polyline the template draws.

One chart per knowledge base: a column per day, stacked by failure cell as shares of that day's
results (so days of different volume compare), with the day's pass rate as a line over it. Each bar
links to the traces it counts (`link(column, cell)`, built by the caller from its own filter). Colours
and label sizes come from CSS classes (static/app.css), so no style attribute is needed and the CSP
stays strict; the margins leave room for labels large enough to read on a phone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from veralith.models import CELLS_BY_SEVERITY

__all__ = ["CELL_ORDER", "Chart", "cell_chart"]

# Best first, so the passing cell sits at the bottom of each stacked bar and the worst on top: the
# severity order of veralith.models, reversed.
CELL_ORDER = tuple(reversed(CELLS_BY_SEVERITY))

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 640, 200, 72, 36, 20


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    w: float
    h: float
    cell: str
    title: str
    href: str | None = None     # the traces this bar counts


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    line: str                            # polyline points of the pass rate, "x,y x,y"
    dots: list[tuple[float, float, str]]  # (x, y, title) per day with results
    ticks: list[tuple[float, str, str]]  # x labels: (x, day, text-anchor)
    gridlines: list[tuple[float, str]]   # y: (y, "50%")
    plot_left: int
    plot_bottom: float
    results: int


def cell_chart(days: list[str], per_day: dict[str, dict[str, Any]], labels: list[str] | None = None,
               link: Callable[[str, str], str] | None = None) -> Chart:
    """The chart of one knowledge base over `days` (oldest first) from daily_figures' per-day slots.

    The columns can be anything in order (runs, oldest first): `labels` then names each column
    (default: the day without its year). `link(column, cell)` gives each bar's address."""
    names = labels if labels is not None else [day[5:] for day in days]
    n = max(1, len(days))
    plot_w, plot_h = WIDTH - LEFT - 8, HEIGHT - TOP - BOTTOM
    step = plot_w / n
    bar_w = min(40.0, max(2.0, step * 0.7))  # a few columns stay bars, not walls
    bars: list[Bar] = []
    points: list[tuple[float, float, str]] = []
    total = 0
    for i, day in enumerate(days):
        slot = per_day.get(day)
        if not slot or not slot["results"]:
            continue
        results = slot["results"]
        total += results
        x = LEFT + i * step + (step - bar_w) / 2
        y = float(TOP + plot_h)
        for cell in CELL_ORDER:
            count = slot["cells"].get(cell, 0)
            if not count:
                continue
            h = plot_h * count / results
            y -= h
            bars.append(Bar(round(x, 1), round(y, 1), round(bar_w, 1), round(h, 1), cell,
                            f"{names[i]}: {cell} {count} of {results} ({count / results:.0%})",
                            None if link is None else link(day, cell)))
        rate = slot["passes"] / results
        points.append((round(x + bar_w / 2, 1), round(TOP + plot_h * (1 - rate), 1),
                       f"{names[i]}: pass rate {rate:.0%} ({slot['passes']} of {results})"))
    # At most 5 labels, the last column always among them, none closer than 3/4 of the spacing:
    # they stay apart at a phone's label size.
    every = max(1, -(-len(days) // 4))
    shown = list(range(0, len(days), every))
    if shown and shown[-1] != len(days) - 1:
        shown[-1 if len(days) - 1 - shown[-1] < every * 0.75 and len(shown) > 1 else len(shown):] = [len(days) - 1]
    ticks = []
    for i in shown:  # (x, label, anchor): a label at the right edge ends there instead of being cut off
        x = round(LEFT + i * step + step / 2, 1)
        ticks.append((x, names[i], "middle") if x < WIDTH - 48 else (float(WIDTH - 2), names[i], "end"))
    grid = [(round(TOP + plot_h * (1 - f), 1), f"{f:.0%}") for f in (0.0, 0.5, 1.0)]
    return Chart(WIDTH, HEIGHT, bars, " ".join(f"{x},{y}" for x, y, _ in points), points, ticks, grid, LEFT,
                 TOP + plot_h, total)
