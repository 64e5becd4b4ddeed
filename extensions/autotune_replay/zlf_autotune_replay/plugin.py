"""Record every Triton autotune decision of a run, or replay a recorded run's decisions exactly.

Autotuning re-sweeps in every process and timing noise picks different winners, so an A/B that
lets each side tune for itself measures the autotuner, not the compiler. Record mode (the
default) writes each decision to ``autotune_records/<kernel>.json`` as it happens; replay
(``--replay-from RUN_DIR`` or ``ZLF_REPLAY_FROM``) pins every tuned kernel to the recorded config
without sweeping, and marks each point that had to tune live instead::

    AUTOTUNE_REPLAY_FALLBACK op=<op> point=<id> kernel=<k> reason=<missing_key|compile_error|...>

The extension is a class: the plugin manager makes a fresh instance per invocation, which holds
this invocation's state (the process-wide Autotuner patch is removed at the end of the run).
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Optional

from zlf import UsageError, hookimpl
from zlf.ab import add_example
from zlf.ab.extending import SOURCE, RunNeed

from .libtuner import MODES, LibtunerCache, clear_libentry_launchers
from .records import RECORDS_DIR, RecordWriter, ReplaySource, canonical_key
from .tuners import HOW_REPLAYED, Tracker, TunerPatch

ENV_REPLAY = "ZLF_REPLAY_FROM"
ENV_LIBTUNER = "ZLF_LIBTUNER_CACHE"
MARKER = "AUTOTUNE_REPLAY_FALLBACK"


def marker_line(op: str, point: str, kernel: str, reason: str) -> str:
    return f"{MARKER} op={op} point={point} kernel={kernel} reason={reason}"


def _replays(traits) -> bool:
    """Record/replay applies to commands that time points of the ops they plan (``zlf run``,
    ``zlf ab``'s runs), not a task's candidates."""
    return traits.times_points and traits.plans_shapes


class AutotuneReplay:
    """The ``autotune_replay`` extension (entry point ``zlf_autotune_replay.plugin:AutotuneReplay``)."""

    def __init__(self):
        self.replay: Optional[ReplaySource] = None
        self.tracker: Optional[Tracker] = None
        self.patch: Optional[TunerPatch] = None
        self.libtuner: Optional[LibtunerCache] = None
        self.writer: Optional[RecordWriter] = None
        self.run = None
        self._marked: set = set()  # (kernel, key) already marked in the current point
        self._libentry_cleared = 0

    @property
    def mode(self) -> str:
        return "replay" if self.replay is not None else "record"

    # ------------------------------------------------------------------ command line
    @hookimpl
    def add_options(self, parser, traits):
        if not _replays(traits):
            return
        g = parser.add_argument_group("autotune_replay (extension)")
        g.add_argument("--replay-from", metavar="RUN_DIR",
                       help=f"pin every autotuned kernel to the configs recorded in RUN_DIR (also {ENV_REPLAY}); "
                            "default: record this run's decisions under autotune_records/")
        g.add_argument("--libtuner-cache", choices=MODES,
                       help="FlagGems libtuner's persistent cache: 'shared' reuses the user's cache (default), "
                            f"'fresh' tunes against a throwaway one (also {ENV_LIBTUNER})")

    @hookimpl(tryfirst=True)
    def configure(self, session):
        traits, config = session.traits, session.config
        if not (_replays(traits) and traits.runs_points_here):
            # a command that hands run options on to its zlf run processes (forwards_run_options:
            # zlf ab) leaves them to those; any other command would silently ignore them: say so.
            given = [flag for flag, dest in (("--replay-from", "replay_from"), ("--libtuner-cache", "libtuner_cache"))
                     if config.options.get(dest)]
            if given and not traits.forwards_run_options:
                raise UsageError(f"{' and '.join(given)}: autotune record/replay works with zlf run (and zlf ab), "
                                 f"not with zlf {config.command}")
            return
        mode = config.options.get("libtuner_cache") or os.environ.get(ENV_LIBTUNER) or "shared"
        if mode not in MODES:
            raise UsageError(f"{ENV_LIBTUNER}={mode!r}: choose one of {', '.join(MODES)}")
        if mode == "fresh" and "flag_gems" in sys.modules:
            raise UsageError("--libtuner-cache fresh: flag_gems was imported before zlf could point "
                             "FLAGGEMS_DB_URL at a fresh cache; import it lazily (inside an op)")
        source = config.options.get("replay_from")
        option = "--replay-from"
        if not source and os.environ.get(ENV_REPLAY):
            source, option = os.environ[ENV_REPLAY], ENV_REPLAY
        self.replay = ReplaySource.open(source, option) if source else None
        self.libtuner = LibtunerCache(mode)
        self.libtuner.apply()  # before any op module (and so flag_gems) is imported
        self.tracker = Tracker(self.replay, self._on_decision, self._on_fallback)

    # ------------------------------------------------------------------ zlf ab campaigns
    @hookimpl
    def add_campaign_options(self, parser):
        add_example(parser, "zlf ab --switch X --until-confident --ext autotune_replay   round 1 A records autotune "
                            "decisions, every other run replays them")

    @hookimpl
    def campaign_setup(self, plan, options, session):
        plan.own_options.append("replay_from")  # round 1 A records, every other run replays it
        plan.data["replay"] = True

    @hookimpl
    def campaign_run_needs(self, campaign, op, round, side):
        """Every run but round 1 A replays round 1 A's record (when it wrote one)."""
        if not campaign.data.get("replay") or (round, side) == (1, "A"):
            return []
        return [RunNeed(options={"replay_from": SOURCE}, round=1, side="A", path=RECORDS_DIR)]

    @hookimpl
    def campaign_context(self, data):
        if data.get("replay"):
            return ["autotune replay: on (round 1 A records, every other run replays it)"]
        return ["autotune replay: OFF -- autotune_replay was not active: every run tunes for itself"]

    # ------------------------------------------------------------------ run lifecycle
    @hookimpl(tryfirst=True)  # before any other extension's before_run can launch a kernel
    def before_run(self, run):
        if self.tracker is None:
            return
        self.run = run
        # Not in configure: importing triton before the cpu backend turns the interpreter on
        # breaks interpreted kernels. A kernel tuned at import time is tuned again (or pinned) on
        # its first call from here on: TrackedCache starts empty.
        self.patch = TunerPatch(self.tracker)
        self.patch.install()
        if self.replay is None:
            self.writer = RecordWriter(run.dir / RECORDS_DIR)
        # A FlagGems launcher filled at import time would skip the tuner for good: empty it, so
        # the first call in a point is recorded (or pinned).
        self._libentry_cleared = clear_libentry_launchers()
        if self._libentry_cleared:
            run.log.info(f"autotune_replay: emptied {self._libentry_cleared} FlagGems libentry launcher "
                         "caches filled before the run started")
        run.meta["autotune"] = self._meta()

    @hookimpl
    def before_point(self, run, point):
        if self.tracker is not None:
            self.tracker.begin_point(point.id)
            self._marked = set()

    @hookimpl
    def after_point(self, run, point, record):
        if self.tracker is None:
            return
        used = self.tracker.used()
        for d in used:
            # A point reusing a fallback decided in an earlier point is affected too.
            if d.fallback_reason and (d.kernel.name, canonical_key(d.key)) not in self._marked:
                run.mark(marker_line(point.op, point.id, d.kernel.name, d.fallback_reason))
        if used:
            run.annotate("autotune", [d.to_json(point.id) for d in used])
        self.tracker.end_point()

    @hookimpl
    def after_run(self, run, results):
        if self.tracker is None:
            return
        try:
            self.libtuner.keep(run.dir)
        finally:
            run.meta["autotune"] = self._meta()
            if self.patch is not None:
                self.patch.remove()

    # ------------------------------------------------------------------ tracker callbacks
    def _on_decision(self, decision, tuner, details) -> None:
        if self.writer is None:
            return  # a replay run writes no records
        entry = {"key": decision.key, "config": decision.config, "how": decision.how, "point": decision.point}
        entry.update(details)
        self.writer.add(decision.kernel, tuner, entry)

    def _on_fallback(self, identity, key, reason, exc) -> None:
        run = self.run
        if exc is not None:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            run.log.info(f"autotune_replay: recorded config of {identity.name} for key {key} failed: "
                         f"{type(exc).__name__}: {first}; tuning live")
        point = run.current_point
        if point is None:  # a kernel tuned outside any point (another extension's before_run)
            run.log.marker(marker_line("-", "-", identity.name, reason))
            return
        self._marked.add((identity.name, canonical_key(key)))
        run.mark(marker_line(point.op, point.id, identity.name, reason))

    # ------------------------------------------------------------------ meta.json
    def _meta(self) -> dict:
        decisions = list(self.tracker.decisions.values())
        meta = {"mode": self.mode, "source": str(self.replay.dir) if self.replay else None}
        meta["decisions"] = dict(Counter(d.how for d in decisions))
        fallbacks = [{"kernel": d.kernel.name, "key": d.key, "reason": d.fallback_reason, "point": d.point}
                     for d in decisions if d.fallback_reason]
        meta["fallbacks"] = fallbacks
        if self.replay is None:
            meta["records"] = RECORDS_DIR
            meta["kernels"] = self.writer.summary() if self.writer else {}
        else:
            meta["pinned"] = sum(1 for d in decisions if d.how == HOW_REPLAYED)
            meta["source_started"] = (self.replay.meta or {}).get("started")
            meta["source_kernels"] = self.replay.kernels
            meta["source_decisions"] = self.replay.decisions
        meta["libentry_launchers_cleared"] = self._libentry_cleared
        meta.update(self.libtuner.describe())
        return meta
