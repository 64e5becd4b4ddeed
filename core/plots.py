"""What every zlf plot shares: a change axis on which a 1 % change and a 386× regression are both
readable, the figure, and its saving.

A change of B against A is drawn as the ratio B/A on a log axis (1 in the middle: no change), so
a 30 % regression, a 2× improvement and a 386× regression each get a bar of their own length and
none is clipped. Tick labels read as a person says them: ``+5%`` and ``−20%`` near 1, ``4×`` and
``1/4×`` beyond a factor of two. Matplotlib only through its object API (``Figure`` and the Agg
canvas): no pyplot state, no display backend.
"""
from __future__ import annotations

import math
from pathlib import Path

#: ratios offered as ticks, besides 1: percent steps near 1, factors beyond 2
_STEPS_PCT = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 50)
_FACTORS = (2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 100000, 1000000)
#: at most this many ticks on a change axis
MAX_TICKS = 9

COLOURS = {"SLOWER": "#c0392b", "FASTER": "#27ae60", "SAME": "#7f8c8d", "UNSURE": "#b7950b"}


def figure(n_rows: int, width: float = 9.0):
    """A figure with one axes, tall enough for ``n_rows`` horizontal bars."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, min(40.0, max(2.6, 0.3 * n_rows + 1.6))), dpi=110)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def save(fig, path: Path) -> None:
    """Write the PNG with every label inside it (``bbox_inches="tight"``: nothing is cut), as every
    zlf file is written: never through a link (:func:`zlf.rundir.write_figure`)."""
    from .rundir import write_figure

    import matplotlib.pyplot as plt

    try:
        write_figure(fig, path, bbox_inches="tight", pad_inches=0.15)
    finally:
        plt.close(fig)


def ratio(delta_pct: float) -> float:
    """B/A from a change in percent (``+30`` -> 1.3), kept above zero for the log axis."""
    return max(1e-9, 1.0 + delta_pct / 100.0)


def ratio_label(r: float) -> str:
    """A tick label for the ratio ``r``: ``0``, ``+5%``, ``−20%``, ``4×``, ``1/4×``."""
    if abs(r - 1.0) < 1e-12:
        return "±0"
    if r >= 2.0:
        return f"{r:,.0f}×" if r >= 10 else f"{r:g}×"
    if r <= 0.5:
        inv = 1.0 / r
        return f"1/{inv:,.0f}×" if inv >= 10 else f"1/{inv:.3g}×"
    pct = (r - 1.0) * 100.0
    text = f"{abs(pct):.1f}".rstrip("0").rstrip(".")
    return ("+" if pct > 0 else "\u2212") + text + "%"


def _candidates() -> list:
    out = {1.0}
    for p in _STEPS_PCT:
        out.add(1 + p / 100)
        out.add(1 - p / 100)
    for f in _FACTORS:
        out.add(float(f))
        out.add(1.0 / f)
    return sorted(out)


def ticks(lo: float, hi: float) -> list:
    """At most :data:`MAX_TICKS` round ratios between ``lo`` and ``hi``, 1 always among them
    when it is inside; spread evenly on the log axis."""
    inside = [c for c in _candidates() if lo <= c <= hi]
    if len(inside) <= MAX_TICKS:
        return inside
    gap = (math.log(hi) - math.log(lo)) / (MAX_TICKS - 1)
    kept = [1.0] if lo <= 1.0 <= hi else []
    for c in sorted(inside, key=lambda c: abs(math.log(c))):  # the ones near 1 first, then outwards
        if all(abs(math.log(c) - math.log(k)) >= gap * 0.9 for k in kept):
            kept.append(c)
    return sorted(kept)


def change_limits(values, pad: float = 1.25) -> tuple:
    """Axis limits (ratios) that hold every value in ``values`` (ratios) and 1, with room for
    a label: ``pad`` times further out on the log scale, at least ±2 %."""
    values = [v for v in values if v is not None and v > 0] + [1.0]
    lo, hi = min(values), max(values)
    span = max(math.log(hi) - math.log(lo), math.log(1.04))
    margin = span * (pad - 1.0)
    return min(math.exp(math.log(lo) - margin), 0.98), max(math.exp(math.log(hi) + margin), 1.02)


def change_axis(ax, lo: float, hi: float, label: str) -> None:
    """Make the x axis of ``ax`` a change axis from ratio ``lo`` to ``hi``."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.xaxis.set_major_locator(FixedLocator(ticks(lo, hi)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: ratio_label(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.tick_params(axis="x", labelsize=7)
    ax.axvline(1.0, color="black", lw=0.7, zorder=3)
    ax.grid(axis="x", color="#dddddd", lw=0.5, zorder=0)
    ax.set_xlabel(label, fontsize=8)


def legend_beside(ax, handles, title: str = "") -> None:
    """The title above the axes and the legend to their right, outside them: it never covers a
    bar, and :func:`save` keeps it inside the PNG."""
    if title:
        ax.set_title(title, fontsize=8, loc="left")
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False,
                  borderaxespad=0.0)
