"""What a finished ``zlf ab`` campaign says: summary.log, summary.json, report.md and its plot.

Reads only the campaign's state and the statistics; never a kernel, never a run in progress.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from tabulate import tabulate

from .. import controls as ctl
from .. import metrics, stats
from ..console import change, clean, percent, clean_lines, md_cell, md_table
from ..redact import redact, redact_text
from ..rundir import write_atomic
from .guards import switch_guard_messages
from .layout import FAILED, OK, PLOT, REPORT, SKIPPED, SUMMARY_JSON, SUMMARY_LOG, now

#: the columns of the table; the numbers are the fields of zlf compare and of zlf ab --format
#: csv/json (zlf.output.CAMPAIGN_FIELDS): ``gmean_ms_A/B``: the geometric means over the rounds
#: the estimate keeps, whose ratio is ``delta_pct``; ``change`` and ``interval``: ``delta_pct`` and
#: ``delta_lo_pct..delta_hi_pct`` for people (a signed percent within a factor of two, ``300× slower``
#: beyond, console.change); ``sd_pct_A/B``: each side's standard deviation of one process's time as
#: the interval uses it (``run-to-run noise`` pools them). docs/ab.md, "Output".
HEADERS = ["point", "gmean_ms_A", "gmean_ms_B", "change", "interval", "sd_pct_A/B",
           "flips/rounds", "mde_pct", "rounds_needed", "verdict"]
#: the rule in one place, printed under every table (docs/ab.md explains it).
RULE = ("verdict rule (B against A), one threshold delta (--min-effect): interval = t-interval of the "
        "log delta (paired per round or unpaired Yuen-Welch, trimmed 0 or 10%, chosen from the variances; an "
        "A/A's variance pooled in with --noise-from); Holm over the m points; SLOWER when the whole "
        "interval is above +delta, FASTER below -delta, SAME inside +-delta, else UNSURE; sign flips "
        "are reported, not a gate. With controls, each process's factor (mixed model, BLUP) is divided out of its "
        "points first. MDE = smallest slowdown called SLOWER with 80% power (noncentral t at a median-unbiased "
        "standard error); rounds for delta = rounds for a zero delta to be called SAME with 80% power.")
#: the plot's x range reaches at most this factor beyond the estimates and the threshold (an
#: interval that goes on is clipped there, with an arrow).
PLOT_REACH = 4.0


def _p(value, digits=2, sign=True) -> str:
    """A percentage for people, never in exponent notation (two rounds and a Holm t-quantile can
    give absurd widths: a factor there, ``300× slower``, as console.change writes it)."""
    if value is None:
        return "-"
    if sign:
        return change(value, digits)
    return percent(value, digits) if abs(value) < 1000 else f"{value:,.0f}%"


def _ms(value) -> str:
    return f"{value:.4g}"


def rows(results, aa=False) -> list:
    out = []
    for r in results:
        interval = "-" if r.delta_lo_pct is None else f"[{_p(r.delta_lo_pct)}, {_p(r.delta_hi_pct)}]"
        noise = f"{_p(r.sd_a_pct, 2, False)} / {_p(r.sd_b_pct, 2, False)}"
        delta = r.delta_pct if r.delta_pct is not None else r.delta_median_pct
        needed = "-" if r.rounds < stats.MIN_ROUNDS else (str(r.rounds_needed) if r.rounds_needed else f">{stats.MAX_PLAN_ROUNDS}")
        a_ms, b_ms = (r.a_mean_ms, r.b_mean_ms) if r.a_mean_ms is not None else (r.a_median_ms, r.b_median_ms)
        row = [r.point, _ms(a_ms), _ms(b_ms), _p(delta), interval, noise,
               f"{r.flips}/{r.rounds}", _p(r.mde_pct, 1, False), needed, r.verdict + (f" ({r.note})" if r.note else "")]
        if aa:
            row.insert(-1, _p(r.noise_pct, 2, False))
        out.append(row)
    return out


def headers(aa=False, metric="time") -> list:
    name = "ms" if metric == metrics.DEFAULT else metric
    h = [c.replace("gmean_ms", f"gmean_{name}") for c in HEADERS]
    if aa:
        h.insert(-1, "run-to-run noise")
    return h


def _context_lines(campaign, alpha, results=(), decided=None) -> list:
    d = campaign.data
    s = campaign.statistics
    a, b = campaign.sides["A"], campaign.sides["B"]
    rounds = campaign.planned_rounds()
    lines = [f"campaign {campaign.path.name}: {'A/A calibration' if campaign.aa else 'A/B'}, "
             f"{rounds} round(s), status {campaign.status}, started {d['started']}, finished {d.get('finished') or '-'}",
             f"  A: {a.describe()}", f"  B: {b.describe()}"]
    if s.until_confident:
        lines.append(f"  until confident: first look after {s.first_look} rounds, at most {s.max_rounds}; "
                     f"rounds used: {rounds}; level of the last look {alpha:.3g} (O'Brien-Fleming alpha spending, "
                     f"total {s.alpha}); a point keeps the verdict of the look that decided it")
    else:
        lines.append(f"  alpha {s.alpha} for the whole campaign (Holm over the points)")
    kinds = sorted({f"{r.pairing}, trim {r.trim:.0%}" for r in results})
    chosen = f"{'/'.join(kinds) or '-'}" + (" (chosen from the variances)" if s.pairing == stats.AUTO else " (--pairing)")
    noise = (f"A/A variance from {s.noise_from} pooled in ({len(s.noise)} points)"
             if s.noise_from else "this campaign's own (no A/A: --noise-from DIR)")
    if s.noise_from and not s.noise:
        noise = f"{s.noise_from} was read by an older zlf (floors): not pooled"
    if s.noise_from and s.noise and decided is not None and decided.normalisation.active:
        like = stats.aa_like(s.noise, True)
        if len(like) < len(s.noise):
            noise += (f"; {len(s.noise) - len(like)} of its points were not normalised by controls as this campaign's "
                      "are: not pooled (unlike)")
    lines.append(f"  threshold delta: {s.min_effect_pct}%; estimate: {chosen}; noise: {noise}")
    if decided is not None:
        lines += [f"  {line}" for line in ctl.summary_lines(decided.normalisation, decided.mode)]
    lines.append("  gmean_*: geometric mean over the rounds the estimate keeps (delta_pct is their ratio"
                 + (", after the process factors are taken out" if decided is not None and decided.normalisation.active else "")
                 + "); sd_pct_A/B: each side's spread of one process's time as the interval uses it")
    metric = campaign.metric
    if metric != metrics.DEFAULT:
        lines.append(f"  metric: {metric} ({metrics.unit(metric)}: {metrics.METRICS[metric].summary})")
    lines += [f"  {line}" for line in campaign.context]  # the extensions' (campaign_context)
    run_args = " ".join([*(d.get("extension_args") or ()), *campaign.run_args])
    if d.get("configs"):  # the run settings are each side's configuration file
        run_args = " ".join([*campaign.run_args, "--config", "_config/<side>.json"])
    # An extension's ops run its command (`zlf task PKG ... --candidate FILE`: the side's arguments last).
    commands = sorted({o.command for o in campaign.ops}) or ["run"]
    for command in commands:
        if command != "run":
            lines.append(f"  every run: zlf {command} {command.upper()} {run_args} <the side's arguments>")
        elif campaign.shared:
            lines.append(f"  every run: zlf {command} OP [OP ...] {run_args}".rstrip()
                         + " (all ops of a round and side in one process; an op that failed there re-ran alone)")
        else:
            lines.append(f"  every run: zlf {command} OP {run_args}".rstrip())
    return lines


def _guard_lines(campaign, ir_lines) -> list:
    lines = switch_guard_messages(campaign.switch_guard)
    for r in campaign.switch_guard:
        if r["found"]:
            lines.append(f"switch {r['name']} is referenced in {r['found'][0]}" + (" ..." if len(r["found"]) > 1 else ""))
    return lines + list(ir_lines)


def _problem_lines(campaign, excluded) -> list:
    lines = []
    for op, run in campaign.failed_ops().items():
        lines.append(f"NO REPORT for {op}: run r{run['round']}_{run['side']} failed ({run['error']}); "
                     f"its runs stay in {campaign.path / op}")
    for op, missing in campaign.incomplete_ops().items():
        lines.append(f"NO REPORT for {op}: run(s) not done: {', '.join(missing)}; its runs stay in {campaign.path / op}")
    flagged = [r for r in campaign.runs if r.get("flags")]
    for r in flagged:
        lines.append(f"busy/throttled: {r['op']} r{r['round']}_{r['side']}: {'; '.join(r['flags'])}")
    for point, why in sorted(excluded.items()):
        lines.append(f"left out {point}: {why}")
    return lines


def _findings(campaign, results, remarks) -> list:
    aa = campaign.aa
    c = stats.counts(results)
    lines = [f"verdicts: {c[stats.FASTER]} FASTER, {c[stats.SLOWER]} SLOWER, {c[stats.SAME]} SAME, "
             f"{c[stats.UNSURE]} UNSURE over {len(results)} points"]
    flipped = [r for r in results if r.flips]
    lines.append(f"sign flips: {len(flipped)} point(s) changed the sign of their delta across rounds"
                 + (": " + ", ".join(f"{r.point} ({r.flips}/{r.rounds})" for r in flipped) if flipped else ""))
    if aa:
        spreads = sorted(r.noise_pct for r in results if r.noise_pct is not None and r.rounds >= 2)
        if spreads:
            lines.append(f"A/A run-to-run noise (standard deviation of one process's time): median "
                         f"{_p(statistics.median(spreads), 2, False)}, max {_p(spreads[-1], 2, False)} "
                         "(give this campaign to --noise-from: its variance is pooled into later intervals)")
    short = [r for r in results if r.rounds < stats.MIN_ROUNDS]
    if short:
        lines.append(f"!!! {len(short)} point(s) have fewer than {stats.MIN_ROUNDS} rounds: no verdict, no MDE")
    shown = {r.point for r in results}
    for point in sorted(p for p in remarks if p in shown):
        marks = remarks[point]
        lines.append(f"markers {point}: {', '.join(marks[:6])}" + (" ..." if len(marks) > 6 else ""))
    return lines


def _controls_table(decided, aa, metric, fmt="simple") -> list:
    """The controls' own rows (canaries: not in the verdict family; a verdict other than SAME
    on one is a finding about the machine, never about the change)."""
    if decided is None or not decided.controls:
        return []
    return ["", "controls (canaries, not among the verdicts; values normalised by the other controls):",
            tabulate(rows(decided.controls, aa), headers=headers(aa, metric), tablefmt=fmt, disable_numparse=True)]


def _as_measured_table(decided, results, fmt="simple") -> list:
    """When the controls' side-shift alarm rang: each point's verdict normalised and as measured,
    side by side (docs/ab.md, "Controls"): the normalisation never silently replaces them."""
    if decided is None or not decided.raw_results:
        return []
    measured = {r.point: r for r in decided.raw_results}
    body = [[clean(r.point), r.verdict, change(r.delta_pct), measured[r.point].verdict, change(measured[r.point].delta_pct)]
            for r in results if r.point in measured]
    return ["", "!!! B's processes differ from A's by the controls: verdicts normalised and as measured:",
            tabulate(body, headers=["point", "verdict", "Δ", "as measured", "Δ as measured"], tablefmt=fmt,
                     disable_numparse=True)]


def render(campaign, results, remarks, excluded, alpha, ir_lines, decided=None) -> str:
    """The plain-text summary (stdout and summary.log); ``decided``: the
    :class:`zlf.ab.analysis.Decided` the results come from (its controls and normalisation)."""
    aa = campaign.aa
    parts = _context_lines(campaign, alpha, results, decided)
    guards = _guard_lines(campaign, ir_lines)
    if guards:
        parts += [""] + guards
    table = (tabulate(rows(results, aa), headers=headers(aa, campaign.metric), disable_numparse=True) if results
             else "(no point has a complete pair of rounds)")
    parts += ["", table] + _as_measured_table(decided, results) \
        + _controls_table(decided, aa, campaign.metric) + _findings(campaign, results, remarks)
    problems = _problem_lines(campaign, excluded)
    if problems:
        parts += [""] + problems
    parts += ["", RULE]
    return clean_lines("\n".join(parts))


def render_markdown(campaign, results, remarks, excluded, alpha, ir_lines, why_no_plot, decided=None) -> str:
    aa = campaign.aa
    # record text inside the fence cannot close it; in the table it is escaped as markdown and HTML
    context = [line.replace("```", "'''") for line in _context_lines(campaign, alpha, results, decided)]
    out = [f"# zlf ab: {md_cell(campaign.path.name)}", "", "```", *context, "```", ""]
    guards = _guard_lines(campaign, ir_lines)
    if guards:
        out += ["## Guards", "", *[f"- {g}" for g in guards], ""]
    out += ["## Points", ""]
    out.append(md_table(rows(results, aa), headers(aa, campaign.metric))
               if results else "(no point has a complete pair of rounds)")
    out += _as_measured_table(decided, results, "github")
    out += _controls_table(decided, aa, campaign.metric, "github")
    out += ["", *[f"- {line}" for line in _findings(campaign, results, remarks)], ""]
    out.append(f"![per-point delta intervals]({PLOT})" if not why_no_plot else f"(no plot: {why_no_plot})")
    problems = _problem_lines(campaign, excluded)
    if problems:
        out += ["", "## Problems", "", *[f"- {p}" for p in problems]]
    out += ["", "## Rule", "", RULE + " Details: docs/ab.md.", ""]
    return clean_lines("\n".join(out))


def plot(results, path: Path, title: str) -> str:
    """Per-point delta intervals on a log change axis (zlf.plots): a 1 % change and a 386×
    regression are both drawn at their size; an interval end more than :data:`PLOT_REACH` times
    beyond the estimates is clipped and drawn as an arrow. Returns '' or why there is no plot."""
    shown = [r for r in results if r.delta_lo_pct is not None]
    if not shown:
        return "no intervals to plot"
    try:
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        from .. import plots
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    delta = max(r.min_effect_pct for r in shown)
    mids = [plots.ratio(r.delta_pct if r.delta_pct is not None else r.delta_median_pct) for r in shown]
    # the scale follows the estimates and the threshold; an interval (2 rounds, df 1) may reach beyond
    lo, hi = plots.change_limits([*mids, plots.ratio(-delta), plots.ratio(delta)])
    ends = [e for r in shown for e in (plots.ratio(r.delta_lo_pct), plots.ratio(r.delta_hi_pct))]
    lo, hi = max(min([lo, *ends]) / 1.05, lo / PLOT_REACH), min(max([hi, *ends]) * 1.05, hi * PLOT_REACH)
    fig, ax = plots.figure(len(shown))
    ax.axvspan(plots.ratio(-delta), plots.ratio(delta), color="tab:blue", alpha=0.08, lw=0, zorder=1)
    for i, (r, mid) in enumerate(zip(shown, mids)):
        colour = plots.COLOURS.get(r.verdict, "#7f8c8d")
        a, b = plots.ratio(r.delta_lo_pct), plots.ratio(r.delta_hi_pct)
        ax.plot([max(a, lo), min(b, hi)], [i, i], color=colour, linewidth=4, solid_capstyle="butt", zorder=2)
        for end, clipped in ((lo, a < lo), (hi, b > hi)):
            if clipped:
                ax.plot([end], [i], "<" if end == lo else ">", color=colour, markersize=6, zorder=3)
        ax.plot([mid], [i], "k|", markersize=11, markeredgewidth=1.5, zorder=4)
        ax.annotate(change(100.0 * (mid - 1.0)), (min(max(b, mid), hi), i), xytext=(5, 0), textcoords="offset points",
                    va="center", fontsize=6, zorder=5)
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels([clean(f"{r.point} {r.verdict}") for r in shown], fontsize=7)
    ax.set_ylim(len(shown) - 0.5, -0.5)
    plots.change_axis(ax, lo, hi, "B against A (log scale; right of 0: B slower)\n"
                                  "bar: interval (arrow: it goes on), tick: estimate")
    verdicts = {r.verdict for r in shown}
    handles = [Patch(color=plots.COLOURS[v], label=v) for v in plots.COLOURS if v in verdicts]
    handles += [Patch(color="tab:blue", alpha=0.15, label=f"threshold ±{delta:g}% (SAME inside)"),
                Line2D([], [], color="black", marker="|", lw=0, markersize=9, label="estimate")]
    plots.legend_beside(ax, handles, title)
    plots.save(fig, path)
    return ""


def write(campaign, results, remarks, excluded, alpha, ir_lines, decided=None) -> str:
    """Write summary.log, summary.json, report.md (+ plot); return the summary text.

    ``decided``: the :class:`zlf.ab.analysis.Decided` the results come from (the controls'
    rows and the normalisation); None: a campaign decided without controls."""
    text = render(campaign, results, remarks, excluded, alpha, ir_lines, decided)
    write_atomic(campaign.path / SUMMARY_LOG, redact_text(text) + "\n")
    doc = {
        "written": now(), "aa": campaign.aa, "alpha_final_look": alpha,
        "min_effect_pct": campaign.statistics.min_effect_pct,
        "pairing": sorted({r.pairing for r in results}), "trim": sorted({r.trim for r in results}),
        "rounds": campaign.planned_rounds(), "counts": stats.counts(results),
        "failed_ops": {op: r["error"] for op, r in campaign.failed_ops().items()},
        "incomplete_ops": campaign.incomplete_ops(),
        "points": [r.to_json() for r in results], "excluded": excluded,
        "controls": ({"mode": decided.mode, **decided.normalisation.to_json(),
                      "points": [r.to_json() for r in decided.controls],
                      "as_measured": [{"point": r.point, "verdict": r.verdict, "delta_pct": r.delta_pct}
                                      for r in decided.raw_results]} if decided is not None else None), "guards": list(_guard_lines(campaign, ir_lines)),
        "flagged_runs": [f"{r['op']}/r{r['round']}_{r['side']}" for r in campaign.runs if r.get("flags")],
        "runs": {s: sum(1 for r in campaign.runs if r["status"] == s) for s in (OK, FAILED, SKIPPED)},
    }
    write_atomic(campaign.path / SUMMARY_JSON, json.dumps(redact(stats.json_safe(doc)), indent=2, allow_nan=False) + "\n")
    why_no_plot = plot(results, campaign.path / PLOT, campaign.path.name)
    write_atomic(campaign.path / REPORT,
                 redact_text(render_markdown(campaign, results, remarks, excluded, alpha, ir_lines, why_no_plot, decided)))
    return text
