"""Checks of a drawn figure's text, as a reader meets it: every text the renderer draws lies
inside the figure (nothing cut at an edge), and no two tick labels of an axis overlap.

Used by tests/integration/test_figure_text.py. A tick label the axis does not draw (its tick outside
the view) is left out, as is empty text.
"""

from __future__ import annotations

from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

#: Pixels a text may reach past an edge (antialiasing) before it counts as cut.
SLACK = 1.0


def _drawn_ticks(axis: Axis) -> list:
    lo, hi = sorted(axis.get_view_interval())
    room = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    return [t for t in axis.get_major_ticks() + axis.get_minor_ticks()
            if lo - room <= t.get_loc() <= hi + room]  # fmt: skip


def tick_labels(axis: Axis) -> list[Text]:
    """The axis's tick labels that are drawn and say something (after the figure is drawn:
    a label gets its text then)."""
    return [
        label
        for tick in _drawn_ticks(axis)
        for label in (tick.label1, tick.label2)
        if label.get_visible() and label.get_text().strip()
    ]


def drawn_texts(fig: Figure) -> list[Text]:
    """Every text the figure draws (titles, labels, legends, annotations, tick labels)."""
    fig.canvas.draw()
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            drawn = set(map(id, tick_labels(axis)))
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                hidden |= {id(t) for t in (tick.label1, tick.label2) if id(t) not in drawn}
    return [
        t
        for t in fig.findobj(Text)
        if id(t) not in hidden and t.get_visible() and t.get_text().strip()
        and (t.axes is None or t.axes.get_visible())
    ]  # fmt: skip


def clipped_texts(fig: Figure) -> list[str]:
    """The texts that reach past the figure's edge, each as 'text @ [x0, x1] x [y0, y1]'."""
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    out = []
    for text in drawn_texts(fig):
        box = text.get_window_extent(renderer)
        if (box.x0 < page.x0 - SLACK or box.x1 > page.x1 + SLACK or box.y0 < page.y0 - SLACK
                or box.y1 > page.y1 + SLACK):  # fmt: skip
            out.append(
                f"{text.get_text()!r} @ [{box.x0:.0f}, {box.x1:.0f}] x "
                f"[{box.y0:.0f}, {box.y1:.0f}] in {page.width:.0f} x {page.height:.0f}"
            )
    return out


def outside_axes(fig: Figure) -> list[str]:
    """Texts drawn in an axes (annotations, value labels) that reach past that axes' frame:
    a label for a point or a line belongs inside the plot, not over its neighbour or the
    figure's margin."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        frame = ax.get_window_extent(renderer)
        for text in ax.texts:
            if not (text.get_visible() and text.get_text().strip()):
                continue
            box = Text.get_window_extent(text, renderer)
            if (box.x0 < frame.x0 - SLACK or box.x1 > frame.x1 + SLACK
                    or box.y0 < frame.y0 - SLACK or box.y1 > frame.y1 + SLACK):  # fmt: skip
                out.append(text.get_text().strip())
    return out


def overlapping(texts: list[Text], fig: Figure) -> list[tuple[str, str]]:
    """Pairs of the texts whose drawn boxes overlap (by more than a pixel); of an annotation,
    its text alone (not the box of its leader line)."""
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), Text.get_window_extent(t, renderer).padded(-0.5)) for t in texts]
    return [
        (a, b)
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if Bbox.intersection(box_a, box_b) is not None and box_a.overlaps(box_b)
    ]


def overlapping_ticks(fig: Figure) -> list[tuple[str, str]]:
    """Pairs of tick labels of one axis that overlap, over every axis of the figure."""
    fig.canvas.draw()
    return [pair for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
            for pair in overlapping(tick_labels(axis), fig)]  # fmt: skip
