"""Render a markdown report (with a PNG plot) of one run directory or of a pair A → B.

The page opens with the verdict and the plot, then the table, then each side's environment
from meta.json with the differences marked: a reviewer gets the answer in a minute and the
evidence below it. Reads run directories only.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from tabulate import tabulate

from . import compare, plots, readers
from .console import change, clean, clean_lines, duration, md_cell, md_table, number, percent
from .redact import redact_text, safe_environment
from .errors import UsageError
from .records import STATUS_FAILED, STATUS_OK, STATUS_OOM
from .rundir import write_atomic

#: meta.json keys shown first, in this order; every other key follows (extensions add their own).
ENV_KEYS = ("device_name", "backend", "timer_default", "host_timing", "status", "started", "finished", "command")
#: meta.json keys left out: ``options`` repeats the command line, ``cwd`` is the reader's business.
ENV_SKIP = ("options", "fingerprint", "environment", "extensions", "zlf_version", "cwd", "device_state_end")
#: a plot taller than this is unreadable anyway; extra points are still in the table.
MAX_PLOTTED_POINTS = 120


def configure_parser(parser) -> None:
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="one run directory (latency report) or two, A then B (comparison report); "
                             "a zlf ab campaign directory shows the campaign's own report")
    parser.add_argument("--out", metavar="PATH",
                        help="where the page goes: a folder (the page is named as by default) or FILE.md; "
                             "the PNG goes next to it (default: RUN_DIR/report.md, or B_DIR/report_vs_<A name>.md)")
    from .compare import THRESHOLD

    parser.add_argument("--threshold", type=THRESHOLD, metavar="PCT", help="as in zlf compare")
    parser.add_argument("--allow-mixed-timers", action="store_true", help="as in zlf compare")
    parser.epilog = (
        "examples:\n"
        "  zlf report runs/base_20250101-120000\n"
        "  zlf report runs/base runs/patched --out review/patch.md"
    )


# ----------------------------------------------------------------------------- environment
def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list, tuple)):
        value = json.dumps(value, sort_keys=True, default=str)
        value = value if len(value) <= 120 else value[:117] + "..."
    return md_cell(value)  # a pipe would end the cell early, ``</details>`` the page's folding


def environment(meta: dict) -> dict:
    """meta.json flattened to ``{label: text}`` for the environment table."""
    env = {}
    for key in ENV_KEYS:
        if key in meta:
            value = meta[key]
            env[key] = " ".join(map(str, value)) if key == "command" and isinstance(value, list) else value
    for key, value in (meta.get("fingerprint") or {}).items():
        if key not in ("device_name", "backend"):
            env[key] = value
    exts = meta.get("extensions") or []
    env["extensions"] = ", ".join(f"{e.get('name')} {e.get('version', '')}".strip() for e in exts) or "(none)"
    env["zlf"] = meta.get("zlf_version")
    # Records written before zlf filtered credentials may hold some: the page is for sharing.
    for key, value in safe_environment(meta.get("environment") or {}).items():
        env[f"${key}"] = value
    for key, value in sorted(meta.items()):
        if key not in env and key not in ENV_KEYS and key not in ENV_SKIP:
            env.update(_flat(key, value))
    return {k: _cell(v) for k, v in env.items()}


def _flat(key: str, value, depth: int = 2) -> dict:
    """A nested meta.json value as dotted rows (``gpu_clock.sm_mhz``) instead of one JSON cell;
    a list of plain values reads as a comma-separated list."""
    if isinstance(value, dict) and value and depth:
        out = {}
        for k, v in value.items():
            out.update(_flat(f"{key}.{k}", v, depth - 1))
        return out
    if isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list, tuple)) for v in value):
        return {key: ", ".join(map(str, value))}
    return {key: value}


#: rows that differ between any two runs (when each started, its own folder): not a difference
#: of the environment, so the short table leaves them to the full one.
ALWAYS_DIFFERENT = ("started", "finished", "command", "run_dir", "pid")


def environment_section(metas: dict) -> str:
    """The environment for a page: with two sides, a short table of what differs (what a
    reviewer reads) and the full table folded in ``<details>``; with one side, the first rows
    (device, backend, timer ...) and the rest folded."""
    envs = {label: environment(meta) for label, meta in metas.items()}
    full = environment_table(metas)
    n = len({k for env in envs.values() for k in env})
    if len(envs) == 2:
        a, b = envs.values()
        differ = [k for k in dict.fromkeys([*a, *b]) if a.get(k, "") != b.get(k, "") and k not in ALWAYS_DIFFERENT]
        if differ:
            rows = [[md_cell(k), a.get(k, ""), b.get(k, "")] for k in differ]
            head = [f"What differs between {' and '.join(envs)} ({len(differ)} of {n} items; when each run "
                    "started and its command are in the full list):", "",
                    tabulate(rows, headers=["", *envs], tablefmt="github", disable_numparse=True)]
        else:
            own = [k for k in ALWAYS_DIFFERENT if a.get(k, "") != b.get(k, "")]
            head = [f"The two environments differ only in what is each run's own ({', '.join(own) or 'nothing'}); "
                    f"the other {n - len(own)} of {n} items are the same."]
    else:
        env = next(iter(envs.values()))
        rows = [[md_cell(k), v] for k, v in env.items() if k in ENV_KEYS or k in ("zlf", "extensions")]
        head = [tabulate(rows, headers=["", "value"], tablefmt="github", disable_numparse=True)]
    return "\n".join([*head, "", f"<details><summary>Full environment ({n} items)</summary>", "", full, "",
                      "</details>"])


def environment_table(metas: dict) -> str:
    """Markdown table, one column per side; with two sides, ``≠`` marks the rows that differ."""
    envs = {label: environment(meta) for label, meta in metas.items()}
    keys = []
    for env in envs.values():
        keys.extend(k for k in env if k not in keys)
    labels = list(envs)
    rows = []
    for k in keys:
        values = [envs[label].get(k, "") for label in labels]  # escaped by environment()
        if len(labels) == 2:
            rows.append(["≠" if values[0] != values[1] else "", md_cell(k), *values])
        else:
            rows.append([md_cell(k), *values])
    headers = (["", "", *labels] if len(labels) == 2 else ["", "value"])
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


# ----------------------------------------------------------------------------- plots
def _quartiles(samples) -> Optional[tuple]:
    import numpy as np

    values = [v for v in samples or () if v is not None]
    return tuple(float(q) for q in np.percentile(values, [25, 75])) if len(values) >= 2 else None


def _change_spread(row) -> Optional[tuple]:
    """The B/A ratios the two sides' sample quartiles allow (B's 25th over A's 75th percentile,
    B's 75th over A's 25th): the whisker of a compared point, None without samples."""
    qa, qb = _quartiles(row.a.samples if row.a else ()), _quartiles(row.b.samples if row.b else ())
    if not qa or not qb or qa[0] <= 0 or qa[1] <= 0:
        return None
    return qb[0] / qa[1], qb[1] / qa[0]


def plot_deltas(cmp: compare.Comparison, path: Path) -> int:
    """B/A per compared point as bars on a log change axis (1 %, 30 % and 386× each readable),
    worst regression on top, whiskers from the sides' sample quartiles; returns bars drawn."""
    from matplotlib.patches import Patch

    rows = [r for r in cmp.rows if r.comparable][:MAX_PLOTTED_POINTS]
    t = cmp.threshold.pct
    fig, ax = plots.figure(len(rows))
    ys = list(range(len(rows)))[::-1]
    ratios = [plots.ratio(r.delta_pct) for r in rows]
    spreads = [_change_spread(r) for r in rows]
    verdicts = [r.verdict(t) for r in rows]
    lo, hi = plots.change_limits([*ratios, *(v for s in spreads if s for v in s), plots.ratio(-t), plots.ratio(t)])
    ax.axvspan(plots.ratio(-t), plots.ratio(t), color="#bdc3c7", alpha=0.35, lw=0, zorder=1)
    ax.barh(ys, [q - 1.0 for q in ratios], left=1.0, color=[plots.COLOURS[v] for v in verdicts], zorder=2, height=0.7)
    for y, q, spread in zip(ys, ratios, spreads):
        if spread:
            ax.errorbar([q], [y], xerr=[[max(0.0, q - spread[0])], [max(0.0, spread[1] - q)]], fmt="none",
                        ecolor="black", elinewidth=0.8, capsize=2, zorder=4)
        at = (max(q, spread[1]) if q >= 1 else min(q, spread[0])) if spread else q  # beyond the whisker
        ax.annotate(change(100.0 * (q - 1.0)), (at, y), xytext=(4 if q >= 1 else -4, 0), textcoords="offset points",
                    ha="left" if q >= 1 else "right", va="center", fontsize=6, zorder=5)
    ax.set_yticks(ys)
    ax.set_yticklabels([clean(r.point) for r in rows], fontsize=7)
    plots.change_axis(ax, lo, hi, "time of B against A (log scale; right of 0: B slower)")
    handles = [Patch(color=plots.COLOURS[v], label=v) for v in (compare.SLOWER, compare.FASTER, compare.SAME)
               if v in verdicts]
    handles.append(Patch(color="#bdc3c7", alpha=0.6, label=f"±{t:.1f}% threshold"))
    if any(spreads):
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="black", lw=0.8, marker="|", label="sample quartiles"))
    plots.legend_beside(ax, handles, clean(cmp.summary.lines()[0]))
    plots.save(fig, path)
    return len(rows)


def plot_latency(records, path: Path) -> int:
    """Median time per ok point (log scale) with the samples' quartiles as whiskers; returns
    bars drawn."""
    rows = [r for r in records if r.status == STATUS_OK and r.median_ms][:MAX_PLOTTED_POINTS]
    fig, ax = plots.figure(len(rows))
    ys = list(range(len(rows)))[::-1]
    quartiles = [_quartiles(r.samples) for r in rows]
    if rows:
        ax.set_xscale("log")
        # log bars start at the left limit: put it below the fastest point so every bar shows.
        low = min([r.median_ms for r in rows] + [q[0] for q in quartiles if q])
        high = max([r.median_ms for r in rows] + [q[1] for q in quartiles if q])
        ax.set_xlim(low / 3, high * 4)
        ax.barh(ys, [r.median_ms - low / 3 for r in rows], left=low / 3, color="#2e86c1", height=0.7, zorder=2)
    for y, r, q in zip(ys, rows, quartiles):
        if q:
            ax.errorbar([r.median_ms], [y], xerr=[[max(0.0, r.median_ms - q[0])], [max(0.0, q[1] - r.median_ms)]],
                        fmt="none", ecolor="black", elinewidth=0.8, capsize=2, zorder=3)
        ax.annotate(duration(r.median_ms), (max(r.median_ms, q[1] if q else 0), y), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=6)
    ax.set_yticks(ys)
    ax.set_yticklabels([clean(f"{r.point} [{r.timer}]") for r in rows], fontsize=7)
    if rows:  # a log locator on an empty (linear) axis has nothing positive to place ticks at
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: duration(v)))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", color="#dddddd", lw=0.5, zorder=0)
    ax.set_xlabel("median time per call (log scale); whiskers: 25th to 75th percentile of the samples", fontsize=8)
    plots.save(fig, path)
    return len(rows)


# ----------------------------------------------------------------------------- pages
def _spread_pct(samples) -> str:
    return percent(compare.relative_iqr_pct(samples))


def _image(alt: str, png_name: Optional[str]) -> str:
    if png_name is None:
        return "_(no plot: matplotlib is not installed; `pip install matplotlib`)_"
    return f"![{alt}]({png_name})"


def single_page(side: compare.Side, png_name: Optional[str]) -> tuple:
    """``(markdown, summary lines)`` for one run directory."""
    records = side.records
    counts = {s: sum(1 for r in records if r.status == s) for s in (STATUS_OK, STATUS_FAILED, STATUS_OOM)}
    timers = sorted({r.timer for r in records if r.timer})
    head = (f"{len(records)} points: {counts[STATUS_OK]} ok, {counts[STATUS_FAILED]} FAILED, {counts[STATUS_OOM]} OOM; "
            f"timer {', '.join(timers) or '-'} on {side.device_name}")
    notes = side.notes()
    if side.meta.get("host_timing"):
        notes.append("cpu backend: times are host wall-clock of interpreted kernels, not GPU kernel times")
    if len(timers) > 1:
        notes.append("this run mixes timers: the timer column says which row used which")
    notes.extend(compare.ceilings_notes(side))
    rows = []
    for r in records:
        note = r.error or ", ".join(compare.marker_names(r))
        rows.append([r.point, r.status, r.timer or "", number(r.median_ms), _spread_pct(r.samples),
                     number(r.gbps), number(r.tflops), compare.ceiling_cell(r, side.ceilings), note])
    table = md_table(rows, ["point", "status", "timer", "median ms", "spread (IQR)", "GB/s", "TFLOP/s",
                            "% ceiling", "error / markers"])
    page = [
        f"# zlf report: {md_cell(side.path.name)}", "", f"**{md_cell(head)}**", "", *(f"- {md_cell(n)}" for n in notes), "",
        _image("median time per point", png_name), "", "## Points", "", table, "",
        "## Environment", "", f"Run directory: {md_cell(side.path)}", "", environment_section({"run": side.meta}), "",
    ]
    return "\n".join(page), [head, *notes]


def pair_page(cmp: compare.Comparison, png_name: Optional[str]) -> tuple:
    """``(markdown, summary lines)`` for a comparison A → B."""
    lines = cmp.summary.lines()
    headers, rows = compare.table_rows(cmp, colour=False)
    table = md_table(rows, headers)
    page = [
        f"# zlf report: {md_cell(cmp.a.path.name)} → {md_cell(cmp.b.path.name)}", "",
        f"**{md_cell(lines[0])}**", "", *(f"- {md_cell(s)}" for s in lines[1:] + list(cmp.notes)), "",
        _image("Δ per point", png_name), "",
        "## Points", "", "Δ = (B − A) / A of the median time; largest regressions first.", "", table, "",
        "## Environment", "", f"- A: {md_cell(cmp.a.path)}", f"- B: {md_cell(cmp.b.path)}", "",
        environment_section({"A": cmp.a.meta, "B": cmp.b.meta}), "",
    ]
    return "\n".join(page), lines + list(cmp.notes)


def default_out(dirs) -> Path:
    if len(dirs) == 1:
        return Path(dirs[0]) / "report.md"
    return Path(dirs[1]) / f"report_vs_{Path(dirs[0]).resolve().name}.md"


def write_report(dirs, out: Optional[str] = None, threshold_pct=None, allow_mixed_timers=False, hooks=None) -> tuple:
    """Write the page and its PNG; returns ``(md path, png path, summary lines)``."""
    if len(dirs) not in (1, 2):
        raise UsageError(f"zlf report takes one run directory or two (A B), got {len(dirs)}")
    if len(dirs) == 2:
        cmp = compare.compare_dirs(dirs[0], dirs[1], threshold_pct, allow_mixed_timers, hooks=hooks)
    else:
        side = compare.load_side(dirs[0], "run")
    md_path = Path(out) if out else default_out(dirs)
    if out and (md_path.is_dir() or md_path.suffix != ".md"):  # --out names a folder: the page goes in it
        md_path = md_path / default_out(dirs).name
    png_path = md_path.with_suffix(".png")
    try:
        md_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if len(dirs) == 2:
                plot_deltas(cmp, png_path)
            else:
                plot_latency(side.records, png_path)
        except ImportError:  # the page without its plot still answers the question
            png_path = None
        if len(dirs) == 2:
            page, summary = pair_page(cmp, png_path.name if png_path else None)
        else:
            page, summary = single_page(side, png_path.name if png_path else None)
        write_atomic(md_path, clean_lines(redact_text(page)))
    except OSError as exc:
        raise UsageError(f"cannot write the report to {str(md_path)!r}: {exc.strerror}; pass --out FILE.md") from exc
    return md_path, png_path, summary


#: what a ``zlf ab`` campaign directory holds (its own report.md is written by zlf ab)
CAMPAIGN_FILE, CAMPAIGN_REPORT, CAMPAIGN_SUMMARY = "campaign.json", "report.md", "summary.log"


def campaign_report(path: Path) -> int:
    """``zlf report CAMPAIGN_DIR``: a campaign writes its own report when it finishes; say what
    it found and where the page is (or how to finish it)."""
    page, summary = path / CAMPAIGN_REPORT, path / CAMPAIGN_SUMMARY
    if not page.is_file():
        raise UsageError(f"{str(path)!r} is a zlf ab campaign without a report yet (not finished): "
                         f"zlf ab --resume {path} completes it and writes {CAMPAIGN_REPORT}")
    from .ab.campaign import Campaign

    try:  # the files of a campaign whose signed parts do not verify are shown, under one line
        problem = Campaign.open(path).verdict_problem()
    except UsageError as exc:
        problem = str(exc)
    if problem:
        print(f"!!! NOT VERIFIED: {clean(problem)}; what follows is what the campaign's files say, not "
              "necessarily what zlf ab decided", file=sys.stderr)
    if summary.is_file():
        print(clean_lines(readers.read_text(summary, what=CAMPAIGN_SUMMARY).rstrip("\n")))
    print(f"report: {page}")
    return 0


def main(args, session) -> int:
    campaigns = [Path(d) for d in args.run_dirs if (Path(d) / CAMPAIGN_FILE).is_file()]
    if campaigns:
        if len(args.run_dirs) != 1:
            raise UsageError(f"{str(campaigns[0])!r} is a zlf ab campaign directory: give it alone "
                             "(zlf report CAMPAIGN_DIR shows its report)")
        return campaign_report(campaigns[0])
    md_path, png_path, summary = write_report(args.run_dirs, args.out, args.threshold, args.allow_mixed_timers,
                                              hooks=getattr(session, "hooks", None))
    for line in summary:
        print(clean(line))
    print(f"report: {md_path}")
    print(f"plot: {png_path}" if png_path else "plot: none (matplotlib is not installed)")
    return 0
