"""Render a markdown report (with a PNG plot) of one run directory or of a pair A → B.

The page opens with the verdict and the plot, then the table, then each side's environment
from meta.json with the differences marked: a reviewer gets the answer in a minute and the
evidence below it. Reads run directories only.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from tabulate import tabulate

from . import compare, readers
from .console import clean, clean_lines, number, percent
from .redact import safe_environment
from .errors import UsageError
from .records import STATUS_FAILED, STATUS_OK, STATUS_OOM

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
    parser.add_argument("--threshold", type=float, metavar="PCT", help="as in zlf compare")
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
    # A pipe would end the markdown cell early.
    return str(value).replace("|", "\\|").replace("\n", " ")


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
            rows = [[k, a.get(k, ""), b.get(k, "")] for k in differ]
            head = [f"What differs between {' and '.join(envs)} ({len(differ)} of {n} items; when each run "
                    "started and its command are in the full list):", "",
                    tabulate(rows, headers=["", *envs], tablefmt="github", disable_numparse=True)]
        else:
            head = [f"The two environments are the same in all {n} items but when each run started."]
    else:
        env = next(iter(envs.values()))
        rows = [[k, v] for k, v in env.items() if k in ENV_KEYS or k in ("zlf", "extensions")]
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
        values = [envs[label].get(k, "") for label in labels]
        if len(labels) == 2:
            rows.append(["≠" if values[0] != values[1] else "", k, *values])
        else:
            rows.append([k, *values])
    headers = (["", "", *labels] if len(labels) == 2 else ["", "value"])
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


# ----------------------------------------------------------------------------- plots
def _figure(n_bars: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # No pyplot: no global state and no display backend, the Agg canvas renders the PNG.
    fig = Figure(figsize=(9, min(40, max(2.5, 0.28 * n_bars + 1.4))), dpi=110)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def plot_deltas(cmp: compare.Comparison, path: Path) -> int:
    """Horizontal bars of Δ% per compared point, worst regression on top; returns bars drawn."""
    rows = [r for r in cmp.rows if r.comparable][:MAX_PLOTTED_POINTS]
    t = cmp.threshold.pct
    fig, ax = _figure(len(rows))
    colours = {compare.SLOWER: "#c0392b", compare.FASTER: "#27ae60", compare.UNCHANGED: "#95a5a6"}
    ys = list(range(len(rows)))[::-1]
    bars = ax.barh(ys, [r.delta_pct for r in rows], color=[colours[r.verdict(t)] for r in rows], zorder=2)
    ax.bar_label(bars, labels=[percent(r.delta_pct, sign=True) for r in rows], fontsize=6, padding=2)
    ax.set_yticks(ys)
    ax.set_yticklabels([clean(r.point) for r in rows], fontsize=7)
    ax.axvspan(-t, t, color="#bdc3c7", alpha=0.35, lw=0, label=f"±{t:.1f}% threshold", zorder=1)
    ax.margins(x=0.12)
    ax.axvline(0, color="black", lw=0.6)
    ax.set_xlabel("Δ time, B vs A (%)   — right of 0: B slower")
    ax.set_title(clean(cmp.summary.lines()[0]), fontsize=8)
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    return len(rows)


def plot_latency(records, path: Path) -> int:
    """Horizontal bars of median time per ok point (log scale); returns bars drawn."""
    rows = [r for r in records if r.status == STATUS_OK and r.median_ms][:MAX_PLOTTED_POINTS]
    fig, ax = _figure(len(rows))
    ys = list(range(len(rows)))[::-1]
    bars = ax.barh(ys, [r.median_ms for r in rows], color="#2e86c1")
    ax.bar_label(bars, labels=[f"{r.median_ms:.3g} ms" for r in rows], fontsize=6, padding=2)
    ax.set_yticks(ys)
    ax.set_yticklabels([clean(f"{r.point} [{r.timer}]") for r in rows], fontsize=7)
    if rows:
        ax.set_xscale("log")
        # log bars start at the left limit: put it below the fastest point so every bar shows.
        low, high = min(r.median_ms for r in rows), max(r.median_ms for r in rows)
        ax.set_xlim(low / 3, high * 3)
    ax.set_xlabel("median time (ms, log scale)")
    fig.tight_layout()
    fig.savefig(path)
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
                     number(r.gbps), number(r.tflops), compare.ceiling_cell(r, side.ceilings), _cell(note)])
    table = tabulate(rows, headers=["point", "status", "timer", "median ms", "spread (IQR)", "GB/s", "TFLOP/s",
                                    "% ceiling", "error / markers"], tablefmt="github", disable_numparse=True)
    page = [
        f"# zlf report: {side.path.name}", "", f"**{head}**", "", *(f"- {n}" for n in notes), "",
        _image("median time per point", png_name), "", "## Points", "", table, "",
        "## Environment", "", f"Run directory: `{side.path}`", "", environment_section({"run": side.meta}), "",
    ]
    return "\n".join(page), [head, *notes]


def pair_page(cmp: compare.Comparison, png_name: Optional[str]) -> tuple:
    """``(markdown, summary lines)`` for a comparison A → B."""
    lines = cmp.summary.lines()
    headers, rows = compare.table_rows(cmp, colour=False)
    table = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)
    page = [
        f"# zlf report: {cmp.a.path.name} → {cmp.b.path.name}", "",
        f"**{lines[0]}**", "", *(f"- {s}" for s in lines[1:] + list(cmp.notes)), "",
        _image("Δ per point", png_name), "",
        "## Points", "", "Δ = (B − A) / A of the median time; largest regressions first.", "", table, "",
        "## Environment", "", f"- A: `{cmp.a.path}`", f"- B: `{cmp.b.path}`", "",
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
        md_path.write_text(clean_lines(page))
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
