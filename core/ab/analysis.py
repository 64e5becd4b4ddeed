"""Statistics over a campaign's run directories: per-point values of both sides, the rule's
settings as stored, and the verdicts (the maths is :mod:`zlf.stats`)."""
from __future__ import annotations

import math
from pathlib import Path

import attrs

from .. import controls as ctl
from .. import metrics, readers, stats
from ..errors import UsageError
from ..records import duplicate_points, shape_str
from ..rundir import RESULTS, RunDir
from .layout import OK, SUMMARY_JSON



def collect(campaign, rounds=None, processes=None):
    """Per-point values of every op whose every planned run (up to ``rounds``) finished ok.

    ``processes``, when a dict, receives ``{point: (A process ids, B process ids)}`` in the
    values' round order: the shared process a run was part of, else the run itself.

    :return: ``(values, blockers, remarks, excluded)``: ``{point: (A values, B values)}`` of the
        campaign's metric (:mod:`zlf.metrics`; time in ms by default) over the rounds
        where both runs of the point's op are done; ``{point: why no direction}``;
        ``{point: [remarks]}``; ``{point: why left out}``.
    """
    rounds = rounds or campaign.planned_rounds()
    metric = campaign.metric
    # docs/ab.md: a report missing rounds reads exactly like a complete one
    failed = {**campaign.failed_ops(), **campaign.incomplete_ops(rounds)}
    values, blockers, remarks, excluded = {}, {}, {}, {}
    for op in campaign.ops:
        if op.name in failed:
            continue
        per_point: dict = {}
        timers: dict = {}
        why_none: dict = {}
        twice: dict = {}
        done_rounds = []
        for k in range(1, rounds + 1):
            pair = [campaign.find(op.name, k, s) for s in ("A", "B")]
            if not all(r and r["status"] == OK for r in pair):
                continue
            done_rounds.append(k)
            by_side = {}
            for side, r in zip(("A", "B"), pair):
                records, _ = RunDir(campaign.run_dir(r)).records()
                by_side[side] = {rec.point: rec for rec in records}
                for point in duplicate_points(records):
                    twice.setdefault(point, f"point id appears twice in r{k}_{side}/{RESULTS}: not paired")
                for rec in records:
                    slot = per_point.setdefault(rec.point, {})
                    slot[(k, side)] = metrics.value(rec, metric)
                    if slot[(k, side)] is None:
                        why_none.setdefault(rec.point, metrics.missing(rec, metric))
                    if rec.timer:
                        timers.setdefault(rec.point, set()).add(rec.timer)
                    for m in rec.markers:
                        word = m.split(" ")[0]
                        remarks.setdefault(rec.point, [])
                        if f"{word} r{k}_{side}" not in remarks[rec.point]:
                            remarks[rec.point].append(f"{word} r{k}_{side}")
            for point, rec_a in by_side["A"].items():  # A and B of a round at different clock states
                why = metrics.clock_differs(rec_a, by_side["B"].get(point))
                if why:
                    remarks.setdefault(point, []).append(f"CLOCK_DIFFERS r{k} ({why})")
        for point, slot in per_point.items():
            if point in twice:
                excluded[point] = twice[point]
                continue
            missing = [f"r{k}_{s}" for k in done_rounds for s in ("A", "B") if slot.get((k, s)) is None]
            if missing:
                excluded[point] = f"no {metric} in " + ", ".join(missing) + (
                    f" ({why_none[point]})" if metric != metrics.DEFAULT and point in why_none else "")
                continue
            if not done_rounds:
                continue
            values[point] = ([slot[(k, "A")] for k in done_rounds], [slot[(k, "B")] for k in done_rounds])
            if processes is not None:
                processes[point] = tuple([_process(campaign.find(op.name, k, side), op.name, k, side)
                                          for k in done_rounds] for side in ("A", "B"))
            if len(timers.get(point, ())) > 1:
                blockers[point] = "mixed timers: " + ", ".join(sorted(timers[point]))
    return values, blockers, remarks, excluded


def _process(run, op: str, k: int, side: str) -> str:
    return run.get("process") or f"{op}/r{k}_{side}"


def load_noise(noise_from) -> dict:
    """``{point: Noise as JSON}`` from an A/A campaign directory (``--noise-from``)."""
    if not noise_from:
        return {}
    path = Path(noise_from) / SUMMARY_JSON
    if not path.is_file():
        raise UsageError(f"--noise-from {noise_from!r}: no {SUMMARY_JSON} (not a finished zlf ab campaign)")
    try:  # a bounded regular file of the summary schema (zlf.readers), one line if not
        doc = readers.read_json(path, schema="summary", what=SUMMARY_JSON)
    except readers.BadFile as exc:
        raise UsageError(f"--noise-from {exc}") from None
    if not doc.get("aa"):
        raise UsageError(f"--noise-from {noise_from!r} is not an A/A campaign (run zlf ab --aa)")
    noise = stats.aa_entries(doc.get("points", []))
    if not noise:
        raise UsageError(f"--noise-from {noise_from!r}: no point has two rounds to estimate noise from")
    return noise


def settings_of(campaign) -> stats.Settings:
    """The rule's knobs as stored (:attr:`Statistics.settings <zlf.ab.campaign.Statistics.settings>`);
    a campaign from before the one-threshold rule kept a SAME margin beside --min-effect: its
    --min-effect is the threshold now."""
    return campaign.statistics.settings


def spending_plan(campaign) -> "stats.SpendingPlan | None":
    return campaign.statistics.plan


def look_level(campaign, rounds: int) -> float:
    """The (one-sided, before Holm) level of the analysis after ``rounds`` rounds: alpha, or
    the O'Brien–Fleming spending level of that look when adaptive."""
    plan = spending_plan(campaign)
    return campaign.statistics.alpha if plan is None else plan.level(rounds)


def frozen_of(campaign) -> dict:
    """``{point: (verdict, rounds)}`` decided at earlier looks of an adaptive campaign."""
    return campaign.frozen


def noise_of(campaign) -> dict:
    """The A/A's per-point entries (per-round times) that ``--noise-from`` stored."""
    return dict(campaign.statistics.noise)


@attrs.frozen
class Decided:
    """What one analysis of a campaign found: the verdicts of the points under test, the
    controls' own rows (not in the verdict family), and the normalisation."""

    results: list
    controls: list
    normalisation: "ctl.Normalisation"
    mode: str
    why: str = ""
    #: the verdicts on the values as measured, when the controls' side-shift alarm rang (shown
    #: beside the normalised ones, never silently replaced)
    raw_results: list = attrs.field(factory=list)


def decide(values, settings, noise=None, notes=None, plan=None, frozen=None, mode=ctl.NONE, controls=(), canaries=(),
           processes=None, why="", control_rows=True, kinds=None) -> Decided:
    """Normalise by the controls' process factors, then the verdict rule (fixed, or one look of
    ``plan``) over every point that is not a canary: the one code path of ``zlf ab``, its
    ``--until-confident`` looks and benchmarks/verdict_sim.py.

    :param controls: the points known to be the same on both sides (canaries and unchanged points).
    :param canaries: the controls that are not points under test (their rows are reported apart).
    :param processes: ``{point: (A process ids, B process ids)}``; default one per round and side.
    :param control_rows: analyse the canaries' own rows too (the report shows them).
    :param kinds: ``{point: "compute" | "memory"}`` (:func:`point_kinds`): used when the controls'
        kinds disagree within processes (each kind normalised by its own controls).
    """
    used = list(controls) if mode != ctl.NONE else []
    norm = ctl.normalise(values, used, processes, settings.alpha, point_kinds=kinds) if used else ctl.Normalisation(
        dict(values), {p: (tuple(a), tuple(b)) for p, (a, b) in values.items()}, note=why or "no control point")
    family = {p: v for p, v in norm.values.items() if p not in canaries}
    raw = {p: norm.raw[p] for p in family if p not in norm.unnormalised} if norm.active else None
    aa = stats.aa_like(noise or {}, norm.active)
    if plan is None:
        results = stats.analyse(family, settings, noise=aa, notes=notes, raw=raw)
    else:
        results = stats.look(family, settings, plan, frozen or {}, noise=aa, notes=notes, raw=raw)
    own = {p: v for p, v in norm.values.items() if p in canaries}
    as_measured = []
    if norm.active and norm.side_shift_alarm:
        measured = {p: norm.raw[p] for p in family}
        as_measured = (stats.analyse(measured, settings, noise=stats.aa_like(noise or {}, False), notes=notes)
                       if plan is None else
                       stats.look(measured, settings, plan, {}, noise=stats.aa_like(noise or {}, False), notes=notes))
    return Decided(results, stats.analyse(own, settings) if own and control_rows else [], norm, mode, why, as_measured)


def controls_of(campaign, values) -> tuple:
    """``(mode, controls, canaries, why)`` of a campaign: which of its points are controls.

    Canaries are the points of the canary ops the campaign added; unchanged points those whose
    shape's launched kernels are identical on both sides by the ``ir_status`` hook (ir_dump),
    compared in the op's first round both sides finished. Only what is provably the same on both
    sides counts: with two interpreters (torch may differ) neither kind does.
    """
    s = campaign.statistics
    mode = s.controls  # a campaign from before controls: none, as it was decided
    if mode == ctl.NONE:
        return mode, [], [], "--controls none"
    sides = campaign.sides
    if sides["A"].interpreter != sides["B"].interpreter:
        return mode, [], [], "the sides run different interpreters: nothing is provably the same on both"
    canary_ops = set(s.canary_ops)
    owner = point_ops(campaign)
    canaries = [p for p in values if owner.get(p) in canary_ops] if mode in (ctl.AUTO, ctl.CANARY) else []
    unchanged = unchanged_points(campaign, values, owner) if mode in (ctl.AUTO, ctl.UNCHANGED) else []
    controls = canaries + [p for p in unchanged if p not in canaries]
    why = "" if controls else (s.controls_note or {
        ctl.CANARY: "no canary points", ctl.UNCHANGED: "no point with identical compiled code on both sides (needs an extension that compares compiled IR)",
        ctl.AUTO: "no canary and no point with identical compiled code"}[mode])
    return mode, controls, canaries, why


def unchanged_points(campaign, values, owner) -> list:
    """Points whose shape's compiled kernels are identical on both sides (``ir_status`` hook)."""
    if campaign.aa or getattr(campaign.hooks, "ir_status", None) is None:
        return []  # an A/A compares nothing; its controls are its canaries, as a campaign's are
    out = []
    for op in campaign.ops:
        for k in range(1, campaign.planned_rounds() + 1):
            ra, rb = campaign.find(op.name, k, "A"), campaign.find(op.name, k, "B")
            if not (ra and rb and ra["status"] == OK and rb["status"] == OK):
                continue
            status = campaign.hooks.ir_status(a_dir=campaign.run_dir(ra), b_dir=campaign.run_dir(rb))
            if status:
                records, _ = RunDir(campaign.run_dir(ra)).records()
                out += [r.point for r in records if r.point in values and owner.get(r.point) == op.name
                        and status.get(shape_str(r.shape)) == "identical"]
            break
    return out


def analyse(campaign, rounds=None):
    """``(results, remarks, excluded, level of the last look)``: :func:`decide_campaign`'s
    verdicts of the points under test."""
    decided, remarks, excluded, alpha = decide_campaign(campaign, rounds)
    return decided.results, remarks, excluded, alpha


def decide_campaign(campaign, rounds=None):
    """``(Decided, remarks, excluded, level of the last look)`` of a campaign."""
    rounds = rounds or campaign.planned_rounds()
    processes: dict = {}
    values, blockers, remarks, excluded = collect(campaign, rounds, processes)
    settings, noise, plan = settings_of(campaign), noise_of(campaign), spending_plan(campaign)
    mode, controls, canaries, why = controls_of(campaign, values)
    decided = decide(values, settings, noise, blockers, plan, frozen_of(campaign) if plan else None, mode, controls,
                     canaries, processes, why, kinds=point_kinds(campaign, values) if controls else None)
    return decided, remarks, excluded, look_level(campaign, rounds)


def point_kinds(campaign, values) -> dict:
    """``{point: "compute" | "memory"}`` from each op's first finished run: a point's flops per
    byte (its record's TFLOP/s over GB/s, from the op's ``flops`` and ``bytes``) nearer, on a log
    scale, to the compute canaries' or to the memory canaries'. Empty without both canary kinds;
    points whose op counts no flops or bytes have no kind."""
    intensity, owner = {}, point_ops(campaign)
    for op in campaign.ops:
        run = next((r for r in campaign.runs if r["op"] == op.name and r["status"] == OK), None)
        if run is None:
            continue
        records, _ = RunDir(campaign.run_dir(run)).records()
        for rec in records:
            if rec.point in values and rec.tflops and rec.gbps and rec.tflops > 0 and rec.gbps > 0:
                intensity[rec.point] = math.log(1000.0 * rec.tflops / rec.gbps)
    ref = {}
    for kind in ("compute", "memory"):
        xs = [x for p, x in intensity.items() if ctl.CANARY_KINDS.get(owner.get(p, "")) == kind]
        if xs:
            ref[kind] = sum(xs) / len(xs)
    if len(ref) < 2 or ref["compute"] <= ref["memory"]:
        return {}
    cut = (ref["compute"] + ref["memory"]) / 2.0
    return {p: "compute" if x >= cut else "memory" for p, x in intensity.items()
            if ctl.CANARY_KINDS.get(owner.get(p, "")) is None}


def point_ops(campaign) -> dict:
    """``{point: op name}`` from each op's first finished run."""
    out = {}
    for op in campaign.ops:
        run = next((r for r in campaign.runs if r["op"] == op.name and r["status"] == OK), None)
        if run is not None:
            records, _ = RunDir(campaign.run_dir(run)).records()
            out.update({rec.point: op.name for rec in records})
    return out


def op_rounds(campaign, op: str) -> int:
    return max((r["round"] for r in campaign.runs if r["op"] == op), default=0)


