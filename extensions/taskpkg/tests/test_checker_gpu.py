"""zlf task on a GPU: the checker's buffers cross to the candidate's process by CUDA IPC (or
staged, forced), and the graph timer replays the rotation over input sets in the order the calls
were made.

Run on a CUDA machine: ``python -m pytest -q -m gpu extensions/taskpkg/tests/test_checker_gpu.py``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from zlf.testing import read_records, run_dir_from

zlf_taskpkg = pytest.importorskip("zlf_taskpkg")

REPO = Path(__file__).resolve().parents[3]
PAGED_KV = REPO / "examples" / "tasks" / "paged_kv_decode"
FORGING = Path(__file__).resolve().parent / "data" / "forging"

pytestmark = pytest.mark.gpu


def test_graph_timer_replays_the_rotation_in_call_order():
    """Every call writes its slot's output and the slot number into ``last``: after timing, the
    last call executed is the last call captured, and every slot holds its own result."""
    import torch

    from zlf.backends.cuda import CudaBackend
    from zlf.ops import Op
    from zlf_taskpkg.worker import Rotation
    from zlf_timing_cudagraph.graph_timer import GraphSettings, time_graph

    backend = CudaBackend(0)
    k = 3
    xs = [torch.full((4096,), float(j + 1), device="cuda") for j in range(k)]
    outs = [torch.full((4096,), float("nan"), device="cuda") for _ in range(k)]
    last = torch.full((1,), -1.0, device="cuda")

    def make(j):
        def call():
            torch.mul(xs[j], 2.0, out=outs[j])
            last.fill_(float(j))  # a constant of the captured kernel: the slot of this call
        return call

    rotation = Rotation([make(j) for j in range(k)], [(xs[j], outs[j]) for j in range(k)])
    op = Op(name="rotation", fn=lambda *a: None, make_inputs=lambda *a: None, shapes=[(4096,)], outputs=(1,))
    timing = time_graph(rotation, backend, GraphSettings(warmup_ms=1.0, rep_ms=5.0), op=op, inputs=rotation.view,
                        dtype="float32")
    torch.cuda.synchronize()
    graph = timing.extra["cudagraph"]
    assert graph["verified"] == "outputs"  # the replay check compared the last captured slot's output
    assert rotation.last_captured is not None and rotation.captured
    assert int(last.item()) == rotation.last_captured  # the timed replays ran last, in capture order
    if graph["calls_per_graph"] >= k:
        assert rotation.captured == set(range(k))
    for j in range(k):
        assert torch.equal(outs[j], xs[j] * 2), j


def _zlf(zlf_cli, *args, rc=None):
    proc = zlf_cli("task", *map(str, args))
    if rc is not None:
        assert proc.returncode == rc, proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize("candidate", ["naive_triton.py", "better_triton.py", "paged_decode.cu"])
@pytest.mark.parametrize("ext", [("task",), ("task", "cudagraph")], ids=["default_timer", "cudagraph"])
def test_paged_kv_candidates_are_accepted_through_the_checker(zlf_cli, tmp_path, candidate, ext):
    """12/12 Accepted, the outputs read by the checker through CUDA IPC."""
    exts = [a for e in ext for a in ("--ext", e)]
    proc = _zlf(zlf_cli, PAGED_KV, "--candidate", PAGED_KV / "candidates" / candidate, *exts, "--reuse-worker",
                "--backend", "cuda", "--out", tmp_path / "runs", rc=0)
    run_dir = run_dir_from(proc.stdout, tmp_path)
    records = read_records(run_dir)
    assert len(records) == 12 and all(r["extra"]["verdict"] == "Accepted" for r in records)
    assert all(r["extra"]["input_sets"] == 3 and r["extra"]["distinct_input_sets"] == 7 for r in records)
    logs = {p.name for p in (run_dir / "task").iterdir()}
    assert any(n.startswith("checker-case") for n in logs) and any(n.startswith("worker-case") for n in logs)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["task"]["verdicts"]["Accepted"] == 12
    assert meta["task"]["sharing"] == "ipc"


@pytest.mark.parametrize("candidate, messages", [
    ("paged_memo.py", ("stale result",)),
    # what it finds is another slot's input or nothing: never the checker's expected output
    ("paged_copy_baseline.py", ("elements differ", "was not written")),
])
def test_paged_kv_forging_candidate_is_rejected(zlf_cli, tmp_path, candidate, messages):
    proc = _zlf(zlf_cli, PAGED_KV, "--candidate", FORGING / candidate, "--ext", "task", "--ext", "cudagraph",
                "--cases", "1,12", "--reuse-worker", "--backend", "cuda", "--out", tmp_path / "runs", rc=1)
    records = read_records(run_dir_from(proc.stdout, tmp_path))
    assert [r["extra"]["verdict"] for r in records] == ["Wrong Answer", "Wrong Answer"], proc.stdout
    assert all(any(m in r["extra"]["judge_output"] for m in messages) for r in records)


@pytest.mark.parametrize("candidate, verdicts", [
    ("naive_triton.py", ["Accepted", "Accepted"]),
    ("paged_decode.cu", ["Accepted", "Accepted"]),
    ("paged_memo.py", ["Wrong Answer", "Wrong Answer"]),
])
def test_staged_sharing_on_the_gpu(zlf_cli, tmp_path, candidate, verdicts):
    """Staged sharing (what a device without IPC gets), forced on CUDA: the worker's own device
    tensors, copied from and back to the checker's host buffers around the calls."""
    where = FORGING if candidate == "paged_memo.py" else PAGED_KV / "candidates"
    proc = zlf_cli("task", PAGED_KV, "--candidate", where / candidate, "--ext", "task", "--ext", "cudagraph",
                   "--cases", "1,12", "--reuse-worker", "--backend", "cuda", "--out", tmp_path / "runs",
                   env={"ZLF_TASK_SHARING": "staged"})
    run_dir = run_dir_from(proc.stdout, tmp_path)
    records = read_records(run_dir)
    assert [r["extra"]["verdict"] for r in records] == verdicts, proc.stdout + proc.stderr
    assert json.loads((run_dir / "meta.json").read_text())["task"]["sharing"] == "staged"
    if verdicts[0] == "Wrong Answer":
        assert all("stale result" in r["extra"]["judge_output"] for r in records)
    else:
        assert all(r["extra"]["distinct_input_sets"] == 7 for r in records)
