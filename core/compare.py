"""Pair two run directories point by point: deltas, verdicts, metrics, exports and a CI gate.

Reads run directories only; never imports or runs the code under test. The pure part
(:func:`pair`, :func:`derive_threshold`, :func:`summarize`, :func:`gate`) works on
:class:`~zlf.records.PointRecord` lists, so ``zlf ab`` and ``zlf report`` reuse it.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Optional

import attrs
from tabulate import tabulate

from . import ceilings as ceilings_mod
from . import metrics, output, stats
from .console import change, clean, csv_text, md_cell, md_table, number, paint, percent, use_colour, warn
from .errors import UsageError
from .options import Number
from .records import STATUS_OK, STATUS_OOM, PointRecord, duplicate_points, shape_str
from .rundir import RESULTS, RunDir

# Pairing status of a row. Only COMPARED and MIXED_TIMERS rows have a delta.
COMPARED = "ok"
MIXED_TIMERS = "mixed timers"
TIMER_MISMATCH = "timer mismatch"
ONLY_A = "only A"
ONLY_B = "only B"
DUPLICATE = "duplicate id"
NO_TIME = "no time"

# one vocabulary with zlf ab (zlf.output): FASTER, SLOWER, SAME; "unchanged" was SAME's old word
FASTER, SLOWER, SAME = output.FASTER, output.SLOWER, output.SAME
UNCHANGED = SAME  # the old name, kept for a release

#: no threshold below this: run-to-run drift of a whole process exceeds the in-process sample
#: spread, and a same-timer A/A control on real hardware showed a 1.7 pp noise floor (docs/measurements.md, "Field figures").
THRESHOLD_FLOOR_PCT = 1.0
#: used only when the records carry no samples to estimate noise from.
THRESHOLD_FALLBACK_PCT = 2.0
FORMATS = ("table", "markdown", "csv", "json")


# ----------------------------------------------------------------------------- records
@attrs.frozen
class Row:
    """One point of a comparison: both sides' records (either may be None) and the delta."""

    point: str
    op: str
    shape: tuple
    dtype: str
    variant: str
    a: Optional[PointRecord]
    b: Optional[PointRecord]
    status: str
    delta_pct: Optional[float] = None
    ir: Optional[str] = None
    #: why A and B ran at different clock states (:func:`zlf.metrics.clock_differs`), or None
    clock: Optional[str] = None

    @property
    def comparable(self) -> bool:
        return self.delta_pct is not None

    @property
    def ratio(self) -> Optional[float]:
        """B time / A time (below 1: B faster)."""
        return None if self.delta_pct is None else 1.0 + self.delta_pct / 100.0

    def verdict(self, threshold_pct: float) -> str:
        """FASTER / SLOWER beyond ``threshold_pct``, SAME within it; the pairing status otherwise."""
        if not self.comparable:
            return self.status
        if self.delta_pct > threshold_pct:
            return SLOWER
        if self.delta_pct < -threshold_pct:
            return FASTER
        return SAME


@attrs.frozen
class Threshold:
    pct: float
    how: str


@attrs.frozen
class Summary:
    compared: int
    faster: int
    slower: int
    same: int
    geomean_ratio: Optional[float]
    threshold: Threshold
    regressions: tuple  # slower rows, largest delta first
    not_compared: dict  # status -> count
    mixed_timers: int

    def lines(self) -> list:
        """The summary as a few plain lines, verdict first."""
        t = self.threshold
        if not self.compared:
            head = "no point could be compared"
        else:
            head = (f"{self.compared} points compared: {self.slower} SLOWER, {self.faster} FASTER, "
                    f"{self.same} SAME (within ±{t.pct:.1f}%)")
            g = self.geomean_ratio
            overall = ("no overall change" if abs(g - 1) < 5e-4 else f"B {change((g - 1) * 100)}" if not 0.5 < g < 2
                       else f"B {abs(g - 1) * 100:.1f}% {'slower' if g > 1 else 'faster'}")
            head += f"; geomean time B/A {g:.3f} ({overall})"
        out = [head, f"threshold ±{t.pct:.1f}%: {t.how}"]
        if self.regressions:
            worst = ", ".join(f"{r.point} {change(r.delta_pct)}" for r in self.regressions[:5])
            more = f" (+{len(self.regressions) - 5} more)" if len(self.regressions) > 5 else ""
            out.append(f"largest regressions: {worst}{more}")
        if self.mixed_timers:
            out.append(f"{self.mixed_timers} compared rows mix timers (--allow-mixed-timers): "
                       "their deltas include the timer difference")
        if self.not_compared:
            parts = ", ".join(f"{n} {s}" for s, n in sorted(self.not_compared.items()))
            out.append(f"not compared: {parts} (listed in the table)")
        return out

    def to_json(self) -> dict:
        return {
            "compared": self.compared, "faster": self.faster, "slower": self.slower,
            "same": self.same, "unchanged": self.same,  # "unchanged": SAME's old name, kept for a release
            "geomean_ratio": self.geomean_ratio,
            "threshold_pct": self.threshold.pct, "threshold_how": self.threshold.how,
            "regressions": [r.point for r in self.regressions],
            "not_compared": dict(self.not_compared), "mixed_timers": self.mixed_timers,
        }


# ----------------------------------------------------------------------------- pure API
def _by_point(records) -> dict:
    return {r.point: r for r in records}


def pair(a_records, b_records, allow_mixed_timers: bool = False, ir_status: Optional[dict] = None,
         metric: str = metrics.DEFAULT) -> list:
    """Pair records by point id; every point of either side gets exactly one :class:`Row`.

    A delta exists only where both sides are ``ok`` with a positive median and, unless
    ``allow_mixed_timers``, the same timer: a graph-timed and a directly timed sub-millisecond
    kernel can differ by 2× with no code change.

    :param ir_status: ``{shape dir name: status}`` from the ``ir_status`` hook, or None.
    :param metric: what the delta is of (:mod:`zlf.metrics`): ``time`` (default), ``cycles``, ``wall``.
    :return: rows in A's order, then B-only points in B's order.
    """
    a_by, b_by = _by_point(a_records), _by_point(b_records)
    dupes = {"A": duplicate_points(a_records), "B": duplicate_points(b_records)}
    rows = []
    for pid in list(a_by) + [p for p in b_by if p not in a_by]:
        a, b = a_by.get(pid), b_by.get(pid)
        ref = a or b
        delta = None
        twice = [side for side in ("A", "B") if pid in dupes[side]]
        if twice:  # which record holds the time is unknown: pair none
            status = f"{DUPLICATE} in {' and '.join(twice)}"
        elif a is None:
            status = ONLY_B
        elif b is None:
            status = ONLY_A
        elif a.status != STATUS_OK or b.status != STATUS_OK:
            if a.status == b.status:
                status = f"both {a.status}"
            else:
                status = "; ".join(f"{side} {r.status}" for side, r in (("A", a), ("B", b)) if r.status != STATUS_OK)
        elif metrics.value(a, metric) is None or metrics.value(b, metric) is None:
            status = NO_TIME if metric == metrics.DEFAULT else f"no {metric}"
        elif a.timer != b.timer and not allow_mixed_timers:
            status = TIMER_MISMATCH
        else:
            status = COMPARED if a.timer == b.timer else MIXED_TIMERS
            va, vb = metrics.value(a, metric), metrics.value(b, metric)
            delta = (vb - va) / va * 100.0
        ir = None
        if ir_status is not None:
            ir = ir_status.get(shape_str(ref.shape), "-")
        rows.append(Row(point=pid, op=ref.op, shape=tuple(ref.shape), dtype=ref.dtype, variant=ref.variant,
                        a=a, b=b, status=status, delta_pct=delta, ir=ir, clock=metrics.clock_differs(a, b)))
    return rows


def sort_rows(rows) -> list:
    """Largest regressions first; rows without a delta last, grouped by status."""
    compared = sorted((r for r in rows if r.comparable), key=lambda r: -r.delta_pct)
    rest = sorted((r for r in rows if not r.comparable), key=lambda r: (r.status, r.point))
    return compared + rest


def relative_iqr_pct(samples) -> Optional[float]:
    samples = [float(s) for s in samples or ()]
    if len(samples) < 3:
        return None
    median = statistics.median(samples)
    if median <= 0:
        return None
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return 100.0 * (q3 - q1) / median


def derive_threshold(rows) -> Threshold:
    """The default ``--threshold``: how much the measurements of one point scatter.

    Per compared point, the relative inter-quartile range of the noisier side's samples; the
    threshold is the median of those over the points, never below :data:`THRESHOLD_FLOOR_PCT`.
    """
    spreads = []
    for r in rows:
        if not r.comparable:
            continue
        sides = [relative_iqr_pct(r.a.samples), relative_iqr_pct(r.b.samples)]
        sides = [s for s in sides if s is not None]
        if sides:
            spreads.append(max(sides))
    if not any(r.comparable for r in rows):
        return Threshold(THRESHOLD_FALLBACK_PCT,
                         f"fixed {THRESHOLD_FALLBACK_PCT:g}%: no point was comparable, so no noise to estimate "
                         "(set --threshold PCT)")
    if not spreads:
        return Threshold(THRESHOLD_FALLBACK_PCT,
                         f"fixed {THRESHOLD_FALLBACK_PCT:g}%: the records carry too few samples to estimate noise "
                         "(set --threshold PCT)")
    noise = statistics.median(spreads)
    pct = max(THRESHOLD_FLOOR_PCT, noise)
    how = (f"median within-run spread of the samples (IQR/median, noisier side) over {len(spreads)} compared "
           f"points is {noise:.1f}%")
    if pct > noise:
        how += f"; raised to the {THRESHOLD_FLOOR_PCT:g}% floor (run-to-run drift exceeds in-run spread)"
    return Threshold(pct, how + "; set --threshold PCT to override")


def summarize(rows, threshold: Threshold) -> Summary:
    compared = [r for r in rows if r.comparable]
    verdicts = [r.verdict(threshold.pct) for r in compared]
    geomean = math.exp(statistics.fmean(math.log(r.ratio) for r in compared)) if compared else None
    regressions = tuple(sorted((r for r in compared if r.verdict(threshold.pct) == SLOWER), key=lambda r: -r.delta_pct))
    not_compared: dict = {}
    for r in rows:
        if not r.comparable:
            not_compared[r.status] = not_compared.get(r.status, 0) + 1
    return Summary(
        compared=len(compared), faster=verdicts.count(FASTER), slower=verdicts.count(SLOWER),
        same=verdicts.count(SAME), geomean_ratio=geomean, threshold=threshold,
        regressions=regressions, not_compared=not_compared,
        mixed_timers=sum(1 for r in compared if r.status == MIXED_TIMERS),
    )


def lost_time(row: Row) -> bool:
    """A row whose B lost the time A had: B failed, ran out of memory, or recorded no usable
    (NaN, missing, non-positive) median; or A's median itself is unusable."""
    if row.status == NO_TIME or row.status in {f"no {m}" for m in metrics.NAMES}:
        return True
    return row.a is not None and row.b is not None and row.a.status == STATUS_OK and row.b.status != STATUS_OK


def gate(rows, max_slower_pct: float, threshold_pct: Optional[float] = None) -> list:
    """Rows that fail ``--fail-if-slower``: those compare itself calls slower (beyond its noise
    ``threshold_pct``, default :func:`derive_threshold`) by more than ``max_slower_pct`` percent,
    worst first, then every row that lost its time (:func:`lost_time`): a gate never passes what
    it could not measure."""
    if threshold_pct is None:
        threshold_pct = derive_threshold(rows).pct
    slower = sorted((r for r in rows if r.comparable and r.verdict(threshold_pct) == SLOWER and r.delta_pct > max_slower_pct),
                    key=lambda r: -r.delta_pct)
    return slower + [r for r in rows if lost_time(r)]


def gate_reason(row: Row) -> str:
    return change(row.delta_pct) if row.comparable else row.status


# ----------------------------------------------------------------------------- run directories
@attrs.frozen
class Side:
    """One run directory as read for a comparison or a report."""

    label: str
    path: Path
    records: tuple
    skipped_lines: int
    meta: dict
    ceilings: Optional[ceilings_mod.Ceilings] = None

    @property
    def device_name(self) -> Optional[str]:
        return self.meta.get("device_name") or self.meta.get("fingerprint", {}).get("device_name")

    @property
    def ops(self) -> list:
        return sorted({r.op for r in self.records})

    def notes(self) -> list:
        out = []
        if self.skipped_lines:
            out.append(f"{self.label}: skipped {self.skipped_lines} incomplete line(s) of {RESULTS} "
                       f"(cut by a crash, or not UTF-8 JSON of a record); using the {len(self.records)} complete record(s)")
        for point, n in duplicate_points(self.records).items():
            out.append(f"{self.label}: point id {point!r} appears {n} times in {RESULTS}: not paired")
        status = self.meta.get("status")
        if status and status != "complete":
            out.append(f"{self.label}: run status is {status!r}: the run did not finish, some points may be missing")
        return out

    def to_json(self) -> dict:
        return {
            "label": self.label, "path": str(self.path), "records": len(self.records),
            "skipped_lines": self.skipped_lines, "device_name": self.device_name,
            "backend": self.meta.get("backend"), "status": self.meta.get("status"),
            "ceilings": self.ceilings.to_json() | {"path": self.ceilings.path} if self.ceilings else None,
        }


def load_side(path, label: str) -> Side:
    """Read a run directory; one-line UsageError when it is not one or holds no complete record."""
    if (Path(path) / "campaign.json").is_file():
        raise UsageError(f"{label} {str(path)!r} is a zlf ab campaign directory, not a run directory: its verdicts "
                         f"are in `zlf report {path}`; zlf compare pairs two run directories (a campaign's runs "
                         "are its <op>/r<k>_<A|B> folders)")
    rundir = RunDir.open(path)
    records, skipped = rundir.records()
    if not records:
        why = f"{skipped} incomplete line(s) only" if skipped else f"no {RESULTS} or an empty one"
        raise UsageError(f"{label} {str(path)!r} has no complete point record ({why})")
    meta = rundir.meta()
    side = Side(label, rundir.path, tuple(records), skipped, meta)
    return attrs.evolve(side, ceilings=ceilings_mod.load(side.device_name))


def ir_status_for(a_path, b_path, hooks=None) -> tuple:
    """``(shape status dict or None, note or None)``: the IR column exists only when an extension
    knows the compiled code both runs hold (``ir_status``)."""
    if hooks is None:
        return None, None
    return hooks.ir_status(a_dir=Path(a_path), b_dir=Path(b_path)), None


@attrs.frozen
class Comparison:
    a: Side
    b: Side
    rows: tuple  # sorted: largest regressions first
    summary: Summary
    notes: tuple
    ir_column: bool
    metric: str = metrics.DEFAULT

    @property
    def threshold(self) -> Threshold:
        return self.summary.threshold


def compare_dirs(a_path, b_path, threshold_pct: Optional[float] = None, allow_mixed_timers: bool = False,
                 metric: str = metrics.DEFAULT, hooks=None) -> Comparison:
    """Load, pair and summarise two run directories (exit-2 errors raised as UsageError);
    ``hooks``: the extensions asked for the IR column (``ir_status``)."""
    metric = metrics.check(metric)
    a, b = load_side(a_path, "A"), load_side(b_path, "B")
    ir_status, ir_note = ir_status_for(a.path, b.path, hooks)
    rows = pair(a.records, b.records, allow_mixed_timers=allow_mixed_timers, ir_status=ir_status, metric=metric)
    if not any(r.a is not None and r.b is not None for r in rows):
        raise UsageError(
            f"nothing to pair: no point id in common (A: {', '.join(a.ops)}, {len(a.records)} points; "
            f"B: {', '.join(b.ops)}, {len(b.records)} points)"
        )
    if threshold_pct is None:
        threshold = derive_threshold(rows)
    else:
        if threshold_pct < 0:
            raise UsageError("--threshold must be a non-negative percentage")
        threshold = Threshold(threshold_pct, "set with --threshold")
    notes = a.notes() + b.notes()
    if a.device_name and b.device_name and a.device_name != b.device_name:
        notes.append(f"A and B ran on different devices: {a.device_name!r} vs {b.device_name!r}")
    if a.meta.get("host_timing") or b.meta.get("host_timing"):
        notes.append("cpu backend: times are host wall-clock of interpreted kernels, not GPU kernel times")
    notes.extend(ceilings_notes(a, b))
    if ir_note:
        notes.append(ir_note)
    if metric != metrics.DEFAULT:
        notes.append(f"metric: {metric} ({metrics.unit(metric)}: {metrics.METRICS[metric].summary}); Δ is of that")
    differ = sum(1 for r in rows if r.clock)
    if differ:
        notes.append(f"{differ} point(s) ran at different clock states on A and B (clock column): "
                     "their time delta includes the clock change (--metric cycles takes it out for compute-bound points)")
    sets = [(input_sets(r.a), input_sets(r.b)) for r in rows if r.delta_pct is not None]
    unlike = [pair for pair in sets if pair[0] != pair[1]]
    if unlike:
        a_sets, b_sets = unlike[0]
        notes.append(f"{len(unlike)} compared point(s) were timed over different numbers of input sets on A and B "
                     f"(e.g. {a_sets} against {b_sets}; --input-copies, docs/timing.md): one side's median is taken "
                     "over fewer placements of its inputs in device memory")
    return Comparison(a, b, tuple(sort_rows(rows)), summarize(rows, threshold), tuple(notes), ir_status is not None,
                      metric)


def input_sets(record) -> int:
    """Over how many sets of its inputs a point was timed (1: its inputs alone, as before input copies)."""
    copies = (record.extra or {}).get("input_copies")
    return int(copies.get("sets", 1)) if isinstance(copies, dict) else 1


def ceilings_notes(*sides) -> list:
    """Say which measured ceilings the % columns use, or how to get them."""
    out, seen = [], set()
    for side in sides:
        if side.device_name in seen:
            continue
        seen.add(side.device_name)
        if not side.device_name:
            out.append(f"{side.label}: meta.json names no device: no % of ceiling")
        elif side.ceilings is not None:
            out.append(f"% of ceiling uses measured ceilings of {side.ceilings.describe()} [{side.ceilings.path}]")
        else:
            out.append(f"no measured ceilings for {side.device_name!r}: run `zlf calibrate` on that machine for % of ceiling")
    return out


# ----------------------------------------------------------------------------- rendering
def marker_names(record: Optional[PointRecord]) -> list:
    if record is None:
        return []
    names = [m.split(" ", 1)[0] for m in record.markers]
    if record.fallback_reason and not names:
        names.append(f"fallback: {record.fallback_reason}")
    return names


def markers_cell(row: Row) -> str:
    parts = []
    for side, rec in (("A", row.a), ("B", row.b)):
        names = marker_names(rec)
        if names:
            parts.append(f"{side}: {', '.join(names)}")
    return "; ".join(parts)


def timer_cell(row: Row) -> str:
    ta = row.a.timer if row.a else None
    tb = row.b.timer if row.b else None
    if ta is None or tb is None or ta == tb:  # a failed side has no timer to disagree with
        return (ta or tb) or ""
    return f"A {ta or '?'} / B {tb or '?'}"


def ceiling_cell(record: Optional[PointRecord], ceilings) -> str:
    """The binding resource: the larger of % bandwidth and % matmul ceiling."""
    if record is None:
        return ""
    bw, tf = ceilings_mod.percent_of(ceilings, record.gbps, record.tflops, record.dtype)
    candidates = [(v, name) for v, name in ((bw, "bw"), (tf, "mm")) if v is not None]
    if not candidates:
        return ""
    v, name = max(candidates)
    return f"{v:.3g}% {name}"


def _verdict_colour(verdict: str) -> Optional[str]:
    if verdict == SLOWER or "FAILED" in verdict:
        return "red"
    if verdict == FASTER:
        return "green"
    if verdict in (TIMER_MISMATCH, MIXED_TIMERS) or "OOM" in verdict or verdict.startswith("only"):
        return "yellow"
    return None


def unchecked_sides(row: Row) -> str:
    """``A``, ``B`` or ``A B``: the sides whose point was timed under ``--check warn`` although its
    reference check failed (record field ``unchecked``)."""
    return " ".join(side for side, rec in (("A", row.a), ("B", row.b)) if rec is not None and rec.unchecked)


def verdict_cell(row: Row, threshold_pct: float, colour: bool) -> str:
    text = clean(row.verdict(threshold_pct))
    if row.status == MIXED_TIMERS:
        text += " (mixed timers)"
    if unchecked_sides(row):
        text += f" (UNCHECKED {unchecked_sides(row)})"
    c = _verdict_colour(row.verdict(threshold_pct))
    return paint(text, c) if colour and c else text


#: the human table's optional columns, after :func:`table_headers`' first six (kept where some row has a value)
OPTIONAL_COLUMNS = ("gbps_B", "tflops_B", "pct_ceiling_B", "clock_differs", "markers", "ir")


def table_headers(metric: str = metrics.DEFAULT) -> tuple:
    """Every column the human table can have, in order; the first six are always there."""
    name = "median_ms" if metric == metrics.DEFAULT else metric
    return ("point", "verdict", f"{name}_A", f"{name}_B", "change", "timer") + OPTIONAL_COLUMNS


def table_rows(cmp: Comparison, colour: bool = False) -> tuple:
    """``(headers, rows)`` of the human table; metric columns appear only where some row has a value.
    The headers are the field names of the csv and json outputs (``median_ms_A``, ``gbps_B`` ...),
    but ``change``: ``delta_pct`` for people (``+30.0%``, ``386× slower``, console.change)."""
    t = cmp.threshold.pct
    all_headers = table_headers(cmp.metric)
    col_a, col_b = all_headers[2:4]
    columns = {h: [] for h in all_headers}
    for r in cmp.rows:
        columns["point"].append(clean(r.point))
        columns["verdict"].append(verdict_cell(r, t, colour))
        columns[col_a].append(number(metrics.value(r.a, cmp.metric)) if r.a else "")
        columns[col_b].append(number(metrics.value(r.b, cmp.metric)) if r.b else "")
        columns["clock_differs"].append(f"differs: {r.clock}" if r.clock else "")
        columns["change"].append(change(r.delta_pct) if r.comparable else "")  # 386× slower, not +3.8e+04%
        columns["timer"].append(clean(timer_cell(r)))
        columns["gbps_B"].append(number(r.b.gbps) if r.b else "")
        columns["tflops_B"].append(number(r.b.tflops) if r.b else "")
        columns["pct_ceiling_B"].append(ceiling_cell(r.b, cmp.b.ceilings))
        columns["markers"].append(clean(markers_cell(r)))
        columns["ir"].append(clean(r.ir or ""))
    always = all_headers[:6]
    keep = [h for h, vals in columns.items() if h in always or (h == "ir" and cmp.ir_column) or any(vals)]
    return keep, [list(vals) for vals in zip(*(columns[h] for h in keep))]


def render_text(cmp: Comparison, markdown: bool = False, colour: bool = False) -> str:
    headers, rows = table_rows(cmp, colour=colour and not markdown)
    head = "\n".join(clean(f"{s.label}: {s.path}  ({s.device_name or 'device unknown'})") for s in (cmp.a, cmp.b))
    summary = [clean(line) for line in cmp.summary.lines()]
    notes = [clean(n) for n in cmp.notes]
    if markdown:  # record text (point ids, errors, device names) escaped as markdown and HTML
        return "\n".join([
            f"**{md_cell(summary[0])}**", "", *(f"- {md_cell(s)}" for s in summary[1:] + notes), "",
            *(f"- {s.label}: {md_cell(s.path)} ({md_cell(s.device_name or 'device unknown')})" for s in (cmp.a, cmp.b)),
            "", md_table(rows, headers),
        ])
    table = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    first = paint(summary[0], "bold") if colour else summary[0]
    return "\n".join([head, "", table, "", first, *summary[1:], *(f"note: {n}" for n in notes)])


def _side_values(record: Optional[PointRecord], ceilings) -> dict:
    if record is None:
        return {}
    bw, tf = ceilings_mod.percent_of(ceilings, record.gbps, record.tflops, record.dtype)
    return {
        "status": record.status, "timer": record.timer, "median_ms": record.median_ms,
        "gbps": record.gbps, "tflops": record.tflops, "pct_bandwidth": bw, "pct_tflops": tf,
        "markers": list(record.markers), "fallback_reason": record.fallback_reason,
        "error": record.error, "samples": list(record.samples), "clock": record.clock,
    }


def to_json(cmp: Comparison, gate_pct: Optional[float] = None) -> dict:
    t = cmp.threshold.pct
    out = {
        "a": cmp.a.to_json(), "b": cmp.b.to_json(),
        "metric": cmp.metric, "unit": metrics.unit(cmp.metric),
        "summary": cmp.summary.to_json(), "summary_lines": cmp.summary.lines(), "notes": list(cmp.notes),
        "rows": [
            {
                "point": r.point, "op": r.op, "shape": list(r.shape), "dtype": r.dtype, "variant": r.variant,
                "status": r.status, "verdict": r.verdict(t), "delta_pct": r.delta_pct, "ratio": r.ratio,
                "ir": r.ir, "clock_differs": r.clock, "unchecked": unchecked_sides(r) or None,
                "a": _side_values(r.a, cmp.a.ceilings), "b": _side_values(r.b, cmp.b.ceilings),
            }
            for r in cmp.rows
        ],
    }
    if gate_pct is not None:
        failed = gate(cmp.rows, gate_pct, t)
        out["gate"] = {"fail_if_slower_pct": gate_pct, "threshold_pct": t, "failed": [r.point for r in failed],
                       "reasons": {r.point: gate_reason(r) for r in failed}}
    return stats.json_safe(out)


def _metric(record: Optional[PointRecord], value) -> str:
    # docs/formats.md, "Tables": "OOM" stands in place of the numbers of a point that did not fit.
    if record is None:
        return ""
    if record.status == STATUS_OOM:
        return "OOM"
    return number(value, 6)


def to_csv(cmp: Comparison) -> str:
    """One row per point: shape columns, then ``median_ms``, ``gbps``, ``tflops`` per side (the
    names of results.jsonl and of the JSON output);
    the metric's values per side when it is not time, and ``clock_differs`` when some point has it."""
    rank = max((len(r.shape) for r in cmp.rows), default=0)
    headers = ["point", "op", "dtype", "variant", "shape", *(f"dim{i}" for i in range(rank)), "status", "verdict",
               "median_ms_A", "median_ms_B", "delta_pct", "timer_A", "timer_B",
               "gbps_A", "gbps_B", "tflops_A", "tflops_B",
               "pct_bandwidth_A", "pct_bandwidth_B", "pct_tflops_A", "pct_tflops_B", "markers_A", "markers_B"]
    if cmp.ir_column:
        headers.append("ir")
    other = cmp.metric != metrics.DEFAULT
    clock_col = any(r.clock for r in cmp.rows)
    if other:
        headers += [f"{cmp.metric}_A", f"{cmp.metric}_B"]
    if clock_col:
        headers.append("clock_differs")
    lines = []
    t = cmp.threshold.pct
    for r in cmp.rows:
        dims = [str(d) for d in r.shape] + [""] * (rank - len(r.shape))
        pa = ceilings_mod.percent_of(cmp.a.ceilings, r.a.gbps, r.a.tflops, r.dtype) if r.a else (None, None)
        pb = ceilings_mod.percent_of(cmp.b.ceilings, r.b.gbps, r.b.tflops, r.dtype) if r.b else (None, None)
        line = [r.point, r.op, r.dtype, r.variant, shape_str(r.shape), *dims, r.status, r.verdict(t),
                _metric(r.a, r.a.median_ms if r.a else None), _metric(r.b, r.b.median_ms if r.b else None),
                "" if r.delta_pct is None else f"{r.delta_pct:.4f}",
                (r.a.timer or "") if r.a else "", (r.b.timer or "") if r.b else "",
                _metric(r.a, r.a.gbps if r.a else None), _metric(r.b, r.b.gbps if r.b else None),
                _metric(r.a, r.a.tflops if r.a else None), _metric(r.b, r.b.tflops if r.b else None),
                _metric(r.a, pa[0]), _metric(r.b, pb[0]), _metric(r.a, pa[1]), _metric(r.b, pb[1]),
                " ".join(marker_names(r.a)), " ".join(marker_names(r.b))]
        if cmp.ir_column:
            line.append(r.ir or "")
        if other:
            line += [_metric(side, metrics.value(side, cmp.metric)) for side in (r.a, r.b)]
        if clock_col:
            line.append(r.clock or "")
        lines.append(line)
    return csv_text(headers, lines)


# ----------------------------------------------------------------------------- command
#: ``--threshold PCT``: |delta| below it is SAME (``nan`` would make every change SAME)
THRESHOLD = Number(float, 0, 1000, unit="percent")
#: ``--fail-if-slower PCT`` (``zlf compare`` and ``zlf ab``): ``nan`` would never trip the gate
GATE = Number(float, 0, 10**6, unit="percent")


def configure_parser(parser) -> None:
    parser.add_argument("a_dir", metavar="A_DIR", help="baseline run directory")
    parser.add_argument("b_dir", metavar="B_DIR", help="candidate run directory; Δ = (B − A) / A")
    output.add_format_argument(parser)
    parser.add_argument("--threshold", type=THRESHOLD, metavar="PCT",
                        help="|Δ| below this counts as SAME (default: the measured noise of the points, floor 1%%)")
    parser.add_argument("--metric", choices=metrics.NAMES, default=metrics.DEFAULT,
                        help="compare on time (default), cycles (time x measured SM clock) or wall (host wall-clock)")
    parser.add_argument("--allow-mixed-timers", action="store_true",
                        help="compare rows whose sides used different timers (refused by default)")
    parser.add_argument("--fail-if-slower", type=GATE, nargs="?", const=0.0, metavar="PCT",
                        help="exit 1 when a point is SLOWER (beyond the noise threshold) and by more than PCT "
                             "percent (default 0), or B lost a time A had (CI gate)")
    parser.epilog = (
        "examples:\n"
        "  zlf compare runs/base runs/patched\n"
        "  zlf compare runs/base runs/patched --format csv > delta.csv\n"
        "  zlf compare runs/base runs/patched --fail-if-slower 5\n"
        "exit codes: 0 done, 1 --fail-if-slower tripped, 2 bad input (not a run dir, nothing to pair)"
    )


def main(args, session) -> int:
    cmp = compare_dirs(args.a_dir, args.b_dir, args.threshold, args.allow_mixed_timers, getattr(args, "metric", None),
                       hooks=getattr(session, "hooks", None))
    machine = args.format in ("csv", "json")
    if machine:  # stdout stays parseable; what a reader must not miss goes to stderr
        for side in (cmp.a, cmp.b):
            for n in side.notes():
                warn(clean(n))
    failed = None
    if args.fail_if_slower is not None:
        if not cmp.summary.compared and not any(lost_time(r) for r in cmp.rows):
            raise UsageError("--fail-if-slower: no point could be compared, nothing to gate on "
                             f"({', '.join(f'{n} {s}' for s, n in cmp.summary.not_compared.items())})")
        failed = gate(cmp.rows, args.fail_if_slower, cmp.threshold.pct)
    if args.format == "json":
        print(json.dumps(to_json(cmp, args.fail_if_slower), indent=2, allow_nan=False))
    elif args.format == "csv":
        print(to_csv(cmp), end="")
    else:
        print(render_text(cmp, markdown=args.format == "markdown", colour=use_colour()))
    if failed is None:
        return 0
    out = sys.stderr if machine else sys.stdout
    if failed:
        names = ", ".join(f"{clean(r.point)} ({gate_reason(r)})" for r in failed)
        line = (f"FAIL: {len(failed)} point(s) slower beyond the noise threshold (±{cmp.threshold.pct:.1f}%) and more "
                f"than {args.fail_if_slower:g}%, or without a time: {names}")
        print(paint(line, "red", out), file=out)
        return 1
    skipped = sum(cmp.summary.not_compared.values())
    extra = f"; {skipped} row(s) not compared are not gated (only one side, timer mismatch)" if skipped else ""
    print(f"PASS: no compared point slower beyond the noise threshold (±{cmp.threshold.pct:.1f}%) and more than "
          f"{args.fail_if_slower:g}%{extra}", file=out)
    return 0
