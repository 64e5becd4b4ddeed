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

Runs are independent ``zlf run`` processes; the campaign process never imports a kernel.
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
    tmp.write_text(text)
    os.replace(tmp, path)


@attrs.frozen
class Side:
    """One side of the campaign: the interpreter and the environment its runs get."""

    name: str  # "A" or "B"
    env: dict = attrs.field(factory=dict)
    python: str = ""

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def cache_key(self) -> str:
        """Short hash of the side's definition: runs share a Triton cache only with runs of
        the same side letter and the same definition (safe to reuse across campaigns)."""
        text = json.dumps({"python": self.interpreter, "env": self.env}, sort_keys=True)
        return f"{self.name}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.env.items())]
        if self.python:
            parts.append(f"python={self.python}")
        return " ".join(parts) or "(unchanged environment)"

    def to_json(self) -> dict:
        return {"name": self.name, "env": dict(self.env), "python": self.python}

    @classmethod
    def from_json(cls, d: dict) -> "Side":
        return cls(name=d["name"], env=dict(d.get("env") or {}), python=d.get("python") or "")


@attrs.frozen
class OpSpec:
    """One op of the campaign: its directory name and the OP argument ``zlf run`` gets."""

    name: str
    run_spec: str
    source: str = ""  # the op's file, for the switch guard ("" = built-in or an extension's)

    @classmethod
    def parse(cls, text: str) -> "OpSpec":
        """``op``, ``op:FILE.py`` (FORMATS.md §5), or ``FILE.py[::NAME]`` as ``zlf run`` takes it."""
        if "::" in text:
            path, _, name = text.partition("::")
            return cls(name or Path(path).stem, f"{os.path.abspath(path)}::{name}" if name else os.path.abspath(path),
                       os.path.abspath(path))
        if ":" in text:
            name, _, path = text.partition(":")
            if not name or not path:
                raise UsageError(f"op {text!r}: expected OP or OP:OP_FILE")
            return cls(name, f"{os.path.abspath(path)}::{name}", os.path.abspath(path))
        if text.endswith(".py"):
            return cls(Path(text).stem, os.path.abspath(text), os.path.abspath(text))
        return cls(text, text)

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

    def add_round(self, k: int) -> None:
        """Append round ``k``: odd rounds A then B, even rounds B then A (cancels one-way drift);
        within a round each op's pair runs back to back."""
        order = ("A", "B") if k % 2 == 1 else ("B", "A")
        for op in self.ops:
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

    def log_path(self, run: dict) -> Path:
        return self.path / run["op"] / LOGS / f"r{run['round']}_{run['side']}.txt"

    # ------------------------------------------------------------------ one run
    def command(self, run: dict, staging: Path) -> list:
        """The ``zlf run`` command line of one run (without the interpreter's environment)."""
        side = self.sides[run["side"]]
        op = next(o for o in self.ops if o.name == run["op"])
        cmd = [side.interpreter, "-m", "zlf", "run", op.run_spec, "--out", str(staging),
               "--name", f"r{run['round']}_{run['side']}"]
        cmd += self.data["extension_args"] + self.data["run_args"]
        record = self.path / op.name / "r1_A"
        # An op whose kernels are not autotuned leaves no record: nothing to replay, nothing to pin.
        if self.data.get("replay") and run["dir"] != f"{op.name}/r1_A" and (record / RECORDS_DIR).is_dir():
            cmd += ["--replay-from", str(record)]
        return cmd

    def environment(self, run: dict) -> dict:
        side = self.sides[run["side"]]
        env = dict(os.environ)
        env.update(side.env)
        env["TRITON_CACHE_DIR"] = str(Path(self.data["triton_cache"]) / side.cache_key())
        env["ZLF_NO_PROGRESS"] = "1"  # plain per-point lines into the run's log file
        env["NO_COLOR"] = "1"
        env.pop("FORCE_COLOR", None)
        return env

    def discard_partial(self, run: dict) -> None:
        """Remove what an interrupted run left (it is re-run whole)."""
        for p in (self._staging(run), self.run_dir(run)):
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)

    def _staging(self, run: dict) -> Path:
        return self.path / run["op"] / STAGING / f"r{run['round']}_{run['side']}"

    def execute(self, run: dict) -> dict:
        """Start one run as a fresh ``zlf run`` process, wait, file its directory and status.

        Raises KeyboardInterrupt (after marking the run) when the user interrupts.
        """
        self.discard_partial(run)
        staging = self._staging(run)
        staging.mkdir(parents=True)
        log = self.log_path(run)
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = self.command(run, staging)
        run.update(status=RUNNING, started=now(), finished=None, rc=None, error=None, flags=[])
        self.save()
        t0 = time.monotonic()
        with open(log, "w") as out:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            proc = subprocess.Popen(cmd, cwd=self.data["cwd"], env=self.environment(run), stdout=out,
                                    stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            try:
                rc = proc.wait()
            except KeyboardInterrupt:
                _stop(proc)
                run.update(status=PENDING, started=None)  # re-run whole on --resume
                self.save()
                raise
        made = [p for p in staging.iterdir() if p.is_dir()] if staging.is_dir() else []
        final = self.run_dir(run)
        if made:
            os.replace(made[0], final)
        shutil.rmtree(staging, ignore_errors=True)
        run.update(rc=rc, finished=now(), seconds=round(time.monotonic() - t0, 2))
        if rc == 130 or rc == -signal.SIGINT:
            run.update(status=PENDING, started=None, finished=None)
            self.save()
            raise KeyboardInterrupt
        if rc == 0 and made:
            run["status"] = OK
        else:
            run["status"] = FAILED
            run["error"] = _failure_reason(rc, final if made else None, log)
        if made:
            run["flags"] = device_flags(final)
        self.save()
        return run


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
