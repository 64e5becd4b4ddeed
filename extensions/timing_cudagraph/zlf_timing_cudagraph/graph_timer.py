"""Graph-replay timing: capture many calls into one graph, time replays with device events.

A direct event pair around one call of a 1 µs kernel measures mostly the host's launch cost.
Captured into a graph, thousands of calls replay back to back from one launch, so a replay's
elapsed time divided by its number of calls is close to the kernel's own time.

Everything goes through the backend contract (streams, graphs, events, L2 flush), so any backend
that can capture graphs (cuda, maca, musa) gets this timer unchanged.

L2 policy (docs/timing.md):
* warm (default): consecutive calls in a graph find their inputs in L2, as in a model's steady state.
* flush (``--flush-l2``): every call in the graph is preceded by the backend's L2 flush, and a
  second graph of flushes alone is replayed alternately with the first; a sample is the
  difference divided by the number of calls. Chosen over rotating input copies because the timed
  callable is opaque (its inputs cannot always be copied) and a 1 µs kernel would need tens of
  thousands of copies to exceed L2; the price is precision on sub-microsecond kernels, where
  the flush (tens of µs) dominates each difference.
"""
from __future__ import annotations

import gc
import math
from typing import Optional

import attrs

from zlf.ops import outside, poison_tensors, self_overlapping, tensors_in
from zlf.records import Timing

from .capture_errors import CaptureFailure, classify

TIMER_NAME = "cudagraph"
#: device time one replay aims at: long enough to amortise the replay's own launch (a few µs).
REPLAY_MS = 2.0
#: calls captured into one graph at most (capture and instantiation cost grow with it).
MAX_CALLS = 10_000
MIN_SAMPLES = 10
MAX_SAMPLES = 500


@attrs.frozen
class GraphSettings:
    """How one point is timed; built from the command line by :meth:`from_options`."""

    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    replay_ms: float = REPLAY_MS
    max_calls: int = MAX_CALLS
    flush_l2: bool = False
    verify: bool = True

    @classmethod
    def from_options(cls, options, backend) -> "GraphSettings":
        """From the :class:`zlf.config.TimingBudget` a ``time_fn`` receives (a namespace is read as one)."""
        from zlf.config import as_budget

        budget = as_budget(options)
        warmup_ms, rep_ms = budget.budgets(backend)
        return cls(
            warmup_ms=warmup_ms,
            rep_ms=rep_ms,
            replay_ms=budget.option("cudagraph_replay_ms") or REPLAY_MS,
            max_calls=budget.option("cudagraph_max_calls") or MAX_CALLS,
            # Graph mode keeps L2 warm unless --flush-l2 was given explicitly.
            flush_l2=budget.flush_l2 is True,
            verify=not budget.option("cudagraph_no_verify", False),
        )

    @property
    def l2(self) -> str:
        return "flush" if self.flush_l2 else "warm"

    @property
    def l2_method(self) -> str:
        return "flush node before every call, minus a flush-only graph" if self.flush_l2 else "warm (no flush)"


@attrs.define
class Captured:
    """A successfully captured graph, the value the last captured call returned, and its pool."""

    graph: object
    calls: int
    last: object = None
    pool: object = None


def graph_support(backend) -> Optional[str]:
    """None when ``backend`` can capture graphs, else one line saying why not."""
    from zlf.backends import Backend

    if backend.host_timing:
        return f"backend {backend.name!r} times with the host clock and has no device graphs"
    if type(backend).new_graph is Backend.new_graph or type(backend).graph_capture is Backend.graph_capture:
        return f"backend {backend.name!r} does not implement graph capture"
    return None


# ----------------------------------------------------------------------------- capture
def _pool_handle(backend):
    make = getattr(backend, "graph_pool_handle", None)
    try:
        return make() if make is not None else None
    except Exception:  # a platform without pool handles still captures; it just cannot be undone
        return None


def _end_dangling_capture(backend, graph, stream) -> None:
    """If the capture never reached its end (the callable left another stream current), end it
    now: a capture left open in global mode makes every later allocation in the process fail."""
    module = backend.torch_device_module
    is_capturing = getattr(module, "is_current_stream_capturing", None)
    if is_capturing is None:
        return
    try:
        with backend.stream_context(stream):
            if is_capturing():
                graph.capture_end()
    except Exception:
        pass


def capture(backend, stream, fn, calls: int, flush=None) -> Captured:
    """Capture ``calls`` calls of ``fn`` (each after ``flush()`` when given) on ``stream``.

    No garbage is collected while the capture is open: a destructor run by the collector may make
    a call a capture forbids (a CUDA IPC mapping of an earlier point, unmapped by its storage's
    destructor, aborts the process). Garbage made before or during the capture is collected by
    the next collection after it.

    :raises CaptureFailure: the capture failed; the backend's allocator state has been undone
        (:meth:`Backend.discard_graph_pool`) and the caller's current stream restored.
    """
    graph = backend.new_graph()
    pool = _pool_handle(backend)
    last = capture_ctx = None
    # Pending work on any stream must finish first: it could otherwise leak into the capture
    # (or be what a global-mode capture trips over).
    backend.synchronize()
    collecting = gc.isenabled()
    gc.disable()
    try:
        # The outer stream context restores the caller's stream even when the capture's own exit
        # raises before restoring it (torch's graph.__exit__ has no try/finally).
        with backend.stream_context(stream):
            capture_ctx = backend.graph_capture(graph, stream=stream, pool=pool) if pool is not None \
                else backend.graph_capture(graph, stream=stream)
            with capture_ctx:
                for _ in range(calls):
                    if flush is not None:
                        flush()
                    last = fn()
    except BaseException as exc:
        last = None
        _end_dangling_capture(backend, graph, stream)
        if pool is not None:
            backend.discard_graph_pool(pool, graph)
        del graph, capture_ctx
        if not isinstance(exc, Exception):
            raise  # Ctrl-C: cleaned up, not a capture failure
        raise classify(exc) from exc
    finally:
        if collecting:
            gc.enable()
    backend.synchronize()
    return Captured(graph=graph, calls=calls, last=last, pool=pool)


# ----------------------------------------------------------------------------- verification
def _mismatch(actual, expected, tolerance: float) -> Optional[str]:
    """Why ``actual`` (replayed) is not ``expected`` (a direct call's result), or None.

    NaN-aware: an op may legitimately produce NaN (``log10`` of a negative input), so NaN must
    sit in the same places on both sides and the error is measured over the other elements;
    a NaN where the direct call has a number is an output the replay left poisoned.
    """
    import torch

    if tuple(actual.shape) != tuple(expected.shape):
        return f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if actual.numel() == 0:
        return None
    if actual.dtype.is_floating_point or actual.dtype.is_complex:
        nan_a, nan_e = torch.isnan(actual), torch.isnan(expected)
        if bool((nan_a & ~nan_e).any()):
            return "outputs left unwritten (still poisoned)"
        if bool((nan_e & ~nan_a).any()):
            return "NaN in a direct call where the replay has a number"
        # complex stays complex: a float64 cast would drop the imaginary part
        wide = torch.complex128 if actual.dtype.is_complex or expected.dtype.is_complex else torch.float64
        a, e = actual.to(wide), expected.to(wide)
        inf_a, inf_e = torch.isinf(a), torch.isinf(e)
        if not bool(torch.equal(inf_a, inf_e)) or not bool(torch.equal(a[inf_a], e[inf_e])):
            return "infinities differ from a direct call"
        finite = ~(nan_a | inf_a)
        a, e = torch.where(finite, a, torch.zeros_like(a)), torch.where(finite, e, torch.zeros_like(e))
        denom = float(torch.linalg.vector_norm(e))
        err = float(torch.linalg.vector_norm(a - e)) / (denom if denom > 0 else 1.0)
        if not err <= tolerance:
            return f"relative error {err:.3g} against a direct call"
        return None
    if not bool(torch.equal(actual, expected)):
        return "outputs differ from a direct call (left unwritten?)"
    return None


def _shares_memory(target, inputs) -> bool:
    """Whether ``target`` is (a view of) one of ``inputs``: the op works in place."""
    import torch

    try:
        ptr = target.untyped_storage().data_ptr()
    except Exception:  # a tensor without storage (meta, sparse) is never an input's buffer here
        return False
    return any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr
               for t in tensors_in(list(inputs or ())))


def _sentinel(targets) -> list:
    """Fill ``targets`` with seeded random values (not NaN: an in-place op maps NaN to NaN, so a
    NaN poison could not tell "not written" from "written") and return copies of them."""
    import torch

    gen = torch.Generator(device=targets[0].device if targets else "cpu")
    gen.manual_seed(0x5EED)
    for t in targets:
        if t.dtype.is_floating_point or t.dtype.is_complex:
            # drawn in float32 and converted: randn has no float8 kernels
            t.copy_(torch.randn(t.shape, generator=gen, device=t.device).to(t.dtype))
        elif t.dtype == torch.bool:
            t.copy_(torch.rand(t.shape, generator=gen, device=t.device) < 0.5)
        else:
            info = torch.iinfo(t.dtype)
            t.copy_(torch.randint(max(info.min, -1000), min(info.max, 1000), t.shape, generator=gen,
                                  device=t.device, dtype=t.dtype))
    return [t.clone() for t in targets]


def _equal_nan(a, b) -> bool:
    """Bit-for-bit equality where NaN equals NaN (``torch.equal`` says NaN != NaN)."""
    import torch

    if a.dtype.is_floating_point or a.dtype.is_complex:
        nan = torch.isnan(a)
        return bool(torch.equal(nan, torch.isnan(b))) and bool(torch.equal(a[~nan], b[~nan]))
    return bool(torch.equal(a, b))


#: verification outcomes (``extra.cudagraph.verified``) and what each means (docs/timing.md)
VERIFIED = {
    "outputs": "a replay reproduced op.outputs of a direct call",
    "returned": "a replay reproduced the tensors a direct call returns",
    "written_in_place": "the op writes its own inputs: a replay was only checked to write its outputs",
    "written_nondeterministic": "two direct calls already differ (random op): a replay was only checked to write its outputs",
    "unverifiable": "no output buffers and nothing returned to compare",
    "off": "--cudagraph-no-verify",
}


def verify_replay(backend, captured: Captured, fn, op=None, inputs=None, dtype: str = "") -> str:
    """Replay the graph once on poisoned outputs and compare them with a direct call's.

    Work issued on a stream the capture never joined runs eagerly at capture time and is
    missing from the graph: its outputs stay poisoned after a replay, and a time measured from
    that graph would be too fast.

    A comparison with a direct call only means something when direct calls agree with each
    other: an in-place op (``arccosh_``) computes f(f(x)) on its second call, a random op
    (dropout) a new mask. Such ops are checked by what still catches unjoined work: outputs
    filled with a seeded pattern must have been written by the replay (an unjoined launch
    leaves them untouched).

    :return: one key of :data:`VERIFIED`.
    :raises CaptureFailure: ``unjoined_stream_work`` when the replay did not produce the outputs.
    """
    if op is not None and inputs is not None and getattr(op, "outputs", ()):
        targets, what = [inputs[i] for i in op.outputs], "outputs"

        def direct():
            backend.synchronize()
            fn()
            backend.synchronize()
            return targets
    else:
        targets, what = tensors_in(captured.last), "returned"
        if not targets:
            return "unverifiable"

        def direct():
            backend.synchronize()
            produced = tensors_in(fn())
            backend.synchronize()
            return produced
    produced = direct()
    if len(produced) != len(targets):
        return "unverifiable"
    tolerance = max(op.tolerance_for(dtype) if op is not None and dtype else 0.0, 1e-3)
    # copies, poison and comparison are the timer's work, not the op's: outside its environment
    with outside(op):
        expected = [t.clone() for t in produced]
    # an output that is (a view of) an input the op reads: the op works in place
    read = [x for i, x in enumerate(inputs or ()) if what == "returned" or i not in op.outputs]
    in_place = any(_shares_memory(t, read) for t in targets)
    differ = None
    if not in_place:
        again = direct()
        with outside(op):
            differ = next((why for a, e in zip(again, expected) if (why := _mismatch(a, e, tolerance))), None)
    # an output whose elements share memory (expand_as returns an expanded view of its input) is
    # written by no kernel and cannot be written by zlf either: compared as it is, never filled
    writable = [t for t in targets if not self_overlapping(t)]
    with outside(op):
        if not writable:
            captured.graph.replay()
            backend.synchronize()
            for k, (actual, exp) in enumerate(zip(targets, expected)):
                why = _mismatch(actual, exp, tolerance)
                if why:
                    raise CaptureFailure("unjoined_stream_work", f"graph replay: {what} {k}: {why}")
            return what
        if in_place or differ:
            kept = [t.clone() for t in writable] if in_place else None
            before = _sentinel(writable)
            captured.graph.replay()
            backend.synchronize()
            untouched = all(_equal_nan(t, b) for t, b in zip(writable, before))
            for t, k in zip(writable, kept or ()):
                t.copy_(k)  # the op's inputs as they were, for the timed replays
            if untouched:
                cause = "it writes its inputs" if in_place else f"two direct calls differ ({differ})"
                raise CaptureFailure("unjoined_stream_work",
                                     f"graph replay: {what} left untouched ({cause}; work on a stream the capture did not join?)")
            return "written_in_place" if in_place else "written_nondeterministic"
        poison_tensors(writable)
        captured.graph.replay()
        backend.synchronize()
        for k, (actual, exp) in enumerate(zip(targets, expected)):
            why = _mismatch(actual, exp, tolerance)
            if why:
                raise CaptureFailure("unjoined_stream_work",
                                     f"graph replay: {what} {k}: {why} (work on a stream the capture did not join?)")
    return what


# ----------------------------------------------------------------------------- timing
def _elapsed_ms(backend, run, repeats: int = 1) -> float:
    start, end = backend.event(), backend.event()
    start.record()
    for _ in range(repeats):
        run()
    end.record()
    backend.synchronize()
    return start.elapsed_time(end)


def _calls_for(per_call_ms: float, settings: GraphSettings) -> int:
    if per_call_ms <= 0 or not math.isfinite(per_call_ms):
        return settings.max_calls
    return int(min(settings.max_calls, max(1, math.ceil(settings.replay_ms / per_call_ms))))


def time_graph(fn, backend, settings: GraphSettings, op=None, inputs=None, dtype: str = "") -> Timing:
    """Time ``fn`` by graph replay. Samples are per-call times (one replay's elapsed / calls).

    :raises CaptureFailure: the point cannot be timed by graph replay (capture failed, or a
        replay did not produce the outputs); the caller times it directly and marks it.
    """
    flush = backend.flush_l2 if settings.flush_l2 else None
    stream = backend.new_stream()
    backend.synchronize()  # inputs written on another stream are complete before the side stream reads them
    # Warm up on the capture stream: lazy per-stream set-up (library handles, workspaces) must not
    # first happen inside the capture.
    with backend.stream_context(stream):
        for _ in range(2):
            if flush is not None:
                flush()  # also allocates the flush buffer outside any graph's memory pool
            fn()
    backend.synchronize()
    # Host launch cost is inside this estimate, so it over-states a small kernel: refined below.
    estimate_ms = max(_elapsed_ms(backend, fn, 5) / 5, 1e-6)
    flush_ms = max(_elapsed_ms(backend, flush, 3) / 3, 0.0) if flush is not None else 0.0

    main = capture(backend, stream, fn, _calls_for(estimate_ms + flush_ms, settings), flush)
    main.graph.replay()  # first replay uploads the graph; not timed
    replay_ms = _elapsed_ms(backend, main.graph.replay)
    better = _calls_for(replay_ms / main.calls, settings)
    if better >= 2 * main.calls:
        del main
        main = capture(backend, stream, fn, better, flush)
        main.graph.replay()
        replay_ms = _elapsed_ms(backend, main.graph.replay)

    verified = verify_replay(backend, main, fn, op, inputs, dtype) if settings.verify else "off"
    baseline = capture(backend, stream, lambda: None, main.calls, flush) if flush is not None else None

    def replay_pair():
        main.graph.replay()
        if baseline is not None:
            baseline.graph.replay()

    pair_ms = max(replay_ms * (2 if baseline is not None else 1), 1e-6)
    n_warmup = max(1, math.ceil(settings.warmup_ms / pair_ms))
    for _ in range(n_warmup):
        replay_pair()
    n = int(min(MAX_SAMPLES, max(MIN_SAMPLES, settings.rep_ms / pair_ms)))
    marks = [[backend.event() for _ in range(4 if baseline is not None else 2)] for _ in range(n)]
    for ev in marks:
        ev[0].record()
        main.graph.replay()
        ev[1].record()
        if baseline is not None:
            ev[2].record()
            baseline.graph.replay()
            ev[3].record()
    backend.synchronize()
    samples = []
    for ev in marks:
        elapsed = ev[0].elapsed_time(ev[1])
        if baseline is not None:
            elapsed -= ev[2].elapsed_time(ev[3])
        samples.append(elapsed / main.calls)
    extra = {
        "cudagraph": {
            "calls_per_graph": main.calls,
            "replays": n,
            "warmup_replays": n_warmup,
            "replay_ms": round(replay_ms, 6),
            "l2_method": settings.l2_method,
            "verified": verified,
        }
    }
    if baseline is not None:
        extra["cudagraph"]["flush_ms_per_call"] = round(
            sorted(ev[2].elapsed_time(ev[3]) for ev in marks)[n // 2] / main.calls, 6)
    return Timing.from_samples(samples, timer=TIMER_NAME, l2=settings.l2, calls_per_sample=main.calls, extra=extra)


def probe_capture(fn, backend, op=None, inputs=None, dtype: str = "", calls: int = 2) -> Optional[CaptureFailure]:
    """Try to capture (and verify) ``fn`` without timing it: None when it works.

    Used in a child process (``--cudagraph-probe subprocess``), where a capture that leaves the
    device in a bad state costs nothing but that process.
    """
    why = graph_support(backend)
    if why:
        return CaptureFailure("unsupported", why)
    stream = backend.new_stream()
    with backend.stream_context(stream):
        fn()
    backend.synchronize()
    try:
        captured = capture(backend, stream, fn, calls)
        verify_replay(backend, captured, fn, op, inputs, dtype)
    except CaptureFailure as failure:
        return failure
    return None
