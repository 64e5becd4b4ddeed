"""How a campaign's runs are started and filed: each run a fresh ``zlf run --config FILE`` process
(``zlf task`` for a task package, ...) of its side's configuration (``_config/<side>.json``, with
what the run needs added), described by a JSON-able *run spec* whose paths are relative to
``{campaign}``, so that a worker process or a Ray task elsewhere can execute it
(:func:`zlf.executors.execute_spec`) and the driver files the outcome (:meth:`Execution.file`).
The campaign process never imports a kernel.
"""
from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Optional

from ..config import owned_options
from ..errors import UsageError
from ..executors import ROOT, config_of, device_identity, environment, execute_spec
from ..rundir import RESULTS, RunDir
from ..scheduler import Unit
from .layout import (FAILED, LOGS, OK, PENDING, RUNNING, SHARED, SKIPPED, STAGING, inside_dir, read_shared,
                     split_run_dir)


class Execution:
    """The part of :class:`~zlf.ab.campaign.Campaign` that builds command lines and run specs,
    starts runs and files their outcomes."""

    def command(self, run: dict, staging: Path, root=None) -> list:
        """The command line of one run, without its environment: ``zlf <op.command> OP --config
        <the side's configuration> --out STAGING --name r<k>_<side>`` and the side's arguments.
        What the run's needs add goes into its configuration (:meth:`config_changes`).

        :param root: the campaign directory as the executing side sees it (default: this one).
        """
        root = Path(root) if root is not None else self.path
        return self._argv(run, [self.op_spec(run["op"]).run_spec], staging, root) + [
            "--config", str(root / self.config_path(run["side"]).relative_to(self.path))]

    def _argv(self, run: dict, specs: list, staging, root: Path) -> list:
        side = self.sides[run["side"]]
        command = self.op_spec(run["op"]).command
        return [side.interpreter, "-m", "zlf", command, *specs, "--out", str(staging),
                "--name", f"r{run['round']}_{run['side']}", *self.run_args, *side.args]

    def config_changes(self, run: dict, root=None) -> tuple:
        """``(changes, if_exists)``: what ``run``'s needs change in its side's configuration.

        ``changes``: ``{"options": {owner: {dest: value}}, "extensions": [...]}`` of the needs that
        always apply; ``if_exists``: ``[{"path", "options", "extensions"}]``, applied when the
        campaign-relative ``path`` exists as the run starts (an earlier run may not have written
        it; a spec is built before its unit runs).
        """
        root = Path(root) if root is not None else self.path
        sets = self.hooks.option_sets if self.hooks is not None else ()
        changes: dict = {"options": {}, "extensions": []}
        if_exists = []
        for need in self.needs(run):
            if need.round is None:
                for owner, owned in owned_options(need.values(), sets, "a run need's option").items():
                    changes["options"].setdefault(owner, {}).update(owned)
                changes["extensions"] += [n for n in need.extensions if n not in changes["extensions"]]
                continue
            source = self.source_dir(run["op"], need.round, need.side)
            if_exists.append({"path": f"{source}/{need.path}" if need.path else source,
                              "options": owned_options(need.values(str(root / source)), sets, "a run need's option"),
                              "extensions": list(need.extensions)})
        return changes, if_exists

    def run_config(self, run: dict, root=None):
        """The :class:`~zlf.config.RunConfig` ``run`` gets if it starts now (its side's, with
        what its needs change)."""
        changes, if_exists = self.config_changes(run, root)
        return config_of(self.config(run["side"]), changes, if_exists, self.path)

    def _config_spec(self, run: dict, log: str, root: Path) -> tuple:
        """``(config, needs, if_exists)`` of a run spec (see :func:`zlf.executors.execute_spec`)."""
        base = str(self.config_path(run["side"]).relative_to(self.path))
        changes, if_exists = self.config_changes(run, root)
        config = {"base": base, **changes, "file": str(Path(log).with_suffix(".json"))}
        return config, [base] + [item["path"] for item in if_exists], if_exists

    def env_overrides(self, run: dict, root=None) -> dict:
        """What a run's environment adds to the executing process's own."""
        side = self.sides[run["side"]]
        cache = Path(self.triton_cache) / side.cache_key()
        if root is not None and inside_dir(cache, self.path):
            cache = Path(root) / cache.relative_to(self.path)
        env = dict(side.env)
        env["TRITON_CACHE_DIR"] = str(cache)
        env["ZLF_NO_PROGRESS"] = "1"  # plain per-point lines into the run's log file
        env["NO_COLOR"] = "1"
        return env

    def environment(self, run: dict) -> dict:
        return environment(self.env_overrides(run))

    def execute_shared(self, runs: list) -> list:
        """Run ``runs`` (one round and side) in one process, then file each op's outcome.

        :return: the runs filed ok, and those whose round goes alone (see :meth:`file_shared`).
        Raises KeyboardInterrupt (after marking the runs pending) when the user interrupts.
        """
        key = self.shared_key(runs)
        self.start_all(runs)
        try:
            outcome = execute_spec(self.shared_spec(key, runs), self.path)
        except KeyboardInterrupt:
            for run in runs:
                run.update(status=PENDING, started=None)
            self.save()
            raise
        if not self.file_shared(key, runs, outcome):
            raise KeyboardInterrupt
        return runs

    def file_shared(self, key: str, runs: list, outcome: dict) -> bool:
        """Split a shared process's run directory into each op's ``<op>/r<k>_<side>`` and file it.

        Per op: every planned point recorded and ok -> ok; a point not ok, or the op in flight
        when the process died (or every op, when it died after all of them) -> the op's round
        (both sides) is pending again with ``alone``: it is re-run in per-op processes, as
        campaigns without shared processes run it; an op the process never reached -> pending
        for the next shared process. False when the user interrupted it (all pending again).
        """
        rc = outcome["rc"]
        raw = self.path / key
        states = self._shared_states(raw if outcome["made"] else None, runs, rc)
        self.note_process(key, outcome, raw if outcome["made"] else None, runs)
        if rc == 130 or rc == -signal.SIGINT:
            for run in runs:
                run.update(status=PENDING, started=None, finished=None)
            shutil.rmtree(raw, ignore_errors=True)
            self.save()
            return False
        share = round((outcome["seconds"] or 0) / max(1, len(runs)), 2)
        source = read_shared(raw) if outcome["made"] and any(s[0] == OK for s in states) else None
        for run, (state, names, points) in zip(runs, states):
            if run["status"] != RUNNING:
                continue  # its round went alone meanwhile (scaled: the other side failed first)
            if state == OK:
                dest = self.run_dir(run)
                if dest.exists():
                    shutil.rmtree(dest)
                split_run_dir(raw, dest, names, points, {"key": key, "ops": [r["op"] for r in runs], "rc": rc},
                              self.hooks, source)
                log = self.log_path(run)
                log.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.path / outcome["log"], log)
                run.update(status=OK, rc=0, finished=outcome["finished"], seconds=share, process=key, error=None,
                           flags=device_flags(dest), records=(dest / RESULTS).is_file())
                if outcome.get("started"):
                    run["started"] = outcome["started"]
                if "gpu" in run:
                    run["device_id"] = device_identity(dest)
            elif state == "not reached":
                run.update(status=PENDING, started=None)
            else:
                why = _failure_reason(rc, raw if outcome["made"] else None, self.path / outcome["log"], names)
                for side in ("A", "B"):  # the round's pair again, both sides alone: one pair, one way
                    r = self.find(run["op"], run["round"], side)
                    if r is not None and r["status"] in (PENDING, RUNNING, OK):
                        r.update(status=PENDING, started=None, finished=None, rc=None, error=None, alone=True,
                                 shared_error=f"{state} in {key}: {why}" if r is run else f"{run['side']} side {state} in {key}")
                        r.pop("process", None)
                for r in self.runs:  # and every later round of the op (see shares)
                    if r["op"] == run["op"] and r["status"] == PENDING:
                        r["alone"] = True
        if not self.is_source(runs, raw):
            shutil.rmtree(raw, ignore_errors=True)  # split; a process later runs read from stays
        self.save()
        return True

    def _shared_states(self, raw: Optional[Path], runs: list, rc: int) -> list:
        """``[(ok | "failed" | "crashed" | "not reached", op names, planned points)]`` per run."""
        meta = RunDir(raw).meta() if raw is not None else {}
        records = RunDir(raw).records()[0] if raw is not None else []
        by_spec = {a.get("spec"): a for a in meta.get("op_args") or []}
        states = []
        for run in runs:
            entry = by_spec.get(self.op_spec(run["op"]).run_spec)
            if entry is None:
                states.append(["not reached", set(), 0])
                continue
            names, points = set(entry.get("ops") or ()), int(entry.get("points") or 0)
            mine = {r.point: r for r in records if r.op in names}
            if points and len(mine) >= points:
                state = OK if all(r.status == "ok" for r in mine.values()) else "failed"
                if any((r.error or "").startswith("worker died:") for r in mine.values()):
                    state = "crashed"  # a point killed the process; zlf run's supervisor filed it and went on
            else:  # no point planned (zlf run alone refuses that) or cut short
                state = "crashed" if mine or not points else "not reached"
            states.append([state, names, points])
        if rc == 0:
            for s in states:  # it ended well without running the op: nothing to trust there
                if s[0] == "not reached":
                    s[0] = "crashed"
        elif not any(s[0] in ("failed", "crashed") for s in states):
            first = next((s for s in states if s[0] == "not reached"), None)
            if first is not None:
                first[0] = "crashed"  # it died starting this op (or before any: one op at a time)
            else:
                for s in states:  # it died after every op: nothing to pin it on
                    s[0] = "crashed"
        return [tuple(s) for s in states]

    def execute(self, run: dict) -> dict:
        """Start one run as a fresh ``zlf run`` process, wait, file its directory and status.

        Raises KeyboardInterrupt (after marking the run) when the user interrupts.
        """
        self.start(run)
        try:
            outcome = execute_spec(self.run_spec(run), self.path)
        except KeyboardInterrupt:
            run.update(status=PENDING, started=None)  # re-run whole on --resume
            self.save()
            raise
        if not self.file(run, outcome):
            raise KeyboardInterrupt
        return run

    def file(self, run: dict, outcome: dict) -> bool:
        """Record a run's outcome (its directory is already in place). False when the run was
        interrupted by the user: it is pending again."""
        rc = outcome["rc"]
        final = self.run_dir(run)
        made = outcome["made"] and final.is_dir()
        self.note_process(run["dir"], outcome, final if made else None, [run])
        run.update(rc=rc, finished=outcome["finished"], seconds=outcome["seconds"])
        if outcome.get("started"):
            run["started"] = outcome["started"]
        if rc in (130, 143, -signal.SIGINT, -signal.SIGTERM):  # stopped, not failed
            run.update(status=PENDING, started=None, finished=None)
            self.save()
            return False
        if rc == 0 and made:
            run.update(status=OK, records=(final / RESULTS).is_file())
        else:
            run["status"] = FAILED
            run["error"] = _failure_reason(rc, final if made else None, self.path / outcome["log"])
        if made:
            run["flags"] = device_flags(final)
            if "gpu" in run:
                run["device_id"] = device_identity(final)
        self.save()
        return True


    def note_process(self, key: str, outcome: dict, run_dir: Optional[Path], runs: list) -> None:
        """Keep one finished process's wall seconds, time split and compile counts in campaign.json's
        ``processes`` (:func:`zlf.ab.library.time_split` adds them up); a process stopped by the
        user is not one (it runs again)."""
        if outcome["rc"] in (130, 143, -signal.SIGINT, -signal.SIGTERM):
            return
        from .library import process_entry

        try:
            meta = RunDir(run_dir).meta() if run_dir is not None else {}
        except (OSError, UsageError):  # an unreadable meta.json costs the split, not the filing
            meta = {}
        self.data.setdefault("processes", {})[key] = process_entry(outcome, meta, runs)

    def run_spec(self, run: dict) -> dict:
        """Everything needed to execute ``run`` anywhere: paths relative to ``{campaign}``.

        ``config``: the side's configuration file and what the run's needs change in it;
        ``needs``: campaign-relative paths the run reads (that file, earlier runs' files,
        :class:`RunNeed`); ``if_exists``: see :meth:`config_changes`.
        """
        root = Path(ROOT)
        staging = self._staging(run).relative_to(self.path)
        log = str(self.log_path(run).relative_to(self.path))
        config, needs, if_exists = self._config_spec(run, log, root)
        spec = {"key": run["dir"], "argv": self._argv(run, [self.op_spec(run["op"]).run_spec], root / staging, root),
                "env": self.env_overrides(run, root=root), "cwd": self.cwd, "staging": str(staging),
                "dir": run["dir"], "log": log, "config": config, "needs": needs, "if_exists": if_exists}
        if self.library:  # the round's other side runs too: a failure on B only is a finding of its own
            spec["goes_on"] = True
        return spec

    def shared_spec(self, key: str, runs: list) -> dict:
        """The run spec of one process that runs every op of ``runs`` (one round, one side, one
        :meth:`origin`)."""
        run = runs[0]
        root = Path(ROOT)
        name = Path(key).name
        staging = f"{SHARED}/{STAGING}/{name}"
        log = f"{SHARED}/{LOGS}/{name}.txt"
        argv = self._argv(run, [self.op_spec(r["op"]).run_spec for r in runs], root / staging, root)
        config, needs, if_exists = self._config_spec(run, log, root)  # the same for every op of the group (shared_groups)
        return {"key": key, "argv": argv, "env": self.env_overrides(run, root=root), "cwd": self.cwd,
                "staging": staging, "dir": key, "log": log, "config": config, "needs": needs,
                "if_exists": if_exists, "shared": [r["dir"] for r in runs]}


def _failure_reason(rc: int, run_dir: Optional[Path], log: Path, ops=None) -> str:
    """Why a run failed: its first point not ok (of ``ops`` only, when given: a shared process's
    op is told its own), else its exit and the log's last line."""
    if run_dir is not None:
        records, _ = RunDir(run_dir).records()
        bad = [r for r in records if r.status != "ok" and (not ops or r.op in ops)]
        if bad:
            r = bad[0]
            more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
            return f"{r.point} {r.status}: {r.error or ''}".strip() + more
    tail = [l for l in log.read_text(errors="replace").splitlines() if l.strip()][-1:] if log.is_file() else []
    what = f"exit code {rc}" if rc >= 0 else f"killed by signal {-rc}"
    return f"{what}" + (f": {tail[0][:200]}" if tail else "")


#: throttle-reason values that mean "not throttled" (none, or GPU idle).
_IDLE_THROTTLE = ("", "0x0000000000000000", "0x0000000000000001", "[N/A]", "N/A")


def device_flags(run_dir: Path) -> list:
    """Why a run's timings may be distorted, from its meta.json: the backend's busy warnings and
    throttle reasons or other processes seen at start or end of the run."""
    meta = RunDir(run_dir).meta()
    flags = list(meta.get("warnings") or [])
    for when in ("device_state_start", "device_state_end"):
        state = meta.get(when) or {}
        reasons = str(state.get("clocks_throttle_reasons.active", "") or "")
        if reasons not in _IDLE_THROTTLE:
            flags.append(f"throttled at {when[len('device_state_'):]} (reasons {reasons})")
        if state.get("other_processes"):
            flags.append(f"other processes at {when[len('device_state_'):]}: " + "; ".join(state["other_processes"]))
    return list(dict.fromkeys(flags))


# ----------------------------------------------------------------------------- scaled out
def campaign_units(campaign, per: str = "pair") -> list:
    """The pending runs as work units (:class:`zlf.scheduler.Unit`): one per round pair
    (``per="pair"``) or one per op (``per="op"``), runs in the campaign's order.

    A and B of a round always run in the same unit, hence on the same GPU: a pair half-done by
    a scaled-out campaign that was stopped is run again whole. A unit waits for the units that
    run what its runs read (:meth:`~zlf.ab.campaign.Campaign.sources`: an autotune record ...).
    """
    if campaign.shared and per == "pair":
        return _shared_units(campaign)
    groups: dict = {}
    for run in campaign.runs:
        groups.setdefault((run["op"], run["round"] if per == "pair" else 0), []).append(run)
    units = []
    for (op, k), runs in groups.items():
        todo = [r for r in runs if r["status"] in (PENDING, RUNNING)]
        if not todo:
            continue
        if per == "pair" and len(todo) < len(runs) and any("gpu" in r for r in runs if r not in todo):
            todo = [r for r in runs if r["status"] != SKIPPED]
        units.append(Unit(f"{op}/r{k}" if per == "pair" else op, [r["dir"] for r in todo], group=op))
    return _after_sources(campaign, units)


def _shared_units(campaign) -> list:
    """Units of a shared-process campaign: per round, one process per side (and origin),
    A and B on one GPU; the rounds of ops sent alone as per-op pair units (after the shared
    ones). A round half done on some GPU when the campaign stopped runs again whole."""
    failed = campaign.failed_ops()
    pending = [r for r in campaign.runs if r["status"] in (PENDING, RUNNING) and not campaign.skip_reason(r, failed)]
    rounds: dict = {}
    alone: dict = {}
    for run in pending:
        if campaign.shares(run):
            rounds.setdefault(run["round"], []).append(run)
        else:
            alone.setdefault((run["op"], run["round"]), []).append(run)
    units = []
    chunk = campaign.chunks()
    position = {id(r): i for i, r in enumerate(campaign.runs)}
    for k, runs in rounds.items():
        for run in list(runs):
            other = campaign.find(run["op"], k, "B" if run["side"] == "A" else "A")
            if other and other["status"] == OK and "gpu" in other and other not in runs:
                runs.append(other)  # its pair partner ran on another GPU: both again, here
        order = ("A", "B") if k % 2 == 1 else ("B", "A")
        runs.sort(key=lambda r: (order.index(r["side"]), position[id(r)]))
        for j in sorted({chunk.get(r["op"], 0) for r in runs}):  # a library's ops in one chunk per GPU
            mine = [r for r in runs if chunk.get(r["op"], 0) == j]
            keys = []
            for side in order:  # A's processes are known (keys) before B's origin is looked up
                keys += [campaign.shared_key(g) for g in campaign.shared_groups([r for r in mine if r["side"] == side])]
            units.append(Unit(f"r{k}" + (f"/c{j}" if len(set(chunk.values())) > 1 else ""), keys))
    for (op, k), runs in alone.items():
        units.append(Unit(f"{op}/r{k}", [r["dir"] for r in runs], group=op))
    return _after_sources(campaign, units)


def _after_sources(campaign, units: list) -> list:
    """``units`` where each waits for the units that run what its runs read (their
    :meth:`~zlf.ab.campaign.Campaign.sources`)."""
    runs = {r["dir"]: r for r in campaign.runs}
    members = {u.id: [d for k in u.keys for d in campaign.groups.get(k, [k])] for u in units}
    unit_of = {d: uid for uid, dirs in members.items() for d in dirs}
    out = []
    for u in units:
        after = []
        for d in members[u.id]:
            for need in (n for n in campaign.needs(runs[d]) if n.round is not None):
                dep = unit_of.get(f"{runs[d]['op']}/r{need.round}_{need.side}")
                if dep not in (None, u.id) and dep not in after:
                    after.append(dep)
        out.append(Unit(u.id, u.keys, u.group, tuple(after)) if after else u)
    return out


class CampaignJob:
    """The campaign as an executor sees it (zlf.executors): specs out, outcomes filed. A key is
    a run's directory, or a shared process's key (``_shared/r<k>_<side>``, see :meth:`Execution.shared_spec`)."""

    def __init__(self, campaign, printer):
        self.campaign = campaign
        self.printer = printer
        self.root = campaign.path
        self._runs = {r["dir"]: r for r in campaign.runs}

    def _group(self, key: str) -> list:
        return [self._runs[d] for d in self.campaign.groups.get(key, ())]

    def spec(self, key: str) -> dict:
        if key in self.campaign.groups:
            return self.campaign.shared_spec(key, self._group(key))
        return self.campaign.run_spec(self._runs[key])

    def skip(self, unit) -> Optional[str]:
        failed = self.campaign.failed_ops().get(unit.group)
        if not failed:
            return None
        reason = f"op failed in r{failed['round']}_{failed['side']}"
        self.skipped(unit.keys, reason)
        return reason

    def started(self, key: str, worker: dict) -> None:
        if key in self.campaign.groups:
            # a round sent alone meanwhile is not in this process's hands
            self.campaign.start_all([run for run in self._group(key) if not run.get("alone")], worker)
            return
        self.campaign.start(self._runs[key], worker)

    def finished(self, key: str, outcome: dict, worker: dict) -> bool:
        if key in self.campaign.groups:
            runs = self._group(key)
            for run in runs:
                if run["status"] == RUNNING:
                    run.update(worker)
            filed = self.campaign.file_shared(key, runs, outcome)
            measured = [run for run in runs if run["status"] == OK and run.get("process") == key]
            if measured:
                self.printer.process(measured)
            for run in runs:
                if run not in measured and run.get("alone") and run.get("shared_error", "").find(key) >= 0:
                    self.printer.line(f"{run['op']} r{run['round']}_{run['side']}: {run['shared_error']}; its round runs alone")
            return filed  # the unit goes on: a failed op's round is re-run alone in a later batch
        run = self._runs[key]
        run.update(worker)
        filed = self.campaign.file(run, outcome)
        self.printer.done(run)
        return filed and (run["status"] == OK or self.campaign.library)

    def skipped(self, keys, reason: str) -> None:
        for key in keys:
            for run in self._group(key) if key in self.campaign.groups else [self._runs[key]]:
                if run["status"] in (PENDING, RUNNING) and key in self.campaign.groups:
                    run.update(status=PENDING, started=None)  # a shared process not run: its ops wait
                elif run["status"] in (PENDING, RUNNING):
                    run.update(status=SKIPPED, error=reason)
                    self.printer.done(run)
        self.campaign.save()

    def lost(self, unit) -> None:
        for key in unit.keys:
            for run in self._group(key) if key in self.campaign.groups else [self._runs[key]]:
                if run["status"] in (PENDING, RUNNING):
                    run.update(status=PENDING, started=None, finished=None, rc=None)  # re-run whole, the pair together
                elif key in self.campaign.groups and run["status"] == OK and run.get("process") == key:
                    run.update(status=PENDING, started=None, finished=None, rc=None)
        self.campaign.save()

    def discard(self, key: str) -> None:
        if key in self.campaign.groups:
            for p in (self.root / key, self.root / SHARED / STAGING / Path(key).name):
                shutil.rmtree(p, ignore_errors=True)
            return
        self.campaign.discard_partial(self._runs[key])

    def identity(self, key: str) -> str:
        runs = self._group(key) if key in self.campaign.groups else [self._runs[key]]
        return next((r.get("device_id") for r in runs if r.get("device_id")), "")

    def note(self, text: str) -> None:
        self.printer.line(text)

