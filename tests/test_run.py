"""`zlf run` end to end on the cpu backend: records, correctness, failures, crash safety."""
import json
import re
import textwrap
from pathlib import Path

import pytest

from conftest import HeldDispatch, read_records, run_dir_from
from zlf.testing import pythonpath

OPS_FILE = '''
import os, signal
import torch
import zlf

def make(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))

def good(x, out):
    torch.mul(x, 2, out=out)

def wrong(x, out):
    torch.mul(x, 2.01, out=out)

def half_written(x, out):
    out[: out.numel() // 2] = x[: x.numel() // 2] * 2

def raises(x, out):
    raise ValueError("kernel exploded\\nsecond line")

def dies(x, out):
    os.kill(os.getpid(), signal.SIGKILL)

def op(name, fn):
    return zlf.Op(name=name, fn=fn, make_inputs=make, shapes=[(256,), (512,)], reference=lambda x, out: x * 2,
                  outputs=(1,), bytes=lambda s, d: 2 * 4 * s[0], flops=lambda s, d: s[0])

good_op = op("good", good)
wrong_op = op("wrong", wrong)
half_op = op("half", half_written)
raises_op = op("raises", raises)
dies_op = op("dies", dies)
'''


def write_ops(tmp_path):
    path = tmp_path / "my_ops.py"
    path.write_text(OPS_FILE)
    return path


def test_builtin_suite_writes_a_complete_run_directory(zlf_cli, tmp_path):
    proc = zlf_cli("run", "--rep-ms", "3", check_rc=0)
    assert proc.stdout.splitlines()[-1].startswith("run dir: runs/builtin_")
    run = run_dir_from(proc.stdout, tmp_path)
    assert {p.name for p in run.iterdir()} >= {"run.log", "results.jsonl", "meta.json", "shapes.yaml"}
    records = read_records(run)
    assert {r["op"] for r in records} == {"add", "softmax", "matmul"}
    for r in records:
        assert r["status"] == "ok", r
        assert r["timer"] == "host_wall" and r["median_ms"] > 0 and len(r["samples"]) >= 5
        assert r["max_rel_err"] is not None and r["max_rel_err"] < 1e-3
        assert set(r) >= {"point", "op", "shape", "dtype", "status", "error", "timer", "median_ms", "samples",
                          "gbps", "tflops", "markers"}
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["backend"] == "cpu"
    assert meta["command"][:2] == ["zlf", "run"]
    assert meta["extensions"] == []  # core alone (the seed extension's tests check its meta.json section)
    assert "torch" in meta["fingerprint"] and "triton" in meta["fingerprint"]
    assert meta["environment"].get("TRITON_INTERPRET") == "1"
    # The table names the timer of every row, and the cpu times are labelled for what they are.
    assert "host_wall" in proc.stdout and "not GPU kernel times" in proc.stdout


def test_failures_are_recorded_and_the_run_goes_on(zlf_cli, tmp_path):
    ops = write_ops(tmp_path)
    proc = zlf_cli("run", f"{ops}::wrong_op", f"{ops}::half_op", f"{ops}::raises_op", f"{ops}::good_op",
                   "--rep-ms", "2")
    assert proc.returncode == 1
    records = {r["point"]: r for r in read_records(run_dir_from(proc.stdout, tmp_path))}
    assert len(records) == 8
    assert records["wrong/256/float32"]["status"] == "FAILED"
    assert "relative error" in records["wrong/256/float32"]["error"]
    assert "NaN or unwritten" in records["half/256/float32"]["error"]
    assert records["raises/256/float32"]["error"] == "ValueError: kernel exploded"
    assert records["good/512/float32"]["status"] == "ok" and records["good/512/float32"]["gbps"] > 0
    assert "FAILED" in proc.stdout and "6 of 8 points FAILED" in proc.stdout


def test_an_op_is_found_by_its_name_as_well_as_its_attribute(zlf_cli, tmp_path):
    ops = write_ops(tmp_path)
    proc = zlf_cli("run", f"{ops}::good", "--rep-ms", "2", check_rc=0)
    assert [r["point"] for r in read_records(run_dir_from(proc.stdout, tmp_path))] == ["good/256/float32", "good/512/float32"]
    missing = zlf_cli.inprocess("run", f"{ops}::nothing")
    assert missing.returncode == 2 and "no attribute or zlf.Op named 'nothing'" in missing.stderr


def test_a_crash_keeps_every_finished_point_and_the_run_goes_on(zlf_cli, tmp_path):
    ops = write_ops(tmp_path)
    proc = zlf_cli("run", f"{ops}::dies_op", f"{ops}::good_op", "--rep-ms", "2")
    assert proc.returncode == 1, proc.stderr
    run = next((tmp_path / "runs").iterdir())
    records = read_records(run)
    assert [(r["point"], r["status"], r["error"]) for r in records] == [
        ("dies/256/float32", "FAILED", "worker died: SIGKILL (signal 9)"),
        ("dies/512/float32", "FAILED", "worker died: SIGKILL (signal 9)"),
        ("good/256/float32", "ok", None), ("good/512/float32", "ok", None)]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["counts"] == {"ok": 2, "FAILED": 2, "OOM": 0}
    assert [d["point"] for d in meta["worker_deaths"]] == ["dies/256/float32", "dies/512/float32"]


def test_json_output_and_no_escape_codes(zlf_cli, tmp_path):
    proc = zlf_cli("run", "add", "--rep-ms", "2", "--json", env={"FORCE_COLOR": "1"}, check_rc=0)
    doc = json.loads(proc.stdout)
    assert len(doc["records"]) == 2 and doc["run_dir"].startswith("runs/add_")
    log = (tmp_path / doc["run_dir"] / "run.log").read_text()
    assert "\x1b[" not in log
    coloured = zlf_cli("run", "add", "--rep-ms", "2", env={"FORCE_COLOR": "1"}, check_rc=0)
    assert "\x1b[" in coloured.stdout
    plain = zlf_cli("run", "add", "--rep-ms", "2", env={"FORCE_COLOR": "1", "NO_COLOR": "1"}, check_rc=0)
    assert "\x1b[" not in plain.stdout


def test_usage_errors_are_one_line_exit_2_and_leave_nothing(zlf_cli, tmp_path):
    for args, needle in [
        (["run", "nosuchop"], "unknown op 'nosuchop'"),
        (["run", "add", "--dtype", "float7"], "unknown dtype 'float7'"),
        (["run", "missing.py::x"], "op file 'missing.py' not found"),
        (["run", "add", "--backend", "tpu"], "unknown backend 'tpu'"),
    ]:
        proc = zlf_cli.inprocess(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_run_directories_are_never_reused(tmp_path):
    from zlf.rundir import RunDir

    a = RunDir.create(tmp_path, "x")
    b = RunDir.create(tmp_path, "x")
    assert a.path != b.path and a.path.is_dir() and b.path.is_dir()
    assert re.fullmatch(r"x_\d{8}-\d{6}(-\d+)?", b.path.name)


def test_truncated_results_are_read_up_to_the_cut(tmp_path):
    from zlf.records import PointRecord
    from zlf.rundir import RunDir

    rd = RunDir.create(tmp_path, "t")
    for i in range(3):
        rd.append(PointRecord(point=f"op/{i}/float32", op="op", shape=(i + 1,), dtype="float32", status="ok", median_ms=1.0))
    text = (rd.path / "results.jsonl").read_text()
    (rd.path / "results.jsonl").write_text(text[:-20])
    records, skipped = RunDir.open(rd.path).records()
    assert [r.point for r in records] == ["op/0/float32", "op/1/float32"] and skipped == 1


def test_help_answers_the_common_questions(zlf_cli):
    out = zlf_cli.inprocess("run", "--help", check_rc=0).stdout
    for needle in ("--ext", "--no-ext", "--flush-l2", "exit codes", "FILE.py"):
        assert needle in out


@pytest.mark.extensions("seed", "shapes")
def test_help_shows_the_options_of_active_extensions(zlf_cli):
    out = zlf_cli.inprocess("run", "--help", check_rc=0).stdout
    for needle in ("--shapes", "--seed"):
        assert needle in out


def test_ctrl_c_keeps_finished_points_and_says_so(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, ZLF_NO_PROGRESS="1")
    # A shell that starts jobs in the background (nohup, CI) ignores SIGINT in them, and Python
    # then never raises KeyboardInterrupt: give the child the default disposition, as a terminal does.
    proc = subprocess.Popen([sys.executable, "-m", "zlf", "run", "add", "softmax", "--rep-ms", "300"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    runs = tmp_path / "runs"
    deadline = time.time() + 120
    while time.time() < deadline:  # interrupt once the first point is on disk
        results = list(runs.glob("*/results.jsonl")) if runs.exists() else []
        if results and results[0].read_text().strip():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    run = next(runs.iterdir())
    assert "interrupted" in err and f"run dir: runs/{run.name}" in err
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "interrupted"
    assert 1 <= len(read_records(run)) < 6
    assert "interrupted by the user" in (run / "run.log").read_text()


def test_bool_and_complex_outputs_and_inputs_are_handled(zlf_cli, tmp_path):
    (tmp_path / "odd.py").write_text('''
import torch, zlf

def mk(shape, dtype, device):
    x = torch.randn(shape, device=device)
    return (x, torch.empty(shape, dtype=torch.bool, device=device), torch.randn(shape, dtype=torch.complex128))

def gt(x, out, c):
    torch.gt(x, 0, out=out)

gt_op = zlf.Op(name="gt", fn=gt, make_inputs=mk, shapes=[(64,)], reference=lambda x, out, c: x > 0, outputs=(1,))
''')
    proc = zlf_cli("run", "odd.py", "--rep-ms", "2", check_rc=0)
    [record] = read_records(run_dir_from(proc.stdout, tmp_path))
    assert record["status"] == "ok"  # (the seed extension's tests fingerprint such inputs)


def test_a_failing_after_point_hook_does_not_lose_the_point(zlf_cli, tmp_path):
    from test_plugins import make_fake_distribution

    site = tmp_path / "site"
    site.mkdir()
    make_fake_distribution(site, "zlf-clumsy", "0.1", "clumsy", "zlf_fake_clumsy", """
        from zlf import hookimpl

        @hookimpl
        def after_point(run, point, record):
            raise KeyError("oops")
    """)
    proc = zlf_cli("run", "add", "--ext", "clumsy", "--rep-ms", "2", env=pythonpath(site), check_rc=0)
    records = read_records(run_dir_from(proc.stdout, tmp_path))
    assert len(records) == 2 and all(r["status"] == "ok" for r in records)
    assert records[0]["extra"]["after_point_error"] == "KeyError: 'oops'"


def test_unusable_output_directory_and_damaged_lines(zlf_cli, tmp_path):
    (tmp_path / "file").write_text("")
    proc = zlf_cli.inprocess("run", "add", "--out", "file/sub")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    from zlf.rundir import RunDir

    rd = RunDir.create(tmp_path, "d")
    (rd.path / "results.jsonl").write_text('5\n[1, 2]\n{"point": "a/1/float32", "op": "a", "shape": [1], "dtype": "float32", "status": "ok"}\n')
    records, skipped = RunDir.open(rd.path).records()
    assert [r.point for r in records] == ["a/1/float32"] and skipped == 2


def test_a_point_that_did_not_fit_reads_oom_in_the_table():
    from zlf.console import results_table
    from zlf.records import PointRecord

    table = results_table([PointRecord(point="a/1/float32", op="a", shape=(1,), dtype="float32", status="OOM",
                                       error="OutOfMemoryError: CUDA out of memory")], colour=False)
    row = table.splitlines()[-1].split()
    assert row[:2] == ["a/1/float32", "OOM"] and row[2:5] == ["OOM", "OOM", "OOM"]


def test_the_check_runs_outside_an_ops_held_environment(zlf_cli, tmp_path):
    """An op whose calls need an environment held across calls (FlagGems' aten dispatch) gives
    zlf ``Op.outside``: core's float64 check then runs on torch's kernels, not the op's."""
    ops = tmp_path / "held_ops.py"
    ops.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import torch, zlf
        from conftest import HeldDispatch

        env = HeldDispatch()

        def make(shape, dtype, device):
            x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
            return (x, torch.empty_like(x))

        def fn(x, out):
            env.enter()
            torch.mul(x, 2, out=out)

        def op(name, **kw):
            return zlf.Op(name=name, fn=fn, make_inputs=make, shapes=[(256,)], outputs=(1,),
                          reference=lambda x, out: x * 2, **kw)

        held = op("held", outside=env.outside)
        unguarded = op("unguarded")
        """))
    proc = zlf_cli("run", f"{ops}::held", f"{ops}::unguarded", "--rep-ms", "2")
    records = {r["op"]: r for r in read_records(run_dir_from(proc.stdout, tmp_path))}
    assert records["held"]["status"] == "ok", records["held"]
    assert records["held"]["max_rel_err"] == 0.0
    # the control: without Op.outside the check meets the op's vector_norm and fails
    assert records["unguarded"]["status"] == "FAILED"
    assert "vector_norm not implemented for torch.float64" in records["unguarded"]["error"]


def test_held_dispatch_helper_restores_torchs_kernel():
    import torch

    env = HeldDispatch()
    env.enter()
    try:
        with __import__("pytest").raises(NotImplementedError):
            torch.linalg.vector_norm(torch.ones(3, dtype=torch.float64))
    finally:
        env.outside()
    assert float(torch.linalg.vector_norm(torch.ones(4, dtype=torch.float64))) == 2.0


def test_recorded_environment_keeps_what_changes_the_measurement():
    """The credential filter (tests/test_hostile.py) must not drop device ids, paths or compiler
    switches whose names or values merely look unusual."""
    from zlf.run import relevant_environment

    env = {"CUDA_VISIBLE_DEVICES": "GPU-5f7b2d1e-3c4a-4b8e-9f1d-2a6c8e0b4d3f", "LLVM_PASS_PLUGIN_PATH": "/opt/p.so",
           "TRITON_CACHE_DIR": "/home/me/.triton/cache", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
           "DISABLE_MMA_V3": "1", "TRITON_HOME": "0123456789abcdef0123456789abcdef01234567", "HOME": "/home/me"}
    kept = relevant_environment(env)
    assert kept == {k: v for k, v in env.items() if k != "HOME"}
