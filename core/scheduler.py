"""Which work unit runs next on which worker: the bookkeeping of ``--gpus`` and ``--executor ray``.

No processes here, only state, so the rules are tested with fake workers (tests/test_scale.py):

* a **unit** is a list of runs executed in order on one worker (one GPU): in a campaign a round
  pair (A and B of a round never run on different GPUs) or a whole op; in a sharded ``zlf run``
  one op argument;
* a unit waits for the units it reads from (``after``: round 1's A run records the autotune
  choices every other run of its op replays);
* a unit whose worker died is queued again, preferably for another worker, at most ``retries``
  times; after that it is given up and stays pending on disk for ``--resume``;
* per worker: units done, runs, busy seconds, failed runs, lost units (the per-GPU summary).
"""
from __future__ import annotations

from typing import Optional

import attrs
from tabulate import tabulate

QUEUED, RUNNING, DONE, SKIPPED, GAVE_UP = "queued", "running", "done", "skipped", "gave up"


def gpu_label(worker: str) -> str:
    """``gpu1`` for a local worker (its index), Ray's ``host:gpuN`` unchanged."""
    return f"gpu{worker}" if str(worker).isdigit() else str(worker)


@attrs.frozen
class Unit:
    """Runs (keys the job knows, e.g. ``add/r1_A``) that execute in order on one worker."""

    id: str
    keys: tuple = attrs.field(converter=tuple)
    group: str = ""  # the op: a failed run of the group skips its other units
    after: tuple = attrs.field(default=(), converter=tuple)


@attrs.define
class WorkerStats:
    worker: str
    identity: str = ""
    units: int = 0
    runs: int = 0
    seconds: float = 0.0
    failed_runs: int = 0
    lost: int = 0

    def to_json(self) -> dict:
        return attrs.asdict(self)


class Scheduler:
    """The queue of units shared by all workers."""

    def __init__(self, units, retries: int = 1):
        self.units = {u.id: u for u in units}
        self.order = [u.id for u in units]
        self.state = {u.id: QUEUED for u in units}
        self.attempts = {u.id: 0 for u in units}
        self.tried_on: dict = {u.id: [] for u in units}
        self.reasons: dict = {}
        self.retries = retries
        self.live: list = []
        self.stats: dict = {}

    # ------------------------------------------------------------------ workers
    def add_worker(self, worker: str) -> None:
        if worker not in self.live:
            self.live.append(worker)
        self._stats(worker)

    def retire_worker(self, worker: str) -> None:
        if worker in self.live:
            self.live.remove(worker)

    def _stats(self, worker: str) -> WorkerStats:
        return self.stats.setdefault(worker, WorkerStats(worker))

    # ------------------------------------------------------------------ units
    def take(self, worker: str, skip=None) -> Optional[Unit]:
        """The next unit for ``worker``, or None (nothing ready for it now).

        :param skip: ``unit -> reason or None``; a unit with a reason is skipped, not run.
        """
        for uid in self.order:
            if self.state[uid] != QUEUED:
                continue
            unit = self.units[uid]
            blocked = [d for d in unit.after if self.state.get(d) in (GAVE_UP,)]
            if blocked:
                self.state[uid], self.reasons[uid] = GAVE_UP, f"waits for {blocked[0]}, which was given up"
                continue
            if any(self.state.get(d, DONE) not in (DONE, SKIPPED) for d in unit.after):
                continue
            why = skip(unit) if skip else None
            if why:
                self.state[uid], self.reasons[uid] = SKIPPED, why
                continue
            others = [w for w in self.live if w != worker and w not in self.tried_on[uid]]
            if worker in self.tried_on[uid] and others:
                continue  # a retry goes elsewhere while there is an elsewhere
            self.state[uid] = RUNNING
            self.attempts[uid] += 1
            self.tried_on[uid].append(worker)
            return unit
        return None

    def done(self, uid: str, worker: str, seconds: float = 0.0, runs: int = 0, failed_runs: int = 0,
             identity: str = "") -> None:
        self.state[uid] = DONE
        s = self._stats(worker)
        s.units += 1
        s.runs += runs
        s.seconds += seconds
        s.failed_runs += failed_runs
        if identity and not s.identity:
            s.identity = identity

    def lost(self, uid: str, worker: str, reason: str) -> bool:
        """The worker running ``uid`` died (or its node): queue the unit again unless it has used
        its retries. True when it was queued again."""
        self._stats(worker).lost += 1
        if self.attempts[uid] <= self.retries:
            self.state[uid] = QUEUED
            self.reasons[uid] = reason
            return True
        self.state[uid] = GAVE_UP
        self.reasons[uid] = f"{reason} (tried {self.attempts[uid]} times: {', '.join(self.tried_on[uid])})"
        return False

    # ------------------------------------------------------------------ state
    def running(self) -> list:
        return [u for u, s in self.state.items() if s == RUNNING]

    def queued(self) -> list:
        return [u for u, s in self.state.items() if s == QUEUED]

    @property
    def finished(self) -> bool:
        return not self.running() and not self.queued()

    def given_up(self) -> dict:
        return {u: self.reasons.get(u, "") for u, s in self.state.items() if s == GAVE_UP}

    def summary_rows(self) -> list:
        return [s.to_json() for s in self.stats.values()]

    def summary_table(self) -> str:
        rows = [[gpu_label(s.worker), s.identity or "-", s.units, s.runs, f"{s.seconds:.1f}", s.failed_runs, s.lost]
                for s in self.stats.values()]
        return tabulate(rows, headers=["worker", "device", "units", "runs", "busy s", "failed runs", "lost units"])
