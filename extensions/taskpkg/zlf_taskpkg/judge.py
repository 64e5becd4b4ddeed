"""``zlf task``: judge a candidate on a task package's cases, in two child processes.

This process never imports the candidate, nor the package's problem module (:mod:`zlf_taskpkg.probe`
reads what it needs of it in a child). It compiles a CUDA C++ candidate (cached), starts a
checker (:mod:`zlf_taskpkg.checker`: the package, the inputs, the baseline, the check) and a
worker (:mod:`zlf_taskpkg.worker`: the candidate) per case -- or one pair for several cases with
``--reuse-worker`` until a case fails --, passes the checker's description of the shared
buffers to the worker, tells each when to go on, enforces the per-case time limit, turns a dead
or hung worker into Runtime Error / Time Limit Exceeded, and writes the run directory: one point
per case for the candidate, the baseline's time in the same record. The verdict is the
checker's (or this process's): the worker can only report a failure.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Optional

import attrs

from tabulate import tabulate

from zlf import UsageError, ceilings
from zlf.console import StatusLine, clean, number, paint
from zlf.procs import die_with_parent, kill_group, python_child_env, stop_code, stop_word
from zlf.records import STATUS_FAILED, STATUS_OK, Timing, is_jsonable
from zlf.run import Run
from zlf.rundir import RunDir, disk_full
from zlf.streams import last_word

from . import outcome as V
from . import probe, sandbox, speed, timers
from .candidate import KIND_CUDA, Candidate, compile_cuda, default_arch, default_cache_dir
from .checker import INPUT_SETS
from .outcome import timing_from_json
from .speed import trust
from .package import TaskPackage
from .shared import IPC, SHARING_WHY, SHM_DIR, SHM_DIR_ENV, sharing_mode
from .worker import OUT_ENV

#: limit for everything before the candidate runs (worker start, genTestCase, baseline timing).
PACKAGE_TIME_LIMIT_S = 600.0
#: how often the terminal's status line says how much of the time limit is left
TICK_S = 1.0
#: how long a worker gets to run after_run hooks and exit once its cases are done.
EXIT_GRACE_S = 30.0
#: lines of a worker's log quoted when it died.
LOG_TAIL_LINES = 25
TASK_DIR = "task"
#: bytes of a child's stdout/stderr kept in its log (the rest is counted, not written)
LOG_CAP_BYTES = 8 << 20
#: control bytes of a child's output written escaped (``\x1b``): logs hold no escape codes
_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")

#: default limit for compiling a CUDA C++ candidate (nvcc), separate from the per-case limit.
COMPILE_TIME_LIMIT_S = 300.0

#: the judge's clock: rounds of the clocked batch (each on input sets the candidate never saw)
#: and of the no-op batch (before the candidate is imported); the least of each is used
WITNESS_ROUNDS = 3
NOOP_ROUNDS = 5
#: while the least batch so far would leave the reported time untrusted, more rounds, up to this
#: many in all: a busy machine's scheduling delays only ever add to a round, so one more round can
#: only lower the least towards what the calls cost, never below it
WITNESS_MAX_ROUNDS = 24
#: a reported time is not trusted when the judge's clock says a call took more than this many
#: times as long, plus the slack below
TRUST_FACTOR = 2.0
#: per call, what the judge's clock may see beyond the reported time: on a device, the host cost
#: of launching (a Python candidate launching several kernels: tens of microseconds each); on the
#: host, the scheduling noise of a loaded machine and its thread pools waking up
DEVICE_SLACK_MS = 0.2
HOST_SLACK_MS = 5.0
#: what of a worker's timing the judge takes: a duration, its samples, and (below) the timer's
#: own diagnostics; the timer's name only from :meth:`Judge.timer_names`
TIMING_EXTRA_KEYS = ("cudagraph", "cupti", "task_timer", "fresh_calls")
GPU_TIMERS = ("cuda_event", "cudagraph", "cupti", "host_sync")

#: the judge's clock (seconds); every clocked call reads it
call_clock = time.perf_counter

_TIMEOUT = object()
#: an event line that is not JSON or lacks the case's nonce: something else wrote to the pipe.
_FORGED = object()


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


class _Silent:
    def isatty(self) -> bool:
        return False


class Phase:
    """The status line of one case: ``[2/5] case 2: timing (41 s of 60 s left)``. Deadlines are
    read on ``clock`` (``time.monotonic``; a test passes a fake one)."""

    def __init__(self, status: StatusLine, head: str, limit: float, clock=time.monotonic):
        self.status, self.head, self.limit, self.clock = status, head, limit, clock
        self.name, self.deadline = "", clock() + limit

    def set(self, name: str, deadline: float) -> None:
        self.name, self.deadline = name, deadline
        self.tick()

    def tick(self) -> None:
        left = max(0.0, self.deadline - self.clock())
        self.status.show(f"{clean(self.head)}: {self.name} ({left:.0f} s of {self.limit:g} s left)")


class WorkerProcess:
    """One child running :mod:`zlf_taskpkg.worker` (or the checker): a control pipe in, an event pipe out."""

    def __init__(self, spec_path: Path, log_path: Path, first_case: int, module: str = "zlf_taskpkg.worker",
                 place: Optional[sandbox.Place] = None, mode: str = sandbox.NONE, share_pid: bool = False):
        r_ctrl, w_ctrl = os.pipe()
        r_evt, w_evt = os.pipe()
        self.log_path = log_path
        self._log = open(log_path, "ab")
        argv = [sys.executable, "-m", module, str(Path(spec_path).resolve()), str(r_ctrl), str(w_evt)]
        env = python_child_env(os.environ)
        if place is not None and module == "zlf_taskpkg.worker":
            env = sandbox.worker_env(env, place, mode)
            env[OUT_ENV] = str(place.out)
            if mode == sandbox.BWRAP:
                argv = sandbox.bwrap_command(argv, place, share_pid)
        elif place is not None:
            env = sandbox.checker_env(env)
            env[SHM_DIR_ENV] = str(place.shm)
            if mode == sandbox.BWRAP and share_pid:  # legacy CUDA IPC: the worker sees what it exports
                argv = sandbox.shm_view_command(argv, place)
                env[SHM_DIR_ENV] = SHM_DIR
                env[sandbox.SHM_VIEW_ENV] = "1"
        #: bwrap stands between the judge and the process (the worker's sandbox, the checker's view)
        self.wrapped = argv[0] != sys.executable
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(r_ctrl, w_evt),
            env=env,
            start_new_session=True,  # its own process group: a kill takes its compiler children too
            preexec_fn=die_with_parent(signal.SIGKILL),  # a killed judge leaves no candidate running
        )
        os.close(r_ctrl)
        os.close(w_evt)
        #: what the judge's clock measured of batches of no-op calls in this worker (ms), once
        self.noop_ms: Optional[list] = None
        self._pump = threading.Thread(target=self._copy_output, daemon=True)
        self._pump.start()
        try:  # the case number on stdin, as a package's getTestCaseSize reads it
            self.proc.stdin.write(f"{first_case}\n".encode())
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self._ctrl = os.fdopen(w_ctrl, "w", buffering=1)
        self._evt = r_evt
        self._buf = b""
        self.meta: dict = {}
        self.nonce: Optional[str] = None
        self.forged_line = b""

    def _copy_output(self) -> None:
        """The child's output into its log: at most :data:`LOG_CAP_BYTES`, control bytes escaped."""
        kept = dropped = 0
        out = self.proc.stdout
        try:
            while True:
                chunk = out.read1(1 << 16) if hasattr(out, "read1") else out.read(1 << 16)
                if not chunk:
                    break
                if kept >= LOG_CAP_BYTES:
                    dropped += len(chunk)
                    continue
                chunk = chunk[:LOG_CAP_BYTES - kept]
                kept += len(chunk)
                self._log.write(_CONTROL.sub(lambda m: b"\\x%02x" % m.group()[0], chunk))
                self._log.flush()
        except (OSError, ValueError):
            pass
        finally:
            if dropped or kept >= LOG_CAP_BYTES:
                with contextlib.suppress(OSError, ValueError):
                    self._log.write(f"\n[zlf: output past {LOG_CAP_BYTES >> 20} MiB not kept "
                                    f"({dropped} more bytes)]\n".encode())
            for closer in (out.close, self._log.close):
                with contextlib.suppress(OSError, ValueError):
                    closer()

    def flush_log(self, timeout: float = 5.0) -> None:
        """Wait (a while) for the child's output to reach its log."""
        self._pump.join(timeout)

    def send(self, message: dict) -> bool:
        # A fresh nonce per case: a thread the candidate left behind cannot replay an old one.
        if "case" in message:
            self.nonce = secrets.token_hex(16)
        try:
            self._ctrl.write(json.dumps({**message, "nonce": self.nonce}) + "\n")
            self._ctrl.flush()
            return True
        except (BrokenPipeError, ValueError):
            return False

    def close_input(self) -> None:
        try:
            self._ctrl.close()
        except (BrokenPipeError, OSError):
            pass

    def next_event(self, timeout: float):
        """The next event dict, ``_TIMEOUT``, ``_FORGED`` (a line without the case's nonce), or
        None when the worker closed its pipe (exited)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return _TIMEOUT
            ready, _, _ = select.select([self._evt], [], [], remaining)
            if not ready:
                return _TIMEOUT
            chunk = os.read(self._evt, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or event.get("nonce") != self.nonce or self.nonce is None:
            self.forged_line = line[:200]
            return _FORGED
        if event.get("event") == "meta":
            self.meta.update(event.get("meta") or {})
            return self.next_event(max(0.0, deadline - time.monotonic()))
        return event

    def kill(self) -> None:
        kill_group(self.proc)
        self._close()

    def finish(self) -> None:
        """Let the worker run its after_run hooks and exit; kill it if it does not."""
        self.close_input()
        deadline = time.monotonic() + EXIT_GRACE_S
        while time.monotonic() < deadline:
            event = self.next_event(deadline - time.monotonic())
            if event is None or event is _TIMEOUT or event is _FORGED:
                break
        try:
            self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            return
        kill_group(self.proc)  # what the candidate started and left behind in the worker's group
        self._close()

    def exit_description(self) -> str:
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = self.proc.returncode
        self.flush_log()
        if rc is not None and self.wrapped and 128 < rc < 128 + 65:
            rc = 128 - rc  # bwrap exits 128 + N when the process inside was killed by signal N
        if rc is not None and rc < 0:
            return f"the candidate's process was killed by {_signal_name(rc)}"
        return f"the candidate's process exited with code {rc}"

    def _close(self) -> None:
        self.close_input()
        self.flush_log(1.0)  # a helper the candidate left may hold the output open: not waited for
        for closer in (lambda: os.close(self._evt),):
            try:
                closer()
            except OSError:
                pass


class Judge:
    def __init__(self, args, session):
        self.args = args
        self.session = session
        self.worker: Optional[WorkerProcess] = None
        self.checker: Optional[WorkerProcess] = None
        self.load_failure: Optional[str] = None
        #: what the case being judged is doing, on a terminal only (never in logs or pipes)
        self.status = StatusLine() if getattr(args, "format", "table") == "table" else StatusLine(_Silent())
        self.done = 0
        #: bytes the case being judged must move (from its checker), and the calibrated copy bandwidth
        self.io_bytes = self.bandwidth = None

    # ------------------------------------------------------------------ setup
    def prepare(self):
        """Everything that can reject the input, before a run directory exists."""
        args, session = self.args, self.session
        candidate_path = args.candidate or os.environ.get("ZLF_TASK_CANDIDATE")
        if not candidate_path:
            raise UsageError("zlf task: give the candidate with --candidate FILE (or ZLF_TASK_CANDIDATE)")
        self.package = TaskPackage.open(args.package)
        self.candidate = Candidate.open(candidate_path)
        self.sandbox, self.sandbox_why = sandbox.choose(getattr(args, "sandbox", None) or sandbox.AUTO)
        session.hooks.check_exclusive()  # before anything is written
        self.backend = session.choose_backend(args.backend, args.device)
        self.facts = probe.read(self.package, args.cases)  # the problem module, imported in a child
        self.cases = self.facts.cases
        self.time_limit = self.package.limit("time_limit_s", args.time_limit, 60)
        self.compile_time_limit = self.package.limit("compile_time_limit_s", args.compile_time_limit,
                                                     COMPILE_TIME_LIMIT_S)
        self.tolerances = self.package.tolerances(args.rtol, args.atol)
        self.base_seed = self.facts.base_seed
        self.outputs = self.facts.outputs
        self.timer = timers.apply(session, self.backend)  # one timer family for every language
        if self.candidate.kind == KIND_CUDA:
            arch = args.nvcc_arch or default_arch(self.backend)
            cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
            with self._ticking(self.candidate.path.name, "compiling with nvcc", self.compile_time_limit):
                self.candidate = compile_cuda(self.candidate, cache, arch, args.nvcc_flag or (),
                                              timeout=self.compile_time_limit)
            if self.candidate.compile_failed:
                self.load_failure = self.candidate.compile_output
            elif self.backend.host_timing:
                raise UsageError(f"candidate {self.candidate.path.name!r} is CUDA C++: it needs a CUDA device "
                                 f"(backend {self.backend.name!r} runs on the host; it compiled fine)")

    def timer_names(self) -> set:
        """The timer names a worker's timing may carry: the judge's choice, the backend's, and on a
        device the fallbacks its timers take; anything else is replaced by the judge's choice."""
        names = {self.timer.timer, self.backend.timer_name}
        if not self.backend.host_timing:
            names.update(GPU_TIMERS)
        return names

    def sanitize_timing(self, d):
        """The worker's timing as the judge keeps it: a duration and its samples (finite, not
        negative), the timer's name if it is one this run can use, the timer's own diagnostics
        (:data:`TIMING_EXTRA_KEYS`) -- nothing the judge computes or names."""
        if not isinstance(d, dict):
            return None

        def ms(x):
            return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) \
                and x >= 0 else None

        value = ms(d.get("value_ms"))
        if value is None:
            return None
        samples = [ms(x) for x in list(d.get("samples_ms") or ())[:100000]]
        if None in samples:  # a clock that ran backwards (or a forged sample): no time is taken from it
            return None
        timer = d.get("timer") if d.get("timer") in self.timer_names() else self.timer.timer
        extra = d.get("extra") if isinstance(d.get("extra"), dict) else {}
        calls = d.get("calls_per_sample")
        return Timing(value_ms=value, timer=timer, samples_ms=samples or [value],
                      fallback_reason=str(d["fallback_reason"])[:500] if d.get("fallback_reason") else None,
                      markers=[str(m)[:500] for m in list(d.get("markers") or ())[:20]],
                      l2=str(d.get("l2") or "")[:20],
                      calls_per_sample=calls if isinstance(calls, int) and not isinstance(calls, bool) and calls > 0 else 1,
                      extra={k: extra[k] for k in TIMING_EXTRA_KEYS if k in extra and is_jsonable(extra[k])},
                      wall_ms=ms(d.get("wall_ms")))

    @contextlib.contextmanager
    def _ticking(self, head: str, name: str, limit: float):
        """The status line ``head: name (N s of LIMIT s left)``, kept current while the body runs."""
        if not self.status.on:
            yield
            return
        phase, done = Phase(self.status, head, limit), threading.Event()
        phase.set(name, time.monotonic() + limit)

        def tick():
            while not done.wait(TICK_S):
                phase.tick()

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()
            self.status.clear()

    def start_run(self):
        args = self.args
        # Orphans of the candidate's processes (double fork, setsid) come back to this process,
        # where the end of a case finds and kills them; what was already running is not ours.
        sandbox.become_subreaper()
        self.children_before = set(sandbox._children_map().get(os.getpid(), ()))
        self.rundir = RunDir.create(args.out, args.name or self.package.name)
        self.rundir.reserve()  # room for the last meta.json should the disk fill up
        (self.rundir.path / TASK_DIR).mkdir()
        plan = [types.SimpleNamespace(op=types.SimpleNamespace(name=self.package.name))] * len(self.cases)
        self.run = Run(self.session, self.rundir, plan, argv=["zlf", *sys.argv[1:]])
        backend, meta = self.backend, self.run.meta
        self.sharing = sharing_mode(backend.device)
        meta["fingerprint"] = backend.fingerprint()
        meta["device_name"] = meta["fingerprint"].get("device_name")
        state = backend.device_state()
        if state:
            meta["device_state_start"] = state
        meta["warnings"] = backend.busy_warnings()
        calibrated = ceilings.load(meta["device_name"])
        #: the copy bandwidth zlf calibrate measured here (GB/s), or None: the cases' memory floor
        self.bandwidth = calibrated.bandwidth_GB_s if calibrated else None
        tolerances = self.tolerances
        meta["task"] = {
            "package": str(self.package.root), "problem_module": self.package.module_path.name,
            "metadata": self.package.meta if is_jsonable(self.package.meta) else str(self.package.meta),
            "candidate": self.candidate.to_json(), "cases": self.cases, "base_seed": self.base_seed,
            "seed_scheme": "base_seed + case number, set before genTestCase", "tolerances": tolerances,
            "time_limit_s": self.time_limit, "compile_time_limit_s": self.compile_time_limit, "isolation": "one worker per case" if not args.reuse_worker
            else "one worker reused until a case fails",
            "checker": "the package, inputs, baseline and check in a process that never runs the candidate; "
                       "buffers shared with the worker (CUDA IPC / shared memory / staged host buffers)",
            "sharing": self.sharing,
            "input_sets": INPUT_SETS,
            "warmup_iters_override": [args.warmup, args.iters],
            "timer": self.timer.to_json(),
            "sandbox": {"mode": self.sandbox, "why": self.sandbox_why,
                        "not_protected": self.not_protected()},
            "time_check": {"batch_rounds": WITNESS_ROUNDS, "max_batch_rounds": WITNESS_MAX_ROUNDS,
                           "noop_rounds": NOOP_ROUNDS, "factor": TRUST_FACTOR,
                           "slack_ms_per_call": self.slack_ms()},
        }
        self.run.save_meta()
        if self.candidate.compile_output:
            (self.rundir.path / TASK_DIR / "compile.log").write_text(self.candidate.compile_output)
        config = self.session.config.write(self.rundir.path / TASK_DIR / "config.json")
        spec = {
            "config": str(Path(config).resolve()), "package": str(self.package.root),
            "run_dir": str(self.rundir.path.resolve()),
            "argv": self.run.meta["command"], "candidate": self.candidate.to_json(),
            "base_seed": self.base_seed, "outputs": self.outputs,
            "tolerances": tolerances,
        }
        self.spec_path = self.rundir.path / TASK_DIR / "worker.json"
        self.spec_path.write_text(json.dumps(spec, indent=2))
        self.run.log.info(self.timer.why)
        print(clean(self.timer.why), file=sys.stderr)  # said once the input was found good
        line = f"sandbox: {self.sandbox} ({self.sandbox_why})"
        if self.sandbox == sandbox.BWRAP and self.sharing == IPC:
            line += f"; {sandbox.SHARED_PID}"
        self.run.log.info(line)
        print(clean(line), file=sys.stderr)
        self.run.log.info(f"task {self.package.name}: candidate {self.candidate.path} ({self.candidate.kind}), "
                          f"cases {self.cases}, time limit {self.time_limit:g} s per case")
        self.run.log.info(f"sharing: {self.sharing} ({SHARING_WHY[self.sharing]})")

    def not_protected(self) -> Optional[str]:
        """What the sandbox in force leaves open (None: nothing this judge knows of)."""
        if self.sandbox != sandbox.BWRAP:
            return sandbox.NOT_PROTECTED
        return sandbox.SHARED_PID if self.sharing == IPC else None

    def slack_ms(self) -> float:
        """Per call, what the judge's clock may see of a call beyond the time its timer reports
        (host launch cost on a device; the host clock's scheduling noise on the host)."""
        return HOST_SLACK_MS if self.backend.host_timing else DEVICE_SLACK_MS

    # ------------------------------------------------------------------ cases
    def _pair_for(self, case: int) -> tuple:
        """The checker and the worker for ``case``: started together, retired together."""
        if self.worker is None or self.checker is None:
            self._retire_worker(kill=True)
            task = self.rundir.path / TASK_DIR
            self.place = sandbox.Place(task / "worker", visible=self.worker_reads())
            self.checker = WorkerProcess(self.spec_path, task / f"checker-case{case}.log", case, "zlf_taskpkg.checker",
                                         place=self.place, mode=self.sandbox, share_pid=self.sharing == IPC)
            self.worker = WorkerProcess(self.spec_path, task / f"worker-case{case}.log", case, place=self.place,
                                        mode=self.sandbox, share_pid=self.sharing == IPC)
        return self.checker, self.worker

    def worker_reads(self) -> list:
        """What the worker reads besides its Python: the run directory (its spec, the config), the
        package, the candidate's folder and compiled library (bound back under bwrap's /tmp)."""
        paths = [self.rundir.path, self.package.root, self.candidate.path.parent]
        library = getattr(self.candidate, "library", None)
        return paths + ([Path(library).parent] if library else [])

    def _retire_worker(self, kill: bool = False) -> None:
        pair, self.worker, self.checker = (self.worker, self.checker), None, None
        for proc in pair:  # the candidate first: the checker's buffers outlive its mappings
            if proc is None:
                continue
            proc.kill() if kill else proc.finish()
            for k, v in proc.meta.items():
                self.run.meta.setdefault(k, v)  # what lifecycle hooks added (seed, autotune ...)
        # every process the pair left (a detached helper of the candidate's came back to this
        # process, a subreaper), then the pair's scratch and shared-memory directories
        self.kill_survivors()
        place, self.place = getattr(self, "place", None), None
        if place is not None:
            place.remove()

    def kill_survivors(self) -> list:
        """Kill what a case left running: every process that became this process's child since
        the run began (orphans come here: this process is a subreaper), but the live pair."""
        keep = [p.proc.pid for p in (self.worker, self.checker) if p is not None]
        killed = sandbox.kill_survivors(keep=keep + sorted(self.children_before))
        if killed:
            self.run.log.info(f"killed {len(killed)} process(es) a case left running: {killed}")
        return killed

    def _fallback_point(self, case: int) -> dict:
        """The case's point when no worker reported it (the worker reports the tensors' dtype)."""
        shapes = [tuple(s) for s in self.facts.case_shapes(case) or ()]
        if shapes:
            shape = list(max(shapes, key=lambda s: math.prod(s) if s else 0)) or [1]
        else:
            shape = [case]
        point = types.SimpleNamespace(op=self.package.name, shape=shape, dtype="unknown", variant=f"case{case}")
        pid = f"{point.op}/{'x'.join(map(str, shape))}/{point.dtype}/{point.variant}"
        return {"id": pid, "op": point.op, "shape": shape, "dtype": point.dtype, "variant": point.variant,
                "case": case, "arg_shapes": [list(s) for s in shapes]}

    def judge_case(self, case: int):
        """``(record, pair_reusable)`` for one case."""
        point = self._fallback_point(case)
        if self.load_failure is not None:  # the same source fails the same way on every case
            return V.case_record(point, V.COMPILE_ERROR, self.load_failure), False
        c = CaseState(self, case, point)
        try:
            return c.judge()
        except CaseOver as over:
            if over.kill:
                self._retire_worker(kill=True)
            return over.record, False

    def execute(self) -> list:
        records = []
        try:
            for case in self.cases:
                self.done = len(records)
                self.io_bytes = None
                record, reusable = self.judge_case(case)
                record = speed.flag(record, self.io_bytes, self.bandwidth)
                record = attrs.evolve(record, extra={**record.extra, "sandbox": self.sandbox})
                record = trust(record)  # time not trusted: no speedup, a FAILED record
                self.kill_survivors()  # nothing of this case touches the next one
                self.status.clear()
                if not (reusable and self.args.reuse_worker):
                    self._retire_worker()
                self.rundir.append(record)
                records.append(record)
                verdict = record.extra.get("verdict")
                self.run.log.info(f"case {case}: {verdict}" + (f" {record.median_ms:.4g} ms" if record.median_ms else "")
                                  + (f" ({record.error})" if record.error else ""))
                if self.args.format != "json":
                    print(f"[{len(records)}/{len(self.cases)}] case {case}: {verdict}", file=sys.stderr, flush=True)
            self._retire_worker()
            self.run.status = "complete"
        except KeyboardInterrupt as exc:
            self.run.status = stop_word(exc)
            raise
        except OSError as exc:
            if disk_full(exc):
                self.run.status = "disk full"
            raise
        finally:
            if self.worker is not None or self.checker is not None:
                self._retire_worker(kill=True)
            self.finish_meta(records)
        return records

    def abandon_setup(self) -> None:
        """The disk filled before the first case: meta.json (where there is one) says so, the
        reserve is given back."""
        if getattr(self, "run", None) is None:
            self.rundir.release()
            return
        self.run.status = "disk full"
        self.finish_meta([])

    def finish_meta(self, records) -> None:
        meta = self.run.meta
        meta["status"] = self.run.status
        meta["finished"] = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
        meta["counts"] = {s: sum(1 for r in records if r.status == s) for s in (STATUS_OK, STATUS_FAILED)}
        meta.setdefault("task", {})
        meta["task"]["verdicts"] = {v: sum(1 for r in records if r.extra.get("verdict") == v) for v in V.VERDICTS}
        meta["task"]["summary"] = summary(records)
        shapes = []
        for r in records:
            if list(r.shape) not in shapes:
                shapes.append(list(r.shape))
        try:
            self.rundir.write_shapes({self.package.name: shapes})
        except OSError as exc:
            if not disk_full(exc):  # the shapes are in the records too; meta.json comes first
                raise
        try:
            self.run.save_meta()
        finally:
            self.rundir.release()
        self.run.log.info(f"run {self.run.status}: {len(records)} of {len(self.cases)} cases written")
        self.run.log.close()


class CaseOver(Exception):
    """A case ended early (a process died, hung, forged a line, or the package failed)."""

    def __init__(self, record, kill: bool = True):
        super().__init__(record.error)
        self.record, self.kill = record, kill


#: record fields the judge sets; annotations from the candidate's process cannot replace them
JUDGE_FIELDS = frozenset({"verdict", "case", "arg_shapes", "case_seed", "baseline_ms", "baseline_timer",
                          "baseline_samples", "speedup", "judge_output", "input_sets", "distinct_input_sets",
                          "io_bytes", "floor_ms", "suspicious", "sandbox", "clock_check", "generated_input_sets",
                          "time_trusted", "time_not_trusted", "timing_rejected"})


class CaseState:
    """One case between the checker and the worker:

    checker: case → baseline → shared; worker: candidate_start → called; checker: check first;
    worker: time → timed; checker: check timed (every slot); worker: call slot j → called;
    checker: check final; worker: end (the verdict) → done.
    """

    def __init__(self, judge: Judge, case: int, point: dict):
        self.j, self.case, self.point = judge, case, point
        self.baseline, self.started = None, False
        self.base_extra, self.base_markers = {}, []
        self.shared: dict = {}
        self.timing = None
        self.timing_rejected = None
        self.clocked_calls = 0
        self.clock = None
        #: the longest clocked round so far (s): a next round must fit in the time limit
        self.round_s = 0.0
        self.max_err = None
        self.lost = False
        self.deadline = time.monotonic() + PACKAGE_TIME_LIMIT_S
        head = f"[{judge.done + 1}/{len(judge.cases)}] case {case}"
        self.phase = Phase(judge.status, head, PACKAGE_TIME_LIMIT_S)

    # ------------------------------------------------------------------ events
    def over(self, verdict: str, text: str, kill: bool = True) -> CaseOver:
        extra = {"input_sets": self.shared.get("input_sets"), "distinct_input_sets": self.shared.get("distinct_sets")} \
            if self.shared else None
        return CaseOver(V.case_record(self.point, verdict, text, baseline=self.baseline, max_rel_err=self.max_err,
                                      extra={**self.base_extra, **(extra or {})}, markers=self.base_markers),
                        kill)

    def wait(self, proc: WorkerProcess, is_checker: bool) -> dict:
        j = self.j
        while True:
            wait = max(0.0, self.deadline - time.monotonic())
            event = proc.next_event(min(wait, TICK_S) if j.status.on else wait)
            if event is _TIMEOUT and time.monotonic() < self.deadline:
                self.phase.tick()
                continue
            if event is _TIMEOUT:
                if self.started and not is_checker:
                    raise self.over(V.TIME_LIMIT_EXCEEDED,
                                    f"no result within the time limit of {j.time_limit:g} s (the candidate was stopped)")
                if self.started:
                    raise self.over(V.JUDGE_ERROR, f"the package's check took past the time limit of {j.time_limit:g} s")
                raise self.over(V.JUDGE_ERROR, f"the package took over {PACKAGE_TIME_LIMIT_S:g} s before the candidate ran")
            if event is _FORGED:
                who = "the checker's" if is_checker else "the judge's"
                raise self.over(V.JUDGE_ERROR if is_checker else V.RUNTIME_ERROR,
                                f"{who} event pipe received a line without this case's nonce: something in the "
                                "candidate's process wrote to it (forged verdict rejected)\n"
                                f"line: {proc.forged_line.decode(errors='replace')}")
            if event is None:
                what = proc.exit_description().replace("the candidate's process", "the checker" if is_checker
                                                       else "the candidate's process")
                verdict = V.RUNTIME_ERROR if self.started and not is_checker else V.JUDGE_ERROR
                raise self.over(verdict, f"{what}\n--- last lines of {proc.log_path.name} ---\n{_tail(proc.log_path)}")
            if is_checker and event.get("event") == "result":  # the package failed
                raise self.over(V.JUDGE_ERROR, event.get("text", ""), kill=False)
            return event

    def send(self, proc: WorkerProcess, message: dict, is_checker: bool) -> None:
        if not proc.send(message):
            who = "checker" if is_checker else "worker"
            raise self.over(V.JUDGE_ERROR if is_checker or not self.started else V.RUNTIME_ERROR,
                            f"the {who} died before it was told to go on:\n" + _tail(proc.log_path))

    def expect(self, proc: WorkerProcess, kinds: tuple, is_checker: bool) -> dict:
        """The next event of one of ``kinds``; a failure reported by the worker ends the case."""
        while True:
            event = self.wait(proc, is_checker)
            kind = event.get("event")
            if kind in kinds:
                return event
            if not is_checker and kind == "result":
                raise self.worker_failed(event)

    def worker_failed(self, event: dict) -> CaseOver:
        """The candidate's process reports its own failure: never more than that."""
        verdict = event.get("verdict")
        allowed = (V.RUNTIME_ERROR, V.COMPILE_ERROR) if self.started else (V.JUDGE_ERROR,)  # the worker did not start
        text = event.get("text", "")
        if verdict not in allowed:
            text = (f"the candidate's process reported {str(verdict)[:40]!r}: a verdict only the checker gives "
                    f"(forged verdict rejected)\n{text}")
            verdict = allowed[0]
        if event.get("load_failed"):
            self.j.load_failure = event.get("text", "")
        extra, markers = self.done()
        over = self.over(verdict, text, kill=False)
        over.record = attrs.evolve(over.record, markers=tuple(self.base_markers + markers),
                                   extra={**extra, **over.record.extra})
        return over

    def done(self) -> tuple:
        """The worker's annotations and markers of the point, once it ended it (best effort)."""
        try:
            event = self.wait(self.j.worker, False)
        except CaseOver:
            self.lost = True  # the worker did not end the point: it is not reused
            return {}, []
        if event.get("event") != "done":
            self.lost = True
            return {}, []
        extra = {k: v for k, v in (event.get("extra") or {}).items() if k not in JUDGE_FIELDS}
        return extra, [str(m) for m in event.get("markers") or ()]

    # ------------------------------------------------------------------ the case
    def judge(self):
        j = self.j
        checker, worker = j._pair_for(self.case)
        self.phase.set("preparing inputs", self.deadline)
        self.send(checker, {"case": self.case}, True)
        while True:
            event = self.wait(checker, True)
            kind = event.get("event")
            if kind == "case":
                self.point = {**event["point"]}
                j.io_bytes = event.get("io_bytes")
                self.phase.set("timing the baseline", self.deadline)
            elif kind == "baseline":
                self.baseline = timing_from_json(event["timing"])
                self.base_extra = dict(event.get("extra") or {})
                self.base_markers = [str(m) for m in event.get("markers") or ()]
            elif kind == "shared":
                self.shared = event
                break
        noop = NOOP_ROUNDS if worker.noop_ms is None else 0  # measured once, before any candidate code
        self.send(worker, {"case": self.case, "point": self.point, "outputs": event["outputs"],
                           "slots": event["slots"], "counts": event["counts"], "noop": noop}, False)
        if noop:  # per round, the sum of one clocked no-op call per slot (as clock_check clocks)
            calls = len(event["slots"]) or 1
            worker.noop_ms = [sum(self.clocked(worker, {"go": "noop"}, "noop_done") for _ in range(calls))
                              for _ in range(noop)]
        self.expect(worker, ("candidate_start",), False)
        self.started = True
        self.deadline = time.monotonic() + j.time_limit
        self.phase.limit = j.time_limit
        # a CUDA C++ candidate was compiled before the run: its first call only loads it
        self.phase.set("first call" if j.candidate.kind == KIND_CUDA else "compiling (first call)", self.deadline)
        self.expect(worker, ("called",), False)

        verdict, text, fatal = self.check("first")
        if verdict == V.ACCEPTED:
            self.phase.set("timing", self.deadline)
            self.send(worker, {"go": "time"}, False)
            timed = self.expect(worker, ("timed",), False)
            self.timing = j.sanitize_timing(timed.get("timing"))
            if self.timing is None:  # an Accepted case without a time is not a trusted one (speed.trust)
                self.timing_rejected = ("its timer reported no finite, non-negative duration "
                                        "(a clock that stood still or ran backwards)")
            self.timed = timed
            self.phase.set("checking", self.deadline)
            verdict, text2, fatal, slot = self.check("timed", with_slot=True)
            if verdict == V.ACCEPTED:
                self.send(worker, {"go": "call", "slot": slot}, False)
                self.expect(worker, ("called",), False)
                verdict, text2, fatal = self.check("final")
            if verdict == V.ACCEPTED:
                verdict, text2, fatal = self.clock_check()
            if verdict != V.ACCEPTED:
                text = text2
        self.send(worker, {"go": "end", "verdict": verdict, "text": text}, False)
        extra, markers = self.done()
        accepted = verdict == V.ACCEPTED
        extra = {**self.base_extra, **extra, "input_sets": self.shared.get("input_sets"),
                 "distinct_input_sets": self.shared.get("distinct_sets"),
                 "generated_input_sets": self.shared.get("total_sets"), "clock_check": self.clock,
                 "timing_rejected": self.timing_rejected if accepted else None}
        record = V.case_record(self.point, verdict, text, self.timing if accepted else None, self.baseline,
                               self.max_err, extra=extra, markers=self.base_markers + markers)
        reusable = verdict in (V.ACCEPTED, V.WRONG_ANSWER) and not fatal and not self.lost and not (
            accepted and self.timing is not None and self.timing.fallback_reason is not None)
        return record, reusable

    def clocked(self, proc: WorkerProcess, order: dict, reply: str) -> float:
        """ms on this process's clock from telling the worker ``order`` to its ``reply``; the
        reply must name the call (a number the judge gives each order): an extra or stale reply
        is a Runtime Error, not a stopped clock."""
        self.clocked_calls += 1
        call = self.clocked_calls
        start = call_clock()
        self.send(proc, {**order, "call": call}, False)
        event = self.expect(proc, (reply,), False)
        ms = (call_clock() - start) * 1e3
        if event.get("call") != call:
            raise self.over(V.RUNTIME_ERROR, f"the judge's clocked call {call} got a reply that is not its own "
                            f"({clean(str(event.get('call')))[:40]}): an extra or stale {reply!r} on the judge's pipe")
        return ms

    def clock_check(self) -> tuple:
        """The judge's clocked batches: each round the checker loads input sets the candidate never
        saw (seeds it drew itself) into every slot, outputs poisoned; then, slot by slot, the
        worker calls the candidate once and synchronises, on this process's clock, and the checker
        checks that slot's output before the next call is ordered. One call at a time: work a call
        hands to threads cannot overlap the next call's clock, and an output not final when the
        call reports is a Wrong Answer. ``(verdict, text, fatal)``; :attr:`clock` keeps the times
        (per round, the sum of its calls' clocks). After :data:`WITNESS_ROUNDS` rounds, while the
        least round would still leave the reported time untrusted, rounds go on (up to
        :data:`WITNESS_MAX_ROUNDS`, and while the case's time limit leaves room for two more):
        on a loaded machine every wake-up waits its turn, a delay that only ever adds, so an honest
        candidate gets a round near what its calls cost, and a cheat's rounds never go below
        what its calls do."""
        j, times = self.j, []
        calls = len(self.shared.get("slots") or ()) or 1
        while len(times) < WITNESS_ROUNDS or self.clock_doubts(times, calls):
            started = time.monotonic()
            self.send(j.checker, {"witness": len(times)}, True)
            ready = self.expect(j.checker, ("witness_ready",), True)
            self.shared["distinct_sets"], self.shared["total_sets"] = ready.get("distinct_sets"), ready.get("total_sets")
            total = 0.0
            for slot in range(calls):
                total += self.clocked(j.worker, {"go": "batch", "slot": slot}, "batched")
                verdict, text, fatal = self.check("witness", slot=slot)
                if verdict != V.ACCEPTED:
                    return verdict, text, fatal
            times.append(total)
            self.round_s = max(self.round_s, time.monotonic() - started)
        self.clock = self.clock_of(times, calls)
        return V.ACCEPTED, "", False

    def clock_of(self, times, calls: int) -> dict:
        return speed.clock_bound(times, self.j.worker.noop_ms or [0.0], calls, self.j.slack_ms(), TRUST_FACTOR)

    def clock_doubts(self, times, calls: int) -> bool:
        """Whether another round is worth clocking: the least round so far leaves the reported
        time below the bound, rounds are left, and so is time for two more of the longest."""
        ms = self.timing.value_ms if self.timing is not None else None
        if ms is None or len(times) >= WITNESS_MAX_ROUNDS:
            return False
        if time.monotonic() + 2 * self.round_s > self.deadline:
            return False
        return ms < self.clock_of(times, calls)["bound_ms"]

    def check(self, phase: str, with_slot: bool = False, slot: Optional[int] = None):
        if phase == "first":
            self.phase.set("checking", self.deadline)
        self.send(self.j.checker, {"check": phase, **({"slot": slot} if slot is not None else {})}, True)
        event = self.expect(self.j.checker, ("checked",), True)
        if phase == "first":
            self.max_err = event.get("max_rel_err")
        result = (event.get("verdict"), event.get("text") or "", bool(event.get("fatal")))
        return (*result, event.get("slot")) if with_slot else result


# ----------------------------------------------------------------------------- output
def summary(records) -> dict:
    passed = [r for r in records if r.extra.get("verdict") == V.ACCEPTED]
    speedups = [r.extra["speedup"] for r in passed if r.extra.get("speedup")]
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    return {"passed": len(passed), "total": len(records), "geomean_speedup": geo, "speedup_cases": len(speedups),
            "suspicious_cases": [r.extra.get("case") for r in records if r.extra.get("suspicious")],
            "time_not_trusted_cases": [r.extra.get("case") for r in records if r.extra.get("time_not_trusted")],
            "inputs_repeat_cases": [r.extra.get("case") for r in records if _inputs_repeat(r)]}


def _inputs_repeat(r) -> bool:
    total, distinct = r.extra.get("generated_input_sets"), r.extra.get("distinct_input_sets")
    return bool(total) and distinct is not None and distinct < total


def verdict_of(r) -> str:
    """The verdict column: the verdict, and whether an Accepted case's time is trusted."""
    verdict = r.extra.get("verdict", "")
    return f"{verdict}, time not trusted" if r.extra.get("time_not_trusted") else verdict


def all_good(s: dict) -> bool:
    """Exit code 0: every case Accepted, and every time trusted."""
    return s["passed"] == s["total"] and not s["time_not_trusted_cases"]


#: the fields of ``zlf task``'s summary, in every format
CASE_FIELDS = ("case", "largest_arg", "verdict", "timer", "candidate_ms", "baseline_ms", "speedup", "note")


def _note(r) -> str:
    note = (r.error or "").split(": ", 1)[1] if r.error and ": " in r.error else ""
    if r.markers:
        note = (note + " " if note else "") + " ".join(m.split(" ")[0] for m in r.markers)
    if r.extra.get("suspicious") and not r.extra.get("time_not_trusted"):
        note = "suspiciously fast: " + "; ".join(r.extra["suspicious"]) + (" " + note if note else "")
    if _inputs_repeat(r) and "inputs repeat" not in note:
        note = "inputs repeat: caching not excluded" + ("; " + note if note else "")
    return note


def case_values(r) -> list:
    """One case's values in :data:`CASE_FIELDS` order."""
    return [r.extra.get("case"), "x".join(map(str, r.shape)), verdict_of(r), r.timer or "",
            r.median_ms, r.extra.get("baseline_ms"), r.extra.get("speedup"), _note(r)]


def verdict_table(records, fmt: str = "table") -> str:
    from zlf.output import render

    if fmt == "csv":
        return render(CASE_FIELDS, [case_values(r) for r in records], fmt)
    rows = []
    for r in records:
        case, shape, verdict, timer, ms, base, speed, note = case_values(r)
        colour = "green" if verdict == V.ACCEPTED else "yellow" if verdict.startswith(V.ACCEPTED) else ("yellow" if verdict == V.JUDGE_ERROR else "red")
        rows.append([case, shape, paint(verdict, colour) if fmt == "table" else verdict, timer, number(ms), number(base),
                     f"{speed:.3f}x" if speed else "", clean(note[:70])])
    return tabulate(rows, headers=list(CASE_FIELDS), tablefmt="github" if fmt == "markdown" else "simple",
                    disable_numparse=True)


def print_details(records) -> None:
    shown_compile = False
    for r in records:
        verdict = r.extra.get("verdict")
        text = (r.extra.get("judge_output") or "").rstrip()
        if r.extra.get("time_not_trusted"):
            print(f"\ncase {r.extra.get('case')}: {V.ACCEPTED}, time not trusted")
            print("\n".join("  " + clean(w) for w in r.extra["time_not_trusted"]))
            continue
        if verdict == V.ACCEPTED or not text:
            continue
        if verdict == V.COMPILE_ERROR:
            if shown_compile:
                continue
            shown_compile = True
            lines = text.splitlines()[:200]
        else:
            lines = text.splitlines()[-30:]
        print(f"\ncase {r.extra.get('case')}: {verdict}")
        print("\n".join("  " + clean(l) for l in lines))  # the candidate's own output


def judge(args, session) -> int:
    j = Judge(args, session)
    j.prepare()
    try:
        j.start_run()
    except OSError as exc:
        if not disk_full(exc) or getattr(j, "rundir", None) is None:
            raise
        j.abandon_setup()
        raise UsageError(f"{exc.strerror or exc} writing {exc.filename or j.rundir.path}: the run could not start "
                         f"(meta.json says so) in {j.rundir.path}") from exc
    try:
        records = j.execute()
    except KeyboardInterrupt as exc:
        last_word(f"\n{stop_word(exc)}; finished cases kept\nrun dir: {j.rundir.shown}")
        return stop_code(exc)
    except OSError as exc:
        if not disk_full(exc):
            raise
        kept = len(j.rundir.records()[0])
        raise UsageError(f"{exc.strerror or exc} writing {exc.filename or j.rundir.path}: "
                         f"{kept} finished case(s) kept in {j.rundir.path}") from exc
    s = summary(records)
    if args.format == "json":
        print(json.dumps({"run_dir": str(j.rundir.path), "package": j.package.name, "candidate": str(j.candidate.path),
                          **s, "cases": [{**dict(zip(CASE_FIELDS, case_values(r))),
                                          "suspicious": r.extra.get("suspicious") or [],
                                          "time_not_trusted": r.extra.get("time_not_trusted") or [],
                                          "output": r.extra.get("judge_output")} for r in records]}, indent=2))
        return 0 if all_good(s) else 1
    print(verdict_table(records, args.format))
    out = sys.stderr if args.format == "csv" else sys.stdout  # csv: stdout is the table alone
    if args.format != "csv":
        print_details(records)
    geo = f"{s['geomean_speedup']:.3f}x" if s["geomean_speedup"] else "n/a"
    print(f"\n{j.package.name}: {s['passed']}/{s['total']} cases Accepted; "
          f"geometric-mean speedup {geo} over {s['speedup_cases']} accepted case(s) (baseline ms / candidate ms)",
          file=out)
    if s["time_not_trusted_cases"]:
        print(f"{len(s['time_not_trusted_cases'])} case(s) Accepted with a time not trusted (no speedup): case(s) "
              + ", ".join(map(str, s["time_not_trusted_cases"])), file=out)
    if s["inputs_repeat_cases"]:
        print("inputs repeat: caching not excluded on case(s) " + ", ".join(map(str, s["inputs_repeat_cases"]))
              + " (the package's input sets are all the same)", file=out)
    fast = speed.summary_line([r for r in records if not r.extra.get("time_not_trusted")])
    if fast:
        print(clean(fast), file=out)
    if j.sandbox != sandbox.BWRAP:
        print(clean(f"sandbox: {j.sandbox}: not protected: {j.not_protected()}"), file=out)
    if j.backend.host_timing:
        print(paint("note: cpu backend: times are host wall-clock, not GPU kernel times", "dim", out), file=out)
    print(f"run dir: {j.rundir.shown}", file=out)
    return 0 if all_good(s) else 1
