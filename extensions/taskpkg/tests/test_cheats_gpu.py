"""zlf task's sandbox and clock on a GPU: honest paged-KV decode candidates stay Accepted under
bwrap (CUDA IPC and the GPU's device nodes work inside it), and GPU cheats that hide their work
from the timer are refused or their time is not trusted.

Run on a CUDA machine: ``python -m pytest -q -m gpu extensions/taskpkg/tests/test_cheats_gpu.py``;
``bash benchmarks/taskpkg_sandbox_gpu.sh`` compares the honest candidates' times with and without
the sandbox.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from zlf.testing import read_records, run_dir_from

zlf_taskpkg = pytest.importorskip("zlf_taskpkg")

from zlf_taskpkg import sandbox  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PAGED_KV = REPO / "examples" / "tasks" / "paged_kv_decode"
GPU_CHEATS = Path(__file__).resolve().parent / "data" / "cheats" / "gpu"
NO_BWRAP = sandbox.bwrap_problem()

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap unusable here: {NO_BWRAP}")]


def run(zlf_cli, tmp_path, candidate, *args):
    proc = zlf_cli("task", PAGED_KV, "--candidate", candidate, "--ext", "task", "--backend", "cuda",
                   "--sandbox", "bwrap", "--out", tmp_path / "runs", *map(str, args))
    run_dir = run_dir_from(proc.stdout, tmp_path)
    return proc, read_records(run_dir), run_dir


@pytest.mark.parametrize("candidate", ["naive_triton.py", "better_triton.py", "paged_decode.cu", "tilelang_decode.py"])
def test_honest_decode_candidates_are_accepted_in_the_sandbox(zlf_cli, tmp_path, candidate):
    if candidate == "tilelang_decode.py":
        pytest.importorskip("tilelang")
    proc, records, run_dir = run(zlf_cli, tmp_path, PAGED_KV / "candidates" / candidate, "--reuse-worker")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(records) == 12 and all(r["extra"]["verdict"] == "Accepted" for r in records)
    assert all(r["extra"]["time_trusted"] is True and r["extra"]["sandbox"] == "bwrap" for r in records)
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["task"]["sharing"] == "ipc" and meta["task"]["sandbox"]["mode"] == "bwrap"


def _honest_ms(zlf_cli, tmp_path, timer_args) -> dict:
    proc, records, _ = run(zlf_cli, tmp_path / "honest", PAGED_KV / "candidates" / "better_triton.py",
                           "--cases", "1,12", "--reuse-worker", *timer_args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {r["extra"]["case"]: r["median_ms"] for r in records}


@pytest.mark.parametrize("timer_args", [(), ("--ext", "cudagraph", "--timer", "cudagraph"), ("--timer", "core")],
                         ids=["default", "cudagraph", "events"])
@pytest.mark.parametrize("cheat", ["side_stream.py", "capture_aware.py", "persistent.py"])
def test_gpu_cheats_are_refused_or_not_trusted(zlf_cli, tmp_path, cheat, timer_args):
    """A cheat may only keep an Accepted with a trusted time if that time is honest: at least half
    the honest candidate's on the same timer (the work it hid was counted after all)."""
    honest = _honest_ms(zlf_cli, tmp_path, timer_args)
    proc, records, _ = run(zlf_cli, tmp_path, GPU_CHEATS / cheat, "--cases", "1,12", "--reuse-worker", *timer_args)
    for r in records:
        x = r["extra"]
        if x["verdict"] != "Accepted" or x["time_trusted"] is False:
            continue
        assert r["median_ms"] >= 0.5 * honest[x["case"]], (cheat, x["case"], r["median_ms"], honest, x["clock_check"])


#: torch's kernels for the judge's preparation of a timed call (the input copy, the output poison)
PREPARATION_KERNELS = ("copy", "fill", "FillFunctor", "elementwise_kernel")


@pytest.mark.parametrize("timer_args", [(), ("--ext", "cudagraph", "--timer", "cudagraph"), ("--timer", "core")],
                         ids=["default", "cudagraph", "events"])
def test_every_timed_call_is_prepared_and_the_preparation_is_not_timed(zlf_cli, tmp_path, timer_args):
    """Every timed call gets the next input set and poisoned outputs first; under CUPTI the copy
    and fill kernels of that preparation are in no sample (the candidate's kernels alone)."""
    proc, records, _ = run(zlf_cli, tmp_path, PAGED_KV / "candidates" / "better_triton.py", "--cases", "1,12",
                           "--reuse-worker", *timer_args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in records:
        x = r["extra"]
        assert x["verdict"] == "Accepted" and x["time_trusted"] is True
        assert x["fresh_calls"]["prepared_calls"] >= len(r["samples"]) and x["fresh_calls"]["input_sets"] == 3
        if r["timer"] == "cupti":
            names = x["cupti"]["kernel_names"]
            assert names and not any(k.lower() in n.lower() for n in names for k in PREPARATION_KERNELS), names
