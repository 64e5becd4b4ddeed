"""Driving a campaign: run every pending run (here, or as work units on an executor), and when
adaptive, look after each round and add rounds only for ops with an undecided point."""
from __future__ import annotations

import sys
import time

from .. import stats
from ..console import clean, clean_lines, paint
from ..scheduler import Scheduler, gpu_label
from .analysis import (collect, controls_of, decide, frozen_of, look_level, noise_of, op_rounds, point_kinds, point_ops,
                       settings_of, spending_plan)
from .campaign import Look
from .execute import CampaignJob, campaign_units
from .guards import wait_until_idle
from .layout import FAILED, OK, PENDING, RUNNING, SKIPPED, now


class Printer:
    """Progress lines on stderr: one per finished process (a shared process of a round and side
    is one line, its ops named), with the processes left and the time left."""

    def __init__(self, campaign):
        self.campaign = campaign
        self.t0 = time.monotonic()
        self.seconds = []
        self.finished = 0

    def done(self, run) -> None:
        """One run that ran alone (or was skipped without a process: a library campaign says
        nothing of those, its table counts the failed ops)."""
        if run["status"] == SKIPPED and self.campaign.library:
            return
        self._print([run], clean(run["op"]))

    def process(self, runs: list) -> None:
        """The runs of one shared process that it measured: one line, the canaries counted apart."""
        canaries = set(self.campaign.statistics.canary_ops)
        own = [r["op"] for r in runs if r["op"] not in canaries]
        controls = len(runs) - len(own)
        names = ", ".join(clean(o) for o in own) or "controls"
        if own and controls:
            names += f" (+{controls} control op{'s' if controls > 1 else ''})"
        if self.campaign.library and len(own) > 3:  # a library's process: its count, not its names
            names = f"{len(own)} ops" + (f" (+{controls} control op{'s' if controls > 1 else ''})" if controls else "")
        self._print(runs, names)

    def _print(self, runs: list, names: str) -> None:
        run = runs[0]
        process = (self.campaign.processes).get(run.get("process") or run["dir"]) or {}
        seconds = process.get("seconds") or max((r.get("seconds") or 0 for r in runs), default=0)
        if run["status"] != SKIPPED:
            self.finished += 1
            if seconds:
                self.seconds.append(seconds)
        left = self.campaign.processes_left()
        total = self.finished + left
        eta = f", ~{_clock(left * sum(self.seconds) / len(self.seconds))} left" if self.seconds and left else ""
        what = {OK: paint("ok", "green", sys.stderr), FAILED: paint("FAILED", "red", sys.stderr)}.get(run["status"], run["status"])
        took = f" {seconds:.1f}s" if seconds else ""
        error = f" ({clean(run['error'])})" if run.get("error") else ""
        flags = paint(" [busy/throttled]", "yellow", sys.stderr) if any(r.get("flags") for r in runs) else ""
        where = f" on {gpu_label(run['gpu'])}" if run.get("gpu") else ""
        count = f"[{self.finished}/{total}]" if run["status"] != SKIPPED else "[skipped]"
        print(f"{count} r{run['round']}_{run['side']} {names} {what}{where}{took}{flags}{error}"
              f"  (elapsed {_clock(time.monotonic() - self.t0)}{eta}{self._decided()})", file=sys.stderr, flush=True)

    def _decided(self) -> str:
        """``, 412/930 points decided`` after a look (an adaptive campaign's), else nothing."""
        looks = self.campaign.looks
        if not looks:
            return ""
        return f", {looks[-1].decided}/{looks[-1].points} points decided"

    def line(self, text: str) -> None:
        print(clean_lines(text), file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Stopped(Exception):
    """The campaign cannot go on now (the device stayed busy); --resume continues it."""


def run_pending(campaign, printer, busy=None, idle_wait=60.0) -> None:
    """Run the first pending run (with its shared process's other ops) until none is left: a
    shared process that fails an op sends that op's round back to the pending runs, alone."""
    while True:
        run = campaign.next_run() if campaign.shared else next(
            (r for r in campaign.runs if r["status"] not in (OK, FAILED, SKIPPED)), None)
        if run is None:
            return
        why = campaign.skip_reason(run)
        if why:
            run.update(status=SKIPPED, error=why)
            if not campaign.library:  # a library's skips are saved with its next run (thousands of saves else)
                campaign.save()
            printer.done(run)
            continue
        if busy is not None:
            warnings = wait_until_idle(busy, idle_wait)
            if warnings:
                raise Stopped(f"--require-idle: device still busy after {idle_wait:g}s before "
                              f"{run['op']} r{run['round']}_{run['side']}: {'; '.join(warnings)}")
        if campaign.shares(run):
            group = next(g for g in campaign.shared_groups() if run in g)
            ran = campaign.execute_shared(group)
            measured = [r for r in ran if r["status"] == OK]
            if measured:
                printer.process(measured)
            for r in ran:
                if r["status"] != OK and r.get("alone") and r.get("shared_error"):
                    printer.line(f"{r['op']} r{r['round']}_{r['side']}: {r['shared_error']}; its round runs alone")
            continue
        campaign.execute(run)
        printer.done(run)


class Scaled:
    """Pending runs as work units on an executor (``--gpus`` / ``--executor ray``); per-worker
    counts summed over the batches of an adaptive campaign."""

    def __init__(self, executor, unit: str = "pair"):
        self.executor = executor
        self.unit = unit
        self.stats: dict = {}

    def run_pending(self, campaign, printer) -> None:
        # a shared process that fails an op sends that op's round back, alone: another batch
        while True:
            done = _settled(campaign)
            self._batch(campaign, printer)
            if not campaign_units(campaign, self.unit):
                return
            if _settled(campaign) == done:
                raise Stopped("runs left that no batch can finish: "
                              + ", ".join(f"{r['op']} r{r['round']}_{r['side']}" for r in campaign.runs
                                          if r["status"] in (PENDING, RUNNING)))

    def _batch(self, campaign, printer) -> None:
        units = campaign_units(campaign, self.unit)
        if not units:
            return
        scheduler = Scheduler(units, retries=self.executor.retries)
        try:
            self.executor.run(CampaignJob(campaign, printer), scheduler)
        finally:
            self._add(scheduler)
            campaign.data["workers"] = list(self.stats.values())
            campaign.save()
        missing = scheduler.given_up()
        left = scheduler.queued()
        if missing or left:
            why = "; ".join(f"{u}: {r}" for u, r in missing.items()) or "no worker left"
            raise Stopped(f"{len(missing) + len(left)} unit(s) not run ({why})")
        pending = [f"{r['op']} r{r['round']}_{r['side']}" for r in campaign.runs
                   if r["status"] in (PENDING, RUNNING) and not (r.get("alone") or campaign.shares(r))]
        if pending:  # a run interrupted on its own (exit 130) is pending again, not failed
            raise Stopped(f"{len(pending)} run(s) not finished: {', '.join(pending)}")

    def _add(self, scheduler) -> None:
        for row in scheduler.summary_rows():
            old = self.stats.get(row["worker"])
            if old is None:
                self.stats[row["worker"]] = row
                continue
            for k in ("units", "runs", "seconds", "failed_runs", "lost"):
                old[k] += row[k]
            old["identity"] = old["identity"] or row["identity"]

    def table(self) -> str:
        from tabulate import tabulate

        rows = [[gpu_label(r["worker"]), r["identity"] or "-", r["units"], r["runs"], _clock(r["seconds"]), r["failed_runs"], r["lost"]]
                for r in self.stats.values()]
        return tabulate(rows, headers=["worker", "device", "units", "runs", "busy", "failed runs", "lost units"])


def _settled(campaign) -> tuple:
    """How far the runs are: finished ones and rounds sent alone (a batch must move one of them)."""
    return (sum(1 for r in campaign.runs if r["status"] in (OK, FAILED, SKIPPED)),
            sum(1 for r in campaign.runs if r.get("alone")))


def look(campaign, n: int) -> tuple:
    """One look of ``--until-confident`` after ``n`` rounds: ``(results, frozen, ops to extend)``
    (:func:`zlf.ab.analysis.decide` on the campaign's values, then :func:`zlf.stats.adaptive_step`'s
    freezing and extension rule); benchmarks/verdict_sim.py calls :func:`step` the same way."""
    processes: dict = {}
    values, blockers, _, _ = collect(campaign, n, processes)
    owner = point_ops(campaign)
    mode, controls, canaries, why = controls_of(campaign, values)
    return step(values, settings_of(campaign), spending_plan(campaign), frozen_of(campaign),
                lambda point: owner.get(point, point.split("/")[0]), noise_of(campaign), blockers,
                mode, controls, canaries, processes, why, point_kinds(campaign, values) if controls else None)


def step(values, settings, plan, frozen, group_of, noise=None, notes=None, mode="none", controls=(), canaries=(),
         processes=None, why="", kinds=None) -> tuple:
    """:func:`zlf.stats.adaptive_step` with the controls' normalisation: ``(results, frozen, groups)``.
    A look freezes only verdicts the values as measured give too, and none while the controls
    cannot tell who moved (their disagreement may be a side's clock mode seen too early)."""
    decided = decide(values, settings, noise, notes, plan, frozen, mode, controls, canaries, processes, why, False,
                     kinds)
    results = decided.results
    before, frozen = frozen or {}, stats.newly_frozen(results, frozen)
    norm = decided.normalisation
    if norm.undecided or (norm.disagree and not norm.active):
        frozen = dict(before)  # the controls could not tell who moved: this look decides nothing
    elif norm.active:  # freeze only what the values as measured decide the same way
        measured = {r.point: norm.raw[r.point] for r in results if r.point not in before and r.point in frozen}
        same = {r.point: r.verdict for r in stats.look(measured, settings, plan, {}, notes=notes)} if measured else {}
        frozen = {p: v for p, v in frozen.items() if p in before or same.get(p) == v[0]}
    n = max((len(a) for a, _ in values.values()), default=0)
    open_ = [r for r in results if r.verdict == stats.UNSURE or r.point not in frozen]
    extend = list(dict.fromkeys(group_of(r.point) for r in open_)) if n < plan.max_rounds else []
    return results, frozen, extend


def drive(campaign, printer, busy=None, idle_wait=60.0, scaled=None) -> None:
    """Run every pending run; when adaptive, look after each round, freeze the verdicts a look
    decides, and add a round only for the ops with an undecided point."""
    s = campaign.statistics
    while True:
        if scaled is not None:
            scaled.run_pending(campaign, printer)
        else:
            run_pending(campaign, printer, busy, idle_wait)
        if not s.until_confident:
            return
        n = campaign.planned_rounds()
        if campaign.library:
            if not _library_look(campaign, printer, n, s):
                return
            continue
        results, frozen, extend = look(campaign, n)
        alpha = look_level(campaign, n)
        campaign.data["frozen"] = {p: list(v) for p, v in frozen.items()}
        extend = [o.name for o in campaign.ops if o.name in extend and op_rounds(campaign, o.name) == n]
        if extend:  # the canaries measure every process that runs an op under test
            extend += [o for o in s.canary_ops if o not in extend]
        looks = campaign.looks
        if not looks or looks[-1].rounds != n:
            campaign.add_look(Look(rounds=n, alpha=alpha, points=len(results), decided=len(frozen),
                                   undecided=len(results) - len(frozen), ops_extended=extend, at=now()))
        campaign.save()
        printer.line(f"look after round {n}: level {alpha:.3g}, {len(results) - sum(r.verdict == stats.UNSURE for r in results)} "
                     f"of {len(results)} points decided" + (f"; another round for {', '.join(extend)}" if extend and n < s.max_rounds else ""))
        if not extend or not results:
            return
        campaign.add_round(n + 1, ops=extend)




def _library_look(campaign, printer, n: int, s) -> bool:
    """A library campaign's look after round ``n`` (:func:`zlf.ab.library.look`: the screen, then
    confirmation looks); adds round ``n + 1`` for the ops with a point still open. False: done."""
    from . import library

    step_ = library.look(campaign, n, screen_rows=False)
    library.keep(campaign, step_)
    extend = [o.name for o in campaign.ops if o.name in step_.extend and op_rounds(campaign, o.name) == n]
    if extend:  # the canaries measure every process that runs an op under test
        extend += [o for o in s.canary_ops if o not in extend]
    plan = library.plan_of(campaign)
    decided, points = library.decided_count(step_)
    alpha = s.alpha if n <= plan.screen_rounds else plan.spending(s.alpha).level(n)
    looks = campaign.looks
    if not looks or looks[-1].rounds != n:
        campaign.add_look(Look(rounds=n, alpha=alpha, points=points, decided=decided, undecided=points - decided,
                               ops_extended=extend, at=now()))
    campaign.save()
    stage = "screen" if n == plan.screen_rounds else ("screening" if n < plan.screen_rounds else "confirmation look")
    own = [o for o in extend if o not in s.canary_ops]
    printer.line(f"{stage} after round {n}: {decided} of {points} points decided "
                 f"({len(step_.state.cleared)} cleared SAME at the screen)"
                 + (f"; another round for {len(own)} op{'s' if len(own) != 1 else ''}" if own else ""))
    if not extend:
        return False
    campaign.add_round(n + 1, ops=extend)
    return True
