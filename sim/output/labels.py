"""Text that fits: a figure legend whose columns fit the page, and point labels placed where
they overlap neither each other nor the page's edge.

A legend of seven columns on a 9-inch figure ran off both edges once policy names grew; a label
per Pareto point piled up where points crowd. Both are solved by measuring what the renderer
will draw (window extents) rather than guessing from character counts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text
from matplotlib.transforms import Bbox

#: Offsets (points) a label may take from its point, tried in order: right, left, above,
#: below and the diagonals, then the same further out (the nearest clears a frontier ring).
_DIRECTIONS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1),
               (2, 1), (-2, 1), (2, -1), (-2, -1), (1, 2), (-1, 2), (1, -2), (-1, -2))  # fmt: skip
_RADII = (10.0, 17.0, 27.0, 40.0, 56.0, 75.0)
#: Points closer than this (pixels) to another count as crowded: their labels go first.
_CROWD_PX = 40.0
#: Pixels of slack around a placed label (labels this close read as touching).
_PAD = 2.0


def fit_legend(fig: Figure, handles: Sequence, most: int = 7, **options: object) -> Legend:
    """A figure legend below the plot with as many columns (at most `most`) as fit within the
    figure's width; a legend too wide for one column still gets one."""
    renderer = fig.canvas.get_renderer()
    legend: Legend | None = None
    for ncols in range(max(1, min(len(handles), most)), 0, -1):
        if legend is not None:
            legend.remove()
        legend = fig.legend(handles=list(handles), loc="outside lower center", ncols=ncols,
                            frameon=False, **options)  # fmt: skip
        if legend.get_window_extent(renderer).width <= 0.98 * fig.bbox.width:
            break
    assert legend is not None
    return legend


def place_labels(
    ax: Axes,
    points: Sequence[tuple[float, float]],
    texts: Sequence[str],
    avoid: Sequence[Bbox] = (),
    **style: object,
) -> list[Text]:
    """One label per point (data coordinates), each at the first offset where it overlaps no
    label placed before it, nothing in `avoid` (display boxes) and stays inside the axes; a
    label placed further out than the nearest ring, or that fits nowhere (its last candidate),
    is joined to its point by a thin line, so it is never read as a neighbour's."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken: list[Bbox] = list(avoid)
    placed: dict[int, Text] = {}
    pixels = ax.transData.transform(list(points)) if len(points) else []
    crowd = [sum(math.dist(p, q) < _CROWD_PX for q in pixels) for p in pixels]
    for k in sorted(range(len(points)), key=lambda k: -crowd[k]):  # crowded points first
        (x, y), text = points[k], texts[k]
        label, offset = None, (0.0, 0.0)
        for radius in _RADII:
            for dx, dy in _DIRECTIONS:
                if label is not None:
                    label.remove()
                offset = (dx * radius, dy * radius)
                label = _label(ax, x, y, text, *offset, style)
                box = _text_box(label, renderer).padded(_PAD)
                if _inside(box, frame) and not any(box.overlaps(b) for b in taken):
                    break
            else:
                continue
            break
        assert label is not None
        if max(abs(offset[0]), abs(offset[1])) > _RADII[0]:  # away from its point: a leader
            label.remove()
            leader = {"arrowstyle": "-", "color": "0.55", "lw": 0.6, "shrinkA": 0, "shrinkB": 4}
            label = _label(ax, x, y, text, *offset, {**style, "arrowprops": leader})
        taken.append(_text_box(label, renderer).padded(_PAD))
        placed[k] = label
    return [placed[k] for k in range(len(points))]


def _label(ax: Axes, x: float, y: float, text: str, dx: float, dy: float, style: dict) -> Text:
    ha = "left" if dx > 0 else "right" if dx < 0 else "center"
    va = "bottom" if dy > 0 else "top" if dy < 0 else "center"
    return ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                       **style)  # fmt: skip


def _text_box(label: Text, renderer: object) -> Bbox:
    """The display box of an annotation's text alone (not of its leader line), placed."""
    label.update_positions(renderer)  # type: ignore[attr-defined]
    return Text.get_window_extent(label, renderer)


def _inside(box: Bbox, frame: Bbox) -> bool:
    return box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1


def marker_boxes(ax: Axes, x: np.ndarray, y: np.ndarray, half: float = 6.0) -> list:
    """Display boxes of the points' markers (labels keep off them)."""
    boxes = []
    for xi, yi in zip(x, y, strict=True):
        if np.isfinite(xi) and np.isfinite(yi):
            px, py = ax.transData.transform((xi, yi))
            boxes.append(Bbox([[px - half, py - half], [px + half, py + half]]))
    return boxes


def line_boxes(ax: Axes, x: np.ndarray, y: np.ndarray, step: float = 5.0) -> list:
    """Small display boxes every `step` pixels along a polyline (labels keep off it)."""
    pixels = ax.transData.transform(np.column_stack([x, y])) if len(x) > 1 else np.empty((0, 2))
    boxes = []
    for (x0, y0), (x1, y1) in itertools.pairwise(pixels):
        n = max(1, int(np.hypot(x1 - x0, y1 - y0) / step))
        for t in np.linspace(0.0, 1.0, n + 1):
            px, py = x0 + t * (x1 - x0), y0 + t * (y1 - y0)
            boxes.append(Bbox([[px - 2, py - 2], [px + 2, py + 2]]))
    return boxes
