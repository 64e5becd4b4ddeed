"""``zlf task``'s timer: one kernel-activity timer for every candidate language when one is offered,
else the active timer with one line saying why; ``--timer`` wins. Two task runs made with the same
default pair on every case in ``zlf compare``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from zlf import hookimpl
from zlf.config import RunConfig, TimingBudget
from zlf.records import Point, Timing
from zlf.session import Session
from zlf.testing import FakeBackendPlugin, fake_backend_class, read_records, run_dir_from

pytest.importorskip("zlf_taskpkg")
from zlf_taskpkg import timers  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PKG = REPO / "tests" / "data" / "taskpkg_vecadd"
CANDIDATES = PKG / "candidates"

HostBackend = fake_backend_class("fakehost")


class DeviceBackend(fake_backend_class("fakedev")):
    """A device-like fake: device events, a graph timer could run on it."""

    host_timing = False
    timer_name = "fake_event"


class FakeKernelTimer:
    name = "kt_timer"

    def time(self, fn, backend, *, warmup_ms, rep_ms, flush_l2):
        fn()
        return Timing.from_samples([0.5, 0.5, 0.5], timer=self.name, l2="warm")


class KernelTimerPlugin:
    """A kernel-activity timer extension; ``available=False`` plays one whose tracer is missing."""

    def __init__(self, available: bool):
        self.available = available

    @hookimpl
    def kernel_timer(self, backend, options):
        if self.available:
            return FakeKernelTimer()
        from zlf.console import warn

        warn("extension kt: no kernel-activity timer (no tracer library on this machine); core's timer decides")
        return None


class GraphPlugin:
    """A graph ``time_fn``: records that it ran."""

    def __init__(self):
        self.calls = 0

    @hookimpl
    def time_fn(self, fn, point, backend, options, op, inputs, kernel_timer):
        self.calls += 1
        fn()
        return Timing.from_samples([1.0, 1.0, 1.0], timer="gt_graph", l2="warm")


def session_for(backend_cls, kt=None, graph=None, timer=None):
    plugins = [("fakebackend", FakeBackendPlugin(backend_cls))]
    if kt is not None:
        plugins.append(("kt", kt))
    if graph is not None:
        plugins.append(("gt", graph))
    config = RunConfig(command="task", backend=backend_cls.name, ext=[name for name, _ in plugins],
                       timing=TimingBudget(timer=timer))
    session = Session.create(config, extra_plugins=plugins)
    return session, session.choose_backend(backend_cls.name), plugins


def test_kernel_timer_times_every_call_in_the_workers(tmp_path, capsys):
    graph = GraphPlugin()
    session, backend, plugins = session_for(DeviceBackend, KernelTimerPlugin(True), graph)
    choice = timers.apply(session, backend)
    assert (choice.timer, choice.provider, choice.kernel_timer) == ("kt_timer", "kt", True)
    assert capsys.readouterr().err == "" and "\n" not in choice.why  # said by the judge, once
    assert "every candidate and the baseline" in choice.why
    # what a worker opens from the written configuration times with the kernel timer, not the graph
    config = RunConfig.read(session.config.write(tmp_path / "config.json"))
    assert config.timing.timer == "kt"
    worker = Session.open(config, extra_plugins=plugins)
    worker_backend = worker.choose_backend(DeviceBackend.name)
    timing = worker.hooks.time_fn(lambda: None, Point("op", (1,), "float32"), worker_backend, config.timing)
    assert timing.timer == "kt_timer" and graph.calls == 0


def test_unusable_kernel_timer_keeps_the_graph_timer_and_says_why(capsys):
    session, backend, _ = session_for(DeviceBackend, KernelTimerPlugin(False), GraphPlugin())
    choice = timers.apply(session, backend)
    assert (choice.timer, choice.provider, choice.kernel_timer) == ("gt", None, False)
    assert session.config.timing.timer is None
    err, why = capsys.readouterr().err, choice.why
    assert err == "" and "\n" not in why  # the extension's own warning went into the one line
    assert why.startswith("timer: gt where it can time a call, else its marked fallback")
    assert "no tracer library on this machine" in why


def test_no_kernel_timer_installed_names_the_event_timer(capsys):
    session, backend, _ = session_for(DeviceBackend)
    choice = timers.apply(session, backend)
    assert (choice.timer, choice.provider) == ("fake_event", None)
    assert "\n" not in choice.why and "core's event timer" in choice.why
    assert "no kernel-activity timer installed" in choice.why


def test_host_backend_says_it_times_on_the_host(capsys):
    session, backend, _ = session_for(HostBackend, KernelTimerPlugin(False))
    choice = timers.apply(session, backend)
    assert choice.timer == "host_wall" and "times on the host" in choice.why and "no tracer library" in choice.why
    assert capsys.readouterr().err == ""


def test_explicit_timer_wins(capsys):
    session, backend, _ = session_for(DeviceBackend, KernelTimerPlugin(True), GraphPlugin(), timer="gt")
    choice = timers.apply(session, backend)
    assert (choice.timer, choice.provider) == ("gt", None) and "--timer" in choice.why
    assert session.config.timing.timer == "gt"


@pytest.mark.slow
def test_two_task_runs_with_the_default_timer_pair_on_every_case(zlf_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    dirs = []
    for cand in ("correct.py", "correct_triton.py"):
        proc = zlf_cli("task", PKG, "--candidate", CANDIDATES / cand, "--ext", "task", "--reuse-worker",
                       "--out", "runs", "--name", cand.split(".")[0], check_rc=0)
        assert proc.stderr.startswith("timer: host_wall")  # the one line, before any case
        run_dir = run_dir_from(proc.stdout, tmp_path)
        meta = json.loads((run_dir / "meta.json").read_text())
        assert meta["task"]["timer"]["timer"] == "host_wall" and meta["task"]["timer"]["why"] in proc.stderr
        assert {r["timer"] for r in read_records(run_dir)} == {"host_wall"}
        dirs.append(run_dir)
    proc = zlf_cli("compare", *dirs, "--format", "json")
    doc = json.loads(proc.stdout)
    assert doc["summary"]["compared"] == 3 and doc["summary"]["not_compared"] == {}
    assert [r["status"] for r in doc["rows"]] == ["ok"] * 3 and all(r["verdict"] for r in doc["rows"])


# ----------------------------------------------------------------------------- CUDA C++ under a graph timer
class StubRun:
    """What :func:`legacy_stream.time_candidate` uses of a Run."""

    def __init__(self, session, backend):
        self.hooks, self.backend, self.marks = session.hooks, backend, []

    def mark(self, line):
        self.marks.append(line)

    def time_point(self, fn, point, op=None, inputs=None, budget=None):
        return self.hooks.time_fn(fn, point, self.backend, budget, op=op, inputs=inputs)


def _time(session, backend, kind):
    from zlf_taskpkg.legacy_stream import time_candidate

    run = StubRun(session, backend)
    point = Point("paged", (4, 8), "bfloat16", "case1")
    budget = session.config.timing.with_changes(warmup_ms=0.1, rep_ms=0.5)
    return run, time_candidate(run, kind, lambda: None, point, None, (), budget)


def test_cuda_candidate_under_a_graph_timer_without_kernel_timer_is_event_timed_and_marked():
    graph = GraphPlugin()
    session, backend, _ = session_for(DeviceBackend, KernelTimerPlugin(False), graph)
    run, timing = _time(session, backend, "cuda")
    assert timing.timer == "fake_event" and graph.calls == 0  # no capture attempted, no host_wall_sync
    assert run.marks == ["BENCHMARK_DIRECT_NO_CUDAGRAPH op=paged point=paged/4x8/bfloat16/case1 "
                         "reason=illegal_stream_use timer=fake_event"] == list(timing.markers)
    assert timing.extra["task_timer"]["fallback"] == "illegal_stream_use"


@pytest.mark.parametrize("kind, kernel, timer, expected", [
    ("python", False, None, "gt_graph"),    # a Python candidate: the graph timer, as before
    ("cuda", True, "kt", "kt_timer"),       # a kernel-activity timer sees the legacy stream
    ("cuda", False, "core", "fake_event"),  # --timer core: core's own timer, unmarked
])
def test_other_candidates_keep_the_run_timer(kind, kernel, timer, expected):
    session, backend, _ = session_for(DeviceBackend, KernelTimerPlugin(kernel), GraphPlugin(), timer=timer)
    run, timing = _time(session, backend, kind)
    assert timing.timer == expected and run.marks == []


@pytest.mark.gpu
def test_triton_and_cuda_candidates_pair_under_the_default_timer_on_gpu(zlf_cli, tmp_path):
    """On a GPU with the timer extensions: one timer for both languages, every case compared."""
    from zlf.testing import installed_extensions
    from zlf_taskpkg.candidate import find_nvcc

    if not {"cudagraph", "cupti"} <= set(installed_extensions()) or find_nvcc() is None:
        pytest.skip("needs the cudagraph and cupti extensions and nvcc")
    paged = REPO / "examples" / "tasks" / "paged_kv_decode"
    dirs, timers_seen = [], set()
    for cand in ("better_triton.py", "paged_decode.cu"):
        proc = zlf_cli("task", paged, "--candidate", paged / "candidates" / cand, "--backend", "cuda", "--cases", "1,12",
                       "--reuse-worker", "--ext", "task,cudagraph,cupti", "--out", "runs", check_rc=0)
        assert any(l.startswith("timer: cupti for every candidate and the baseline")
                   for l in proc.stderr.splitlines()), proc.stderr[:500]
        run_dir = run_dir_from(proc.stdout, tmp_path)
        timers_seen |= {r["timer"] for r in read_records(run_dir)}
        dirs.append(run_dir)
    assert timers_seen == {"cupti"}
    doc = json.loads(zlf_cli("compare", *dirs, "--format", "json").stdout)
    assert doc["summary"]["compared"] == 2 and all(r["verdict"] for r in doc["rows"])
