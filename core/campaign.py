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
      triton_cache/<A|B>-<hash>/ one Triton cache per side definition (unless --triton-cache)

Runs are independent ``zlf run`` processes (``zlf task`` for a task package); the campaign
process never imports a kernel. A run is described by a JSON-able *run spec* (:meth:`Campaign.run_spec`)
whose paths are relative to ``{campaign}``, so that a worker process or a Ray task elsewhere can
execute it (:func:`execute_spec`) and the driver files the outcome (:meth:`Campaign.file`).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import attrs

from . import __version__
from .errors import UsageError
from .rundir import RunDir

CAMPAIGN = "campaign.json"
#: placeholder for the campaign directory in a run spec (replaced where the run executes).
ROOT = "{campaign}"
SUMMARY_LOG = "summary.log"
SUMMARY_JSON = "summary.json"
REPORT = "report.md"
PLOT = "delta_intervals.png"
STAGING = ".staging"
LOGS = "logs"
#: where the autotune_replay extension writes a record run's decisions (FORMATS.md §3).
RECORDS_DIR = "autotune_records"
FORMAT_VERSION = 1

PENDING, RUNNING, OK, FAILED, SKIPPED = "pending", "running", "ok", "failed", "skipped"
#: campaign status words.
C_RUNNING, C_COMPLETE, C_INTERRUPTED = "running", "complete", "interrupted"


def now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())  # else a reboot can leave an empty campaign.json behind the rename
    os.replace(tmp, path)
    try:  # the rename itself lives in the directory
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
        """``op``, ``op:FILE.py`` (FORMATS.md §5), or ``FILE.py[::NAME]`` as ``zlf run`` takes it;
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

    # ------------------------------------------------------------------ create / open
    @classmethod
    def create(cls, parent, label: str, data: dict) -> "Campaign":
        rundir = RunDir.create(Path(parent).absolute(), f"ab_{label}")  # same naming and no-reuse rule as runs
        c = cls(rundir.path, {"format": FORMAT_VERSION, "zlf_version": __version__, "status": C_RUNNING,
                              "started": now(), "finished": None, "runs": [], "looks": [], **data})
        c.save()
        return c

    @classmethod
    def open(cls, path) -> "Campaign":
        p = Path(path)
        f = p / CAMPAIGN
        if not f.is_file():
            raise UsageError(f"{str(path)!r} is not a zlf ab campaign (no {CAMPAIGN})")
        try:
            data = json.loads(f.read_text())
        except json.JSONDecodeError as exc:
            raise UsageError(f"{f}: not valid JSON ({exc})") from exc
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
        for op in self.ops:
            if ops is not None and op.name not in ops:
                continue
            for side in order:
                self.runs.append({"op": op.name, "round": k, "side": side, "dir": f"{op.name}/r{k}_{side}",
                                  "status": PENDING, "rc": None, "started": None, "finished": None,
                                  "seconds": None, "flags": [], "error": None})
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
        if rc == 130 or rc == -signal.SIGINT:
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
    staging, final, log = root / spec["staging"], root / spec["dir"], root / spec["log"]
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
        proc = subprocess.Popen(cmd, cwd=spec["cwd"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=_die_with_parent)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            _stop(proc)
            raise
    made = [p for p in staging.iterdir() if p.is_dir()] if staging.is_dir() else []
    if made:
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(made[0], final)
    shutil.rmtree(staging, ignore_errors=True)
    return {"key": spec["key"], "rc": rc, "made": bool(made), "name": made[0].name if made else None,
            "started": started, "finished": now(),
            "seconds": round(time.monotonic() - t0, 2), "log": spec["log"]}


def device_identity(run_dir: Path) -> str:
    """The device a run measured on, from its meta.json: uuid, else PCI bus id, else the name
    (two GPUs of one model still differ by a few percent)."""
    fp = RunDir(run_dir).meta().get("fingerprint") or {}
    return str(fp.get("uuid") or fp.get("pci.bus_id") or fp.get("device_name") or "")


def _die_with_parent() -> None:
    """Child side of Popen: die when the campaign process dies (Linux), so a killed campaign
    leaves no orphan run writing into a directory that --resume is about to discard."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _stop(proc) -> None:
    try:
        proc.wait(timeout=10)  # it got the same Ctrl-C (same process group)
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


class CampaignJob:
    """The campaign as an executor sees it (zlf.executors): specs out, outcomes filed."""

    def __init__(self, campaign: Campaign, printer):
        self.campaign = campaign
        self.printer = printer
        self.root = campaign.path
        self._runs = {r["dir"]: r for r in campaign.runs}

    def spec(self, key: str) -> dict:
        return self.campaign.run_spec(self._runs[key])

    def skip(self, unit) -> Optional[str]:
        failed = self.campaign.failed_ops().get(unit.group)
        if not failed:
            return None
        reason = f"op failed in r{failed['round']}_{failed['side']}"
        self.skipped(unit.keys, reason)
        return reason

    def started(self, key: str, worker: dict) -> None:
        self.campaign.start(self._runs[key], worker)

    def finished(self, key: str, outcome: dict, worker: dict) -> bool:
        run = self._runs[key]
        run.update(worker)
        filed = self.campaign.file(run, outcome)
        self.printer.done(run)
        return filed and run["status"] == OK

    def skipped(self, keys, reason: str) -> None:
        for key in keys:
            run = self._runs[key]
            if run["status"] in (PENDING, RUNNING):
                run.update(status=SKIPPED, error=reason)
                self.printer.done(run)
        self.campaign.save()

    def lost(self, unit) -> None:
        for key in unit.keys:
            run = self._runs[key]
            run.update(status=PENDING, started=None, finished=None, rc=None)  # re-run whole, the pair together
        self.campaign.save()

    def discard(self, key: str) -> None:
        self.campaign.discard_partial(self._runs[key])

    def identity(self, key: str) -> str:
        return self._runs[key].get("device_id") or ""

    def note(self, text: str) -> None:
        self.printer.line(text)
