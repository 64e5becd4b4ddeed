"""The run engine: one process, one side. Points run in order; each record is appended as
soon as it exists, so a crash or Ctrl-C loses nothing already measured."""
from __future__ import annotations

import contextlib
import datetime as _dt
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

import attrs

from . import __version__
from .console import Progress, clean_lines, duration
from .errors import one_line as _one_line
from .ops import check_output, outside, point_inputs, poison
from .procs import EXIT_HUNG, PointTimeLimit, PointWatch, leave_if_forked, stop_word
from .redact import redact_text, safe_environment
from .records import STATUS_FAILED, STATUS_OK, STATUS_OOM, PointRecord, jsonable_options
from .rundir import LOG, RunDir, disk_full
from .streams import LossyStream

#: environment variables that change what is compiled or timed, as far as core knows (Triton,
#: torch, the CUDA stack, compiler switches); extensions add theirs (``env_prefixes`` hook).
ENV_PREFIXES = ("TRITON_", "ZLF_", "CUDA_", "NVIDIA_", "HIP_", "ROCR_", "PYTORCH_", "TORCH_", "DISABLE_",
                "ENABLE_", "MLIR_", "LLVM_")


#: where a process's time went (meta.json ``time_split``, seconds): ``start`` (interpreter start to
#: zlf's main), ``imports`` (extensions, the backend and its libraries), ``planning`` (ops resolved,
#: points planned), then per point ``inputs``, ``compile`` (the point's first, checked call: Triton
#: compiles, an autotuner tunes; the correctness check), ``measuring`` (the timer)
SPLIT = ("start", "imports", "planning", "inputs", "compile", "measuring")


class TimeSplit:
    """A process's seconds per :data:`SPLIT` category and the kernels compiled in it (Triton's
    ``on_compile``: ``compiled`` cache misses, ``cache_hits`` loaded from its disk cache): a
    campaign adds them up and marks a compile where it expects none."""

    def __init__(self, before: Optional[dict] = None):
        before = before or {}
        self.seconds = {k: float(before.get(k) or 0.0) for k in SPLIT}
        self.compiled = int(before.get("compiled") or 0)
        self.cache_hits = int(before.get("cache_hits") or 0)

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0

    def add(self, name: str, seconds: Optional[float]) -> None:
        if seconds is not None:
            self.seconds[name] += max(0.0, seconds)

    def count(self, event) -> None:
        """An ``on_compile`` event: a compile, or a load from Triton's cache."""
        if getattr(event, "cache_hit", False):
            self.cache_hits += 1
        else:
            self.compiled += 1

    def to_json(self) -> dict:
        return {**{k: round(v, 4) for k, v in self.seconds.items()}, "compiled": self.compiled,
                "cache_hits": self.cache_hits}


def relevant_environment(environ=None, prefixes=ENV_PREFIXES) -> dict:
    """The variables of ``environ`` starting with one of ``prefixes``, as meta.json records them
    (less any that looks like a credential: :func:`zlf.redact.safe_environment`)."""
    environ = os.environ if environ is None else environ
    prefixes = tuple(prefixes)
    return safe_environment({k: v for k, v in sorted(environ.items()) if k.startswith(prefixes)})


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


class RunLog:
    """run.log: timestamped lines, marker lines verbatim (grep-able), never escape codes."""

    def __init__(self, path: Path):
        self._f = open(path, "a", buffering=1)

    def _write(self, line: str) -> None:
        try:
            self._f.write(clean_lines(redact_text(line.rstrip("\n"))) + "\n")
            self._f.flush()
        except OSError:  # a full disk: the log is for people; records and meta.json come first
            pass

    def info(self, message: str) -> None:
        self._write(f"{_dt.datetime.now():%Y-%m-%d %H:%M:%S} {message}")

    def warning(self, message: str) -> None:
        self.info(f"WARNING {message}")

    def marker(self, line: str) -> None:
        self._write(line)

    def close(self) -> None:
        try:
            self._f.close()
        except OSError:
            pass


@contextlib.contextmanager
def lossy_streams():
    """``sys.stdout`` and ``sys.stderr`` as :class:`LossyStream` inside the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = LossyStream(saved[0]), LossyStream(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


class Run:
    """The state of one ``zlf run`` process, handed to every lifecycle hook.

    Attributes extensions use: ``dir`` (Path), ``rundir`` (:class:`RunDir`), ``config``
    (:class:`~zlf.config.RunConfig`), ``options`` (the parsed command line), ``backend``,
    ``meta`` (dict written to meta.json), ``log`` (:class:`RunLog`), ``status``, and during a
    point ``current_point``, ``current_op``, ``current_inputs``, ``markers`` and ``extra``.

    The lifecycle, for anything that runs points its own way (a task worker, a probe)::

        run = Run.open(session, rundir, plan)
        run.begin()                              # compiler hooks, time limit, before_run
        for each point:
            run.begin_point(point, op)           # before_point
            timing = run.time_point(fn, point, op=op, inputs=inputs)   # time_fn
            record = run.end_point(point, record)                      # after_point
        run.close()                              # after_run, meta.json, run.log
    """

    def __init__(self, session, rundir: RunDir, plan: list, argv=None):
        self.session = session
        self.config = session.config
        self.options = session.options
        self.backend = session.backend
        self.hooks = session.hooks
        self.rundir = rundir
        self.dir = rundir.path
        self.plan = plan
        self.log = RunLog(self.dir / LOG)
        self.status = "running"
        self.records: list = []
        self.current_point = None
        self.current_op = None
        self.current_inputs = None
        self._markers: list = []
        self._extra: dict = {}
        self.compiler_hooks = None
        #: the backend's :class:`~zlf.backends.base.ClockSampler` (None: the device's clock is not read)
        self.clock_sampler = None
        self.watch = PointWatch(None, self._hung)  # armed by execute() with --time-limit
        #: where this process's time goes (meta.json ``time_split``)
        self.split = TimeSplit()
        #: the pipe to the supervising parent (:class:`zlf.supervise.Link`), None without one
        self.link = None
        #: the process running the points: a copy an op's os.fork() returns into ends at once
        self.pid = os.getpid()
        self.meta = {
            "zlf_version": __version__,
            "command": list(argv if argv is not None else sys.argv),
            "cwd": os.getcwd(),
            "started": _now(),
            "status": self.status,
            "backend": self.backend.name,
            "timer_default": self.backend.timer_name,
            "host_timing": self.backend.host_timing,
            "extensions": [
                {"name": i.name, "distribution": i.distribution, "version": i.version}
                for i in self.hooks.infos if i.status == "active"
            ],
            "ops": sorted({p.op.name for p in plan}),
            "points": len(plan),
            "environment": relevant_environment(prefixes=self.hooks.env_prefixes()),
            "options": jsonable_options(self.options),
        }

    @classmethod
    def open(cls, session, rundir: RunDir, plan: list = (), argv=None) -> "Run":
        """A run of ``plan`` (PlannedPoints; may be empty) writing into ``rundir``."""
        return cls(session, rundir, list(plan), argv=argv)

    # ------------------------------------------------------------------ lifecycle
    def begin(self) -> None:
        """Install the compiler hooks, arm the time limit, call ``before_run``. Call :meth:`close`
        afterwards even when this raises."""
        hooks, backend = self.hooks, self.backend
        observed = hooks.on_compile if hooks.implemented("on_compile") else None

        def on_compile(event):  # counted always: a campaign checks that later rounds compile nothing
            self.split.count(event)
            if observed is not None:
                observed(event)

        self.compiler_hooks = backend.install_compiler_hooks(
            on_compile,
            hooks.on_launch if hooks.implemented("on_launch") else None,
        )
        self.meta["compiler_hook_api"] = getattr(self.compiler_hooks, "api", None)
        limit = self.config.time_limit_s
        self.meta["time_limit_s"] = limit = backend.point_time_limit_s if limit is None else limit
        self.watch = PointWatch(limit, self._hung, on_extend=lambda seconds: self.tell("extend", seconds=seconds))
        hooks.before_run(self)

    def begin_point(self, point, op=None, inputs=None) -> None:
        """A point starts: it becomes current, its markers and annotations start empty, ``before_point`` runs."""
        self.current_point, self.current_op, self.current_inputs = point, op, inputs
        self._markers, self._extra = [], {}
        self.hooks.before_point(self, point)

    def launch_window(self, point):
        """The context in which the point's first (checked) call reports its launches (``on_launch``)."""
        return self.compiler_hooks.launch_window(point.id) if self.compiler_hooks else contextlib.nullcontext()

    def time_point(self, fn, point, op=None, inputs=None, budget=None, call_on=None):
        """Time ``fn`` with ``time_fn`` under ``budget`` (default: the config's); the timing's
        markers are attached to the point. ``call_on(args)``: the point's call on other arguments,
        where ``fn`` is that call on ``inputs`` (see the ``time_fn`` hook). Returns the
        :class:`~zlf.records.Timing` (or None)."""
        budget = self.config.timing if budget is None else budget
        timing = self.hooks.time_fn(fn, point, self.backend, budget, op=op, inputs=inputs, call_on=call_on)
        for line in timing.markers if timing is not None else ():
            self.mark(line)
        return timing

    def end_point(self, point, record: PointRecord) -> PointRecord:
        """``after_point``, then the record with every marker and annotation of the point; the
        point stops being current and the backend frees its memory."""
        try:
            self.hooks.after_point(self, point, record)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # an observer's failure must not lose the point it observed
            self.annotate("after_point_error", _one_line(exc))
            self.log.info(f"after_point of {point.id} raised:\n{traceback.format_exc().rstrip()}")
        if self._extra or self._markers != list(record.markers):  # after_point may have annotated
            record = attrs.evolve(record, markers=tuple(self._markers), extra={**record.extra, **self._extra})
        self.current_point = self.current_op = self.current_inputs = None
        try:
            self.backend.free_memory()
        except Exception:
            pass
        return record

    def close(self, status: Optional[str] = None) -> None:
        """``after_run`` with the records so far, then remove the compiler hooks, finish and write
        meta.json, release the run directory's reserve and close run.log."""
        if status is not None:
            self.status = status
        try:
            self.hooks.after_run(self, list(self.records))
        finally:
            try:
                if self.compiler_hooks is not None:
                    self.compiler_hooks.remove()
                if self.clock_sampler is not None:
                    self.clock_sampler.close()
            finally:
                try:
                    self.watch.close()  # the caller's SIGALRM handler and timer back
                finally:
                    self.finish()

    def finish(self) -> None:
        """The run's files once it ended: meta.json's final fields, the reserve released, run.log closed."""
        self.meta["status"] = self.status
        self.meta["finished"] = _now()
        self.meta["counts"] = _counts(self.records)
        try:
            state = self.backend.device_state()
            if state:
                self.meta["device_state_end"] = state
        except Exception:
            pass
        try:
            self.save_meta()
        finally:
            self.rundir.release()
        self.log.info(f"run {self.status}: {len(self.records)} of {len(self.plan)} points written")
        self.log.close()

    # ------------------------------------------------------------------ for extensions
    @property
    def markers(self) -> tuple:
        """The current point's marker lines so far."""
        return tuple(self._markers)

    @property
    def extra(self) -> dict:
        """The current point's annotations so far (a copy)."""
        return dict(self._extra)

    def mark(self, line: str) -> None:
        """Attach a marker line to the current point's record and write it to run.log."""
        self.log.marker(line)
        if self.current_point is not None:
            self._markers.append(line)

    def annotate(self, key: str, value) -> None:
        """Attach ``key: value`` to the current point's record (``extra`` in results.jsonl)."""
        self._extra[key] = value

    def save_meta(self) -> None:
        self.meta["time_split"] = self.split.to_json()
        self.rundir.write_meta(self.meta)

    def _hung(self, point) -> None:
        """The watchdog thread's end of a point stuck where SIGALRM cannot reach it (a C call, a
        device sync): write its FAILED record and a consistent meta.json, then end the process
        with :data:`EXIT_HUNG` (after_run hooks cannot run: the main thread is stuck)."""
        limit = self.watch.allowed
        error = hung_error(limit)
        try:
            record = PointRecord(point=point.id, op=point.op, shape=point.shape, dtype=point.dtype,
                                 variant=point.variant, status=STATUS_FAILED, error=error)
            self.rundir.append(record)
            self.records.append(record)
            self.log.info(f"{point.id} {STATUS_FAILED} ({error})")
            self.status = "hung"
            self.meta.update(status=self.status, finished=_now(), error=f"{point.id}: {error}", counts=_counts(self.records))
            self.save_meta()
            self.log.info(f"run hung: {len(self.records)} of {len(self.plan)} points written")
        finally:
            print(hung_message(point.id, limit, self.rundir.shown), file=sys.stderr, flush=True)
            os._exit(EXIT_HUNG)

    def tell(self, event: str, **fields) -> None:
        """Tell the supervising parent (:mod:`zlf.supervise`) about the run, when there is one."""
        if self.link is not None:
            self.link.send(event, **fields)


def hung_error(limit) -> str:
    """The error of a point stuck past its time limit where it cannot be interrupted."""
    return (f"time limit: no result within {limit:g} s, stuck where it cannot be interrupted "
            "(native code or a device sync); run stopped")


def hung_message(point_id: str, limit, run_dir) -> str:
    """What a run stopped by such a point says (exit 124)."""
    return (f"\nzlf: point {point_id} hung past its time limit of {limit:g} s where it cannot be interrupted; "
            f"its FAILED record is written and the run stopped (exit {EXIT_HUNG})\nrun dir: {run_dir}")


def _counts(records) -> dict:
    return {s: sum(1 for r in records if r.status == s) for s in (STATUS_OK, STATUS_FAILED, STATUS_OOM)}


def _rate(amount_fn, point, median_ms, scale) -> Optional[float]:
    if amount_fn is None or not median_ms or median_ms <= 0:
        return None
    amount = amount_fn(point.shape, point.dtype)
    if amount is None:  # the op cannot say for this point
        return None
    return amount / (median_ms * 1e-3) / scale


def run_point(run: Run, planned) -> PointRecord:
    op, point = planned.op, planned.point
    backend = run.backend
    status, error, timing, max_err, clock, unchecked = STATUS_OK, None, None, None, None, None
    try:
        with run.watch(point):
            run.begin_point(point, op)
            with run.split.phase("inputs"):
                inputs = point_inputs(op, point, backend)
                run.current_inputs = inputs
                poison(inputs, op.outputs)
            with run.split.phase("compile"), run.launch_window(point):
                returned = op.fn(*inputs)
                leave_if_forked(run.pid)
                backend.synchronize()
            with run.split.phase("compile"), outside(op):
                max_err, error = check_output(op, inputs, returned, point.dtype)
            if error and run.config.check_mode == "warn":
                unchecked, error = error, None  # timed anyway; every table says UNCHECKED
                run.log.info(f"point {point.id}: UNCHECKED (--check warn): {unchecked}")
            if error:
                status = STATUS_FAILED
            else:
                # the clock is read beside the timer (a background thread), never between its samples
                with run.split.phase("measuring"), (
                        run.clock_sampler.window() if run.clock_sampler else contextlib.nullcontext()) as window:
                    timing = run.time_point(lambda: op.fn(*inputs), point, op=op, inputs=inputs,
                                            call_on=(lambda args: lambda: op.fn(*args)) if op.copies else None)
                leave_if_forked(run.pid)
                clock = window.summary() if window is not None else None
    except KeyboardInterrupt:
        raise
    except (PointTimeLimit, SystemExit) as exc:  # BaseExceptions that are the point's failure, not the run's
        status, timing = STATUS_FAILED, None
        error = str(exc) if isinstance(exc, PointTimeLimit) else f"called sys.exit({exc.code!r})"
        run.log.info(f"point {point.id}: {error}:\n{traceback.format_exc().rstrip()}")
    except Exception as exc:  # a point's failure is recorded; the run goes on
        status = STATUS_OOM if backend.is_oom(exc) else STATUS_FAILED
        error = _one_line(exc)
        run.log.info(f"point {point.id} raised:\n{traceback.format_exc().rstrip()}")
    median = timing.value_ms if timing is not None else None
    record = PointRecord(
        point=point.id, op=point.op, shape=point.shape, dtype=point.dtype, variant=point.variant,
        status=status, error=error,
        timer=timing.timer if timing else None, median_ms=median,
        samples=timing.samples_ms if timing else (),
        gbps=_rate(op.bytes, point, median, 1e9), tflops=_rate(op.flops, point, median, 1e12),
        markers=run.markers, l2=timing.l2 if timing else None,
        fallback_reason=timing.fallback_reason if timing else None,
        max_rel_err=max_err, extra={**(timing.extra if timing else {}), **run.extra},
        wall_ms=timing.wall_ms if timing else None, clock=clock if timing else None,
        unchecked=unchecked if status == STATUS_OK else None,
    )
    return run.end_point(point, record)


def _clock_sampler(backend, run: Run):
    """The backend's clock sampler, or None; what was chosen is recorded in meta.json."""
    try:
        sampler = backend.clock_sampler()
    except Exception as exc:  # clock readings are information; their absence never stops a run
        run.log.info(f"clock sampler unavailable: {_one_line(exc)}")
        sampler = None
    if sampler is None:
        run.meta["clock"] = {"source": None}
    else:
        run.meta["clock"] = {"source": sampler.source, "interval_ms": round(sampler.interval_s * 1e3, 3)}
    return sampler


def record_device(run: Run) -> None:
    """The device's identity, state, busy warnings and clock sampler, into meta.json."""
    backend = run.backend
    run.meta["fingerprint"] = backend.fingerprint()
    run.meta["device_name"] = run.meta["fingerprint"].get("device_name")
    state = backend.device_state()
    if state:
        run.meta["device_state_start"] = state
    warnings = backend.busy_warnings()
    run.meta["warnings"] = warnings
    run.clock_sampler = _clock_sampler(backend, run)
    for w in warnings:
        run.log.warning(w)
        from .console import warn

        warn(w)


def execute(run: Run, progress: Optional[Progress] = None, start: int = 0) -> list:
    """Run every planned point from index ``start`` on (a fresh worker going on with a run:
    ``run.records`` holds the earlier ones); returns the records. Always calls ``after_run``."""
    try:
        run.begin()
        record_device(run)
        run.save_meta()
        run.log.info(f"backend {run.backend.name} on {run.meta['device_name']}; {len(run.plan)} points")
        recorded = {r.point for r in run.records}  # a fresh worker's: a point never gets two records
        for index, planned in enumerate(run.plan[start:], start):
            if planned.point.id in recorded:
                continue
            run.tell("begin", index=index, limit=run.watch.limit)
            record = run_point(run, planned)
            run.rundir.append(record)
            run.records.append(record)
            run.tell("end", index=index)
            logged = record.status if record.median_ms is None else f"{record.status} {record.median_ms:.4g} ms"
            run.log.info(f"{record.point} {logged}" + (f" ({record.error})" if record.error else ""))
            if progress:  # in the table's unit (2.07 µs), the log keeps ms
                progress.step(record.point, record.status if record.median_ms is None
                              else f"{record.status} {duration(record.median_ms)}")
        run.status = "complete"
    except KeyboardInterrupt as exc:
        run.status = stop_word(exc)
        run.log.warning("interrupted by the user" if run.status == "interrupted" else "terminated (SIGTERM)")
        raise
    except BaseException as exc:
        run.status = "crashed"
        run.log.info(f"run crashed:\n{traceback.format_exc().rstrip()}")
        run.meta["error"] = _one_line(exc)
        if disk_full(exc):
            run.meta["status"] = run.status = "disk full"
        raise
    finally:
        try:
            run.close()
        finally:
            if progress:
                progress.close()
    return run.records
