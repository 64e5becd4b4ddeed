"""zlf task: every verdict on a CPU task package, isolation, the run directory, CUDA C++ compile."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from zlf.testing import read_records, run_dir_from

REPO = Path(__file__).resolve().parents[3]

zlf_taskpkg = pytest.importorskip("zlf_taskpkg")

from zlf import UsageError  # noqa: E402
from zlf.cli import main  # noqa: E402
from zlf_taskpkg.candidate import Candidate, compile_cuda, find_nvcc  # noqa: E402
from zlf_taskpkg.package import TaskPackage, parse_cases  # noqa: E402

from task_fixtures import VECADD, judge_task  # noqa: E402

PKG = VECADD
CANDIDATES = PKG / "candidates"
PAGED_KV = REPO / "examples" / "tasks" / "paged_kv_decode"
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    monkeypatch.setenv("NO_COLOR", "1")


def judge(tmp_path, capsys, candidate, *extra):
    """``zlf task`` in this process (its workers are real child processes): (rc, stdout, records, run dir)."""
    j = judge_task(tmp_path, capsys, PKG, CANDIDATES / candidate, *extra)
    return j.rc, j.out, j.records, j.run_dir


def verdicts(records) -> list:
    return [r["extra"]["verdict"] for r in records]


# ----------------------------------------------------------------------------- package format
def test_package_discovery_and_stdin_case_number():
    pkg = TaskPackage.open(PKG)
    assert pkg.name == "vecadd" and pkg.module_path.name == "problem.py"
    assert pkg.num_cases() == 3 and pkg.base_seed() == 20240601
    shapes, arg_shapes, warmup, iters = pkg.case_sizes(3)
    assert shapes == [(65537,), (65537,), (65537,), ()] and (warmup, iters) == (2, 10)
    assert pkg.tolerances() == {"rtol": 1e-5, "atol": 1e-6}
    assert pkg.tolerances(rtol=0.5) == {"rtol": 0.5, "atol": 1e-6}
    assert not hasattr(sys.stdin, "getvalue") and "BytesIO" not in repr(sys.stdin)  # the real stdin is back


def test_parse_cases():
    assert parse_cases("1,3-5", 6) == [1, 3, 4, 5]
    assert parse_cases(None, 3) == [1, 2, 3]
    for bad in ("0", "2-9", "a", "3-1"):
        with pytest.raises(UsageError):
            parse_cases(bad, 6)


def test_not_a_package(tmp_path):
    with pytest.raises(UsageError, match="no problem module"):
        TaskPackage.open(tmp_path)


# ----------------------------------------------------------------------------- verdicts
@pytest.mark.slow
def test_accepted_end_to_end(zlf_cli, tmp_path):
    proc = zlf_cli("task", PKG, "--candidate", CANDIDATES / "correct.py", "--ext", "task", check_rc=0)
    assert proc.stdout.rstrip().splitlines()[-1].startswith("run dir: ")
    assert "vecadd: 3/3 cases Accepted; geometric-mean speedup" in proc.stdout
    run_dir = run_dir_from(proc.stdout, tmp_path)
    assert {"results.jsonl", "meta.json", "run.log", "shapes.yaml"} <= {p.name for p in run_dir.iterdir()}
    records = read_records(run_dir)
    assert [r["point"] for r in records] == [f"vecadd/{n}/float32/case{k}" for k, n in ((1, 1000), (2, 4096), (3, 65537))]
    for r in records:
        assert r["status"] == "ok" and r["extra"]["verdict"] == "Accepted"
        assert r["median_ms"] > 0 and r["extra"]["baseline_ms"] > 0 and r["timer"] == "host_wall"
        assert r["extra"]["speedup"] == pytest.approx(r["extra"]["baseline_ms"] / r["median_ms"])
        assert r["max_rel_err"] == 0.0
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["task"]["verdicts"]["Accepted"] == 3
    assert meta["task"]["summary"]["passed"] == 3
    # a fresh worker per case (the default)
    assert len(list((run_dir / "task").glob("worker-case*.log"))) == 3


class BurstClock:
    """The judge's clock on a machine whose load comes in bursts: during the first
    ``burst_rounds`` clocked rounds every reading is ``delay_ms`` later than the last (each
    clocked call waits that long for its turn on a CPU, as behind a dozen burners on two cores);
    then the burners pause."""

    def __init__(self, delay_ms: float, burst_rounds: int):
        self.delay_s, self.burst_rounds, self.offset, self.round = delay_ms / 1e3, burst_rounds, 0.0, None

    def __call__(self) -> float:
        if self.round is not None and self.round < self.burst_rounds:
            self.offset += self.delay_s
        return time.perf_counter() + self.offset


def test_a_burst_of_load_does_not_make_an_honest_time_untrusted(tmp_path, capsys, monkeypatch):
    from zlf_taskpkg import judge as judge_mod

    fake = BurstClock(delay_ms=12.0, burst_rounds=judge_mod.WITNESS_ROUNDS)  # 12 ms > the host slack
    send = judge_mod.CaseState.send

    def send_and_follow_rounds(self, proc, message, is_checker):
        if "witness" in message:  # the checker loads fresh inputs: a clocked round starts
            fake.round = message["witness"]
        return send(self, proc, message, is_checker)

    monkeypatch.setattr(judge_mod, "call_clock", fake)
    monkeypatch.setattr(judge_mod.CaseState, "send", send_and_follow_rounds)
    rc, out, records, _ = judge(tmp_path, capsys, "correct.py", "--cases", "1")
    assert rc == 0 and "time not trusted" not in out
    check = records[0]["extra"]["clock_check"]
    # the delayed rounds are kept, and a round after the burst is the least one
    assert len(check["batch_ms"]) > judge_mod.WITNESS_ROUNDS
    assert min(check["batch_ms"][:judge_mod.WITNESS_ROUNDS]) > 12.0 * check["calls"]
    assert records[0]["extra"]["time_trusted"] is True


@pytest.mark.slow
def test_wrong_answer_shows_check_output(tmp_path, capsys):
    rc, out, records, _ = judge(tmp_path, capsys, "wrong.py", "--cases", "2")
    assert rc == 1 and verdicts(records) == ["Wrong Answer"]
    assert "elements differ" in records[0]["extra"]["judge_output"]
    assert records[0]["status"] == "FAILED" and records[0]["median_ms"] is None
    assert records[0]["extra"]["baseline_ms"] > 0  # the baseline was timed before the candidate ran
    assert "0/1 cases Accepted" in out


@pytest.mark.slow
def test_crash_is_runtime_error_and_judge_goes_on(tmp_path, capsys):
    rc, out, records, run_dir = judge(tmp_path, capsys, "crash.py", "--cases", "1-2", "--reuse-worker")
    assert rc == 1 and verdicts(records) == ["Runtime Error", "Runtime Error"]
    assert "SIGSEGV" in records[0]["extra"]["judge_output"]
    assert "crash.py" in records[0]["extra"]["judge_output"]  # faulthandler's stack from the worker log
    # the second case ran in a fresh process even with --reuse-worker
    assert len(list((run_dir / "task").glob("worker-case*.log"))) == 2


@pytest.mark.slow
def test_hang_is_time_limit_exceeded(tmp_path, capsys):
    """The verdict and its message say the limit stopped the candidate (no wall-clock bound here:
    how long the judge takes on a loaded machine is not what is tested)."""
    rc, out, records, _ = judge(tmp_path, capsys, "hang.py", "--cases", "1", "--time-limit", "2")
    assert rc == 1 and verdicts(records) == ["Time Limit Exceeded"]
    assert "time limit of 2 s" in records[0]["extra"]["judge_output"]


@pytest.mark.slow
def test_input_mutation_is_caught(tmp_path, capsys):
    rc, out, records, _ = judge(tmp_path, capsys, "mutate.py", "--cases", "1")
    assert verdicts(records) == ["Wrong Answer"]
    assert "modified its inputs" in records[0]["extra"]["judge_output"]
    assert "argument 0" in records[0]["extra"]["judge_output"]


@pytest.mark.slow
def test_write_outside_output_is_caught(tmp_path, capsys):
    rc, out, records, _ = judge(tmp_path, capsys, "overflow.py", "--cases", "1")
    assert verdicts(records) == ["Runtime Error"]
    assert "wrote outside its output" in records[0]["extra"]["judge_output"]


@pytest.mark.slow
def test_write_outside_output_retires_a_reused_worker(tmp_path, capsys):
    rc, out, records, run_dir = judge(tmp_path, capsys, "overflow.py", "--cases", "1-2", "--reuse-worker")
    assert verdicts(records) == ["Runtime Error", "Runtime Error"]
    assert len(list((run_dir / "task").glob("worker-case*.log"))) == 2  # a fresh process after the error


@pytest.mark.slow
def test_forged_verdict_is_rejected(tmp_path, capsys):
    """A candidate that writes an "Accepted" result to every pipe of its process is not believed."""
    rc, out, records, _ = judge(tmp_path, capsys, "forge.py", "--cases", "1-2", "--reuse-worker")
    assert rc == 1 and verdicts(records) == ["Runtime Error", "Runtime Error"]
    assert "forged verdict rejected" in records[0]["extra"]["judge_output"]
    assert all(r["median_ms"] is None and r["extra"]["speedup"] is None for r in records)


def test_cuda_compile_time_limit(tmp_path, capsys, monkeypatch):
    """An nvcc that never finishes is killed at --compile-time-limit: Compile Error, no hang (it
    says when it starts and, if it is left to end, when it ends: it must not have ended)."""
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\ncase "$1" in --version) echo "fake nvcc 12.0"; exit 0;; esac\n'
                    f'echo started >> {tmp_path}/nvcc.log\nsleep 600\necho ended >> {tmp_path}/nvcc.log\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("ZLF_TASK_CACHE", str(tmp_path / "cache"))
    rc, out, records, run_dir = judge(tmp_path, capsys, "correct.cu", "--cases", "1-2", "--backend", "cpu",
                                      "--compile-time-limit", "1")
    assert "started" in (tmp_path / "nvcc.log").read_text() and "ended" not in (tmp_path / "nvcc.log").read_text()
    assert rc == 1 and verdicts(records) == ["Compile Error", "Compile Error"]
    assert "did not finish within the compile time limit of 1 s" in records[0]["error"]
    assert json.loads((run_dir / "meta.json").read_text())["task"]["compile_time_limit_s"] == 1.0


@pytest.mark.parametrize("problem_edit, meta_edit, message", [
    (("return len(CASES)", "raise RuntimeError('boom')"), {}, "getNumOfTestcases() raised RuntimeError: boom"),
    (None, {"time_limit_s": "abc"}, "time_limit_s 'abc' (from metadata meta.json) is not a positive number"),
    (None, {"rtol": "tight"}, "rtol 'tight' (from metadata meta.json) is not a non-negative number"),
])
def test_bad_package_is_one_line_and_no_run_dir(tmp_path, capsys, problem_edit, meta_edit, message):
    pkg = tmp_path / "badpkg"
    pkg.mkdir()
    source = (PKG / "problem.py").read_text()
    if problem_edit:
        source = source.replace(*problem_edit)
    (pkg / "problem.py").write_text(source)
    (pkg / "meta.json").write_text(json.dumps({**json.loads((PKG / "meta.json").read_text()), **meta_edit}))
    rc = main(["task", str(pkg), "--candidate", str(CANDIDATES / "correct.py"), "--ext", "task",
               "--out", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_python_compile_error_once_for_all_cases(tmp_path, capsys):
    rc, out, records, run_dir = judge(tmp_path, capsys, "syntax_error.py", "--cases", "1-3")
    assert verdicts(records) == ["Compile Error"] * 3
    assert "SyntaxError" in records[2]["error"]
    assert len(list((run_dir / "task").glob("worker-case*.log"))) == 1  # not re-imported per case


@pytest.mark.slow
def test_triton_candidate_reused_worker(tmp_path, capsys):
    rc, out, records, run_dir = judge(tmp_path, capsys, "correct_triton.py", "--cases", "1-2", "--reuse-worker",
                                      "--iters", "3", "--warmup-calls", "1")
    assert rc == 0 and verdicts(records) == ["Accepted", "Accepted"]
    assert len(list((run_dir / "task").glob("worker-case*.log"))) == 1


# ----------------------------------------------------------------------------- CUDA C++
@needs_nvcc
@pytest.mark.slow
def test_cuda_compile_error_shows_compiler_output(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ZLF_TASK_CACHE", str(tmp_path / "cache"))
    rc, out, records, _ = judge(tmp_path, capsys, "compile_error.cu", "--cases", "1-2")
    assert verdicts(records) == ["Compile Error", "Compile Error"]
    assert "launch_missing_kernel" in records[0]["error"]
    assert "identifier \"launch_missing_kernel\" is undefined" in out


@needs_nvcc
@pytest.mark.slow
def test_cuda_compile_is_cached(tmp_path):
    cand = Candidate.open(CANDIDATES / "correct.cu")
    first = compile_cuda(cand, tmp_path, "sm_90a")
    assert not first.compile_failed, first.compile_output
    assert Path(first.library).is_file() and not first.compile_cached
    second = compile_cuda(cand, tmp_path, "sm_90a")
    assert second.compile_cached and second.library == first.library


@needs_nvcc
@pytest.mark.slow
def test_cuda_candidate_needs_a_device(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ZLF_TASK_CACHE", str(tmp_path / "cache"))
    rc = main(["task", str(PKG), "--candidate", str(CANDIDATES / "correct.cu"), "--ext", "task",
               "--backend", "cpu", "--out", str(tmp_path / "runs")])
    assert rc == 2 and "needs a CUDA device" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the GPU example package
def test_paged_kv_package_is_consistent_on_cpu(monkeypatch):
    """The example's format on CPU at reduced size: sizes, inputs, baseline, check."""
    monkeypatch.setenv("PAGED_KV_DECODE_SMALL", "1")
    import torch

    pkg = TaskPackage.open(PAGED_KV)
    assert pkg.num_cases() == 12
    shapes, arg_shapes, warmup, iters = pkg.case_sizes(12)
    problem = pkg.load()
    torch.manual_seed(0)
    args = problem.genTestCase(arg_shapes, device="cpu")
    q, k_cache, v_cache, block_table, seq_lens, out = args[:6]
    assert q.dtype == torch.bfloat16 and q.shape[1:] == (8, 128) and k_cache.shape[1] == 16
    assert sorted(block_table.flatten().tolist()) == list(range(k_cache.shape[0]))  # a permutation
    base = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    cand = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    problem.baseline(*base)
    problem.baseline(*cand)
    assert problem.check(arg_shapes, args, cand, base)
    cand[5].zero_()
    assert not problem.check(arg_shapes, args, cand, base)


@pytest.mark.gpu
def test_paged_kv_candidates_on_gpu(zlf_cli, tmp_path):
    for name in ("naive_triton.py", "better_triton.py", "paged_decode.cu"):
        proc = zlf_cli("task", PAGED_KV, "--candidate", PAGED_KV / "candidates" / name, "--ext", "task",
                       "--cases", "1,12", "--reuse-worker")
        assert proc.returncode == 0, proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- a folder's own imports
CANDIDATE_WITH_HELPERS = "from helpers import VALUE\ndef run_kernel(*args):\n    return VALUE\n"
CANDIDATE_IMPORTING_LATE = "def run_kernel(*args):\n    from late_helper import VALUE\n    return VALUE\n"

TWO_CANDIDATES = """
import sys
import helpers  # a module of that name loaded before (another library's)
from zlf_taskpkg.candidate import PythonKernel
from pathlib import Path
a = PythonKernel(Path("a/cand.py"))
b = PythonKernel(Path("b/cand.py"))
c = PythonKernel(Path("c/cand.py"))
print(a.fn(), b.fn(), c.fn(), helpers.VALUE)
"""


def test_two_python_candidates_in_one_process_each_import_their_own_helpers(tmp_path):
    """Each candidate's imports find its own files: the second candidate's ``helpers`` is its own,
    not the first's nor a module of that name loaded before; and a candidate that imports a file
    of its folder only when it runs still finds it. (In a child: a failure would leave this
    worker's imports changed.)"""
    import subprocess

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "cand.py").write_text(CANDIDATE_WITH_HELPERS)
        (tmp_path / name / "helpers.py").write_text(f"VALUE = {name!r}\n")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cand.py").write_text(CANDIDATE_IMPORTING_LATE)
    (tmp_path / "c" / "late_helper.py").write_text("VALUE = 'c'\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helpers.py").write_text("VALUE = 'lib'\n")
    done = subprocess.run([sys.executable, "-c", TWO_CANDIDATES], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(tmp_path / "lib")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["a", "b", "c", "lib"], done.stdout
