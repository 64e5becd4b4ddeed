"""The judge's checker process: the package runs here, the candidate never does.

Started as ``python -m zlf_taskpkg.checker SPEC.json CTRL_FD EVENT_FD`` next to each worker
(:mod:`zlf_taskpkg.worker`, the candidate's process). It imports the problem module, never the
candidate, and for each case:

- generates the inputs (seeded as always) and more input sets for the timed calls, runs the
  baseline on each and keeps the expected outputs and pristine inputs to itself;
- times the baseline (the run lifecycle's ``time_fn``, as every point is timed);
- allocates the buffers the candidate gets -- input copies, guarded and poisoned outputs -- in
  shared memory (:mod:`zlf_taskpkg.shared`; host staging buffers on a device without IPC) and
  describes them to the judge, which hands the description to the worker;
- when the judge says the candidate has called, reads those buffers itself: canaries, inputs,
  the package's ``check``; a result that equals another input set's expected output is a stale
  result.

Control lines: ``{"case": k, "nonce": N}``, then ``{"check": "first"|"timed"|"final"}``. Events
(JSON lines carrying the nonce): ``case``, ``baseline``, ``shared``, ``checked``, ``result``
(the package failed: Judge Error), ``meta`` at exit.
"""
from __future__ import annotations

import contextlib
import faulthandler
import inspect
import io
import json
import os
import secrets
import sys
import traceback
from pathlib import Path
from typing import Optional

import attrs

from zlf.config import RunConfig
from zlf.ops import Op, poison_tensors, relative_error
from zlf.records import Point
from zlf.run import Run
from zlf.rundir import RunDir
from zlf.seeding import seed_everything
from zlf.session import Session

from . import outcome as V
from .outcome import timing_to_json
from .package import TaskPackage
from .sandbox import SHM_VIEW_ENV, follow_no_links, make_undumpable
from .shared import SharedArena
from .speed import io_bytes

#: canary bytes on each side of every output buffer: a write past either end is caught.
GUARD_BYTES = 16384
GUARD_FILL = 0xA5
#: calls used to convert the package's (warmup, iters) counts into the timer's ms budgets.
ESTIMATE_CALLS = 3
#: input sets the timed calls rotate over (each generated with its own seeds).
INPUT_SETS = 3
#: how far apart the seeds of a case's input sets are
SET_SEED_STRIDE = 1_000_003


def witness_offset() -> int:
    """A seed offset for a clocked batch's input set: unpredictable, never a timing set's."""
    return SET_SEED_STRIDE * (INPUT_SETS + 1) + secrets.randbelow(1 << 48)


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


def budget_for(backend, budget, call, counts):
    """The :class:`~zlf.config.TimingBudget` a timer gets: the package's warmup/iters counts
    become ms budgets (count × one measured call), unless --warmup-ms / --rep-ms were given."""
    warmup, iters = counts
    if warmup is None and iters is None:
        return budget
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


def _offset_generator(real, offset: int):
    """A ``torch.Generator`` whose every seed -- the one it is created with, and each
    ``manual_seed(s)`` -- is shifted by ``offset``."""

    class Generator(real):
        def __new__(cls, *args, **kwargs):
            generator = real.__new__(cls, *args, **kwargs)
            real.manual_seed(generator, (real.initial_seed(generator) + offset) % (1 << 63))
            return generator

        def __init__(self, *args, **kwargs):
            pass  # torch's generator is made whole by __new__

        def manual_seed(self, seed):
            if isinstance(seed, int) and not isinstance(seed, bool):
                seed = (seed + offset) % (1 << 63)
            return real.manual_seed(self, seed)

    Generator.__name__ = Generator.__qualname__ = "Generator"
    return Generator


@contextlib.contextmanager
def offset_seeds(offset: int):
    """While a package generates input set ``k > 0``, its own ``torch.manual_seed(s)`` (and
    ``random.seed``, ``numpy.random.seed``, ``numpy.random.default_rng(s)``,
    ``numpy.random.RandomState(s)``) seed ``s + offset``, and every ``torch.Generator`` it creates
    is seeded ``offset`` further (at creation and at each ``manual_seed``): a package that
    re-seeds, or seeds a generator of its own, inside genTestCase still gets independent sets."""
    if not offset:
        yield
        return
    import random

    import torch

    patched = [(torch, "manual_seed"), (random, "seed")]
    with contextlib.suppress(ImportError):
        import numpy

        patched += [(numpy.random, "seed"), (numpy.random, "default_rng"), (numpy.random, "RandomState")]
    saved = [(mod, name, getattr(mod, name)) for mod, name in patched]

    def shifted(real):
        def seed(s=None, *a, **k):
            return real(s + offset if isinstance(s, int) and not isinstance(s, bool) else s, *a, **k)
        return seed

    for mod, name, real in saved:
        setattr(mod, name, shifted(real))
    real_generator = torch.Generator
    torch.Generator = _offset_generator(real_generator, offset)
    try:
        yield
    finally:
        torch.Generator = real_generator
        for mod, name, real in saved:
            setattr(mod, name, real)


class CheckFailed(Exception):
    """The package's ``check`` raised: a Judge Error, whatever the candidate wrote."""


@attrs.define
class InputSet:
    """One generated set: pristine inputs and the baseline's result, both private to the checker."""

    seed: int
    original: list
    expected: list  # the baseline's arguments after it ran


@attrs.define
class Slot:
    """The shared arguments the candidate is called with, and the guards around its outputs."""

    args: list
    guards: dict
    set_index: int = 0


class Checker:
    def __init__(self, spec: dict, events):
        self.spec = spec
        self.events = events
        self.nonce = None
        self.config = RunConfig.read(spec["config"])
        self.session = Session.open(self.config)
        self.backend = self.session.choose_backend(self.config.backend, self.config.device)
        self.package = TaskPackage.open(spec["package"])
        self.problem = self.package.load()
        self.run = WorkerRun.open(self.session, RunDir(spec["run_dir"]), argv=spec["argv"])
        self.meta_before = json.dumps(self.run.meta, sort_keys=True, default=str)
        self.records = []
        self.run.begin()
        self.run.meta.pop("time_limit_s", None)  # the judge enforces its own per-case limit
        self.arena = None
        self.sets, self.slots = [], []

    # ------------------------------------------------------------------ protocol
    def emit(self, event: str, **fields) -> None:
        self.events.write(json.dumps({"event": event, "nonce": self.nonce, **fields}, default=str) + "\n")
        self.events.flush()

    def finish(self) -> None:
        self.release()
        self.run.close("complete")
        before = json.loads(self.meta_before)
        added = {k: v for k, v in self.run.meta.items() if k not in before or before[k] != v}
        self.emit("meta", meta=json.loads(json.dumps(added, default=str)))

    def release(self) -> None:
        """Drop the last case's buffers (the worker has dropped its mappings, or is gone)."""
        if self.arena is not None:
            self.arena.close()
        self.arena, self.sets, self.slots = None, [], []
        if self.run.current_point is not None:
            self.run.current_point = None
        with contextlib.suppress(Exception):
            self.backend.free_memory()
        if self.backend.device.startswith("cuda"):
            import torch

            with contextlib.suppress(Exception):
                torch.cuda.ipc_collect()

    def handle(self, request: dict) -> bool:
        """One control line; False when this process must not be used again."""
        if "case" in request:
            self.release()
            try:
                self.prepare(int(request["case"]))
            except Exception:
                self.emit("result", verdict=V.JUDGE_ERROR, text="the package failed:\n" + traceback.format_exc(),
                          fatal=True)
                return False
            return True
        if "witness" in request:  # fresh input sets in every slot, outputs poisoned: the clocked batch
            try:
                self.load_witness()
            except Exception:
                self.emit("result", verdict=V.JUDGE_ERROR, text="the package failed:\n" + traceback.format_exc(),
                          fatal=True)
                return False
            self.emit("witness_ready", distinct_sets=self.distinct_sets, total_sets=len(self.sets))
            return True
        try:
            verdict, text, fatal, slot = self.check(str(request.get("check")), request.get("slot"))
        except CheckFailed as exc:
            self.emit("result", verdict=V.JUDGE_ERROR, text=str(exc), fatal=True)
            return False
        except Exception:
            self.emit("result", verdict=V.JUDGE_ERROR, text="the judge's check failed:\n" + traceback.format_exc(),
                      fatal=True)
            return False
        self.emit("checked", verdict=verdict, text=text, fatal=fatal, slot=slot, max_rel_err=self.max_err)
        return True

    # ------------------------------------------------------------------ one case
    def generate(self, arg_shapes, seed: int, offset: int = 0) -> list:
        seed_everything(seed)
        with offset_seeds(offset):
            return list(self.problem.genTestCase(arg_shapes, device=self.backend.device))

    def run_baseline(self, original) -> list:
        expected = clone_args(original)
        self.problem.baseline(*expected)
        self.backend.synchronize()
        return expected

    def prepare(self, case: int) -> None:
        """Sizes, input sets, the baseline's results and timing, the shared buffers."""
        run, backend, package = self.run, self.backend, self.package
        shapes, arg_shapes, warmup, iters = package.case_sizes(case)
        self.arg_shapes = arg_shapes
        seed = self.spec["base_seed"] + case
        original = self.generate(arg_shapes, seed)
        tensors = [a for a in original if _is_tensor(a)]
        largest = max(tensors, key=lambda t: t.numel()) if tensors else None
        point = Point(op=package.name, shape=tuple(largest.shape) if largest is not None else (len(original),),
                      dtype=str(largest.dtype).replace("torch.", "") if largest is not None else "none",
                      variant=f"case{case}")
        run.begin_point(point)
        base_args = self.run_baseline(original)
        outputs = self.spec["outputs"] if self.spec["outputs"] is not None else detect_outputs(original, base_args)
        if not outputs:  # the baseline wrote nothing we could see (e.g. out already held the result)
            outputs = [max(i for i, a in enumerate(original) if _is_tensor(a))]
        self.outputs = outputs
        op = Op(name=package.name, fn=_unbound, make_inputs=_unbound, shapes=[point.shape],
                dtypes=[point.dtype], reference=None, outputs=tuple(outputs))
        run.current_op, run.current_inputs = op, original
        point_json = {"id": point.id, "op": point.op, "shape": list(point.shape), "dtype": point.dtype,
                      "variant": point.variant, "case": case,
                      "arg_shapes": [list(s) for s in shapes], "case_seed": seed}
        self.emit("case", point=point_json, outputs=outputs, warmup=warmup, iters=iters, seed=seed,
                  io_bytes=io_bytes(original))
        budget = self.config.timing
        counts = (budget.warmup if budget.warmup is not None else warmup,
                  budget.iters if budget.iters is not None else iters)
        base_point = Point(op=point.op, shape=point.shape, dtype=point.dtype, variant=f"{point.variant}.baseline")
        call = lambda: self.problem.baseline(*base_args)  # noqa: E731
        timing = run.time_point(call, base_point, op=op, inputs=tuple(base_args),
                                budget=budget_for(backend, budget, call, counts))
        self.emit("baseline", timing=timing_to_json(timing), extra=run.extra, markers=list(run.markers))

        # The input sets the timed calls rotate over, each with its own seeds and expected output.
        self.sets = [InputSet(seed, original, base_args)]
        self.witness_rounds = 0
        for k in range(1, INPUT_SETS + 1):
            self.add_set(k)
        self.distinct_sets = self.count_distinct()
        # The shared buffers: slot 0 holds the case's inputs for the checked call, the others a
        # timing set each; before timing slot 0 gets the first timing set too.
        self.arena = SharedArena(backend.device, f"case{case}")
        self.slots = []
        for j in range(INPUT_SETS):
            self.slots.append(self._slot(original if j == 0 else self.sets[j + 1].original, 0 if j == 0 else j + 1))
        backend.synchronize()
        self.max_err = None
        self.emit("shared", slots=[self.arena.describe(s.args) for s in self.slots], outputs=outputs,
                  sharing=self.arena.mode,
                  counts=list(counts), input_sets=INPUT_SETS, distinct_sets=self.distinct_sets)

    def count_distinct(self) -> int:
        """Input sets, the case's own included, whose inputs differ from every earlier set's."""
        distinct = []
        for s in self.sets:
            if all(any(_is_tensor(a) and i not in self.outputs and differing_elements(a, b)
                       for i, (a, b) in enumerate(zip(s.original, d.original))) for d in distinct):
                distinct.append(s)
        return len(distinct)

    def add_set(self, k: int, offset: Optional[int] = None) -> int:
        """Generate input set ``k``, run the baseline on it; its index. Its seeds are the case's
        shifted by ``offset`` (default ``k`` strides: the sets the worker's timed calls rotate over,
        which it may predict; the clocked batch's come with an offset it cannot)."""
        original = self.sets[0].original
        offset = k * SET_SEED_STRIDE if offset is None else offset
        set_seed = self.sets[0].seed + offset
        extra_set = self.generate(self.arg_shapes, set_seed, offset=offset)
        self._same_layout(original, extra_set, k)
        self.sets.append(InputSet(set_seed, extra_set, self.run_baseline(extra_set)))
        return len(self.sets) - 1

    def load_witness(self) -> None:
        """Input sets the candidate has never seen, one per slot, every output poisoned: the
        judge's clocked batch (its clock, the worker's calls) must compute every one of them.
        Their seeds are drawn here with :mod:`secrets` and never leave this process: a candidate
        that knows the base seed and the package cannot generate them ahead of the batch."""
        del self.sets[1 + INPUT_SETS:]  # the last batch's sets: seen now
        first = len(self.sets) + self.witness_rounds * len(self.slots)
        self.witness_rounds += 1
        for j, slot in enumerate(self.slots):
            self.load(slot, self.add_set(first + j, offset=witness_offset()))
        self.backend.synchronize()
        self.distinct_sets = self.count_distinct()

    def _same_layout(self, original, other, k: int) -> None:
        for i, (a, b) in enumerate(zip(original, other)):
            same = (tuple(a.shape), a.dtype) == (tuple(b.shape), b.dtype) if _is_tensor(a) and _is_tensor(b) else a == b
            if not same or len(original) != len(other):
                raise RuntimeError(f"input set {k} (another seed) differs from the case's inputs in {_describe(i, a) if _is_tensor(a) else f'argument {i}'}: "
                                   "genTestCase must give every seed the same shapes, dtypes and scalars")

    def _slot(self, source, set_index: int) -> Slot:
        args, guards = [], {}
        for i, a in enumerate(source):
            if not _is_tensor(a):
                args.append(a)
            elif i in self.outputs and a.is_contiguous() and a.numel():
                pad = max(1, GUARD_BYTES // a.element_size())
                buf = self.arena.empty((a.numel() + 2 * pad,), (1,), a.dtype)
                inner = buf[pad:pad + a.numel()].view(a.shape)
                guards[i] = (buf, pad, a.numel())
                args.append(inner)
            else:
                args.append(self.arena.copy_of(a))
        slot = Slot(args, guards, set_index)
        self.load(slot, set_index)
        return slot

    def load(self, slot: Slot, set_index: int) -> None:
        """Copy an input set into a slot's inputs, fill the canaries, poison the outputs."""
        import torch

        for i, (a, src) in enumerate(zip(slot.args, self.sets[set_index].original)):
            if _is_tensor(a) and i not in self.outputs:
                a.copy_(src)
        for buf, _, _ in slot.guards.values():
            buf.view(torch.uint8).fill_(GUARD_FILL)
        poison_tensors(slot.args[i] for i in self.outputs if _is_tensor(slot.args[i]))
        slot.set_index = set_index

    # ------------------------------------------------------------------ checks
    def check(self, phase: str, only=None) -> tuple:
        """``(verdict, text, fatal, slot)`` of a phase: ``first`` (the checked call, slot 0),
        ``timed`` (the last timed call, in slot 0), ``final`` (one call on a refreshed slot),
        ``witness`` (slot ``only`` -- every slot when None -- after a clocked call)."""
        if phase == "first":
            self.arena.unlink()  # the worker has mapped the files (it has called): they go, the mappings stay
            verdict, text, fatal = self.check_slot(0, first=True)
            if verdict == V.ACCEPTED:  # before timing: fresh inputs in slot 0, every output poisoned
                for j, slot in enumerate(self.slots):
                    self.load(slot, 1 if j == 0 else slot.set_index)
                self.backend.synchronize()
            return verdict, text, fatal, None
        if phase == "timed":
            # the timed calls were made in slot 0, on the input sets of every slot in turn (the
            # other slots were not called: their outputs are still poison): its output is the last
            # timed call's, checked on the set its inputs hold now
            self.identify_sets(self.slots[0])
            verdict, text, fatal = self.check_slot(0, prefix="after timing")
            if verdict != V.ACCEPTED:
                return verdict, text, fatal, None
            texts = [text]
            # called once more on the case's own inputs, in a slot whose pointers saw other data
            again = 1 % len(self.slots)
            self.load(self.slots[again], 0)
            self.backend.synchronize()
            return V.ACCEPTED, "\n".join(t for t in texts if t), False, again
        if phase == "final":
            again = 1 % len(self.slots)
            verdict, text, fatal = self.check_slot(again, prefix="called again after timing")
            return verdict, text, fatal, None
        if phase == "witness":
            for j in range(len(self.slots)) if only is None else [int(only)]:
                verdict, text, fatal = self.check_slot(j, prefix="in the judge's clocked batch")
                if verdict != V.ACCEPTED:
                    return verdict, text, fatal, None
            return V.ACCEPTED, "", False, None
        raise ValueError(f"unknown check phase {phase!r}")

    def identify_sets(self, slot: Slot) -> None:
        """After the timed calls: which input set ``slot`` holds now. The worker rotated the
        slots' input sets through it (a fresh set and poisoned outputs before every timed call),
        so its last call ran on whichever set its inputs hold: found here by the inputs' bytes,
        never by what the worker says. Inputs that match no set leave the slot's own set (its
        check then reports the inputs it finds modified)."""
        timing_sets = [slot.set_index] + sorted({s.set_index for s in self.slots} - {slot.set_index})
        for k in timing_sets:
            if all(differing_elements(a, o) == 0 for i, (a, o) in enumerate(zip(slot.args, self.sets[k].original))
                   if i not in self.outputs and _is_tensor(o)):
                slot.set_index = k
                return

    def check_slot(self, j: int, first: bool = False, prefix: str = "") -> tuple:
        """``(verdict, text, fatal)`` of the output in slot ``j`` against its input set."""
        slot = self.slots[j]
        want = self.sets[slot.set_index]
        lead = f"{prefix}, input set {slot.set_index}: " if prefix else ""
        self.backend.synchronize()
        # An out-of-bounds write may have hit memory no guard covers: the worker is not reused.
        for i, guard in slot.guards.items():
            bad = guard_damage(guard)
            if bad:
                return V.RUNTIME_ERROR, (f"{lead}wrote outside its output: {bad} guard bytes around "
                                         f"{_describe(i, slot.args[i])} were overwritten (out-of-bounds write)"), True
        # the check reads private copies: the pristine inputs and a snapshot of the outputs (on
        # the device the package's tensors are on: staged buffers live on the host)
        got = {i: slot.args[i].to(want.original[i].device, copy=True) for i in self.outputs
               if _is_tensor(slot.args[i])}
        ok, text = self.run_check(want, got)
        if first:
            self.max_err = self.max_rel_err(got, want)
        if not ok:
            return V.WRONG_ANSWER, lead + (self.why_wrong(slot, want, got) or text or "check() returned False"), False
        changed = []
        for i, (a, o) in enumerate(zip(slot.args, want.original)):
            if i in self.outputs or not _is_tensor(o):
                continue
            n = differing_elements(a, o)
            if n:
                changed.append(f"{_describe(i, o)}: {n} of {o.numel()} elements changed")
        if changed:
            return (V.WRONG_ANSWER, lead + "modified its inputs (inputs must be read-only): " + "; ".join(changed)
                    + ("\n" + text if text else ""), False)
        return V.ACCEPTED, text, False

    def why_wrong(self, slot: Slot, want: InputSet, got: dict):
        """A stale result (another set's expected output) or an unwritten output, else None."""
        for k, other in enumerate(self.sets):
            if other is not want and self.run_check(other, got, quiet=True)[0]:
                return (f"stale result: the output equals the expected output of input set {k} (seed {other.seed}), "
                        f"not that of the inputs it was called with (set {slot.set_index}, seed {want.seed}); "
                        "a kernel that returns a remembered result instead of computing it")
        poisoned = {i: t.clone() for i, t in got.items()}
        poison_tensors(poisoned.values())
        if got and all(differing_elements(got[i], poisoned[i]) == 0 for i in got):
            return "the output was not written (still the judge's poison): a kernel that returns without computing"
        return None

    def run_check(self, want: InputSet, got: dict, quiet: bool = False) -> tuple:
        """The package's check on ``got`` as the candidate's outputs, its stdout/stderr captured."""
        cand_args = [got.get(i, a) if i in self.outputs else a for i, a in enumerate(want.original)]
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
                ok = bool(self.problem.check(self.arg_shapes, want.original, cand_args, want.expected, **tolerances))
            except Exception as exc:  # the package's fault, not the candidate's: Judge Error
                raise CheckFailed("the package's check() raised:\n" + traceback.format_exc()
                                  + ("\n" + buf.getvalue().strip() if buf.getvalue().strip() else "")) from exc
        return ok, "" if quiet else buf.getvalue().strip()

    def max_rel_err(self, got: dict, want: InputSet):
        worst = None
        for i, a in got.items():
            b = want.expected[i]
            if a.dtype.is_floating_point or a.dtype.is_complex:
                try:
                    err = relative_error(a, b)
                except Exception:
                    continue
                worst = err if worst is None or err != err or err > worst else worst
        return worst


def _unbound(*_args):
    raise RuntimeError("the task judge times bound calls only")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    faulthandler.enable()
    make_undumpable()  # the candidate's process may see this one: its memory stays closed to it
    if os.environ.pop(SHM_VIEW_ENV, None):  # the pair's directory as /dev/shm: the candidate writes there too
        why = follow_no_links()
        if why:
            print(f"zlf task: the checker will not share the candidate's /dev/shm: {why} "
                  "(Linux 5.10 or later; or judge with --sandbox none)", file=sys.stderr)
            return 70
    events = os.fdopen(int(argv[2]), "w", buffering=1)
    ctrl = os.fdopen(int(argv[1]), "r")
    return V.serve(ctrl, events, lambda: Checker(spec, events), _handle, "checker")


def _handle(checker, request) -> bool:
    checker.nonce = request.get("nonce", checker.nonce)
    return checker.handle(request)

if __name__ == "__main__":
    sys.exit(main())
