"""The state of one ``zlf ab`` campaign on disk, and how one of its runs is started.

Layout::

    <parent>/ab_<label>_<YYYYmmdd-HHMMSS>/
      campaign.json        the plan, the sides, every run's status and start/end; rewritten
                           atomically after every change, so a killed campaign can be resumed
      summary.log          the summary table and every guard's message (plain text)
      summary.json         per-point statistics (read by ``--noise-from``)
      report.md            markdown report; delta_intervals.png its plot
      <op>/r<k>_<A|B>/     one run directory per op, round and side (``zlf run`` wrote it)
      <op>/logs/r<k>_<A|B>.txt   that run's stdout and stderr
      _shared/logs/r<k>_<A|B>.txt  output of a process that ran every op of a round and side
      triton_cache/<A|B>-<hash>/ one Triton cache per side definition (unless --triton-cache)

Runs are ``zlf run`` processes (``zlf task`` for a task package); the campaign process never
imports a kernel. A campaign with ``"process": "shared"`` runs every op of a (round, side) in
one process (startup paid once) and splits its run directory into the per-op ones
(:meth:`Campaign.file_shared`); an op that fails or crashes there gets its round re-run in
per-op processes (``"alone"``), so a report never rests on a shared process that misbehaved. A run is described by a JSON-able *run spec* (:meth:`Campaign.run_spec`)
whose paths are relative to ``{campaign}``, so that a worker process or a Ray task elsewhere can
execute it (:func:`execute_spec`) and the driver files the outcome (:meth:`Campaign.file`).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import attrs
import yaml

from . import __version__
from .errors import UsageError
from .procs import Terminated, die_with_parent
from .rundir import LOG, META, RESULTS, SHAPES, RunDir, inside, write_atomic

CAMPAIGN = "campaign.json"
#: placeholder for the campaign directory in a run spec (replaced where the run executes).
ROOT = "{campaign}"
SUMMARY_LOG = "summary.log"
SUMMARY_JSON = "summary.json"
REPORT = "report.md"
PLOT = "delta_intervals.png"
STAGING = ".staging"
LOGS = "logs"
#: where the autotune_replay extension writes a record run's decisions (docs/autotune.md).
RECORDS_DIR = "autotune_records"
FORMAT_VERSION = 1

#: where processes that run several ops write (an op may not have this name).
SHARED = "_shared"
#: ``campaign.json``'s ``process``: one process per (op, round, side), or per (round, side).
PER_OP, SHARED_PROCESS = "per-op", "shared"

#: campaign.json fields that become the runs' command lines, environment or code: signed at
#: creation with this user's key, so that ``--resume`` runs nothing an edit put there.
#: (``scale`` too: a Ray address is where results are unpickled from.)
SIGNED = ("sides", "ops", "run_args", "extension_args", "cwd", "triton_cache", "scale", "identities")
KEY_FILE = "campaign.key"

PENDING, RUNNING, OK, FAILED, SKIPPED = "pending", "running", "ok", "failed", "skipped"
#: campaign status words.
C_RUNNING, C_COMPLETE, C_INTERRUPTED = "running", "complete", "interrupted"


def now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


_write_atomic = write_atomic


@attrs.frozen
class Side:
    """One side of the campaign: the interpreter, the environment and the extra arguments
    (``--candidate FILE`` of a task campaign) its runs get."""

    name: str  # "A" or "B"
    env: dict = attrs.field(factory=dict)
    python: str = ""
    args: tuple = attrs.field(default=(), converter=tuple)

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def cache_key(self) -> str:
        """Short hash of the side's definition: runs share a Triton cache only with runs of
        the same side letter and the same definition (safe to reuse across campaigns)."""
        definition = {"python": self.interpreter, "env": self.env}
        if self.args:  # keeps the keys of campaigns without side arguments as they were
            definition["args"] = list(self.args)
        text = json.dumps(definition, sort_keys=True)
        return f"{self.name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.env.items())]
        if self.python:
            parts.append(f"python={self.python}")
        parts.extend(self.args)
        return " ".join(parts) or "(unchanged environment)"

    def to_json(self) -> dict:
        return {"name": self.name, "env": dict(self.env), "python": self.python, "args": list(self.args)}

    @classmethod
    def from_json(cls, d: dict) -> "Side":
        return cls(name=d["name"], env=dict(d.get("env") or {}), python=d.get("python") or "",
                   args=tuple(d.get("args") or ()))


@attrs.frozen
class OpSpec:
    """One op of the campaign: its directory name and the OP argument its command gets.

    ``command`` is the zlf sub-command a run starts: ``run`` (an op), or ``task`` (``run_spec``
    is then a task package folder, judged with each side's ``--candidate``).
    """

    name: str
    run_spec: str
    source: str = ""  # the op's file, for the switch guard ("" = built-in or an extension's)
    command: str = "run"

    @classmethod
    def parse(cls, text: str) -> "OpSpec":
        """``op``, ``op:FILE.py`` (docs/ab.md), or ``FILE.py[::NAME]`` as ``zlf run`` takes it;
        ``op:WORD[::NAME]`` where WORD is not a file is an extension's spelling (flaggems'
        ``mm:blas_perf::test_blas_benchmark``), passed on unchanged."""
        head, sep, tail = text.partition("::")
        if ":" in head:
            name, _, path = head.partition(":")
            if not name or not path:
                raise UsageError(f"op {text!r}: expected OP or OP:OP_FILE")
            is_file = os.path.exists(path) or path.endswith(".py")
            if is_file and sep:
                raise UsageError(f"op {text!r}: expected OP:OP_FILE or FILE.py::NAME, not both")
            if is_file:
                return cls(name, f"{os.path.abspath(path)}::{name}", os.path.abspath(path))
            return cls(name, text)
        if sep:
            return cls(tail or Path(head).stem, f"{os.path.abspath(head)}::{tail}" if tail else os.path.abspath(head),
                       os.path.abspath(head))
        if text.endswith(".py"):
            return cls(Path(text).stem, os.path.abspath(text), os.path.abspath(text))
        return cls(text, text)

    @classmethod
    def task(cls, package: str) -> "OpSpec":
        """A task package: its op name is the package's name (metadata ``name``, else the folder),
        the one its runs give their points."""
        path = os.path.abspath(package)
        if not os.path.isdir(path):
            raise UsageError(f"--task {package!r} is not a directory")
        try:
            from zlf_taskpkg.package import TaskPackage  # reads metadata only; imports no kernel
        except ImportError:
            raise UsageError("--task needs the task extension (pip install -e extensions/taskpkg)") from None
        return cls(TaskPackage.open(path).name, path, path, command="task")

    def to_json(self) -> dict:
        return attrs.asdict(self)


class Campaign:
    """campaign.json, read and rewritten as runs start and finish."""

    def __init__(self, path: Path, data: dict):
        self.path = Path(path)
        self.data = data
        #: ``{shared key: [run dirs]}`` of the shared processes handed to an executor
        self.groups: dict = {}

    # ------------------------------------------------------------------ create / open
    @classmethod
    def create(cls, parent, label: str, data: dict) -> "Campaign":
        rundir = RunDir.create(Path(parent).absolute(), f"ab_{label}")  # same naming and no-reuse rule as runs
        c = cls(rundir.path, {"format": FORMAT_VERSION, "zlf_version": __version__, "status": C_RUNNING,
                              "started": now(), "finished": None, "runs": [], "looks": [], **data})
        c.seal()
        c.save()
        return c

    # ------------------------------------------------------------------ trust on --resume
    def code_files(self) -> dict:
        """``{label: path}`` of what the runs execute besides zlf: each side's interpreter, op
        files, task candidates (``--candidate FILE`` among a side's arguments)."""
        files = {}
        for side in self.sides.values():
            if side.python:
                files[f"side {side.name}'s interpreter"] = side.python
            for flag, value in zip(side.args, side.args[1:]):
                if flag == "--candidate":
                    files[f"side {side.name}'s candidate"] = value
        for op in self.ops:
            if op.source and os.path.isfile(op.source):
                files[f"op file of {op.name}"] = op.source
        return files

    def seal(self) -> None:
        """Record the identity of every file in :meth:`code_files` and sign :data:`SIGNED`.
        Without a key (an unwritable home) the campaign runs but cannot be resumed."""
        self.data["identities"] = {label: file_identity(path) for label, path in self.code_files().items()}
        key = signing_key(create=True)
        self.data["signature"] = _sign(key, self.data) if key else None

    def check_resume(self, named: dict) -> None:
        """Refuse (UsageError) to resume a campaign whose command lines zlf ab did not write:
        the signature of :data:`SIGNED` must verify with this user's key, and every file the
        runs execute must be the one recorded at creation -- an interpreter may instead be named
        again (``named``: ``{"A": path or None, "B": ...}``), then its new identity is recorded."""
        where = "--resume"
        key = signing_key(create=False)
        if key is None:
            raise UsageError(f"{where}: no campaign signing key of this user ({key_path()}): cannot verify "
                             "what campaign.json would run; start a new campaign")
        try:
            sides = self.sides
        except (KeyError, TypeError, AttributeError):
            raise UsageError(f"{where}: campaign.json has no valid sides") from None
        for name, path in named.items():
            if not path:
                continue
            side = sides.get(name)
            recorded = side.python if side else ""
            if not recorded or os.path.realpath(path) != os.path.realpath(recorded):
                was = recorded or "the driver's own"
                raise UsageError(f"{where}: --{name.lower()}-python {path!r} is not side {name}'s interpreter of this "
                                 f"campaign ({was}); start a new campaign to change it")
        signature = self.data.get("signature")
        if not isinstance(signature, str) or not hmac.compare_digest(signature, _sign(key, self.data)):
            raise UsageError(f"{where}: campaign.json's sides, ops or arguments are not what zlf ab wrote when it "
                             "created this campaign (edited, or made by another user, machine or zlf version): "
                             "refusing to run them; start a new campaign")
        identities = self.data.get("identities") or {}
        vouched = {f"side {n}'s interpreter" for n, p in named.items() if p}
        for label, path in self.code_files().items():
            if label in vouched:
                continue
            change = identity_change(identities.get(label), path)
            if change:
                again = (f"; name it again with --{label[5].lower()}-python PATH to run it"
                         if label.endswith("interpreter") else "; start a new campaign")
                raise UsageError(f"{where}: {label} {path} {change} since the campaign started{again}")
        if vouched:
            self.seal()  # the interpreter the user named again is the recorded one from now on

    @classmethod
    def open(cls, path) -> "Campaign":
        p = Path(path)
        f = p / CAMPAIGN
        if not f.is_file():
            raise UsageError(f"{str(path)!r} is not a zlf ab campaign (no {CAMPAIGN})")
        try:
            data = json.loads(f.read_bytes())
        except ValueError as exc:  # not JSON, or not UTF-8
            raise UsageError(f"{f}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise UsageError(f"{f}: not a zlf campaign (a JSON {type(data).__name__}, not an object)")
        if data.get("format") != FORMAT_VERSION:
            raise UsageError(f"{f}: campaign format {data.get('format')!r}, this zlf reads {FORMAT_VERSION}")
        return cls(p, data)

    def save(self) -> None:
        _write_atomic(self.path / CAMPAIGN, json.dumps(self.data, indent=2, default=str) + "\n")

    # ------------------------------------------------------------------ the plan
    @property
    def sides(self) -> dict:
        return {s["name"]: Side.from_json(s) for s in self.data["sides"]}

    @property
    def ops(self) -> list:
        return [OpSpec(**o) for o in self.data["ops"]]

    @property
    def runs(self) -> list:
        return self.data["runs"]

    def planned_rounds(self) -> int:
        return max((r["round"] for r in self.runs), default=0)

    def add_round(self, k: int, ops=None) -> None:
        """Append round ``k``: odd rounds A then B, even rounds B then A (cancels one-way drift);
        within a round each op's pair runs back to back. ``ops``: only these op names (an
        adaptive campaign extends only the ops with an undecided point)."""
        order = ("A", "B") if k % 2 == 1 else ("B", "A")
        alone = {r["op"] for r in self.runs if r.get("alone")}
        for op in self.ops:
            if ops is not None and op.name not in ops:
                continue
            for side in order:
                self.runs.append({"op": op.name, "round": k, "side": side, "dir": f"{op.name}/r{k}_{side}",
                                  "status": PENDING, "rc": None, "started": None, "finished": None,
                                  "seconds": None, "flags": [], "error": None})
                if op.name in alone:  # it failed or crashed in a shared process: it runs alone
                    self.runs[-1]["alone"] = True
        self.save()

    def run_dir(self, run: dict) -> Path:
        return self.path / run["dir"]

    def find(self, op: str, k: int, side: str) -> Optional[dict]:
        for r in self.runs:
            if r["op"] == op and r["round"] == k and r["side"] == side:
                return r
        return None

    def failed_ops(self) -> dict:
        """``{op: first failed run}`` for ops with any failed run."""
        out = {}
        for r in self.runs:
            if r["status"] == FAILED:
                out.setdefault(r["op"], r)
        return out

    def incomplete_ops(self, rounds: Optional[int] = None) -> dict:
        """``{op: [r<k>_<side> not done]}`` for ops without a failed run but with a planned run
        (up to ``rounds``) that did not finish ok: such an op gets no report either."""
        failed = self.failed_ops()
        rounds = rounds or self.planned_rounds()
        out: dict = {}
        for r in self.runs:
            if r["op"] not in failed and r["round"] <= rounds and r["status"] != OK:
                out.setdefault(r["op"], []).append(f"r{r['round']}_{r['side']} {r['status']}")
        return out

    def log_path(self, run: dict) -> Path:
        return self.path / run["op"] / LOGS / f"r{run['round']}_{run['side']}.txt"

    # ------------------------------------------------------------------ one run
    def command(self, run: dict, staging: Path, root=None, replay: bool = True) -> list:
        """The ``zlf run`` (or ``zlf task``) command line of one run, without its environment.

        :param root: the campaign directory as the executing side sees it (default: this one).
        :param replay: add ``--replay-from`` when round 1 A's record exists now (False: leave it
            to :func:`execute_spec`, which decides when the run starts).
        """
        side = self.sides[run["side"]]
        op = next(o for o in self.ops if o.name == run["op"])
        root = Path(root) if root is not None else self.path
        cmd = [side.interpreter, "-m", "zlf", op.command, op.run_spec, "--out", str(staging),
               "--name", f"r{run['round']}_{run['side']}"]
        cmd += self.data["extension_args"] + self.data["run_args"] + list(side.args)
        # An op whose kernels are not autotuned leaves no record: nothing to replay, nothing to pin.
        if replay and self.replays(run) and self.replay_record(op.name).is_dir():
            cmd += ["--replay-from", str(root / op.name / "r1_A")]
        return cmd

    def replays(self, run: dict) -> bool:
        """Whether ``run`` replays round 1 A's record (every run of its op but r1_A, with replay on)."""
        return bool(self.data.get("replay")) and run["dir"] != f"{run['op']}/r1_A"

    def replay_record(self, op: str) -> Path:
        return self.path / op / "r1_A" / RECORDS_DIR

    def env_overrides(self, run: dict, root=None) -> dict:
        """What a run's environment adds to the executing process's own."""
        side = self.sides[run["side"]]
        cache = Path(self.data["triton_cache"]) / side.cache_key()
        if root is not None and _inside(cache, self.path):
            cache = Path(root) / cache.relative_to(self.path)
        env = dict(side.env)
        env["TRITON_CACHE_DIR"] = str(cache)
        env["ZLF_NO_PROGRESS"] = "1"  # plain per-point lines into the run's log file
        env["NO_COLOR"] = "1"
        return env

    def environment(self, run: dict) -> dict:
        return _environment(self.env_overrides(run))

    def run_spec(self, run: dict) -> dict:
        """Everything needed to execute ``run`` anywhere: paths relative to :data:`ROOT`.

        ``needs``: campaign-relative folders the run reads (the autotune record it replays).
        ``replay``: ``{"record", "args"}``: ``args`` are added when ``record`` exists as the run
        starts -- a spec is built before its unit runs, when r1_A of the same unit has not yet
        written the record (an op whose kernels are not autotuned never writes one).
        """
        root = Path(ROOT)
        staging = self._staging(run).relative_to(self.path)
        argv = self.command(run, root / staging, root=root, replay=False)
        spec = {"key": run["dir"], "argv": argv, "env": self.env_overrides(run, root=root), "cwd": self.data["cwd"],
                "staging": str(staging), "dir": run["dir"], "log": str(self.log_path(run).relative_to(self.path)),
                "needs": []}
        if self.replays(run):
            record = f"{run['op']}/r1_A/{RECORDS_DIR}"
            spec["needs"] = [record]
            spec["replay"] = {"record": record, "args": ["--replay-from", str(root / run["op"] / "r1_A")]}
        return spec

    def discard_partial(self, run: dict) -> None:
        """Remove what an interrupted run left (it is re-run whole)."""
        for p in (self._staging(run), self.run_dir(run)):
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)

    def _staging(self, run: dict) -> Path:
        return self.path / run["op"] / STAGING / f"r{run['round']}_{run['side']}"

    # ------------------------------------------------------------------ shared processes
    @property
    def shared(self) -> bool:
        """Whether the ops of a (round, side) share one process (campaigns before this: no)."""
        return self.data.get("process") == SHARED_PROCESS

    def shares(self, run: dict) -> bool:
        """Whether ``run`` goes into a shared process: not once its op has failed or crashed in
        one (from that round on the op runs alone), nor for a task package."""
        if not self.shared or self.op_spec(run["op"]).command != "run":
            return False
        return not any(r.get("alone") for r in self.runs if r["op"] == run["op"])

    def next_run(self) -> Optional[dict]:
        """The run to start next: the earliest round first, in the round's side order (a shared
        process of side A before B's in odd rounds), else campaign order."""
        todo = [(i, r) for i, r in enumerate(self.runs) if r["status"] not in (OK, FAILED, SKIPPED)]
        if not todo:
            return None
        def order(item):
            i, r = item
            return r["round"], ("A", "B").index(r["side"]) ^ (0 if r["round"] % 2 else 1), i
        return min(todo, key=order)[1]

    def op_spec(self, name: str) -> OpSpec:
        return next(o for o in self.ops if o.name == name)

    def replay_origin(self, run: dict) -> str:
        """The process whose autotune record ``run`` replays ("" when it records or replay is off):
        ops share a process only with ops that replay the same record."""
        return self.record_source(run) if self.replays(run) else ""

    def record_source(self, run: dict) -> str:
        """The campaign-relative directory whose autotune record ``run`` replays: the shared
        process that ran its op's r1_A (kept for that), else ``<op>/r1_A``. Before r1_A has run
        (a scaled campaign builds a unit's specs up front): the shared process it is in."""
        first = self.find(run["op"], 1, "A") or {}
        if first.get("process"):
            return first["process"]
        if first.get("status") != OK:
            for key in reversed(list(self.groups)):
                if first.get("dir") in self.groups[key]:
                    return key
        return first.get("dir") or f"{run['op']}/r1_A"

    def shared_groups(self, runs=None) -> list:
        """``[[run, ...]]``: the pending shared runs (or ``runs``) grouped by round, side and replay
        origin, in campaign order (the group of the first pending run first)."""
        failed = self.failed_ops()
        todo = runs if runs is not None else [
            r for r in self.runs if r["status"] in (PENDING, RUNNING) and self.shares(r) and r["op"] not in failed]
        groups: dict = {}
        for r in todo:
            groups.setdefault((r["round"], r["side"], self.replay_origin(r)), []).append(r)
        return list(groups.values())

    def shared_key(self, runs: list) -> str:
        """A fresh ``_shared/r<k>_<side>[-n]`` for one process of ``runs`` (never reused: a
        process re-run after a crash keeps the first one's log)."""
        base = f"{SHARED}/r{runs[0]['round']}_{runs[0]['side']}"
        taken = {r.get("process") for r in self.runs} | set(self.groups)
        for n in range(1, 10000):
            key = base if n == 1 else f"{base}-{n}"
            if key not in taken and not (self.path / SHARED / LOGS / f"{Path(key).name}.txt").exists():
                self.groups[key] = [r["dir"] for r in runs]
                return key
        raise RuntimeError(f"no free key for {base}")

    def shared_spec(self, key: str, runs: list) -> dict:
        """The run spec of one process that runs every op of ``runs`` (one round, one side)."""
        run = runs[0]
        side = self.sides[run["side"]]
        root = Path(ROOT)
        name = Path(key).name
        staging = f"{SHARED}/{STAGING}/{name}"
        argv = [side.interpreter, "-m", "zlf", "run", *[self.op_spec(r["op"]).run_spec for r in runs],
                "--out", str(root / staging), "--name", f"r{run['round']}_{run['side']}"]
        argv += self.data["extension_args"] + self.data["run_args"] + list(side.args)
        spec = {"key": key, "argv": argv, "env": self.env_overrides(run, root=root), "cwd": self.data["cwd"],
                "staging": staging, "dir": key, "log": f"{SHARED}/{LOGS}/{name}.txt", "needs": [],
                "shared": [r["dir"] for r in runs]}
        if self.replays(run):
            source = self.record_source(run)  # the same for every op of the group (shared_groups)
            record = f"{source}/{RECORDS_DIR}"
            spec["needs"] = [record]
            spec["replay"] = {"record": record, "args": ["--replay-from", str(root / source)]}
        return spec

    def execute_shared(self, runs: list) -> list:
        """Run ``runs`` (one round and side) in one process, then file each op's outcome.

        :return: the runs filed ok, and those whose round goes alone (see :meth:`file_shared`).
        Raises KeyboardInterrupt (after marking the runs pending) when the user interrupts.
        """
        key = self.shared_key(runs)
        for run in runs:
            self.start(run)
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
        if rc == 130 or rc == -signal.SIGINT:
            for run in runs:
                run.update(status=PENDING, started=None, finished=None)
            shutil.rmtree(raw, ignore_errors=True)
            self.save()
            return False
        share = round((outcome["seconds"] or 0) / max(1, len(runs)), 2)
        why = None
        for run, (state, names, points) in zip(runs, states):
            if run["status"] != RUNNING:
                continue  # its round went alone meanwhile (scaled: the other side failed first)
            if state == OK:
                dest = self.run_dir(run)
                if dest.exists():
                    shutil.rmtree(dest)
                split_run_dir(raw, dest, names, points, {"key": key, "ops": [r["op"] for r in runs], "rc": rc})
                log = self.log_path(run)
                log.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.path / outcome["log"], log)
                run.update(status=OK, rc=0, finished=outcome["finished"], seconds=share, process=key, error=None,
                           flags=device_flags(dest))
                if outcome.get("started"):
                    run["started"] = outcome["started"]
                if "gpu" in run:
                    run["device_id"] = device_identity(dest)
            elif state == "not reached":
                run.update(status=PENDING, started=None)
            else:
                if why is None:
                    why = _failure_reason(rc, raw if outcome["made"] else None, self.path / outcome["log"])
                for side in ("A", "B"):  # the round's pair again, both sides alone: one pair, one way
                    r = self.find(run["op"], run["round"], side)
                    if r is not None and r["status"] in (PENDING, RUNNING, OK):
                        r.update(status=PENDING, started=None, finished=None, rc=None, error=None, alone=True,
                                 shared_error=f"{state} in {key}: {why}" if r is run else f"{run['side']} side {state} in {key}")
                        r.pop("process", None)
                for r in self.runs:  # and every later round of the op (see shares)
                    if r["op"] == run["op"] and r["status"] == PENDING:
                        r["alone"] = True
        if not (self.data.get("replay") and runs[0]["round"] == 1 and runs[0]["side"] == "A"
                and (raw / RECORDS_DIR).is_dir()):
            shutil.rmtree(raw, ignore_errors=True)  # split; a record process stays: later runs replay it
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

    def start(self, run: dict, worker: Optional[dict] = None) -> None:
        run.update(status=RUNNING, started=now(), finished=None, rc=None, error=None, flags=[])
        if worker:
            run.update(worker)
        self.save()

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
        run.update(rc=rc, finished=outcome["finished"], seconds=outcome["seconds"])
        if outcome.get("started"):
            run["started"] = outcome["started"]
        if rc in (130, 143, -signal.SIGINT, -signal.SIGTERM):  # stopped, not failed
            run.update(status=PENDING, started=None, finished=None)
            self.save()
            return False
        if rc == 0 and made:
            run["status"] = OK
        else:
            run["status"] = FAILED
            run["error"] = _failure_reason(rc, final if made else None, self.path / outcome["log"])
        if made:
            run["flags"] = device_flags(final)
            if "gpu" in run:
                run["device_id"] = device_identity(final)
        self.save()
        return True


def file_identity(path) -> dict:
    """``realpath``, ``size``, ``mtime_ns`` and ``sha256`` of a file (empty dict if unreadable)."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
        digest = hashlib.sha256()
        with open(real, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return {}
    return {"realpath": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest.hexdigest()}


def identity_change(recorded, path) -> Optional[str]:
    """How ``path`` differs from its recorded identity, or None. The content decides (a touched
    but unchanged file is the same file)."""
    now_ = file_identity(path)
    if not now_:
        return "cannot be read"
    if not isinstance(recorded, dict) or not recorded:
        return "has no recorded identity"
    if now_["realpath"] != recorded.get("realpath"):
        return f"now resolves to {now_['realpath']} (was {recorded.get('realpath')})"
    if now_["sha256"] != recorded.get("sha256") or now_["size"] != recorded.get("size"):
        return "changed (its sha256 differs)"
    return None


def key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "zlf" / KEY_FILE


def signing_key(create: bool) -> Optional[bytes]:
    """This user's campaign key: private (0600, owned by this user), made on first use."""
    path = key_path()
    if create and not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        st = os.stat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None  # another user could read (forge) or replace it
        text = path.read_text().strip()
    except OSError:
        return None
    return text.encode() if len(text) >= 32 else None


def _sign(key: bytes, data: dict) -> str:
    body = json.dumps({k: data.get(k) for k in SIGNED}, sort_keys=True, default=str)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def _inside(path: Path, parent: Path) -> bool:
    try:
        Path(path).relative_to(parent)
        return True
    except ValueError:
        return False


def _environment(overrides: dict) -> dict:
    env = dict(os.environ)
    env.update(overrides)
    env.pop("FORCE_COLOR", None)
    return env


def _place(text: str, root: str) -> str:
    return text.replace(ROOT, root)


def execute_spec(spec: dict, root, extra_env: Optional[dict] = None) -> dict:
    """Run one run spec under ``root`` (the campaign directory, or a scratch folder on a Ray
    node): a fresh process whose output goes to the spec's log; its run directory is moved from
    the staging folder to ``dir`` once the process has exited.

    :return: ``{"key", "rc", "made", "started", "finished", "seconds", "log"}`` (JSON-able).
    Raises KeyboardInterrupt after stopping the process when the user interrupts.
    """
    root = Path(root)
    # campaign.json is a file anyone can edit: its paths must not lead out of the campaign
    # (the old output at ``dir`` is removed before the run).
    staging, final, log = (inside(root, root / spec[k]) for k in ("staging", "dir", "log"))
    for p in (staging, final):
        if p.exists():
            shutil.rmtree(p, ignore_errors=True)
    staging.mkdir(parents=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = list(spec["argv"])
    replay = spec.get("replay")
    if replay and (root / replay["record"]).is_dir():
        argv += replay["args"]
    cmd = [_place(a, str(root)) for a in argv]
    env = _environment({k: _place(v, str(root)) for k, v in {**spec["env"], **(extra_env or {})}.items()})
    started, t0 = now(), time.monotonic()
    with open(log, "w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        # SIGKILL when this process dies (a run stuck in a C call would not act on SIGTERM; what it
        # leaves --resume discards); a `zlf task` run's worker dies with it in turn.
        proc = subprocess.Popen(cmd, cwd=spec["cwd"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent(signal.SIGKILL))
        try:
            rc = proc.wait()
        except KeyboardInterrupt as exc:
            _stop(proc, exc)
            raise
    made = [p for p in staging.iterdir() if p.is_dir()] if staging.is_dir() else []
    if made:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(made[0], final)
    shutil.rmtree(staging, ignore_errors=True)
    return {"key": spec["key"], "rc": rc, "made": bool(made), "name": made[0].name if made else None,
            "started": started, "finished": now(),
            "seconds": round(time.monotonic() - t0, 2), "log": spec["log"]}


def _link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst)  # the shared process's files are final: a link costs no space
    except OSError:
        shutil.copy2(src, dst)


def split_run_dir(raw: Path, dest: Path, names: set, points: int, shared: dict) -> None:
    """Write the run directory of the ops ``names`` from a shared process's ``raw`` one: their
    records and shapes, meta.json with their counts and a ``shared_process`` section, the whole
    run.log, the IR of their points' shapes and every other file (autotune records ...) whole."""
    from .irtree import IR_DIR
    from .records import shape_str

    src = RunDir(raw)
    final, dest = dest, dest.with_name(f".{dest.name}.split")  # in place only once whole
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    out = RunDir(dest)
    records = [r for r in src.records()[0] if r.op in names]
    for r in records:
        out.append(r)
    shapes = {op: v for op, v in (src.shapes() or {}).items() if op in names}
    write_atomic(dest / SHAPES, yaml.safe_dump(shapes, sort_keys=False, default_flow_style=None))
    meta = src.meta()
    ran_status = meta.get("status")
    meta.update(ops=sorted(names), points=points, status="complete",
                counts={s: sum(1 for r in records if r.status == s) for s in ("ok", "FAILED", "OOM")},
                shared_process={**shared, "status": ran_status})
    out.write_meta(meta)
    if (raw / LOG).is_file():
        shutil.copyfile(raw / LOG, dest / LOG)
    own_shapes = {shape_str(r.shape) for r in records}
    for item in raw.iterdir():
        if item.name in (RESULTS, META, LOG, SHAPES):
            continue
        if item.name == IR_DIR and item.is_dir():  # ir/<shape>/...: only this op's shapes
            (dest / IR_DIR).mkdir()
            for sub in item.iterdir():
                if sub.is_dir() and sub.name in own_shapes:
                    shutil.copytree(sub, dest / IR_DIR / sub.name, copy_function=_link_or_copy)
                elif sub.is_file():
                    _link_or_copy(sub, dest / IR_DIR / sub.name)
        elif item.is_dir():
            shutil.copytree(item, dest / item.name, copy_function=_link_or_copy)
        else:
            _link_or_copy(item, dest / item.name)
    os.replace(dest, final)


def device_identity(run_dir: Path) -> str:
    """The device a run measured on, from its meta.json: uuid, else PCI bus id, else the name
    (two GPUs of one model still differ by a few percent)."""
    fp = RunDir(run_dir).meta().get("fingerprint") or {}
    return str(fp.get("uuid") or fp.get("pci.bus_id") or fp.get("device_name") or "")


def _stop(proc, exc: BaseException) -> None:
    """Stop a run this process was waiting for: Ctrl-C reached it too (same process group);
    SIGTERM reached this process only, so it is passed on. Killed if it does not stop."""
    try:
        if isinstance(exc, Terminated):
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.kill()
        proc.wait()


def _failure_reason(rc: int, run_dir: Optional[Path], log: Path) -> str:
    if run_dir is not None:
        records, _ = RunDir(run_dir).records()
        bad = [r for r in records if r.status != "ok"]
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
def campaign_units(campaign: Campaign, per: str = "pair") -> list:
    """The pending runs as work units (:class:`zlf.scheduler.Unit`): one per round pair
    (``per="pair"``) or one per op (``per="op"``), runs in the campaign's order.

    A and B of a round always run in the same unit, hence on the same GPU: a pair half-done by
    a scaled-out campaign that was stopped is run again whole. With autotune replay, an op's
    later units wait for the unit that runs r1_A (it writes the record they replay).
    """
    from .scheduler import Unit

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
    if campaign.data.get("replay"):
        first = {u.group: u.id for u in units if f"{u.group}/r1_A" in u.keys}
        units = [Unit(u.id, u.keys, u.group, (first[u.group],)) if u.group in first and first[u.group] != u.id else u
                 for u in units]
    return units


def _shared_units(campaign: Campaign) -> list:
    """Units of a shared-process campaign: per round, one process per side (and replay origin),
    A and B on one GPU; the rounds of ops sent alone as per-op pair units (after the shared
    ones). A round half done on some GPU when the campaign stopped runs again whole."""
    from .scheduler import Unit

    failed = campaign.failed_ops()
    pending = [r for r in campaign.runs if r["status"] in (PENDING, RUNNING) and r["op"] not in failed]
    rounds: dict = {}
    alone: dict = {}
    for run in pending:
        if campaign.shares(run):
            rounds.setdefault(run["round"], []).append(run)
        else:
            alone.setdefault((run["op"], run["round"]), []).append(run)
    units, first = [], None
    for k, runs in rounds.items():
        for run in list(runs):
            other = campaign.find(run["op"], k, "B" if run["side"] == "A" else "A")
            if other and other["status"] == OK and "gpu" in other and other not in runs:
                runs.append(other)  # its pair partner ran on another GPU: both again, here
        order = ("A", "B") if k % 2 == 1 else ("B", "A")
        runs.sort(key=lambda r: (order.index(r["side"]), campaign.runs.index(r)))
        keys = []
        for side in order:  # A's processes are known (keys) before B's replay origin is looked up
            keys += [campaign.shared_key(g) for g in campaign.shared_groups([r for r in runs if r["side"] == side])]
        units.append(Unit(f"r{k}", keys))
        if k == 1 and any(r["side"] == "A" for r in runs):
            first = f"r{k}"
    for (op, k), runs in alone.items():
        units.append(Unit(f"{op}/r{k}", [r["dir"] for r in runs], group=op))
    if not campaign.data.get("replay"):
        return units
    # the unit that runs an op's r1_A writes the record its other runs replay: they wait for it
    recorder = {u.group: u.id for u in units if u.group and f"{u.group}/r1_A" in u.keys}
    out = []
    for u in units:
        dep = recorder.get(u.group) if u.group else None
        dep = dep if dep is not None else first
        out.append(u if dep in (None, u.id) else Unit(u.id, u.keys, u.group, (dep,)))
    return out


class CampaignJob:
    """The campaign as an executor sees it (zlf.executors): specs out, outcomes filed. A key is
    a run's directory, or a shared process's key (``_shared/r<k>_<side>``, see :meth:`Campaign.shared_spec`)."""

    def __init__(self, campaign: Campaign, printer):
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
            for run in self._group(key):
                if not run.get("alone"):  # a round sent alone meanwhile is not in this process's hands
                    self.campaign.start(run, worker)
            return
        self.campaign.start(self._runs[key], worker)

    def finished(self, key: str, outcome: dict, worker: dict) -> bool:
        if key in self.campaign.groups:
            runs = self._group(key)
            for run in runs:
                if run["status"] == RUNNING:
                    run.update(worker)
            filed = self.campaign.file_shared(key, runs, outcome)
            for run in runs:
                if run["status"] == OK and run.get("process") == key:
                    self.printer.done(run)
                elif run.get("alone") and run.get("shared_error", "").find(key) >= 0:
                    self.printer.line(f"{run['op']} r{run['round']}_{run['side']}: {run['shared_error']}; its round runs alone")
            return filed  # the unit goes on: a failed op's round is re-run alone in a later batch
        run = self._runs[key]
        run.update(worker)
        filed = self.campaign.file(run, outcome)
        self.printer.done(run)
        return filed and run["status"] == OK

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
