"""The candidate's process: the candidate runs here, the package never does.

Started as ``python -m zlf_taskpkg.worker SPEC.json CTRL_FD EVENT_FD`` next to a checker
(:mod:`zlf_taskpkg.checker`, which owns the package, the inputs and the verdict). Per case it
reads ``{"case": k, "nonce": N, "point": ..., "slots": [...]}`` from CTRL_FD -- the slots are the
checker's shared buffers (:mod:`zlf_taskpkg.shared`) --, then ``{"go": "time"}``,
``{"go": "call", "slot": j}`` and ``{"go": "end", "verdict": ..., "text": ...}`` as the judge
orders; it writes one JSON event per line to EVENT_FD, each carrying the case's nonce (the judge
drops a worker whose events lack it: see :func:`main`):

- ``candidate_start`` the judge's time limit starts now
- ``called``          the candidate was called and the device synchronized: the checker may read

Staged sharing (a device without IPC: :class:`~zlf_taskpkg.shared.Staging`): the worker copies the
checker's staging buffers to its device tensors before the first call, before the timed calls
and before the call after timing, and the device tensors back after each of them, before it
reports ``called`` / ``timed`` -- never inside the timed calls.
- ``timed``           the candidate's timing (measured here: the timer runs in this process)
- ``result``          a failure here (exception, launch error, compile error): never Accepted
- ``done``            the point's annotations and markers once the lifecycle ended the point
- ``meta``            what lifecycle hooks added to the run's meta (at exit)

A crash, hang or CUDA error here only costs this process: the judge sees the pipe close (or
its clock run out) and goes on in a fresh one.
"""
from __future__ import annotations

import faulthandler
import gc
import json
import os
import sys
import traceback
from pathlib import Path

import attrs

from zlf.config import RunConfig
from zlf.ops import Op, outside, poison_tensors
from zlf.records import Point
from zlf.rundir import RunDir
from zlf.session import Session

from . import outcome as V
from .candidate import is_compile_error, load_kernel
from .checker import WorkerRun, budget_for
from .legacy_stream import time_candidate
from .outcome import timing_to_json
from .shared import Staging, open_shared

#: the folder the worker writes its run files into (set by the judge)
OUT_ENV = "ZLF_TASK_WORKER_OUT"
#: what the record says of the timed calls' preparation
FRESH_CALLS_HOW = ("before every timed call, outside the timed region: the next input set copied into the "
                   "call's input buffers and its outputs poisoned")

class Rotation:
    """The timed callable: call ``i`` runs the candidate on slot ``i % len(calls)``. Every slot
    holds its own input set and output buffers (the checker's shared memory), so a captured graph
    replays the calls in the order they were made; :attr:`last` is the slot of the last call
    made, :attr:`last_captured` that of the last call made while a graph was being captured,
    :attr:`captured` the slots a capture has seen.

    Fresh calls (:meth:`prepare`, run by the timer before every timed call through
    :class:`FreshBackend`): the slot the next call uses gets the next of the case's input sets
    copied into its input buffers, from copies kept on the device (:meth:`keep_sets`), and its
    outputs poisoned -- so no timed call finds its answer already in its output buffer, or its
    inputs' pointers tied to the result of an earlier call."""

    def __init__(self, calls, slots, capturing=None, outputs=()):
        self.calls, self.slots = calls, slots
        self.capturing = capturing or _capturing
        self.count = 0
        self.last = self.last_captured = None
        self.captured: set = set()
        self.view = LastArgs(self)
        self.outputs = tuple(outputs)
        self.sets: list = []
        #: per slot: which of :attr:`sets` its inputs hold now, and how often it was prepared
        self.holding = list(range(len(slots)))
        self.loads = [0] * len(slots)
        self.prepared = 0

    def __call__(self):
        j = self.count % len(self.calls)
        self.count += 1
        self.last = j
        if self.capturing():
            self.last_captured = j
            self.captured.add(j)
        return self.calls[j]()

    def keep_sets(self, sources=None) -> None:
        """Copies of the inputs of ``sources`` (the checker's slots, one input set each; default
        this rotation's slots) as the checker loaded them, on their device: what :meth:`prepare`
        rotates through this rotation's slots. Made once, before timing; slot ``j`` holds set
        ``j`` (the set of ``sources[j]``) then."""
        sources = self.slots if sources is None else sources
        self.sets = [[a.clone() if _is_tensor(a) and i not in self.outputs else None for i, a in enumerate(slot)]
                     for slot in sources]
        self.holding = list(range(len(self.slots)))

    def prepare(self) -> None:
        """Before the next call: its slot gets the input set after the one it held last time
        (a device-to-device copy) and its outputs poisoned (NaN, an integer's largest value)."""
        if not self.sets:
            return
        j = self.count % len(self.calls)
        self.loads[j] += 1
        k = (j + self.loads[j]) % len(self.sets)
        slot = self.slots[j]
        if k != self.holding[j]:
            for dst, src in zip(slot, self.sets[k]):
                if src is not None:
                    dst.copy_(src)
            self.holding[j] = k
        poison_tensors(slot[i] for i in self.outputs if i < len(slot) and _is_tensor(slot[i]))
        self.prepared += 1


class FreshBackend:
    """The backend as the timer sees it: the same in every way (and equal to it, so a kernel
    timer offered for the backend is offered for it too), except that ``flush_l2`` -- which every
    timer calls before each timed call, outside the timed region: core's event timer before its
    start event, the CUPTI timer inside its ``flush`` window, whose activity records count for
    no call, the graph timer as a node its flush-only graph subtracts -- also prepares the next
    call (:meth:`Rotation.prepare`). The L2 itself is flushed only when the run asked for it."""

    def __init__(self, backend, rotation, flush: bool, op=None):
        self._backend, self._rotation, self._flush, self._op = backend, rotation, flush, op

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def __hash__(self):
        return hash(self._backend)

    def __eq__(self, other):
        return other is self or other == self._backend

    def flush_l2(self) -> None:
        if self._flush:
            self._backend.flush_l2()
        with outside(self._op):  # the judge's tensor work, not the candidate's
            self._rotation.prepare()


def _is_tensor(x) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(x, torch.Tensor)


def _capturing() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:
        return False


class LastArgs:
    """The arguments of the rotation's last call, as a sequence: what a timer that compares a
    replay's outputs with a direct call's (the graph timer) reads as the call's inputs."""

    def __init__(self, rotation):
        self.rotation = rotation

    def _args(self):
        last = self.rotation.last
        return self.rotation.slots[last if last is not None else 0]

    def __getitem__(self, i):
        return self._args()[i]

    def __len__(self):
        return len(self._args())

    def __iter__(self):
        return iter(list(self._args()))


class Worker:
    """The candidate's side of a case: it maps the checker's buffers, calls the candidate, times
    it. Nothing it reports can make a case Accepted: the checker reads the outputs itself."""

    def __init__(self, spec: dict, events, ctrl):
        self.spec = spec
        self.events = events
        self.ctrl = ctrl
        self.kernel = None
        self.nonce = None
        self.staging = None
        self.config = RunConfig.read(spec["config"])
        self.session = Session.open(self.config)
        self.hooks = self.session.hooks
        self.backend = self.session.choose_backend(self.config.backend, self.config.device)
        # the worker's own run files (run.log, what extensions write at after_run): a folder of the
        # run directory of its own, the only part of it the sandbox lets the worker write
        out = os.environ.get(OUT_ENV) or spec["run_dir"]
        self.run = WorkerRun.open(self.session, RunDir(out), argv=spec["argv"])
        self.meta_before = json.dumps(self.run.meta, sort_keys=True, default=str)
        self.records = []
        self.run.begin()
        self.run.meta.pop("time_limit_s", None)  # the judge enforces its own per-case limit

    # ------------------------------------------------------------------ protocol
    def emit(self, event: str, **fields) -> None:
        self.events.write(json.dumps({"event": event, "nonce": self.nonce, **fields}, default=str) + "\n")
        self.events.flush()

    def order(self) -> dict:
        """The judge's next instruction for this case (``{"go": ...}``); ``end`` if the pipe closed."""
        line = self.ctrl.readline()
        return json.loads(line) if line else {"go": "end", "verdict": V.JUDGE_ERROR, "text": "", "closed": True}

    def finish(self) -> None:
        self.run.records[:] = self.records
        self.run.close("complete")
        before = json.loads(self.meta_before)
        added = {k: v for k, v in self.run.meta.items() if k not in before or before[k] != v}
        self.emit("meta", meta=json.loads(json.dumps(added, default=str)))

    # ------------------------------------------------------------------ one case
    def judge(self, request: dict) -> bool:
        """One case; returns False when this process must not be reused."""
        p = request["point"]
        point = Point(op=p["op"], shape=tuple(p["shape"]), dtype=p["dtype"], variant=p["variant"])
        self.point_json = p
        outputs = request["outputs"]
        self.outputs = tuple(outputs)
        self.staging = Staging(self.backend.device)
        slots = [open_shared(text, self.staging) for text in request["slots"]]
        self.staging.upload()  # staged: the checker's inputs, canaries and poison onto the device
        self.backend.synchronize()
        op = Op(name=p["op"], fn=_unbound, make_inputs=_unbound, shapes=[point.shape], dtypes=[point.dtype],
                reference=None, outputs=tuple(outputs))
        self.run.begin_point(point, op, slots[0])
        self.noop_batches(slots, int(request.get("noop") or 0))
        self.emit("candidate_start")
        failure, end = self.candidate(point, op, slots, tuple(request["counts"]))
        if failure is not None:
            verdict, text = failure
            timing = None
        else:
            verdict, text, timing = end.get("verdict", V.JUDGE_ERROR), end.get("text", ""), self.timing
            if end.get("closed"):
                return False
        record = V.case_record(self.point_json, verdict, text, timing if verdict == V.ACCEPTED else None,
                               None, None, extra=self.run.extra, markers=list(self.run.markers))
        record = self.run.end_point(point, record)
        self.records.append(record)
        del slots
        self.staging = None
        # This case's mappings of the checker's buffers are unmapped now, not by a collection that
        # may fall inside a later case's graph capture (where unmapping aborts the process).
        gc.collect()
        self.emit("done", extra=self.run.extra, markers=list(record.markers))
        return failure is None

    def noop_batches(self, slots, rounds: int) -> None:
        """The judge's clocked batch with a candidate that does nothing, before any candidate code
        ran in this process: what the judge's clock measures of the batch that is not the
        candidate's (the pipes, the synchronisation, a staged copy)."""
        for _ in range(rounds * len(slots)):  # one clocked no-op call per slot and round
            order = self.order()
            if order.get("go") != "noop":
                return
            self.batch([_noop])
            self.emit("noop_done", call=order.get("call"))

    def batch(self, calls) -> None:
        """The calls, then synchronise: one clocked call of the judge's batch (one slot's)."""
        self.upload()
        for call in calls:
            call()
        self.backend.synchronize()
        self.download()

    def upload(self) -> None:
        """Staged: the checker's staging buffers onto the device (nothing to do when shared)."""
        if self.staging.pairs:
            self.staging.upload()
            self.backend.synchronize()

    def download(self) -> None:
        """Staged: the device buffers back to the staging files the checker reads."""
        if self.staging.pairs:
            self.staging.download()
            self.backend.synchronize()

    def time_fresh(self, kind, rotation, point, op, budget):
        """The candidate's timing with every timed call prepared (:class:`FreshBackend`): the
        timer is told to flush before each call -- its hook for work between calls, outside the
        timed region -- and the record keeps the L2 policy the run asked for."""
        run, real = self.run, self.run.backend
        flush = budget.flush(real)
        run.backend = FreshBackend(real, rotation, flush, op)
        try:
            timing = time_candidate(run, kind, rotation, point, op, rotation.view, budget.with_changes(flush_l2=True))
        finally:
            run.backend = real
        if timing is None:
            return None
        fresh = {"prepared_calls": rotation.prepared, "input_sets": len(rotation.sets),
                 "how": FRESH_CALLS_HOW}
        return attrs.evolve(timing, l2="flush" if flush else "warm", extra={**timing.extra, "fresh_calls": fresh})

    def fail(self, verdict: str, text: str, **fields):
        self.emit("result", verdict=verdict, text=text, **fields)
        return (verdict, text), None

    def candidate(self, point, op, slots, counts):
        """Call, then time, as the judge orders: ``(None, end order)`` when the judge ended the
        case (the checker has the last word), ``((verdict, text), None)`` when the candidate
        failed here (a failure is all it can report)."""
        backend, spec = self.backend, self.spec
        cand = spec["candidate"]
        self.timing = None
        if self.kernel is None:
            try:
                self.kernel = load_kernel(cand["kind"], cand["path"], cand["library"])
            except BaseException as exc:  # SyntaxError, ImportError, a missing symbol ...
                if isinstance(exc, KeyboardInterrupt):
                    raise
                return self.fail(V.COMPILE_ERROR, _short_traceback(), load_failed=True)
        calls = [self.kernel.bind(args) for args in slots]
        try:
            with self.run.launch_window(point):
                calls[0]()
                launch_error = self.kernel.last_error()
                backend.synchronize()
            self.download()
        except Exception as exc:
            verdict = V.COMPILE_ERROR if is_compile_error(exc) else V.RUNTIME_ERROR
            return self.fail(verdict, _short_traceback())
        if launch_error:
            return self.fail(V.RUNTIME_ERROR, f"run_kernel left a launch error: {launch_error}")
        self.emit("called")
        order = self.order()
        if order.get("go") != "time":
            return None, order  # the checker's verdict ends the case
        # Timed only now that the result was checked (by the checker). The timed calls are made
        # in slot 0, each with the next of the input sets the checker loaded into the slots
        # copied in and its outputs poisoned (Rotation.prepare): the other slots are never
        # called (their outputs stay the checker's poison), so when a call begins no buffer of
        # this process holds the answer for its inputs.
        rotation = Rotation(calls[:1], slots[:1], outputs=self.outputs)
        try:
            self.upload()  # staged: the refreshed slots (never inside the timed calls)
            rotation.keep_sets(slots)  # the input sets the timed calls rotate over, as the checker loaded them
            calls[0]()  # called at least once, whatever the timer's budget
            backend.synchronize()
            timing = self.time_fresh(cand["kind"], rotation, point, op,
                                     budget_for(backend, self.config.timing, rotation, counts))
            self.kernel.last_error()  # a failed graph capture leaves its error here; the timer handled it
            backend.synchronize()
            self.download()
        except Exception:
            return self.fail(V.RUNTIME_ERROR, "while timing:\n" + _short_traceback())
        self.timing = timing
        self.emit("timed", timing=timing_to_json(timing), last_slot=rotation.last,
                  last_captured=rotation.last_captured, calls=rotation.count)
        order = self.order()
        if order.get("go") != "call":
            return None, order
        try:
            self.upload()
            calls[int(order["slot"])]()
            launch_error = self.kernel.last_error()
            backend.synchronize()
            self.download()
        except Exception:
            return self.fail(V.RUNTIME_ERROR, "while timing:\n" + _short_traceback())
        if launch_error:
            return self.fail(V.RUNTIME_ERROR, f"while timing: run_kernel left a launch error: {launch_error}")
        self.emit("called")
        order = self.order()
        while order.get("go") == "batch":
            try:  # one call of the judge's clocked batch: a fresh input set in its slot, outputs poisoned
                self.batch([calls[int(order["slot"]) % len(calls)]])
                launch_error = self.kernel.last_error()
            except Exception:
                return self.fail(V.RUNTIME_ERROR, "in the judge's clocked batch:\n" + _short_traceback())
            if launch_error:
                return self.fail(V.RUNTIME_ERROR, f"in the judge's clocked batch: run_kernel left a launch error: "
                                                  f"{launch_error}")
            self.emit("batched", call=order.get("call"))  # which call: the judge drops a stale reply
            order = self.order()
        return None, order


def _noop():
    return None


def _unbound(*_args):
    raise RuntimeError("the task judge times bound calls only")


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
    return V.serve(ctrl, events, lambda: Worker(spec, events, ctrl), _judge, "worker")


def _judge(worker, request) -> bool:
    worker.nonce = request.get("nonce")
    return worker.judge(request)

if __name__ == "__main__":
    sys.exit(main())
