"""A campaign over a whole op library (``zlf ab --library SOURCE``): which ops, what became of each
op on each side, the library's verdict table, and where the processes' time went.

The campaign itself is an ordinary adaptive ``zlf ab`` campaign (:mod:`zlf.ab.driving`): every
round and side is one process for all ops (start and imports paid once), each side keeps its
Triton cache across rounds, an op that fails or hangs in a shared process has its round re-run
alone (:mod:`zlf.ab.execute`), the screening rounds cover every point and later rounds only the
ops with a point still open. What this module adds reads campaign.json and the run directories
only: it never starts a process, so ``zlf ab --status DIR`` may call it on a running campaign.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Optional

import attrs

from .. import readers, stats
from ..console import change, clean
from ..errors import UsageError
from ..run import SPLIT
from .layout import FAILED, OK, PENDING, RUNNING, SKIPPED

#: campaign.json's field of a library campaign: ``{"source", "size", "sample", "seed", "named"}``
FIELD = "library"
#: the biggest op list file read (a list of ops, not data)
LIST_LIMIT = 4 * 1024 * 1024
#: the outcome words of a side (``ok``: every run of the side finished ok)
REFUSED, HUNG, CRASHED = "refused", "hung", "crashed"
#: how a point that ran past its time limit reads (zlf.procs / zlf.run)
_HUNG_WORDS = ("time limit",)
#: how a point that killed its worker reads (zlf.supervise)
_DIED = "worker died:"
#: rc of a process ended by the watchdog (a point stuck where no signal reaches)
_EXIT_HUNG = 124


# ----------------------------------------------------------------------------- which ops
def read_op_list(path: str) -> list:
    """The ops of an op list file: one OP per line (as ``zlf ab`` takes it), ``#`` starts a comment."""
    try:
        text = readers.read_text(Path(path), limit=LIST_LIMIT, what="op list")
    except OSError as exc:
        raise UsageError(f"--library {path!r}: cannot read it ({exc.strerror or exc})") from None
    ops = []
    for n, line in enumerate(text.splitlines(), 1):
        spec = line.split("#", 1)[0].strip()
        if not spec:
            continue
        if any(ch.isspace() for ch in spec):
            raise UsageError(f"--library {path}: line {n}: one op per line, got {clean(spec)!r}")
        ops.append(spec)
    if not ops:
        raise UsageError(f"--library {path!r}: no op in it (one OP per line)")
    return list(dict.fromkeys(ops))


def op_name(spec: str) -> str:
    """The name an op of a library goes by: ``mm`` for ``mm:blas_perf``, ``neg`` for ``FILE.py::neg``."""
    head, _, tail = spec.partition("::")
    if tail and ":" not in head:
        return tail
    return head.split(":", 1)[0] if ":" in head else Path(head).stem if head.endswith(".py") else head


def select(library: list, names=(), sample: Optional[int] = None, seed: int = 0, source: str = "") -> list:
    """The ops of ``library`` (specs) the campaign runs: ``names`` (each an op of the library, by
    name or as spelt there), or ``random.Random(seed).sample`` of ``sample`` of them, or all."""
    if names and sample is not None:
        raise UsageError("--library: name the ops or --sample N of them, not both")
    if sample is not None:
        if sample > len(library):
            raise UsageError(f"--sample {sample}: the library {source} has {len(library)} ops")
        return random.Random(seed).sample(library, sample)
    if not names:
        return list(library)
    by_name: dict = {}
    for spec in library:
        by_name.setdefault(op_name(spec), spec)
    chosen = []
    for name in names:
        if name in library:
            chosen.append(name)
        elif name in by_name:
            chosen.append(by_name[name])
        else:
            raise UsageError(f"--library: unknown op {clean(name)!r}: not among the {len(library)} ops of {source}")
    return list(dict.fromkeys(chosen))


# ----------------------------------------------------------------------------- what became of each op
@attrs.frozen
class SideOutcome:
    """One side of one op: ``ok``, or ``failed`` / ``refused`` / ``hung`` / ``crashed`` with the
    run it happened in and why; ``pending`` while runs are left; ``skipped`` when its op failed
    on the other side first and this side never ran."""

    word: str
    run: str = ""
    why: str = ""


@attrs.frozen
class OpOutcome:
    op: str
    a: SideOutcome
    b: SideOutcome

    @property
    def failed(self) -> bool:
        return self.a.word not in (OK, PENDING) or self.b.word not in (OK, PENDING)

    @property
    def where(self) -> str:
        """``B only``, ``A only``, ``A and B``, or ``""`` when no side failed."""
        bad = [s for s, o in (("A", self.a), ("B", self.b)) if o.word not in (OK, PENDING, SKIPPED)]
        if bad == ["B"] and self.a.word == OK:
            return "B only"
        if bad == ["A"] and self.b.word == OK:
            return "A only"
        return " and ".join(bad)


def failure_kind(run: dict) -> str:
    """What a failed run was: ``refused`` (exit 2: bad input, a skip), ``hung`` (a point past its
    time limit), ``crashed`` (a point killed its worker, or the process died), else ``failed``."""
    error = run.get("error") or ""
    rc = run.get("rc")
    if rc == 2:
        return REFUSED
    if rc == _EXIT_HUNG or any(w in error for w in _HUNG_WORDS):
        return HUNG
    if _DIED in error or (isinstance(rc, int) and rc < 0):
        return CRASHED
    return "failed"


def outcomes(campaign) -> dict:
    """``{op: OpOutcome}`` of every op the user named (canaries aside), from its runs."""
    canaries = set(campaign.statistics.canary_ops)
    out = {}
    for op in campaign.ops:
        if op.name in canaries:
            continue
        runs = [r for r in campaign.runs if r["op"] == op.name]
        first = min((r["round"] for r in runs if r["status"] == FAILED), default=None)
        if first is not None:  # the op's later rounds are skipped (or will be): its outcome is that round's
            runs = [r for r in runs if r["round"] <= first]
        sides = []
        for side in ("A", "B"):
            mine = [r for r in runs if r["side"] == side]
            bad = next((r for r in mine if r["status"] == FAILED), None)
            if bad is not None:
                shared = bad.get("shared_error") or ""
                why = bad.get("error") or shared
                sides.append(SideOutcome(failure_kind(bad), f"r{bad['round']}_{side}", why))
            elif any(r["status"] in (PENDING, RUNNING) for r in mine):
                sides.append(SideOutcome(PENDING))
            elif mine and all(r["status"] == SKIPPED for r in mine):
                sides.append(SideOutcome(SKIPPED, "", mine[0].get("error") or ""))
            else:
                sides.append(SideOutcome(OK))
        out[op.name] = OpOutcome(op.name, *sides)
    return out


# ----------------------------------------------------------------------------- the table
HEADERS = ["op / point", "outcome", "A", "B", "change", "interval", "why"]
#: where a row sorts (the findings first): failures on B only, on A only, directions by evidence,
#: undecided points, SAME ops, failures on both sides, what is still running
_ORDER = {"B only": 0, "A only": 1, stats.SLOWER: 2, stats.FASTER: 2, stats.UNSURE: 3, stats.SAME: 4,
          "both": 5, PENDING: 6}


def _ms(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def _p(value) -> str:
    return "-" if value is None else change(value, 2)


def table_rows(campaign, results, outcome=None) -> list:
    """The library's rows (:data:`HEADERS`), findings first: an op that fails on B only (a
    finding of its own), on A only, every point with a direction by its evidence (decision
    p-value, then size), undecided points, one row per op whose points are all SAME, ops that
    fail on both sides, ops still running."""
    outcome = outcome if outcome is not None else outcomes(campaign)
    by_op: dict = {}
    owner = _owners(campaign, results)
    for r in results:
        by_op.setdefault(owner.get(r.point, r.point.split("/")[0]), []).append(r)
    keyed = []
    for name, o in outcome.items():
        if o.failed:
            where = o.where
            side = o.b if where == "B only" else o.a if where == "A only" else (o.b if o.b.word not in (OK, PENDING, SKIPPED) else o.a)
            word = f"{side.word.upper()} on {where}" if where else side.word.upper()
            why = "; ".join(f"{s}: {x.word} in {x.run}: {x.why}" if x.run else f"{s}: {x.word}"
                            for s, x in (("A", o.a), ("B", o.b)) if x.word not in (OK,))
            rank = _ORDER.get(where, _ORDER["both"])
            keyed.append(((rank, 0.0, name), [name, word, o.a.word, o.b.word, "-", "-", why]))
            continue
        points = by_op.get(name, [])
        if not points:
            keyed.append(((_ORDER[PENDING], 0.0, name), [name, "PENDING", o.a.word, o.b.word, "-", "-", "runs left"]))
            continue
        same = [r for r in points if r.verdict == stats.SAME]
        for r in points:
            if r.verdict == stats.SAME and len(same) == len(points):
                continue
            delta = r.delta_pct if r.delta_pct is not None else r.delta_median_pct
            interval = "-" if r.delta_lo_pct is None else f"[{_p(r.delta_lo_pct)}, {_p(r.delta_hi_pct)}]"
            a_ms, b_ms = (r.a_mean_ms, r.b_mean_ms) if r.a_mean_ms is not None else (r.a_median_ms, r.b_median_ms)
            evidence = r.p_value if r.p_value is not None else 1.0
            size = -abs(delta) if delta is not None else 0.0
            keyed.append(((_ORDER.get(r.verdict, 3), evidence, size, r.point),
                          [r.point, r.verdict, _ms(a_ms), _ms(b_ms), _p(delta), interval, r.note or ""]))
        if same and len(same) == len(points):
            widest = max(same, key=lambda r: abs(r.delta_pct or 0.0))
            keyed.append(((_ORDER[stats.SAME], 1.0, 0.0, name),
                          [name, stats.SAME, "-", "-", f"max {_p(widest.delta_pct)}", "-",
                           f"{len(same)} point{'s' if len(same) != 1 else ''}"]))
    keyed.sort(key=lambda kv: kv[0])
    return [clean_row(row) for _, row in keyed]


def clean_row(row: list) -> list:
    return [clean(str(c)) for c in row]


def _owners(campaign, results) -> dict:
    from .analysis import point_ops

    owners = point_ops(campaign)
    return {r.point: owners.get(r.point, r.point.split("/")[0]) for r in results}


def counts_line(campaign, results, outcome=None) -> str:
    """``200 ops: 5 with a SLOWER point, 0 FASTER, 188 all SAME, 2 UNSURE; 5 failed (3 on B only
    ...); 930 of 1000 points decided``."""
    outcome = outcome if outcome is not None else outcomes(campaign)
    owner = _owners(campaign, results)
    verdicts: dict = {}
    for r in results:
        verdicts.setdefault(owner[r.point], set()).add(r.verdict)
    measured = [n for n, o in outcome.items() if not o.failed and n in verdicts]
    slower = sum(1 for n in measured if stats.SLOWER in verdicts[n])
    faster = sum(1 for n in measured if stats.FASTER in verdicts[n])
    same = sum(1 for n in measured if verdicts[n] == {stats.SAME})
    unsure = sum(1 for n in measured if stats.UNSURE in verdicts[n])
    failed = [o for o in outcome.values() if o.failed]
    wheres: dict = {}
    for o in failed:
        wheres[o.where or "?"] = wheres.get(o.where or "?", 0) + 1
    kinds: dict = {}
    for o in failed:
        for s in (o.a, o.b):
            if s.word not in (OK, PENDING, SKIPPED):
                kinds[s.word] = kinds.get(s.word, 0) + 1
    pending = sum(1 for n, o in outcome.items() if not o.failed and n not in verdicts)
    decided = sum(1 for r in results if r.verdict != stats.UNSURE)
    parts = [f"{len(outcome)} ops: {slower} with a SLOWER point, {faster} with a FASTER point, "
             f"{same} all SAME, {unsure} with an UNSURE point"]
    if failed:
        parts.append(f"{len(failed)} failed (" + ", ".join(f"{n} on {w}" for w, n in sorted(wheres.items()))
                     + "; sides: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")")
    if pending:
        parts.append(f"{pending} not analysed yet")
    parts.append(f"{decided} of {len(results)} points decided")
    return "; ".join(parts)


# ----------------------------------------------------------------------------- where the time went
def process_entry(outcome: dict, meta: dict, runs: list) -> dict:
    """campaign.json's ``processes`` entry of one finished process: its wall seconds (as the
    driver measured it), its time split and compile counts (its meta.json), its round, side and ops."""
    split = meta.get("time_split") if isinstance(meta, dict) else None
    return {"round": runs[0]["round"], "side": runs[0]["side"], "ops": len(runs), "rc": outcome.get("rc"),
            "seconds": outcome.get("seconds"), "split": split if isinstance(split, dict) else None}


def time_split(campaign) -> dict:
    """Seconds per :data:`zlf.run.SPLIT` category summed over the campaign's processes, ``other``
    (the rest of their wall time: run directories, device queries, teardown; a process killed
    before it could say) and ``wall``; ``processes``, ``per_round`` ``{round: wall}``."""
    total = dict.fromkeys(SPLIT, 0.0)
    wall, per_round = 0.0, {}
    procs = campaign.processes
    for entry in procs.values():
        seconds = float(entry.get("seconds") or 0.0)
        wall += seconds
        per_round[entry.get("round")] = per_round.get(entry.get("round"), 0.0) + seconds
        for k in SPLIT:
            total[k] += float((entry.get("split") or {}).get(k) or 0.0)
    accounted = sum(total.values())
    elapsed = campaign.data.get("driver_s")
    return {**{k: round(v, 3) for k, v in total.items()}, "other": round(max(0.0, wall - accounted), 3),
            "wall": round(wall, 3), "processes": len(procs), "per_round": per_round,
            "elapsed": elapsed if isinstance(elapsed, (int, float)) else None}


def split_line(split: dict) -> str:
    """``where the time went (12 processes, 80 s): start 4 s (5 %), imports ...``."""
    wall = split["wall"] or 0.0
    if not wall:
        return "where the time went: no process finished yet"
    parts = [f"{k} {split[k]:.1f} s ({100.0 * split[k] / wall:.0f} %)" for k in (*SPLIT, "other")]
    line = f"where the time went ({split['processes']} processes, {wall:.0f} s): " + ", ".join(parts)
    elapsed = split.get("elapsed")
    if elapsed:  # the driver's own work (filing, splitting, looks) is what the processes' wall does not hold
        line += (f"; the campaign ran {elapsed:.0f} s, measuring {100.0 * split['measuring'] / elapsed:.0f} % of it"
                 + (f", the driver's own work {elapsed - wall:.0f} s" if elapsed >= wall + 1.0 else ""))
    return line


def later_compiles(campaign) -> list:
    """``[(process key, round, side, kernels)]``: processes after the first round of their side
    that compiled kernels (Triton cache misses). Each side's cache is kept across rounds, so a
    later round should compile nothing; one that did is marked, not assumed away."""
    out = []
    for key, entry in sorted(campaign.processes.items()):
        n = int((entry.get("split") or {}).get("compiled") or 0)
        if n and (entry.get("round") or 1) > 1:
            out.append((key, entry.get("round"), entry.get("side"), n))
    return out


# ----------------------------------------------------------------------------- the printed report
def lines(campaign, results, outcome=None, partial: bool = False, step=None) -> list:
    """The library report: the table, its counts, the rule's statement (with ``step``, the last
    look: what the screen cleared), the time split, every later-round compile."""
    from tabulate import tabulate

    outcome = outcome if outcome is not None else outcomes(campaign)
    rows = table_rows(campaign, results, outcome)
    out = ["library table (B against A; findings first)" + (" -- PARTIAL: the campaign has not finished" if partial else ""),
           tabulate(rows, headers=HEADERS) if rows else "(no op finished a round yet)",
           counts_line(campaign, results, outcome)]
    out.append(error_statement(campaign, step))
    out.append(split_line(time_split(campaign)))
    for key, k, side, n in later_compiles(campaign):
        out.append(f"!!! COMPILED in round {k}: {key} (side {side}) compiled {n} Triton kernel(s); "
                   "its side's cache should have held them (a changed key, or an evicted cache)")
    return out


# ----------------------------------------------------------------------------- the two-stage rule
#: campaign.json's field of the rule: ``{"plan": screening.Plan, "state": screening.State}``
SCREENING = "screening"


def plan_of(campaign):
    """The campaign's :class:`zlf.ab.screening.Plan` (as created; from its rounds if not stored)."""
    from . import screening

    stored = (campaign.data.get(SCREENING) or {}).get("plan")
    if stored:
        return screening.Plan.from_json(stored)
    s = campaign.statistics
    return screening.Plan(screen_rounds=s.first_look, max_rounds=s.max_rounds)


def look(campaign, rounds: Optional[int] = None, screen_rows: bool = True):
    """One look of the library's two-stage rule after ``rounds`` rounds (default: all planned):
    :func:`zlf.ab.screening.step` on the campaign's values, from its stored state. Pure: the
    caller stores ``step.state`` (:func:`keep`). ``screen_rows=False`` leaves out the rows of
    points cleared at the screen (a look that prints no table)."""
    from . import screening
    from .analysis import collect, controls_of, noise_of, point_kinds, point_ops, settings_of

    rounds = rounds or campaign.planned_rounds()
    processes: dict = {}
    values, blockers, _, _ = collect(campaign, rounds, processes)
    owner = point_ops(campaign)
    mode, controls, canaries, why = controls_of(campaign, values)
    state = screening.State.from_json((campaign.data.get(SCREENING) or {}).get("state"))
    return screening.step(values, settings_of(campaign), plan_of(campaign), state,
                          lambda point: owner.get(point, point.split("/")[0]), noise_of(campaign), blockers, mode,
                          controls, canaries, processes, why, point_kinds(campaign, values) if controls else None,
                          screen_rows=screen_rows)


def keep(campaign, step) -> None:
    """Store a look's state (campaign.json ``screening``), for the next look and ``--resume``."""
    campaign.data[SCREENING] = {"plan": plan_of(campaign).to_json(), "state": step.state.to_json()}


def decided_count(step) -> tuple:
    """``(decided, points)`` after a look: cleared at the screen or frozen at a confirmation look."""
    return len(step.state.cleared) + len(step.state.frozen), len(step.rounds)


def error_statement(campaign, step=None) -> str:
    """The library-wide error rate the verdicts carry (:func:`zlf.ab.screening.statement`)."""
    from . import screening
    from .analysis import settings_of

    return screening.statement(plan_of(campaign), settings_of(campaign), step)


def analysable_rounds(campaign) -> int:
    """The most rounds after which every op that has not failed has its runs done: what a
    partial table analyses (an op decided earlier keeps its frozen verdict)."""
    failed = campaign.failed_ops()
    for n in range(campaign.planned_rounds(), 0, -1):
        if not [op for op in campaign.incomplete_ops(n) if op not in failed]:
            return n
    return 0


#: the library's table and its lines, written beside summary.log when the campaign ends
TEXT, JSON = "library.txt", "library.json"


def write(campaign, results, outcome=None, step=None) -> None:
    """library.txt (what was printed) and library.json (rows, counts, time split, later-round
    compiles) in the campaign directory."""
    import json

    from ..rundir import write_atomic

    outcome = outcome if outcome is not None else outcomes(campaign)
    rows = table_rows(campaign, results, outcome)
    doc = {"rows": [dict(zip(HEADERS, r)) for r in rows], "counts": counts_line(campaign, results, outcome),
           "statement": error_statement(campaign, step), "time_split": time_split(campaign),
           "later_compiles": [{"process": k, "round": n, "side": s, "compiled": c} for k, n, s, c in later_compiles(campaign)],
           "outcomes": {name: {"A": attrs.asdict(o.a), "B": attrs.asdict(o.b), "failed_on": o.where}
                        for name, o in outcome.items() if o.failed}}
    write_atomic(campaign.path / JSON, json.dumps(doc, indent=2, default=str) + "\n")
    write_atomic(campaign.path / TEXT, "\n".join(lines(campaign, results, outcome, step=step)) + "\n")
