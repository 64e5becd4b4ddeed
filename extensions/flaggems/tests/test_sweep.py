"""zlf sweep over a fixture checkout whose ops crash, hang, disagree with their reference, are
skipped by FlagGems, and pass; resume; the table. Each op is a real ``zlf run`` child process."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from zlf_flaggems import sweep

DATA = Path(__file__).resolve().parent / "data"
SWEEP = DATA / "flaggems_fixture_sweep"
BASE = DATA / "flaggems_fixture_base"
# flaggems alone in the child runs: these tests pass with zlf and zlf-flaggems installed
CHILD = ("--run-ext", "none", "--run-args", "--warmup-ms 1 --rep-ms 3 --dtype float32")


def sweep_dir(stdout: str, tmp_path) -> Path:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("sweep dir: "))
    path = Path(line[len("sweep dir: "):].split(" (")[0])
    return path if path.is_absolute() else tmp_path / path


def rows_of(root: Path) -> dict:
    return {r["op"]: r for r in sweep.read_rows(root)}


def test_a_sweep_that_measured_nothing_exits_1(zlf_cli, tmp_path):
    """Every op failed before a point ran ok (here one that crashes; on a machine without pytest,
    every op): the sweep exits 1 and says so, where it exited 0."""
    proc = zlf_cli("sweep", "--flaggems-dir", SWEEP, "--ops", "crash_op", "--op-time-limit", "60", *CHILD)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "zlf sweep: no op ran a point ok (1 op(s)); first error: " in proc.stderr
    assert rows_of(sweep_dir(proc.stdout, tmp_path))["crash_op"]["status"] == "crashed"


def test_the_flaggems_distribution_declares_pytest():
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    assert any(d.split(">")[0].split("=")[0].strip() == "pytest" for d in project["dependencies"])


@pytest.mark.slow
def test_sweep_survives_every_kind_of_op_and_names_what_each_did(zlf_cli, tmp_path):
    """Every kind of op in one sweep. compile_op is fractional_max_pool2d on the H200: 227 s
    compiling (81 tuning configurations per point) when the 240 s op limit struck, and the sweep
    called it hung; alone, with 330 s, it ran 9/9 ok. Here it compiles a new Triton kernel every
    ~0.3 s without end: killed at the limit, it is compile_limit with its count of compiled
    kernels; hang_op, which compiles nothing, stays hung."""
    proc = zlf_cli("sweep", "--flaggems-dir", SWEEP, "--op-time-limit", "15", "--gpus", "0,0", *CHILD, check_rc=0)
    root = sweep_dir(proc.stdout, tmp_path)
    rows = rows_of(root)
    assert set(rows) == {"compile_op", "crash_op", "hang_op", "needs_vllm", "rope_mismatch", "softmax", "softmax_backward"}
    compiling = rows["compile_op"]
    assert compiling["status"] == "compile_limit" and compiling["rc"] is None, compiling
    assert compiling["first_error"].startswith("no end within 15 s, still compiling: ")
    assert int(compiling["first_error"].split("still compiling: ")[1].split()[0]) >= 3  # kernels compiled
    assert "(more time: --op-time-limit)" in compiling["first_error"]
    assert rows["softmax"]["status"] == "ok" and rows["softmax"]["ok"] == 2 and rows["softmax"]["failed"] == 0
    assert rows["softmax"]["timers"] == "host_wall:2"
    crash = rows["crash_op"]
    # the point's process died; zlf run's supervising parent filed it and ran the second point
    assert crash["status"] == "crashed" and crash["rc"] == 1 and crash["points"] == 2
    assert crash["first_error"] == "worker died: exit code 139 at point crash_op/64x64/float32"
    hang = rows["hang_op"]
    assert hang["status"] == "hung" and hang["rc"] is None
    assert hang["first_error"] == ("no end within 15 s; killed while: point 1/2 hang_op/64x64/float32: "
                                   "first FlagGems call (compile, tuning)")
    assert hang["compile_s"] >= 7  # the time went where the op hung (the limit, less start-up and imports)
    log = (root / "logs" / "hang_op_hang_op.log").read_text()
    assert "test_hang_op.py" in log and "in hang_op" in log  # SIGUSR1: its stack, before the kill
    skip = rows["needs_vllm"]
    assert skip["status"] == "refused" and skip["first_error"] == ""
    assert skip["skip_reason"].endswith("test_needs_vllm.py::test_needs_vllm: vllm is not installed")
    mismatch = rows["rope_mismatch"]
    assert mismatch["status"] == "failed" and mismatch["failed"] == 2
    assert mismatch["reference_mismatch"].endswith("on 2/2 points)")
    assert mismatch["first_error"].startswith(mismatch["reference_mismatch"] + ": wrong result (output 0): relative error 2 > 0.0001")
    run_log = (root / "logs" / "rope_mismatch_rope_mismatch.log").read_text()
    assert run_log.count("the benchmark's reference and the FlagGems op disagree (rel. error 2 on 2/2 points)") == 1
    assert "on 2/2 points); --check warn times them anyway" in run_log
    # the table: every op once, in the sweep's order, tab-separated, the summary line under it
    tsv = (root / "sweep.tsv").read_text().splitlines()
    assert tsv[0].split("\t") == list(sweep.FIELDS)
    assert [ln.split("\t")[0] for ln in tsv[1:]] == [s.split(":")[0] for s in json.loads((root / "sweep.json").read_text())["ops"]]
    assert ("7 ops: 2 ok, 1 failed, 1 refused, 1 hung, 1 compile_limit, 1 crashed; 4 ok points (0 UNCHECKED): "
            "0.0 % on a device timer") in proc.stdout
    assert "where the time went: startup" in proc.stdout
    assert "[7/7]" in proc.stderr


def test_check_warn_times_a_mismatching_op_marked_unchecked(zlf_cli, tmp_path):
    proc = zlf_cli("sweep", "--flaggems-dir", SWEEP, "rope_mismatch", "softmax", "--check", "warn",
                   *CHILD, "--format", "json", check_rc=0)
    doc = json.loads(proc.stdout)
    rows = {r["op"]: r for r in doc["ops"]}
    assert rows["rope_mismatch"]["status"] == "ok" and rows["rope_mismatch"]["unchecked"] == 2
    assert rows["softmax"]["unchecked"] == 0
    records = [json.loads(line) for line in
               (Path(rows["rope_mismatch"]["run_dir"]) / "results.jsonl").read_text().splitlines()]
    assert all(r["status"] == "ok" and r["median_ms"] > 0 for r in records)
    assert all(r["unchecked"].startswith("wrong result (output 0): relative error 2 > 0.0001") for r in records)
    assert "2 ops: 2 ok; 4 ok points (2 UNCHECKED)" in doc["summary"]
    assert rows["rope_mismatch"]["reference_mismatch"].startswith(
        "the benchmark's reference and the FlagGems op disagree (rel. error 2 on 2/2 points)")
    assert rows["rope_mismatch"]["first_error"] == rows["rope_mismatch"]["reference_mismatch"]


@pytest.mark.slow
def test_resume_runs_only_the_ops_not_finished(zlf_cli, tmp_path):
    # seed 28 draws three quick ops (slow_first_call, drawn by others, waits 4 s each time it runs)
    proc = zlf_cli("sweep", "--flaggems-dir", BASE, "--sample", "3", "--sample-seed", "28", *CHILD, check_rc=0)
    root = sweep_dir(proc.stdout, tmp_path)
    chosen = json.loads((root / "sweep.json").read_text())["ops"]
    assert len(chosen) == 3 and len(set(chosen)) == 3
    assert chosen == sweep.choose_ops(sweep.list_ops(sweep._checkout.find_checkout(str(BASE), "x")), None, 3, 28)
    lines = (root / "sweep.jsonl").read_text().splitlines()
    kept = lines[:1] + ['{"op": "torn', "3", "null", '{"spec": 5}']  # one op done; a torn line, lines that are no row
    (root / "sweep.jsonl").write_bytes(("\n".join(kept) + "\n").encode() + b"\xff\xfe not utf-8\n")
    import shutil

    shutil.copytree(DATA, tmp_path / "moved", symlinks=True)  # the checkout elsewhere on the next machine
    moved = (tmp_path / "moved" / BASE.name).resolve()
    proc = zlf_cli("sweep", "--resume", root, "--flaggems-dir", moved, "--format", "json", check_rc=0)
    assert "2 of 3 ops to run (1 finished before)" in proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["spec"] for r in doc["ops"]] == chosen
    assert len(sweep.read_rows(root)) == 3
    for spec in chosen[1:]:  # the ops run again ran from the checkout given now
        assert f"--flaggems-dir {moved} " in (root / "logs" / f"{sweep._safe(spec)}.log").read_text()


def test_list_ops_of_both_layouts():
    co = sweep._checkout.find_checkout(str(SWEEP), "x")
    assert sweep.list_ops(co) == ["compile_op:compile_op", "crash_op:crash_op", "hang_op:hang_op", "needs_vllm:needs_vllm",
                                  "rope_mismatch:rope_mismatch", "softmax:softmax", "softmax_backward:softmax"]
    v5 = sweep.list_ops(sweep._checkout.find_checkout(str(DATA / "flaggems_fixture_v5"), "x"))
    assert {"mm:blas_perf", "flaky_exp:reduction_perf", "avg_pool2d:special_perf"} <= set(v5)
    assert not any(s.startswith(("parametrize:", "skipif:", "attri_util:")) for s in v5)
    # marks made at run time (getattr(pytest.mark, name), the v5 layout's grouped files) are not
    # in the text: such ops are swept as OP arguments (softmax:reduction_perf)
    assert "softmax:reduction_perf" not in v5


@pytest.mark.parametrize("args, expected", [
    (["--flaggems-dir", "nowhere"], "not found: looked for a directory holding"),
    (["--flaggems-dir", str(SWEEP), "no_such_op"], "op 'no_such_op': no benchmark file of the checkout marks it"),
    (["--flaggems-dir", str(SWEEP), "--sample", "0"], "--sample 0: expected a whole number of ops from 1"),
    (["--flaggems-dir", str(SWEEP), "--gpus", "0,x"], "--gpus '0,x': expected GPU indices"),
    (["--flaggems-dir", str(SWEEP), "--run-args", "'unclosed"], "--run-args"),
    (["--resume", "nowhere"], "--resume 'nowhere': not a sweep directory"),
    (["--resume", "list"], "--resume 'list': sweep.json is not a sweep's"),
    (["--resume", "ops5"], "--resume 'ops5': sweep.json is not a sweep's"),
    (["--resume", "binary"], "--resume 'binary': not a sweep directory"),
    ([], "no FlagGems checkout given"),
])
def test_bad_input_is_one_line_exit_2(zlf_cli, tmp_path, args, expected):
    for name, data in (("list", b"[1, 2]"), ("ops5", b'{"ops": 5, "flaggems_dir": "x"}'), ("binary", b"\xff\xfe")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep.json").write_bytes(data)
    proc = zlf_cli("sweep", *args, env={"FLAGGEMS_DIR": ""})
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_cost_breakdown_adds_up_the_phase_lines(tmp_path):
    f = tmp_path / "p"
    f.write_text("10.0\timport\timporting flag_gems\n12.5\tplan\tcounting\n13.0\tcompile\tpoint 1\ntorn\n"
                 "20.0\tmeasure\tpoint 1\n")
    lines = sweep._phases.read(f)
    assert sweep._phases.durations(lines, 21.0) == {"import": 2.5, "plan": 0.5, "compile": 7.0, "measure": 1.0}


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_an_interrupted_sweep_kills_its_running_op_and_resume_runs_it_again(tmp_path, stop):
    """SIGINT (``timeout -s INT``, a budgeted GPU call) or SIGTERM (``timeout``, ``kill``): the
    running op's process group is killed and not recorded, the finished ops' table is printed,
    exit 130 / 143 (it was 130 for both); --resume runs the rest."""
    import os
    import signal
    import subprocess
    import sys
    import time

    # the interrupted sweep and its ops start plainly: pgrep below finds an op by its command line
    proc = subprocess.Popen([sys.executable, "-m", "zlf", "sweep", "--flaggems-dir", str(SWEEP),
                             "softmax", "hang_op", "--op-time-limit", "300", *CHILD],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ZLF_NO_PROGRESS": "1", "ZLF_SPAWN_SERVER": ""},
                            # a pytest-xdist worker ignores SIGINT, and its children inherit that
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    phases = None
    for _ in range(600):  # until the hanging op is in its first FlagGems call
        found = list(tmp_path.glob("runs/*/logs/hang_op_hang_op.phases"))
        if found and "first FlagGems call" in found[0].read_text():
            phases = found[0]
            break
        time.sleep(0.2)
    assert phases is not None, proc.stderr.read() if proc.poll() is not None else "no phase line"
    proc.send_signal(getattr(signal, stop))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + getattr(signal, stop), err
    root = phases.parent.parent
    assert [r["op"] for r in sweep.read_rows(root)] == ["softmax"]
    assert "1 of 2 ops finished; the rest: zlf sweep --resume" in err
    assert "softmax" in out and "hang_op" not in out
    # the op's process is gone (its command line names this sweep's directory)
    left = subprocess.run(["pgrep", "-f", str(root / "runs" / "hang_op_hang_op")], capture_output=True, text=True)
    assert left.stdout.strip() == ""
    proc = subprocess.run([sys.executable, "-m", "zlf", "sweep", "--resume", str(root), "--op-time-limit", "1"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert "1 of 2 ops to run (1 finished before)" in proc.stderr


def test_a_point_limit_struck_while_compiling_is_named_compile_limit_not_hung(zlf_cli, tmp_path):
    """upsample_bicubic2d_aa_backward on the H200: one point spent the 60 s point limit in its first
    FlagGems call (67.8 s compiling, eight ops at once) and the sweep called the op hung. The op is
    the sweep's only one and runs no point ok, so the sweep measured nothing: exit 1."""
    proc = zlf_cli("sweep", "--flaggems-dir", SWEEP, "hang_op", "--time-limit", "1",
                   "--op-time-limit", "120", *CHILD, check_rc=1)
    row = rows_of(sweep_dir(proc.stdout, tmp_path))["hang_op"]
    assert row["status"] == "compile_limit" and row["failed"] == 2, row
    assert row["first_error"].startswith("time limit during compile (the point's first FlagGems call")
    assert "1 compile_limit" in proc.stdout
    assert "zlf sweep: no op ran a point ok (1 op(s)); first error: time limit during compile" in proc.stderr


def test_a_run_stopped_in_native_compile_code_is_compile_limit_with_its_seconds(tmp_path):
    """The point limit's hard path: stuck where SIGALRM cannot reach (Triton's native compiler),
    the run writes its record and exits 124; its last phase line says it was compiling."""
    phases = tmp_path / "op.phases"
    phases.write_text("100.0\timport\timporting flag_gems\n101.0\tcompile\tpoint 2/9 up/4x4/float16: "
                      "first FlagGems call (compile, tuning)\n")
    row = sweep.summarize("up:up", 124, False, 99.0, 168.8, tmp_path / "out", tmp_path / "none.log", phases, 600.0)
    assert row["status"] == "compile_limit"
    assert row["first_error"] == ("time limit during compile (67.8 s in: point 2/9 up/4x4/float16: "
                                  "first FlagGems call (compile, tuning))")
    phases.write_text("100.0\tmeasure\tpoint 2/9 up/4x4/float16: timing the FlagGems op\n")
    assert sweep.summarize("up:up", 124, False, 99.0, 168.8, tmp_path / "out", tmp_path / "none.log", phases, 600.0)["status"] == "hung"


def test_the_compile_allowance_is_passed_to_every_run(tmp_path):
    settings = {"run_exts": ["none"], "flaggems_dir": "/fg", "time_limit": 60.0, "compile_time_limit": 240.0}
    cmd = sweep.child_command(settings, "up:up", tmp_path)
    assert cmd[cmd.index("--flaggems-compile-time-limit") + 1] == "240"
    assert "--flaggems-compile-time-limit" not in sweep.child_command({**settings, "compile_time_limit": 0.0}, "up:up", tmp_path)


def test_compile_progress_lines_are_not_phases_and_only_recent_ones_count(tmp_path):
    phases = tmp_path / "op.phases"
    phases.write_text("100.0\timport\timporting flag_gems\n"
                      "101.0\tplan\tcounting the inputs of up 4x4/float16\n"
                      "150.0\tcompiled\t_plus_kernel\n")
    from zlf_flaggems import phases as _phases

    assert [c for _, c, _ in _phases.read(phases)] == ["import", "plan"]
    assert _phases.compiles(phases) == [(150.0, "_plus_kernel")]
    args = ("up:up", None, True, 99.0)
    row = sweep.summarize(*args, 200.0, tmp_path / "out", tmp_path / "none.log", phases, 100.0)
    assert row["status"] == "compile_limit"
    assert row["first_error"] == ("no end within 100 s, still compiling: 1 Triton kernels compiled, the last 50 s "
                                  "before the kill; killed while: counting the inputs of up 4x4/float16 "
                                  "(more time: --op-time-limit)")
    assert row["plan_s"] == 99.0  # the progress line did not end the planning phase
    row = sweep.summarize(*args, 215.0, tmp_path / "out", tmp_path / "none.log", phases, 100.0)
    assert row["status"] == "hung"
    assert row["first_error"].endswith("(no kernel compiled in its last 65 s)")


@pytest.mark.slow
def test_a_full_disk_under_the_sweeps_table_is_one_line_not_a_thread_traceback(tmp_path):
    """800 bytes (a file-size limit standing for a full disk): the second op's row no longer fits
    in sweep.jsonl. The worker thread raised, Python printed its traceback and the sweep exited 0."""
    import os
    import resource
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "zlf", "sweep", "--flaggems-dir", str(SWEEP),
                           "needs_vllm", "crash_op", *CHILD], cwd=tmp_path, capture_output=True, text=True,
                          # no bytecode: under the limit Python would leave truncated cache files for
                          # the session's later processes (zlf.procs.python_child_env)
                          env={**os.environ, "ZLF_NO_PROGRESS": "1", "PYTHONDONTWRITEBYTECODE": "1"},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (800, 800)))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("zlf: error:")]
    assert len(errors) == 1 and errors[0].startswith("zlf: error: File too large writing ")
    assert errors[0].endswith("sweep.jsonl")
    root = sweep_dir(proc.stderr, tmp_path)
    assert [r["op"] for r in sweep.read_rows(root)] == ["needs_vllm"]  # the row written stays for --resume


def test_zlf_ab_library_flaggems_takes_the_sweeps_ops(zlf_cli, tmp_path):
    # zlf ab --library flaggems: the checkout's ops as the sweep lists them, sampled as it samples
    import random

    from zlf_flaggems import checkout

    ops = sweep.list_ops(checkout.find_checkout(str(SWEEP), "--flaggems-dir"))
    proc = zlf_cli("ab", "--switch", "X", "--controls", "none", "--dry-run", "--library", "flaggems",
                   "--flaggems-dir", str(SWEEP), "--sample", "3", "--sample-seed", "5", env={"FLAGGEMS_DIR": ""})
    assert proc.returncode == 0, proc.stderr
    chosen = [spec.split(":")[0] for spec in random.Random(5).sample(ops, 3)]
    assert f"ops: {', '.join(chosen)}; 3 rounds, then up to 12 until confident" in proc.stdout
    assert f'"flaggems_dir": "{SWEEP.resolve()}"' in proc.stdout
    proc = zlf_cli("ab", "--switch", "X", "--dry-run", "--library", "flaggems", env={"FLAGGEMS_DIR": ""})
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "zlf: error: --library flaggems: no FlagGems checkout given: use --flaggems-dir DIR or FLAGGEMS_DIR=DIR")
