"""The ``cudagraph`` extension: graph-replay timing, per-point marked fallback, cpu skip.

On CPU, a fake device backend stands in for a GPU: its "kernels" are Python callables that a
capture records and a replay re-runs, its events are host events, and its capture fails the way
CUDA captures fail (generic "previous error during capture" for host syncs, torch's
own message for device-to-host copies, end-of-capture errors for unjoined forks, and an allocator
left mid-capture unless the pool is discarded). GPU tests (``-m gpu``) run the real thing.
"""
from __future__ import annotations

import argparse
import contextlib
import json

import attrs
from pathlib import Path

import pytest
import torch

import zlf
from zlf.backends import Backend, CpuBackend
from zlf.records import Point
from zlf_timing_cudagraph.capture_errors import MARKER, CaptureFailure, classify, marker_line
from zlf_timing_cudagraph.plugin import CudaGraphTimer

from zlf.testing import HeldDispatch, read_records, run_dir_from

REPO = Path(__file__).resolve().parents[3]

INVALIDATED = "CUDA error: operation failed due to a previous error during capture"
STUCK = 'captures_underway.empty() INTERNAL ASSERT FAILED at "c10/cuda/CUDACachingAllocator.cpp":3089'


# ----------------------------------------------------------------------------- the fake device
class FakeGraph:
    def __init__(self):
        self.nodes = []

    def replay(self):
        for node in self.nodes:
            node()


class FakeBackend(Backend):
    """A device whose capture records Python "kernels" and fails like CUDA does."""

    name = "fakegpu"
    description = "fake device for tests"
    timer_name = "fake_event"
    triton_target = "fake"
    host_timing = False

    def __init__(self, undo_pool: bool = True):
        super().__init__(0)
        self.undo_pool = undo_pool
        self.capturing = None
        self.invalidated = False
        self.fork_open = False
        self.allocator_in_capture = False
        self.discarded = []
        self.captures = 0
        self._pools = 0
        self.stream = "main"

    # streams and graphs
    def new_stream(self):
        return object()

    @contextlib.contextmanager
    def stream_context(self, stream):
        prev, self.stream = self.stream, stream
        try:
            yield
        finally:
            self.stream = prev

    def current_stream(self):
        return self.stream

    def new_graph(self):
        return FakeGraph()

    def graph_pool_handle(self):
        self._pools += 1
        return (0, self._pools)

    def discard_graph_pool(self, pool, graph=None):
        self.discarded.append(pool)
        if self.undo_pool:
            self.allocator_in_capture = False

    @contextlib.contextmanager
    def graph_capture(self, graph, stream=None, pool=None):
        if self.allocator_in_capture:  # torch's graph.__enter__ calls empty_cache()
            raise RuntimeError(STUCK)
        self.captures += 1
        self.capturing, self.invalidated, self.fork_open = graph, False, False
        self.allocator_in_capture = True
        try:
            yield
        finally:
            self.capturing = None
            # Like CUDAGraph::capture_end: the end-of-capture error comes before the allocator is told.
            if self.invalidated:
                raise RuntimeError(INVALIDATED + " (cudaErrorStreamCaptureInvalidated)")
            if self.fork_open:
                raise RuntimeError("CUDA error: cudaErrorStreamCaptureUnjoined")
            self.allocator_in_capture = False

    # execution
    def launch(self, kernel):
        if self.capturing is not None:
            self.capturing.nodes.append(kernel)
        else:
            kernel()

    def fail_capture(self, exc_type=RuntimeError, message=INVALIDATED):
        if self.capturing is not None:
            self.invalidated = True
            raise exc_type(message)

    def synchronize(self):
        self.fail_capture()

    def flush_l2(self):
        self.launch(lambda: None)

    def free_memory(self):
        if self.allocator_in_capture:
            raise RuntimeError(STUCK)


class DeviceScalar:
    """What ``tensor[0]`` on a device gives: reading it on the host needs a sync."""

    def __init__(self, backend, value=1.0):
        self.backend, self.value = backend, value

    def item(self):
        self.backend.fail_capture()
        return self.value

    def cpu(self):
        if self.backend.capturing is not None:
            raise RuntimeError("Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is pinned")
        return self.value


def add_op(backend, body=None, name="add", outputs=(2,)):
    """A fake-device add whose callable runs ``body(backend, x, y, out)`` after its kernel."""

    def fn(x, y, out):
        backend.launch(lambda: torch.add(x, y, out=out))
        if body is not None:
            body(backend, x, y, out)

    def make(shape, dtype, device):
        x, y = torch.randn(shape), torch.randn(shape)
        return (x, y, torch.empty_like(x))

    return zlf.Op(name=name, fn=fn, make_inputs=make, shapes=[(256,)], reference=lambda x, y, out: x + y,
                  outputs=outputs)


def options(**kw):
    base = dict(warmup_ms=1.0, rep_ms=5.0, flush_l2=None, cudagraph_probe="inline", cudagraph_replay_ms=0.5,
                cudagraph_max_calls=50, cudagraph_no_verify=False)
    base.update(kw)
    return argparse.Namespace(**base)


def time_point(timer, backend, op, kernel_timer=None, **opts):
    point = Point(op.name, (256,), "float32")
    inputs = op.make_inputs(point.shape, point.dtype, "cpu")
    return timer.time_fn(fn=lambda: op.fn(*inputs), point=point, backend=backend, options=options(**opts),
                         op=op, inputs=inputs, kernel_timer=kernel_timer), point


# ----------------------------------------------------------------------------- graph mode
def test_a_capturable_point_is_timed_by_graph_replay_with_per_call_samples():
    backend = FakeBackend()
    timing, _ = time_point(CudaGraphTimer(), backend, add_op(backend))
    assert timing.timer == "cudagraph"
    assert timing.fallback_reason is None and timing.markers == ()
    assert timing.l2 == "warm"
    info = timing.extra["cudagraph"]
    assert timing.calls_per_sample == info["calls_per_graph"] > 1
    assert len(timing.samples_ms) == info["replays"] >= 10
    assert timing.value_ms > 0 and min(timing.samples_ms) <= timing.value_ms <= max(timing.samples_ms)
    assert info["verified"] == "outputs" and info["probe"] == "inline"


class _Mapping:
    """An object in a reference cycle (freed by the garbage collector, not by its refcount) whose
    destructor makes a call a capture forbids, as a CUDA IPC mapping's does (cudaIpcCloseMemHandle:
    the process aborts); here the fake backend's capture is invalidated instead."""

    def __init__(self, backend, freed):
        self.backend, self.freed, self.me = backend, freed, self

    def __del__(self):
        self.freed.append("inside" if self.backend.capturing is not None else "outside")
        if self.backend.capturing is not None:
            self.backend.invalidated = True


def test_garbage_is_never_collected_inside_a_capture():
    """Garbage that becomes collectable while a capture is open is collected after it: a
    collection inside the capture would run a destructor the capture forbids (on the H200, a
    reused task worker aborted when the mapping of an earlier case was freed inside a capture)."""
    import gc

    backend = FakeBackend()
    freed = []

    def body(backend, x, y, out):
        if backend.capturing is not None:
            _Mapping(backend, freed)  # unreachable at once, collectable by the collector only
            [object() for _ in range(50)]  # allocations: with threshold 1, a collection is due

    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        timing, _ = time_point(CudaGraphTimer(), backend, add_op(backend, body))
        gc.collect()
    finally:
        gc.set_threshold(*threshold)
    assert timing.timer == "cudagraph" and timing.fallback_reason is None, timing.markers
    assert freed and set(freed) == {"outside"}, freed
    assert gc.isenabled()


def test_flush_l2_captures_a_flush_before_every_call_and_subtracts_a_flush_only_graph():
    backend = FakeBackend()
    timing, _ = time_point(CudaGraphTimer(), backend, add_op(backend), flush_l2=True)
    assert timing.timer == "cudagraph" and timing.l2 == "flush"
    assert "flush_ms_per_call" in timing.extra["cudagraph"]
    assert "minus a flush-only graph" in timing.extra["cudagraph"]["l2_method"]


def test_a_callable_returning_its_result_is_verified_through_the_returned_tensor():
    backend = FakeBackend()

    def make(shape, dtype, device):
        return (torch.randn(shape),)

    def fn(x):
        out = torch.empty_like(x)  # allocated at capture time, written at every replay
        backend.launch(lambda: torch.mul(x, 2, out=out))
        return out

    op = zlf.Op(name="double", fn=fn, make_inputs=make, shapes=[(256,)], reference=lambda x: 2 * x)
    timing, _ = time_point(CudaGraphTimer(), backend, op)
    assert timing.timer == "cudagraph"
    assert timing.extra["cudagraph"]["verified"] == "returned"


def test_the_replay_check_runs_outside_an_ops_held_environment():
    """The replay check's copies, poison and float64 comparison are the timer's work: with an op
    environment held across calls (FlagGems' dispatch) they run inside ``Op.outside``."""
    backend = FakeBackend()
    env = HeldDispatch()

    def fn(x, y, out):
        env.enter()
        backend.launch(lambda: torch.add(x, y, out=out))

    base = add_op(backend)
    try:
        held = attrs.evolve(base, fn=fn, outside=env.outside)
        timing, _ = time_point(CudaGraphTimer(), backend, held)
        assert timing.timer == "cudagraph" and timing.fallback_reason is None
        assert timing.extra["cudagraph"]["verified"] == "outputs"
        # entered by the op's calls (again for the second direct call of the determinism check),
        # left for every copy and comparison
        assert env.entries == 2 and env.lib is None
        # the control: without Op.outside the comparison meets the op's vector_norm (the point fails)
        with pytest.raises(NotImplementedError, match="torch.float64"):
            time_point(CudaGraphTimer(), backend, attrs.evolve(base, fn=fn))
    finally:
        env.exit()


# ----------------------------------------------------------------------------- fallback
def _item(backend, x, y, out):
    DeviceScalar(backend).item()


def _cpu_copy(backend, x, y, out):
    DeviceScalar(backend).cpu()


def _synchronize(backend, x, y, out):
    backend.synchronize()


def _nonzero(backend, x, y, out):
    idx = torch.nonzero(out); backend.fail_capture()  # noqa: E702 -- the raising line names nonzero


def _fork_not_joined(backend, x, y, out):
    backend.fork_open = True


def _legacy_stream(backend, x, y, out):
    backend.fail_capture(message="CUDA error: operation would make the legacy stream depend on a capturing "
                                 "blocking stream (cudaErrorStreamCaptureImplicit)")


def _python_error(backend, x, y, out):
    if backend.capturing is not None:
        raise ValueError("only fails while capturing")


@pytest.mark.parametrize("body, reason", [
    (_item, "host_sync"),
    (_synchronize, "host_sync"),
    (_nonzero, "host_sync"),
    (_cpu_copy, "device_to_host_copy"),
    (_fork_not_joined, "unjoined_stream_work"),
    (_legacy_stream, "illegal_stream_use"),
    (_python_error, "other"),
])
def test_a_failed_capture_falls_back_to_the_direct_timer_with_the_exact_marker(body, reason):
    backend = FakeBackend()
    op = add_op(backend, body, name="bad")
    timing, point = time_point(CudaGraphTimer(), backend, op)
    # core's direct timer on this backend; unjoined work needs a device-wide sync per sample
    assert timing.timer == ("host_wall_sync" if reason == "unjoined_stream_work" else "fake_event")
    assert timing.fallback_reason == reason
    assert timing.markers == (f"BENCHMARK_DIRECT_NO_CUDAGRAPH op=bad point={point.id} reason={reason} timer={timing.timer}",)
    assert timing.extra["cudagraph"]["fallback"] == reason and timing.extra["cudagraph"]["detail"]
    assert len(timing.samples_ms) >= 5 and timing.value_ms > 0
    assert timing.l2 == "warm"  # same L2 policy as graph mode, so one table compares like with like


def test_after_a_failed_capture_the_next_point_still_captures():
    backend = FakeBackend()
    timer = CudaGraphTimer()
    bad, _ = time_point(timer, backend, add_op(backend, _item, name="bad"))
    assert bad.fallback_reason == "host_sync"
    assert backend.discarded, "the failed capture's pool was not discarded"
    good, _ = time_point(timer, backend, add_op(backend))
    assert good.timer == "cudagraph" and good.fallback_reason is None
    assert timer.poisoned is None


def test_a_process_left_unable_to_capture_marks_every_later_point():
    backend = FakeBackend(undo_pool=False)  # a backend that cannot undo the allocator state
    timer = CudaGraphTimer()
    time_point(timer, backend, add_op(backend, _item, name="bad"))
    assert timer.poisoned and "host_sync" in timer.poisoned
    later, point = time_point(timer, backend, add_op(backend, name="later"))
    assert later.fallback_reason == "context_poisoned"
    assert later.markers == (f"{MARKER} op=later point={point.id} reason=context_poisoned timer=fake_event",)


def test_work_on_an_unjoined_stream_is_detected_by_the_replay_check_and_marked():
    backend = FakeBackend()

    def side_stream(backend, x, y, out):
        out.zero_()  # eager, not recorded: the "kernel" ran on a stream the capture never saw
        torch.add(x, y, out=out)

    op = add_op(backend, name="side")
    op = zlf.Op(name="side", fn=lambda x, y, out: side_stream(backend, x, y, out), make_inputs=op.make_inputs,
                shapes=[(256,)], reference=op.reference, outputs=(2,))
    timing, point = time_point(CudaGraphTimer(), backend, op)
    assert timing.fallback_reason == "unjoined_stream_work"
    assert timing.markers == (f"{MARKER} op=side point={point.id} reason=unjoined_stream_work timer=host_wall_sync",)
    assert "still poisoned" in timing.extra["cudagraph"]["detail"]
    # The current stream's events miss such work too: the fallback synchronises the device per sample.
    assert timing.timer == "host_wall_sync"


def _returning_op(backend, name, body, eager=False):
    """A fake-device op of one input that returns its result (as FlagGems' ops do); ``body(x)``
    is its one "kernel", launched on the current stream, or run eagerly (``eager``: a stream the
    capture never joined)."""

    def make(shape, dtype, device):
        return (torch.randn(shape),)

    def fn(x):
        out = torch.empty_like(x)
        kernel = lambda: body(x, out)  # noqa: E731
        kernel() if eager else backend.launch(kernel)
        return out if body.__name__ != "in_place" else x

    return zlf.Op(name=name, fn=fn, make_inputs=make, shapes=[(256,)], reference=lambda x: x)


def log10(x, out):
    torch.log10(x, out=out)  # NaN for the negative half of randn inputs, by definition


def in_place(x, out):
    x.copy_(torch.arccosh(x))  # arccosh_: the second call computes f(f(x))


def dropout(x, out):
    out.copy_(torch.nn.functional.dropout(x, 0.5, training=True))  # a new mask every call


@pytest.mark.parametrize("body, verified", [
    (log10, "returned"),
    (in_place, "written_in_place"),
    (dropout, "written_nondeterministic"),
])
def test_nan_outputs_in_place_and_random_ops_are_graph_timed_not_called_unjoined(body, verified):
    """FlagGems' log10, arccosh_ and feature_dropout launch one kernel on the current stream; the
    replay check used to call them unjoined_stream_work (NaN made the error NaN, an in-place op
    computed f(f(x)), a random op a new mask)."""
    backend = FakeBackend()
    timing, _ = time_point(CudaGraphTimer(), backend, _returning_op(backend, body.__name__, body))
    assert timing.fallback_reason is None, timing.extra
    assert timing.timer == "cudagraph" and timing.extra["cudagraph"]["verified"] == verified


@pytest.mark.parametrize("body", [in_place, dropout])
def test_unjoined_work_of_in_place_and_random_ops_is_still_caught(body):
    """The negative control of the weaker check: a replay that writes nothing is unjoined work."""
    backend = FakeBackend()
    timing, point = time_point(CudaGraphTimer(), backend, _returning_op(backend, "side", body, eager=True))
    assert timing.fallback_reason == "unjoined_stream_work"
    assert "left untouched" in timing.extra["cudagraph"]["detail"]


def test_an_in_place_ops_inputs_are_restored_after_the_replay_check():
    from zlf_timing_cudagraph.graph_timer import Captured, verify_replay

    backend = FakeBackend()
    x = torch.rand(64) + 1.0  # arccosh's domain: finite values after one call
    op = _returning_op(backend, "inplace", in_place)
    graph = FakeGraph()
    graph.nodes.append(lambda: in_place(x, None))
    in_place(x, None)
    kept = x.clone()
    assert verify_replay(backend, Captured(graph=graph, calls=1, last=x), lambda: op.fn(x), op, (x,)) \
        == "written_in_place"
    # the direct call of the check applied f once more; the sentinel values are gone again
    assert torch.allclose(x, torch.arccosh(kept), equal_nan=True)


def test_replay_comparison_is_nan_aware():
    from zlf_timing_cudagraph.graph_timer import _mismatch

    nan, inf = float("nan"), float("inf")
    assert _mismatch(torch.tensor([nan, 1.0, inf]), torch.tensor([nan, 1.0, inf]), 1e-3) is None
    assert "still poisoned" in _mismatch(torch.tensor([nan, nan]), torch.tensor([nan, 1.0]), 1e-3)
    assert "NaN in a direct call" in _mismatch(torch.tensor([2.0, 1.0]), torch.tensor([nan, 1.0]), 1e-3)
    assert "infinities" in _mismatch(torch.tensor([inf, 1.0]), torch.tensor([-inf, 1.0]), 1e-3)
    assert "relative error" in _mismatch(torch.tensor([nan, 2.0]), torch.tensor([nan, 1.0]), 1e-3)


def test_no_verify_skips_the_replay_check():
    backend = FakeBackend()
    op = add_op(backend)
    timing, _ = time_point(CudaGraphTimer(), backend, op, cudagraph_no_verify=True)
    assert timing.extra["cudagraph"]["verified"] == "off"


# ----------------------------------------------------------------------------- classification
def test_classify_reads_the_root_cause_of_torchs_chained_capture_errors():
    backend = FakeBackend()
    graph = FakeGraph()
    try:
        with backend.graph_capture(graph):
            DeviceScalar(backend).item()
    except RuntimeError as exc:
        failure = classify(exc)
    # the outer error (raised by the capture's exit) is generic; the root names .item()
    assert failure.reason == "host_sync" and "item()" in failure.detail


def test_classify_generic_messages_and_marker_format():
    assert classify(RuntimeError("CUDA error: operation not permitted when stream is capturing")).reason == "host_sync"
    assert classify(RuntimeError(INVALIDATED)).reason == "capture_invalidated"
    assert classify(RuntimeError(STUCK)).reason == "context_poisoned"
    assert classify(KeyError("x")).reason == "other"
    assert isinstance(classify(CaptureFailure("host_sync")), CaptureFailure)
    assert marker_line("softmax", "softmax/1024x1024/float16", "host_sync") == \
        "BENCHMARK_DIRECT_NO_CUDAGRAPH op=softmax point=softmax/1024x1024/float16 reason=host_sync"


# ----------------------------------------------------------------------------- cpu backend
def test_on_the_cpu_backend_time_fn_returns_none_so_cores_timer_is_used(capsys):
    from zlf.plugins import Hooks, Selection, build_plugin_manager

    timer = CudaGraphTimer()
    pm, infos = build_plugin_manager(Selection(only=("graphtimer",)), extra_plugins=[("graphtimer", timer)])
    hooks = Hooks(pm, infos)
    backend = CpuBackend()
    timing = hooks.time_fn(lambda: sum(range(100)), Point("x", (1,), "float32"), backend,
                           options(rep_ms=2.0), op=None, inputs=())
    assert timing.timer == "host_wall"  # core's default answered
    assert timer.time_fn(fn=lambda: None, point=Point("x", (1,), "float32"), backend=backend, options=options(),
                         op=None, inputs=(), kernel_timer=None) is None
    assert "extension cudagraph skipped" in capsys.readouterr().err


def test_zlf_run_on_cpu_skips_the_extension_with_one_clear_line(zlf_cli, tmp_path):
    proc = zlf_cli("run", "--ext", "cudagraph", "add", "--backend", "cpu", check_rc=0)
    run_dir = run_dir_from(proc.stdout, tmp_path)
    log = (run_dir / "run.log").read_text()
    skipped = [l for l in log.splitlines() if "extension cudagraph skipped" in l]
    assert len(skipped) == 1 and "backend 'cpu'" in skipped[0]
    assert "extension cudagraph skipped" in proc.stderr
    assert MARKER not in log
    records = read_records(run_dir)
    assert records and all(r["timer"] == "host_wall" and not r["markers"] for r in records)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["cudagraph"]["active"] is False and meta["cudagraph"]["l2"] == "warm"
    assert any(e["name"] == "cudagraph" for e in meta["extensions"])


def test_the_child_process_probe_rebuilds_the_point_and_answers(tmp_path, monkeypatch):
    from zlf_timing_cudagraph.probe import probe_in_child

    monkeypatch.chdir(tmp_path)
    from zlf.config import ExtensionOptions, RunConfig

    config = RunConfig(ops=["add"], backend="cpu", ext=["cudagraph"],
                       options=ExtensionOptions({"cudagraph": {"cudagraph_probe": "subprocess"}}))
    failure = probe_in_child(config, Point("add", (1024,), "float32"), timeout=300)
    assert isinstance(failure, CaptureFailure)
    assert failure.reason == "unsupported" and "host clock" in failure.detail


# ----------------------------------------------------------------------------- GPU
def _cuda():
    from zlf.backends import CudaBackend

    backend = CudaBackend(0)
    backend.setup()
    return backend


def _gpu_add_op(name, body=None):
    from zlf.ops.builtin import add

    def fn(x, y, out):
        add(x, y, out)
        if body is not None:
            body(x, y, out)

    def make(shape, dtype, device):
        x, y = torch.randn(shape, device=device), torch.randn(shape, device=device)
        return (x, y, torch.empty_like(x))

    return zlf.Op(name=name, fn=fn, make_inputs=make, shapes=[(1 << 20,)], reference=lambda x, y, out: x + y,
                  outputs=(2,))


def _gpu_time(timer, backend, op, kernel_timer=None, **opts):
    point = Point(op.name, (1 << 20,), "float32")
    inputs = op.make_inputs(point.shape, point.dtype, backend.device)
    op.fn(*inputs)
    backend.synchronize()
    o = options(warmup_ms=10.0, rep_ms=40.0, cudagraph_replay_ms=2.0, cudagraph_max_calls=10_000, **opts)
    return timer.time_fn(fn=lambda: op.fn(*inputs), point=point, backend=backend, options=o, op=op,
                         inputs=inputs, kernel_timer=kernel_timer), point


@pytest.mark.gpu
def test_gpu_normal_point_is_timed_by_graph_replay_and_beats_direct_timing():
    backend = _cuda()
    timing, _ = _gpu_time(CudaGraphTimer(), backend, _gpu_add_op("add"))
    assert timing.timer == "cudagraph" and not timing.markers
    assert timing.extra["cudagraph"]["verified"] == "outputs"
    assert timing.calls_per_sample > 100  # a ~2 µs kernel: many calls per replay
    assert 0.0005 < timing.value_ms < 0.02


@pytest.mark.gpu
@pytest.mark.parametrize("body, reason", [
    (lambda x, y, out: out[0].item(), "host_sync"),
    (lambda x, y, out: torch.cuda.synchronize(), "host_sync"),
    (lambda x, y, out: torch.nonzero(out), "host_sync"),
    (lambda x, y, out: out[:4].cpu(), "device_to_host_copy"),
])
def test_gpu_failed_capture_falls_back_marked_and_the_next_point_still_captures(body, reason):
    backend = _cuda()
    timer = CudaGraphTimer()
    bad, point = _gpu_time(timer, backend, _gpu_add_op("bad", body))
    assert bad.fallback_reason == reason, bad.extra
    assert bad.markers == (f"BENCHMARK_DIRECT_NO_CUDAGRAPH op=bad point={point.id} reason={reason} timer=cuda_event",)
    assert bad.timer == "cuda_event"
    backend.free_memory()  # would raise "captures_underway.empty() INTERNAL ASSERT" if the allocator were stuck
    assert timer.poisoned is None
    for _ in range(2):  # two further captures: neither the stream nor the allocator is left broken
        good, _ = _gpu_time(timer, backend, _gpu_add_op("good"))
        assert good.timer == "cudagraph" and good.fallback_reason is None


@pytest.mark.gpu
def test_gpu_unjoined_side_stream_work_is_marked():
    backend = _cuda()
    side = torch.cuda.Stream()
    from zlf.ops.builtin import add

    def fn(x, y, out):
        with torch.cuda.stream(side):  # never waits on nor joins the capturing stream
            add(x, y, out)

    op = zlf.Op(name="side", fn=fn, make_inputs=_gpu_add_op("x").make_inputs, shapes=[(1 << 20,)],
                reference=lambda x, y, out: x + y, outputs=(2,))
    timing, point = _gpu_time(CudaGraphTimer(), backend, op)
    assert timing.fallback_reason == "unjoined_stream_work", timing.extra
    assert timing.markers == (f"BENCHMARK_DIRECT_NO_CUDAGRAPH op=side point={point.id} reason=unjoined_stream_work "
                              "timer=host_wall_sync",)


@pytest.mark.gpu
def test_gpu_a_view_op_under_cupti_is_no_device_work():
    """A view launches nothing: with CUPTI beside the graph timer, the fallback says so (and the
    host clock is all it has), while an op whose kernel runs on a side stream is CUPTI-timed."""
    pytest.importorskip("zlf_timing_cupti")
    from zlf_timing_cupti.sources import make_source
    from zlf_timing_cupti.timer import CuptiTimer

    source, why = make_source("auto")
    if source is None:
        pytest.skip(f"no CUPTI here: {why}")
    backend = _cuda()

    def make(shape, dtype, device):
        return (torch.randn(shape, device=device),)

    view = zlf.Op(name="alias", fn=lambda x: x.view(x.shape), make_inputs=make, shapes=[(1 << 20,)],
                  reference=lambda x: x.clone())
    timing, point = _gpu_time(CudaGraphTimer(), backend, view, kernel_timer=CuptiTimer(source))
    assert timing.fallback_reason == "no_device_work", timing.extra
    assert timing.markers == (f"{MARKER} op=alias point={point.id} reason=no_device_work timer=host_wall_sync",)
    side = torch.cuda.Stream()
    from zlf.ops.builtin import add

    def fn(x, y, out):
        with torch.cuda.stream(side):
            add(x, y, out)

    op = zlf.Op(name="side", fn=fn, make_inputs=_gpu_add_op("x").make_inputs, shapes=[(1 << 20,)],
                reference=lambda x, y, out: x + y, outputs=(2,))
    timing, _ = _gpu_time(CudaGraphTimer(), backend, op, kernel_timer=CuptiTimer(source))
    assert (timing.fallback_reason, timing.timer) == ("unjoined_stream_work", "cupti"), timing.extra


@pytest.mark.gpu
def test_gpu_forked_stream_not_joined_is_marked():
    backend = _cuda()
    side = torch.cuda.Stream()
    from zlf.ops.builtin import add

    def fn(x, y, out):
        side.wait_stream(torch.cuda.current_stream())  # forked into the capture ...
        with torch.cuda.stream(side):
            add(x, y, out)  # ... and never joined back

    op = zlf.Op(name="fork", fn=fn, make_inputs=_gpu_add_op("x").make_inputs, shapes=[(1 << 20,)],
                reference=lambda x, y, out: x + y, outputs=(2,))
    timer = CudaGraphTimer()
    timing, _ = _gpu_time(timer, backend, op)
    assert timing.fallback_reason == "unjoined_stream_work", timing.extra
    good, _ = _gpu_time(timer, backend, _gpu_add_op("good"))
    assert good.timer == "cudagraph"


@pytest.mark.gpu
def test_gpu_flush_mode_reports_flush_and_a_slower_time_than_warm():
    backend = _cuda()
    warm, _ = _gpu_time(CudaGraphTimer(), backend, _gpu_add_op("add"))
    cold, _ = _gpu_time(CudaGraphTimer(), backend, _gpu_add_op("add"), flush_l2=True)
    assert cold.l2 == "flush" and warm.l2 == "warm"
    assert cold.value_ms > warm.value_ms * 0.9


@pytest.mark.gpu
@pytest.mark.parametrize("probe", ["inline", "subprocess"])
def test_gpu_zlf_run_marks_the_item_point_next_to_normal_points(zlf_cli, tmp_path, probe):
    ops_file = REPO / "benchmarks" / "cudagraph_ops.py"
    proc = zlf_cli("run", "--ext", "cudagraph", "--cudagraph-probe", probe, str(ops_file), "--rep-ms", "30")
    run_dir = run_dir_from(proc.stdout, tmp_path)
    records = {r["op"]: r for r in read_records(run_dir)}
    log = (run_dir / "run.log").read_text()
    assert records["add_before"]["timer"] == records["add_after"]["timer"] == "cudagraph"
    item = records["add_then_item"]
    assert item["fallback_reason"] == "host_sync" and item["timer"] == "cuda_event"
    line = f"BENCHMARK_DIRECT_NO_CUDAGRAPH op=add_then_item point={item['point']} reason=host_sync timer=cuda_event"
    assert item["markers"] == [line] and line in log.splitlines()
    assert records["add_on_side_stream"]["fallback_reason"] == "unjoined_stream_work"


# ----------------------------------------------------------------------------- graph timer fallback
class FakeKernelTimer:
    name = "cupti"

    def __init__(self):
        self.calls = 0

    def time(self, fn, backend, *, warmup_ms, rep_ms, flush_l2):
        from zlf.records import Timing

        self.calls += 1
        fn()
        return Timing.from_samples([0.002] * 5, timer=self.name, l2="flush" if flush_l2 else "warm", wall_ms=0.03)


@pytest.mark.parametrize("unjoined", [False, True])
def test_a_point_the_graph_cannot_capture_is_timed_by_the_kernel_timer_and_marked(unjoined):
    backend = FakeBackend()
    kernel = FakeKernelTimer()
    if unjoined:
        def side(backend, x, y, out):
            torch.add(x, y, out=out)  # eager: a stream the capture never joined

        op = add_op(backend, name="side")
        op = zlf.Op(name="side", fn=lambda x, y, out: side(backend, x, y, out), make_inputs=op.make_inputs,
                    shapes=[(256,)], reference=op.reference, outputs=(2,))
        reason = "unjoined_stream_work"
    else:
        op, reason = add_op(backend, _item, name="bad"), "host_sync"
    timing, point = time_point(CudaGraphTimer(), backend, op, kernel_timer=kernel)
    assert kernel.calls == 1
    assert timing.timer == "cupti" and timing.fallback_reason == reason  # never host_wall_sync with CUPTI
    assert timing.markers == (f"BENCHMARK_DIRECT_NO_CUDAGRAPH op={op.name} point={point.id} reason={reason} timer=cupti",)
    assert timing.extra["cudagraph"]["fallback_timer"] == "cupti" and timing.wall_ms == 0.03


class SilentKernelTimer(FakeKernelTimer):
    """A kernel-activity timer that saw nothing on the device (what CUPTI returns for a view)."""

    def time(self, fn, backend, *, warmup_ms, rep_ms, flush_l2):
        self.calls += 1
        fn()
        return None


def test_an_op_that_launches_nothing_is_no_device_work_not_unjoined_stream_work():
    """FlagGems' alias and unfold return views: the graph is empty, the replay writes nothing, and
    the H200 sweep called them ``unjoined_stream_work``. With a kernel-activity timer that saw no
    device work in any call, the reason says what happened."""
    backend = FakeBackend()

    def make(shape, dtype, device):
        return (torch.randn(shape),)

    op = zlf.Op(name="alias", fn=lambda x: x.view(x.shape), make_inputs=make, shapes=[(256,)],
                reference=lambda x: x.clone())
    timing, point = time_point(CudaGraphTimer(), backend, op, kernel_timer=SilentKernelTimer())
    assert timing.fallback_reason == "no_device_work", timing.extra["cudagraph"]
    assert timing.markers == (f"{MARKER} op=alias point={point.id} reason=no_device_work timer=host_wall_sync",)
    assert "cupti saw no kernel" in timing.extra["cudagraph"]["detail"]
    # without a kernel-activity timer the two cannot be told apart: the reason stays as it was
    timing, _ = time_point(CudaGraphTimer(), backend, op)
    assert timing.fallback_reason == "unjoined_stream_work"


def test_a_capturable_point_stays_on_the_graph_timer_with_a_kernel_timer_offered():
    backend = FakeBackend()
    kernel = FakeKernelTimer()
    timing, _ = time_point(CudaGraphTimer(), backend, add_op(backend), kernel_timer=kernel)
    assert timing.timer == "cudagraph" and kernel.calls == 0


def test_an_expanded_view_returned_by_the_op_is_compared_as_it_is_never_written():
    """FlagGems' expand_as returns an expanded view of its input (stride 0): filling it for the
    replay check raised "more than one element of the written-to tensor refers to a single
    memory location" and failed the point."""
    backend = FakeBackend()

    def make(shape, dtype, device):
        return (torch.randn(1), torch.randn(shape))

    op = zlf.Op(name="expand_as", fn=lambda x, other: x.expand_as(other), make_inputs=make,
                shapes=[(256,)], reference=lambda x, other: x.expand_as(other))
    timing, _ = time_point(CudaGraphTimer(), backend, op)
    assert timing.fallback_reason is None, timing.extra
    assert timing.timer == "cudagraph" and timing.extra["cudagraph"]["verified"] == "returned"


def test_self_overlapping_outputs_are_never_poisoned():
    from zlf.ops import poison_tensors, self_overlapping

    base = torch.randn(1, 4)
    view, plain = base.expand(3, 4), torch.randn(3, 4)
    assert self_overlapping(view) and not self_overlapping(plain)
    poison_tensors([view, plain])
    assert torch.isfinite(base).all() and torch.isnan(plain).all()
