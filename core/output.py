"""One output vocabulary for every command's summary: formats, field names, verdict words.

``--format table|markdown|csv|json`` means the same on ``run``, ``task``, ``compare`` and ``ab``:
the four formats show the same fields under the same names (``median_ms``, ``gbps``,
``tflops`` ...), and a verdict is one of :data:`VERDICTS` in all of them.
"""
from __future__ import annotations

import collections
import json
import re

from tabulate import tabulate

from .console import clean, csv_text, failure_key, md_table, paint, results_table

FORMATS = ("table", "markdown", "csv", "json")

#: the verdicts of B against A, in ``zlf compare`` and ``zlf ab`` alike (UNSURE: ab only, where
#: the interval is neither inside nor beyond the threshold).
FASTER, SLOWER, SAME, UNSURE = "FASTER", "SLOWER", "SAME", "UNSURE"
VERDICTS = (FASTER, SLOWER, SAME, UNSURE)
#: words older outputs used for the same verdicts; read as the new ones.
OLD_VERDICTS = {"faster": FASTER, "slower": SLOWER, "unchanged": SAME, "same": SAME}


def verdict_word(word: str) -> str:
    """``word`` in the one vocabulary (an older word such as ``unchanged`` reads as ``SAME``)."""
    return OLD_VERDICTS.get(word, word)


def add_format_argument(parser, default: str = "table", json_alias: bool = True) -> None:
    """``--format FMT`` (and ``--json``, a deprecated alias of ``--format json`` kept for a release)."""
    parser.add_argument("--format", choices=FORMATS, default=default,
                        help=f"summary format: {', '.join(FORMATS)} (default: {default}); the same fields in each")
    if json_alias:
        from .options import deprecated

        deprecated(parser, "--json", "--format json", dest="format", action="store_const", const="json")


def render(fields, rows, fmt: str, doc=None) -> str:
    """``rows`` (lists of values in ``fields`` order) as ``fmt``. ``json`` prints ``doc`` when
    given, else the rows as objects keyed by ``fields``. Strings from records are cleaned."""
    if fmt == "json":
        body = doc if doc is not None else [dict(zip(fields, r)) for r in rows]
        return json.dumps(body, indent=2, default=str)
    if fmt == "csv":
        return csv_text(fields, rows).rstrip("\n")
    cells = [["" if v is None else clean(_cell(v)) for v in r] for r in rows]
    if fmt == "markdown":
        return md_table(cells, fields)
    return tabulate(cells, headers=list(fields), tablefmt="simple", disable_numparse=True)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value))
    return str(value)


# ----------------------------------------------------------------------------- failures
#: Python's message when a compiled launcher gets another number of arguments than it was built
#: for: the harness (e.g. FlagGems' libentry) and the installed Triton disagree on the signature.
_ARITY = re.compile(r"takes exactly (\d+) arguments? \((\d+) given\)")


def likely_cause(error: str) -> str:
    """A one-line guess at why ``error`` happened, or ""."""
    m = _ARITY.search(error or "")
    if m:
        return (f"a kernel launcher expected {m.group(1)} arguments and got {m.group(2)}: the harness that "
                f"launches the kernels (a library's own launcher) was written for another Triton than the "
                f"installed one ({_versions()}); use a harness revision made for this Triton")
    return ""


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    parts = []
    for dist in ("triton",):
        try:
            parts.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            continue
    return ", ".join(parts) or "versions unknown"


def failure_groups(records) -> list:
    """Failed points grouped by their error text: ``[(error, [point ids])]``, largest group first."""
    groups = collections.OrderedDict()
    for r in records:
        if r.status == "FAILED":
            groups.setdefault(failure_key(r.error or ""), []).append(r.point)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


def failure_lines(records, limit: int = 1) -> list:
    """One line per distinct failure shared by more than ``limit`` points (``N points FAILED
    with: ERROR``), each followed by its likely cause when one is known."""
    out = []
    for error, points in failure_groups(records):
        if len(points) <= limit:
            continue
        out.append(f"{len(points)} points FAILED with the same error (e.g. {clean(points[0])}): {clean(error[:200])}")
        cause = likely_cause(error)
        if cause:
            out.append(f"  likely cause: {cause}")
    return out


# ----------------------------------------------------------------------------- zlf run
def print_run_summary(records, fmt: str, run_dir, host_timing: bool = False, lines=()) -> None:
    """The end of ``zlf run``: the records in ``fmt``, then what a reader must not miss (to
    stderr under csv and json, so stdout stays parseable), then the run directory."""
    import sys

    failed = sum(1 for r in records if r.status == "FAILED")
    if fmt == "json":
        print(json.dumps({"run_dir": str(run_dir), "records": [r.to_json() for r in records]}, indent=2))
    else:
        print(results_table(records, colour=fmt == "table", fmt=fmt))
    out = sys.stderr if fmt in ("csv", "json") else sys.stdout
    notes = list(lines)
    if host_timing:
        notes.append(paint("note: cpu backend: times are host wall-clock of interpreted kernels, not GPU kernel times",
                           "dim", out))
    notes += failure_lines(records)
    if failed:
        notes.append(paint(f"{failed} of {len(records)} points FAILED", "red", out))
    for line in notes:
        print(line, file=out)
    if fmt != "json":
        print(f"run dir: {run_dir}", file=out)


# ----------------------------------------------------------------------------- zlf ab
#: the fields of ``zlf ab``'s summary in csv and json, as its table shows them (docs/ab.md,
#: "Output"): ``gmean_ms_B / gmean_ms_A - 1`` is ``delta_pct``; ``sd_pct_A/B`` the spreads the
#: interval is computed from
CAMPAIGN_FIELDS = ("point", "verdict", "gmean_ms_A", "gmean_ms_B", "delta_pct", "delta_lo_pct", "delta_hi_pct",
                   "sd_pct_A", "sd_pct_B", "flips", "rounds", "mde_pct", "rounds_needed", "note")


def campaign_fields(metric: str = "time") -> tuple:
    """:data:`CAMPAIGN_FIELDS` with the values named after the campaign's metric (``gmean_cycles_A``)."""
    name = "ms" if metric in (None, "time") else metric
    return tuple(f.replace("gmean_ms", f"gmean_{name}") for f in CAMPAIGN_FIELDS)


def campaign_rows(results) -> list:
    """One row per point of a campaign's results, in :data:`CAMPAIGN_FIELDS` order."""
    return [[r.point, verdict_word(r.verdict),
             r.a_mean_ms if r.a_mean_ms is not None else r.a_median_ms,
             r.b_mean_ms if r.b_mean_ms is not None else r.b_median_ms,
             r.delta_pct if r.delta_pct is not None else r.delta_median_pct, r.delta_lo_pct, r.delta_hi_pct,
             r.sd_a_pct, r.sd_b_pct, r.flips, r.rounds, r.mde_pct, r.rounds_needed, r.note]
            for r in results]


def campaign_summary(campaign, results, text: str, fmt: str) -> str:
    """What ``zlf ab`` prints at the end: the summary text (table), report.md (markdown), or
    the per-point rows (csv, json; json with the campaign directory)."""
    if fmt == "table":
        return text
    if fmt == "markdown":
        return (campaign.path / "report.md").read_text()
    fields = campaign_fields(campaign.data.get("metric"))
    rows = campaign_rows(results)
    doc = {"campaign_dir": str(campaign.path), "points": [dict(zip(fields, r)) for r in rows]}
    return render(fields, rows, fmt, doc=doc if fmt == "json" else None)
