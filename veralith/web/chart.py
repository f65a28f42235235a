"""Server-rendered SVG charts as geometry: rectangles and a polyline the template draws.

One chart per knowledge base: a column per day, stacked by failure cell as shares of that day's
results (so days of different volume compare), with the day's pass rate as a line over it. Colours
come from CSS classes (static/app.css), so no style attribute is needed and the CSP stays strict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veralith.models import CELLS_BY_SEVERITY

__all__ = ["CELL_ORDER", "Chart", "cell_chart"]

# Best first, so the passing cell sits at the bottom of each stacked bar and the worst on top: the
# severity order of veralith.models, reversed.
CELL_ORDER = tuple(reversed(CELLS_BY_SEVERITY))

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 640, 180, 36, 22, 8


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    w: float
    h: float
    cell: str
    title: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    line: str                            # polyline points of the pass rate, "x,y x,y"
    dots: list[tuple[float, float, str]]  # (x, y, title) per day with results
    ticks: list[tuple[float, str]]       # x labels: (x, day)
    gridlines: list[tuple[float, str]]   # y: (y, "50%")
    plot_left: int
    plot_bottom: float
    results: int


def cell_chart(days: list[str], per_day: dict[str, dict[str, Any]], labels: list[str] | None = None) -> Chart:
    """The chart of one knowledge base over `days` (oldest first) from daily_figures' per-day slots.

    The columns can be anything in order (runs, oldest first): `labels` then names each column
    (default: the day without its year)."""
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
                            f"{names[i]}: {cell} {count} of {results} ({count / results:.0%})"))
        rate = slot["passes"] / results
        points.append((round(x + bar_w / 2, 1), round(TOP + plot_h * (1 - rate), 1),
                       f"{names[i]}: pass rate {rate:.0%} ({slot['passes']} of {results})"))
    label_every = max(1, n // 6)
    ticks = [(round(LEFT + i * step + step / 2, 1), names[i]) for i in range(len(days))
             if i % label_every == 0 or i == n - 1]
    grid = [(round(TOP + plot_h * (1 - f), 1), f"{f:.0%}") for f in (0.0, 0.5, 1.0)]
    return Chart(WIDTH, HEIGHT, bars, " ".join(f"{x},{y}" for x, y, _ in points), points, ticks, grid, LEFT,
                 TOP + plot_h, total)
