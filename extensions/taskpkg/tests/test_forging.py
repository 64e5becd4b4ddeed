"""zlf task: a candidate that forges its verdict from inside its own process is not Accepted.

Each attack is run twice: as the attack (Wrong Answer or Runtime Error) and as its honest twin
(``FORGE_HONEST=1``: the same kind of thing, then the answer computed) -- Accepted. Every attack
runs with the CPU's shared memory; those that go through the shared buffers run with staged
sharing too (a device without IPC: the worker copies the checker's host buffers to its own
tensors and back; forced on CPU with ``$ZLF_TASK_SHARING``).
"""
from __future__ import annotations

from pathlib import Path

import json

import pytest

zlf_taskpkg = pytest.importorskip("zlf_taskpkg")

from task_fixtures import VECADD as PKG, judge_task  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
FORGING = Path(__file__).resolve().parent / "data" / "forging"


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("ZLF_TASK_SHARING", raising=False)


@pytest.fixture(params=["shm", "staged"])
def sharing(request, monkeypatch):
    """How the checker's buffers reach the candidate: CPU shared memory, or staged (forced)."""
    if request.param == "staged":
        monkeypatch.setenv("ZLF_TASK_SHARING", "staged")
    return request.param


def sharing_of(run_dir) -> str:
    meta = json.loads((run_dir / "meta.json").read_text())
    log = (run_dir / "run.log").read_text()
    assert f"sharing: {meta['task']['sharing']} (" in log
    return meta["task"]["sharing"]


def judge(tmp_path, capsys, candidate, *extra):
    """``zlf task`` of ``candidate`` (a file of data/forging/, or any path) on the vecadd package."""
    j = judge_task(tmp_path, capsys, PKG, FORGING / candidate, *extra)
    return j.rc, j.records, j.run_dir


ATTACKS = [
    # file, what the attack's case must say, whether it goes through the shared buffers
    ("patch_check.py", "elements differ", False),           # check patched in the candidate's process: not the checker's
    ("frame_read.py", "was not written", False),            # no baseline answer in any frame of the candidate's process
    ("copy_baseline.py", "was not written", True),          # nor among its objects
    ("memo_pointer.py", "stale result", True),              # the pointers it remembered hold another input set now
    ("early_return.py", "was not written", True),           # the later calls leave the poison
    ("nonce_forge.py", "forged verdict rejected", False),   # a well-formed "Accepted" from its process is no verdict
]
#: every attack with shared memory; with staged sharing, the attacks that reach the buffers (the
#: others never touch them: running them staged too would judge the same thing twice)
CASES = [pytest.param(mode, f, m, id=f"{mode}-{f}") for mode in ("shm", "staged")
         for f, m, buffers in ATTACKS if mode == "shm" or buffers]


@pytest.mark.slow
@pytest.mark.parametrize("sharing, candidate, message", CASES, indirect=["sharing"])
def test_forging_attempt_is_not_accepted(tmp_path, capsys, monkeypatch, sharing, candidate, message):
    monkeypatch.delenv("FORGE_HONEST", raising=False)
    rc, records, run_dir = judge(tmp_path, capsys, candidate, "--cases", "2")
    assert sharing_of(run_dir) == sharing
    verdict = records[0]["extra"]["verdict"]
    assert rc == 1 and verdict in ("Wrong Answer", "Runtime Error"), records[0]
    assert message in records[0]["extra"]["judge_output"]
    assert records[0]["median_ms"] is None and records[0]["extra"]["speedup"] is None


@pytest.mark.slow
@pytest.mark.parametrize("sharing, candidate, message", CASES, indirect=["sharing"])
def test_honest_twin_is_accepted(tmp_path, capsys, monkeypatch, sharing, candidate, message):
    monkeypatch.setenv("FORGE_HONEST", "1")
    rc, records, run_dir = judge(tmp_path, capsys, candidate, "--cases", "2")
    assert sharing_of(run_dir) == sharing
    assert rc == 0 and records[0]["extra"]["verdict"] == "Accepted", records[0]["extra"]["judge_output"]
    assert records[0]["max_rel_err"] == 0.0 and records[0]["median_ms"] > 0
    assert records[0]["extra"]["input_sets"] == 3 and records[0]["extra"]["distinct_input_sets"] == 7


@pytest.mark.slow
def test_stale_result_survives_worker_reuse(tmp_path, capsys, monkeypatch, sharing):
    """A reused worker keeps its memo across cases: still stale on the second case, and the
    honest twin stays Accepted on both."""
    monkeypatch.delenv("FORGE_HONEST", raising=False)
    rc, records, run_dir = judge(tmp_path, capsys, "memo_pointer.py", "--cases", "1-2", "--reuse-worker")
    assert sharing_of(run_dir) == sharing
    assert [r["extra"]["verdict"] for r in records] == ["Wrong Answer", "Wrong Answer"], records
    assert all("stale result" in r["extra"]["judge_output"] for r in records)
    assert len(list((run_dir / "task").glob("worker-case*.log"))) == 1  # Wrong Answer keeps the worker
    monkeypatch.setenv("FORGE_HONEST", "1")
    rc, records, run_dir = judge(tmp_path, capsys, "memo_pointer.py", "--cases", "1-2", "--reuse-worker")
    assert rc == 0 and [r["extra"]["verdict"] for r in records] == ["Accepted", "Accepted"]


def test_graph_replay_keeps_the_rotation_in_call_order():
    """On the cudagraph tests' fake device (capture records Python kernels): each slot ends with
    its own result, and the last kernel executed is the last call captured."""
    import importlib.util

    import torch

    pytest.importorskip("zlf_timing_cudagraph")
    from zlf.ops import Op
    from zlf_taskpkg.worker import Rotation
    from zlf_timing_cudagraph.graph_timer import GraphSettings, time_graph

    spec = importlib.util.spec_from_file_location(
        "cudagraph_fakes", REPO / "extensions" / "timing_cudagraph" / "tests" / "test_cudagraph.py")
    fakes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fakes)
    backend = fakes.FakeBackend()
    k = 3
    xs = [torch.full((8,), float(j + 1)) for j in range(k)]
    outs = [torch.full((8,), float("nan")) for _ in range(k)]
    last = torch.full((1,), -1.0)

    def make(j):
        def kernel():
            torch.mul(xs[j], 2.0, out=outs[j])
            last.fill_(float(j))
        return lambda: backend.launch(kernel)

    rotation = Rotation([make(j) for j in range(k)], [(xs[j], outs[j]) for j in range(k)],
                        capturing=lambda: backend.capturing is not None)
    op = Op(name="rotation", fn=lambda *a: None, make_inputs=lambda *a: None, shapes=[(8,)], outputs=(1,))
    settings = GraphSettings(warmup_ms=1.0, rep_ms=5.0, replay_ms=0.5, max_calls=50)
    timing = time_graph(rotation, backend, settings, op=op, inputs=rotation.view, dtype="float32")
    assert timing.extra["cudagraph"]["verified"] == "outputs"
    assert timing.extra["cudagraph"]["calls_per_graph"] >= k and rotation.captured == set(range(k))
    assert rotation.count > timing.extra["cudagraph"]["calls_per_graph"]  # eager calls too, before and after
    assert int(last.item()) == rotation.last_captured  # the timed replays ran last, in capture order
    for j in range(k):
        assert torch.equal(outs[j], xs[j] * 2), j


def test_the_checker_never_loads_candidate_code():
    """The checker's module imports neither the candidate loader nor the worker."""
    import subprocess
    import sys

    code = ("import sys, zlf_taskpkg.checker; "
            "print('zlf_taskpkg.candidate' in sys.modules, 'zlf_taskpkg.worker' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# ----------------------------------------------------------------------------- staged sharing
VECADD = REPO / "tests" / "data" / "taskpkg_vecadd" / "candidates"


def test_sharing_mode_by_device_type(monkeypatch):
    from zlf_taskpkg.shared import sharing_mode

    monkeypatch.delenv("ZLF_TASK_SHARING", raising=False)
    assert [sharing_mode(d) for d in ("cuda:1", "cuda", "cpu")] == ["ipc", "ipc", "shm"]
    assert [sharing_mode(d) for d in ("musa:0", "privateuseone:0", "xpu")] == ["staged"] * 3
    monkeypatch.setenv("ZLF_TASK_SHARING", "staged")
    assert sharing_mode("cpu") == sharing_mode("cuda:0") == "staged"


def test_a_device_without_ipc_gets_staging_buffers(monkeypatch):
    """A vendor backend's device (``musa``: no CUDA IPC) is staged, not refused: the checker's
    buffers are host files; the worker's tensors are its own (here on the CPU, standing in for the
    device), filled by upload and read back by download -- canaries and inputs included."""
    import torch

    from zlf_taskpkg.shared import SharedArena, Staging, open_shared

    monkeypatch.delenv("ZLF_TASK_SHARING", raising=False)
    arena = SharedArena("musa:0", "test")  # the judge refused this device type before
    try:
        assert arena.mode == "staged" and arena.pool is None
        x = arena.copy_of(torch.arange(6, dtype=torch.float32).reshape(2, 3).t())
        guard = arena.empty((10,), (1,), torch.float32)
        guard.fill_(-1.0)
        out = guard[2:8].view(2, 3)
        staging = Staging("cpu")
        dx, dout = open_shared(arena.describe([x, out, 7]), staging)[:2]
        assert open_shared(arena.describe([x, out, 7]), Staging("cpu"))[2] == 7
        assert dx.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
        assert (dx.stride(), dout.storage_offset()) == (x.stride(), out.storage_offset())
        staging.upload()
        assert torch.equal(dx, x) and bool((dout == -1).all())
        dout.copy_(dx.t() * 2)
        dout.as_strided((1,), (1,), 0).fill_(0.0)  # a write before the output: a canary hit
        assert bool((out == -1).all())  # nothing reaches the checker before download
        staging.download()
        assert torch.equal(out, x.t() * 2) and guard[0].item() == 0.0 and guard[1].item() == -1.0
    finally:
        arena.close()


@pytest.mark.slow
def test_staged_write_outside_output_retires_a_reused_worker(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ZLF_TASK_SHARING", "staged")
    rc, records, run_dir = judge(tmp_path, capsys, VECADD / "overflow.py", "--cases", "1-2", "--reuse-worker")
    assert rc == 1 and sharing_of(run_dir) == "staged"
    assert [r["extra"]["verdict"] for r in records] == ["Runtime Error", "Runtime Error"]
    assert "wrote outside its output" in records[0]["extra"]["judge_output"]
    assert len(list((run_dir / "task").glob("worker-case*.log"))) == 2  # a fresh process after the error


@pytest.mark.slow
def test_staged_hang_is_time_limit_exceeded(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ZLF_TASK_SHARING", "staged")
    rc, records, run_dir = judge(tmp_path, capsys, VECADD / "hang.py", "--cases", "1", "--time-limit", "2")
    assert rc == 1 and sharing_of(run_dir) == "staged"
    assert [r["extra"]["verdict"] for r in records] == ["Time Limit Exceeded"]
    assert "time limit of 2 s" in records[0]["extra"]["judge_output"]


@pytest.mark.slow
def test_staged_reused_worker_accepts_and_refreshes_inputs(tmp_path, capsys, monkeypatch):
    """Staged with --reuse-worker: one worker for every case, each Accepted after the rotation
    over fresh input sets (a stale copy-in would be a stale result)."""
    monkeypatch.setenv("ZLF_TASK_SHARING", "staged")
    rc, records, run_dir = judge(tmp_path, capsys, VECADD / "correct.py", "--cases", "1-3", "--reuse-worker")
    assert rc == 0 and sharing_of(run_dir) == "staged"
    assert [r["extra"]["verdict"] for r in records] == ["Accepted"] * 3
    assert all(r["max_rel_err"] == 0.0 and r["extra"]["distinct_input_sets"] == 7 for r in records)
    assert len(list((run_dir / "task").glob("worker-case*.log"))) == 1
