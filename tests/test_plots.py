"""What the plots of ``zlf report`` and of a campaign show: big changes at their size, labels a
reader takes in, the legend beside the bars, the spread of a single run."""
from __future__ import annotations

import pytest

from zlf import compare, plots, report, stats
from zlf.ab import report as ab_report
from zlf.console import change, duration
from zlf.records import PointRecord

pytest.importorskip("matplotlib")


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions save, in order (the PNG is still written)."""
    saved = []
    real = plots.save

    def keep(fig, path):
        saved.append(fig)
        real(fig, path)

    monkeypatch.setattr(plots, "save", keep)
    return saved


def _rec(pid, median, samples=()):
    return PointRecord(point=pid, op="k", shape=(1,), dtype="float32", status="ok", timer="t", median_ms=median,
                       samples=tuple(samples))


def _comparison(tmp_path, a_ms, b_ms):
    rows = compare.pair([_rec(p, ms) for p, ms in a_ms.items()], [_rec(p, ms) for p, ms in b_ms.items()])
    threshold = compare.Threshold(2.0, "test")
    side = compare.Side("A", tmp_path, (), 0, {})
    return compare.Comparison(side, side, tuple(compare.sort_rows(rows)), compare.summarize(rows, threshold), (),
                              False)


def _texts(ax) -> list:
    return [t.get_text() for t in ax.texts]


def _legend_clear_of_axes(fig) -> bool:
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    return not legend.overlaps(ax.get_window_extent(renderer))


def test_pair_plot_draws_386x_to_scale_with_a_factor_label(tmp_path, figures):
    cmp = _comparison(tmp_path, {"k/1": 1.0, "k/2": 1.0, "k/3": 1.0}, {"k/1": 386.0, "k/2": 1.01, "k/3": 0.7})
    assert report.plot_deltas(cmp, tmp_path / "d.png") == 3
    ax = figures[0].axes[0]
    lo, hi = ax.get_xlim()
    assert ax.get_xscale() == "log" and hi > 386 and lo < 0.7
    assert {"386× slower", "+1.0%", "-30.0%"} <= set(_texts(ax))
    assert _legend_clear_of_axes(figures[0])


def test_campaign_plot_shows_386x_unclipped_and_legend_beside(tmp_path, figures):
    values = {"k/1": ([1.0, 1.01, 0.99, 1.0], [386.0, 390.0, 380.0, 386.0]),
              "k/2": ([1.0, 1.01, 0.99, 1.0], [1.0, 1.0, 1.01, 0.99])}
    results = stats.analyse(values)
    assert ab_report.plot(results, tmp_path / "c.png", "title") == ""
    ax = figures[0].axes[0]
    assert ax.get_xlim()[1] > 386
    assert any(t.endswith("× slower") for t in _texts(ax))
    assert _legend_clear_of_axes(figures[0])


def test_single_run_plot_has_spread_whiskers_and_time_units(tmp_path, figures):
    records = [_rec("k/1", 0.0175, [0.017, 0.0175, 0.018, 0.019]), _rec("k/2", 8.2, [8.0, 8.2, 8.3, 9.0])]
    assert report.plot_latency(records, tmp_path / "s.png") == 2
    ax = figures[0].axes[0]
    whiskers = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(whiskers) == 2
    assert {"17.5 µs", "8.2 ms"} <= set(_texts(ax))


def test_change_axis_ticks_read_as_people_say_them():
    assert plots.ratio_label(1.0) == "±0"
    assert plots.ratio_label(1.3) == "+30%" and plots.ratio_label(0.99) == "\u22121%"
    assert plots.ratio_label(4.0) == "4×" and plots.ratio_label(386.0) == "386×" and plots.ratio_label(0.25) == "1/4×"
    small = plots.ticks(0.97, 1.03)
    assert 1.0 in small and 1.01 in small and 0.99 in small
    wide = plots.ticks(0.3, 1000.0)
    assert 1.0 in wide and max(wide) >= 200 and min(wide) <= 0.5 and len(wide) <= plots.MAX_TICKS


def test_numbers_for_people():
    assert [change(d) for d in (1.0, 30.0, -30.0, 38500.0, -60.0, None)] == \
        ["+1.0%", "+30.0%", "-30.0%", "386× slower", "2.5× faster", ""]
    assert [duration(ms) for ms in (0.00085, 0.0175, 8.245, 0.9999, 1234.5)] == \
        ["850 ns", "17.5 µs", "8.24 ms", "1 ms", "1.23 s"]
