"""The judge's child process: the package and the candidate run here, never in ``zlf task``.

Started as ``python -m zlf_taskpkg.worker SPEC.json CTRL_FD EVENT_FD`` (stdin carries the
first case number, as a package expects). It reads ``{"case": k, "nonce": N}`` lines from
CTRL_FD until that pipe closes and writes one JSON event per line to EVENT_FD, each carrying the
case's nonce (the judge drops a worker whose events lack it: see :func:`main`):

- ``case``            the point judged and the case's sizes (inputs exist, baseline has run)
- ``baseline``        the baseline's timing
- ``candidate_start`` the judge's time limit starts now
- ``result``          verdict, judge output, the candidate's timing, fields for the record
- ``meta``            what lifecycle hooks added to the run's meta (at exit)

A crash, hang or CUDA error here only costs this process: the judge sees the pipe close (or
its clock run out) and goes on in a fresh one.
"""
from __future__ import annotations

import contextlib
import faulthandler
import inspect
import io
import json
import os
import sys
import traceback
from pathlib import Path

import attrs

from zlf.config import RunConfig
from zlf.ops import Op, poison, relative_error
from zlf.records import Point
from zlf.run import Run
from zlf.rundir import RunDir
from zlf.seeding import seed_everything
from zlf.session import Session

from . import outcome as V
from .candidate import is_compile_error, load_kernel
from .legacy_stream import time_candidate
from .outcome import timing_to_json
from .package import TaskPackage
from .speed import io_bytes

#: canary bytes on each side of every output buffer: a write past either end is caught.
GUARD_BYTES = 16384
GUARD_FILL = 0xA5
#: calls used to convert the package's (warmup, iters) counts into the timer's ms budgets.
ESTIMATE_CALLS = 3


class WorkerRun(Run):
    """A Run whose meta goes back to the judge (which owns meta.json and the run directory)."""

    def save_meta(self) -> None:
        pass

    def finish(self) -> None:
        self.log.close()


def _is_tensor(x) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _bits(t):
    import torch

    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).reshape(flat.numel(), t.element_size()) if flat.numel() else flat.view(torch.uint8)


def differing_elements(a, b) -> int:
    """Elements whose bytes differ (NaN-safe: bit patterns, not values)."""
    if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
        return max(a.numel(), b.numel(), 1)
    if a.numel() == 0:
        return 0
    x, y = _bits(a), _bits(b.to(a.device))
    return int((x != y).any(dim=1).sum().item())


def _describe(i, t) -> str:
    return f"argument {i} ({str(t.dtype).replace('torch.', '')}{list(t.shape)})"


def clone_args(args):
    return [a.clone() if _is_tensor(a) else a for a in args]


def guarded_copy(t):
    """A copy of ``t`` living inside a larger buffer whose ends hold canary bytes."""
    import torch

    if not t.is_contiguous() or t.numel() == 0:
        return t.clone(), None
    pad = max(1, GUARD_BYTES // t.element_size())
    buf = torch.empty(t.numel() + 2 * pad, dtype=t.dtype, device=t.device)
    buf.view(torch.uint8).fill_(GUARD_FILL)
    inner = buf[pad:pad + t.numel()].view(t.shape)
    inner.copy_(t)
    return inner, (buf, pad, t.numel())


def guard_damage(guard) -> int:
    import torch

    buf, pad, n = guard
    raw = buf.view(torch.uint8)
    size = buf.element_size()
    ends = (raw[:pad * size], raw[(pad + n) * size:])
    return int(sum(int((e != GUARD_FILL).sum().item()) for e in ends))


def detect_outputs(original, after) -> list:
    """Indices of the tensors the baseline wrote: those are the outputs."""
    return [i for i, (a, b) in enumerate(zip(original, after)) if _is_tensor(a) and differing_elements(a, b)]


class Worker:
    def __init__(self, spec: dict, events):
        self.spec = spec
        self.events = events
        self.kernel = None
        self.nonce = None
        self.config = RunConfig.read(spec["config"])
        self.session = Session.open(self.config)
        self.hooks = self.session.hooks
        self.backend = self.session.choose_backend(self.config.backend, self.config.device)
        self.package = TaskPackage.open(spec["package"])
        self.problem = self.package.load()
        self.run = WorkerRun.open(self.session, RunDir(spec["run_dir"]), argv=spec["argv"])
        self.meta_before = json.dumps(self.run.meta, sort_keys=True, default=str)
        self.records = []
        self.run.begin()
        self.run.meta.pop("time_limit_s", None)  # the judge enforces its own per-case limit

    # ------------------------------------------------------------------ protocol
    def emit(self, event: str, **fields) -> None:
        self.events.write(json.dumps({"event": event, "nonce": self.nonce, **fields}, default=str) + "\n")
        self.events.flush()

    def finish(self) -> None:
        self.run.records[:] = self.records
        self.run.close("complete")
        before = json.loads(self.meta_before)
        added = {k: v for k, v in self.run.meta.items() if k not in before or before[k] != v}
        self.emit("meta", meta=json.loads(json.dumps(added, default=str)))

    # ------------------------------------------------------------------ one case
    def judge(self, case: int) -> bool:
        """Judge one case; returns False when this process must not be reused."""
        run = self.run
        try:
            prepared = self.prepare(case)
        except Exception:
            self.emit("result", verdict=V.JUDGE_ERROR, text="the package failed:\n" + traceback.format_exc(), fatal=True)
            return False
        point, op, original, base_args, outputs, arg_shapes, counts = prepared
        self.emit("candidate_start")
        verdict, text, timing, max_err, fatal, load_failed = self.judge_candidate(point, op, original, base_args, outputs, arg_shapes, counts)
        record = V.case_record(self.point_json, verdict, text, timing, self.baseline_timing, max_err,
                               extra=run.extra, markers=list(run.markers))
        record = run.end_point(point, record)
        if "after_point_error" in run.extra:
            text += f"\n(after_point hook failed: {run.extra['after_point_error']})"
        self.records.append(record)
        self.emit("result", verdict=verdict, text=text, timing=timing_to_json(timing), max_rel_err=max_err,
                  extra=run.extra, markers=list(run.markers), fatal=fatal, load_failed=load_failed)
        return not fatal

    def prepare(self, case: int):
        """Sizes, seeded inputs, the baseline's result and timing: everything before the candidate."""
        run, backend, package = self.run, self.backend, self.package
        shapes, arg_shapes, warmup, iters = package.case_sizes(case)
        seed = self.spec["base_seed"] + case
        seed_everything(seed)
        original = list(self.problem.genTestCase(arg_shapes, device=backend.device))
        tensors = [a for a in original if _is_tensor(a)]
        largest = max(tensors, key=lambda t: t.numel()) if tensors else None
        point = Point(op=package.name, shape=tuple(largest.shape) if largest is not None else (len(original),),
                      dtype=str(largest.dtype).replace("torch.", "") if largest is not None else "none",
                      variant=f"case{case}")
        run.begin_point(point)
        base_args = clone_args(original)
        self.problem.baseline(*base_args)
        backend.synchronize()
        outputs = self.spec["outputs"] if self.spec["outputs"] is not None else detect_outputs(original, base_args)
        if not outputs:  # the baseline wrote nothing we could see (e.g. out already held the result)
            outputs = [max(i for i, a in enumerate(original) if _is_tensor(a))]
        ref = [base_args[i] for i in outputs]
        op = Op(name=package.name, fn=self._unbound, make_inputs=self._unbound, shapes=[point.shape],
                dtypes=[point.dtype], reference=lambda *_: list(ref), outputs=tuple(outputs))
        run.current_op, run.current_inputs = op, original
        self.point_json = {"id": point.id, "op": point.op, "shape": list(point.shape), "dtype": point.dtype,
                           "variant": point.variant, "case": case,
                           "arg_shapes": [list(s) for s in shapes], "case_seed": seed}
        self.emit("case", point=self.point_json, outputs=outputs, warmup=warmup, iters=iters, seed=seed,
                  io_bytes=io_bytes(original))
        budget = self.config.timing
        counts = (budget.warmup if budget.warmup is not None else warmup,
                  budget.iters if budget.iters is not None else iters)
        base_point = Point(op=point.op, shape=point.shape, dtype=point.dtype, variant=f"{point.variant}.baseline")
        base_op = attrs.evolve(op, reference=None)
        call = lambda: self.problem.baseline(*base_args)  # noqa: E731
        self.baseline_timing = run.time_point(call, base_point, op=base_op, inputs=tuple(base_args),
                                              budget=self.budget(call, counts))
        self.emit("baseline", timing=timing_to_json(self.baseline_timing))
        return point, op, original, base_args, outputs, arg_shapes, counts

    def judge_candidate(self, point, op, original, base_args, outputs, arg_shapes, counts):
        """``(verdict, text, timing, max_rel_err, fatal, load_failed)`` of the candidate on one case."""
        backend, spec = self.backend, self.spec
        cand = spec["candidate"]
        if self.kernel is None:
            try:
                self.kernel = load_kernel(cand["kind"], cand["path"], cand["library"])
            except BaseException as exc:  # SyntaxError, ImportError, a missing symbol ...
                if isinstance(exc, KeyboardInterrupt):
                    raise
                return V.COMPILE_ERROR, _short_traceback(), None, None, True, True
        args, guards = [], {}
        for i, a in enumerate(original):
            if i in outputs and _is_tensor(a):
                inner, guard = guarded_copy(a)
                args.append(inner)
                if guard:
                    guards[i] = guard
            else:
                args.append(a.clone() if _is_tensor(a) else a)
        poison(args, [i for i in outputs if _is_tensor(args[i])])
        call = self.kernel.bind(args)
        self.run.current_inputs = args
        try:
            with self.run.launch_window(point):
                call()
                launch_error = self.kernel.last_error()
                backend.synchronize()
        except Exception as exc:
            verdict = V.COMPILE_ERROR if is_compile_error(exc) else V.RUNTIME_ERROR
            return verdict, _short_traceback(), None, None, True, False
        if launch_error:
            return V.RUNTIME_ERROR, f"run_kernel left a launch error: {launch_error}", None, None, True, False

        self.emit("phase", name="checking")
        damage = self.memory_damage(original, args, outputs, guards)
        # An out-of-bounds write may have hit memory no guard covers: this process is not reused.
        if damage and damage[0] == V.RUNTIME_ERROR:
            return damage[0], damage[1], None, None, True, False
        ok, text = self.check(arg_shapes, original, args, base_args)
        max_err = self.max_rel_err(args, base_args, outputs)
        if not ok:
            return V.WRONG_ANSWER, text or "check() returned False", None, max_err, False, False
        if damage:
            return damage[0], damage[1] + ("\n" + text if text else ""), None, max_err, False, False

        # Timed only now that the result was checked; checked again afterwards, so a kernel that
        # computes once and then returns early is not timed as fast.
        self.emit("phase", name="timing")
        try:
            timing = time_candidate(self.run, spec["candidate"]["kind"], call, point, op, tuple(args),
                                    self.budget(call, counts))
            self.kernel.last_error()  # a failed graph capture leaves its error here; the timer handled it
            poison(args, [i for i in outputs if _is_tensor(args[i])])
            call()
            launch_error = self.kernel.last_error()
            backend.synchronize()
        except Exception:
            return V.RUNTIME_ERROR, "while timing:\n" + _short_traceback(), None, max_err, True, False
        if launch_error:
            return V.RUNTIME_ERROR, f"while timing: run_kernel left a launch error: {launch_error}", None, max_err, True, False
        damage = self.memory_damage(original, args, outputs, guards)
        ok, text2 = self.check(arg_shapes, original, args, base_args)
        if damage:
            return damage[0], "after timing: " + damage[1], None, max_err, damage[0] == V.RUNTIME_ERROR, False
        if not ok:
            return (V.WRONG_ANSWER, "the result was right once but wrong when called again after timing:\n" + text2,
                    None, max_err, False, False)
        return V.ACCEPTED, text, timing, max_err, timing.fallback_reason is not None, False

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _unbound(*_args):
        raise RuntimeError("the task judge times bound calls only")

    def budget(self, call, counts):
        """The :class:`~zlf.config.TimingBudget` a timer gets: the package's warmup/iters counts
        become ms budgets (count × one measured call), unless --warmup-ms / --rep-ms were given."""
        warmup, iters = counts
        budget = self.config.timing
        if warmup is None and iters is None:
            return budget
        backend = self.backend
        # The direct timer sizes its loop with the L2 flush included: so does this estimate.
        flush = backend.flush_l2 if budget.flush(backend) else (lambda: None)
        call()
        backend.synchronize()
        start, end = backend.event(), backend.event()
        start.record()
        for _ in range(ESTIMATE_CALLS):
            flush()
            call()
        end.record()
        backend.synchronize()
        one = max(start.elapsed_time(end) / ESTIMATE_CALLS, 1e-6)
        changes = {}
        if budget.warmup_ms is None and warmup is not None:
            changes["warmup_ms"] = max(warmup, 1) * one
        if budget.rep_ms is None and iters is not None:
            changes["rep_ms"] = max(iters, 1) * one
        return budget.with_changes(**changes)

    def check(self, arg_shapes, original, cand_args, base_args) -> tuple:
        """The package's check, its stdout/stderr captured: ``(passed, text)``."""
        tolerances = dict(self.spec["tolerances"])
        try:
            params = inspect.signature(self.problem.check).parameters
            if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
                tolerances = {k: v for k, v in tolerances.items() if k in params}
        except (TypeError, ValueError):
            pass
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                ok = bool(self.problem.check(arg_shapes, original, cand_args, base_args, **tolerances))
            except Exception:
                ok = False
                print("check() raised:\n" + traceback.format_exc(), file=sys.stderr)
        return ok, buf.getvalue().strip()

    def memory_damage(self, original, args, outputs, guards):
        """``(verdict, text)`` if the candidate wrote past an output (Runtime Error) or modified an
        input (Wrong Answer), else None."""
        for i, guard in guards.items():
            bad = guard_damage(guard)
            if bad:
                return V.RUNTIME_ERROR, (f"wrote outside its output: {bad} guard bytes around {_describe(i, args[i])} "
                                         "were overwritten (out-of-bounds write)")
        changed = []
        for i, (a, o) in enumerate(zip(args, original)):
            if i in outputs or not _is_tensor(o):
                continue
            n = differing_elements(a, o)
            if n:
                changed.append(f"{_describe(i, o)}: {n} of {o.numel()} elements changed")
        if changed:
            return V.WRONG_ANSWER, "modified its inputs (inputs must be read-only): " + "; ".join(changed)
        return None

    @staticmethod
    def max_rel_err(args, base_args, outputs):
        worst = None
        for i in outputs:
            a, b = args[i], base_args[i]
            if _is_tensor(a) and (a.dtype.is_floating_point or a.dtype.is_complex):
                try:
                    err = relative_error(a, b)
                except Exception:
                    continue
                worst = err if worst is None or err != err or err > worst else worst
        return worst


def _short_traceback(limit: int = 40) -> str:
    lines = traceback.format_exc().rstrip().splitlines()
    return "\n".join(lines[-limit:])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    # The candidate runs in this process: it must not read the pipes' numbers off sys.argv. The
    # per-case nonce arrives on the control pipe before the candidate is imported; events without
    # it are rejected. This stops a naive forged verdict, not a hostile one (docs/taskpkg.md).
    del sys.argv[1:]
    faulthandler.enable()  # a segfault in the candidate leaves its Python stack in the log
    events = os.fdopen(int(argv[2]), "w", buffering=1)
    ctrl = os.fdopen(int(argv[1]), "r")
    first = ctrl.readline()
    if not first:
        return 0
    request = json.loads(first)
    try:
        worker = Worker(spec, events)
    except Exception:
        events.write(json.dumps({"event": "result", "verdict": V.JUDGE_ERROR, "fatal": True, "nonce": request.get("nonce"),
                                 "text": "the judge's worker failed to start:\n" + traceback.format_exc()}) + "\n")
        return 3
    try:
        while request:
            worker.nonce = request.get("nonce")
            if not worker.judge(int(request["case"])):
                break
            line = ctrl.readline()
            request = json.loads(line) if line else None
    finally:
        worker.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
