"""zlf task against a hostile candidate: the seven classes of cheats a contest red team used.

Each cheat (``data/cheats/``) was Accepted -- with forged work, a forged time, or an effect on a
later run -- by the judge before its sandbox, its clock and its judge-owned fields; each has an
honest twin (``FORGE_HONEST=1``, the same cost of work) that must stay Accepted with a trusted
time. The work of the cheats that lie about time costs 20 ms a call, so the judge's clock sees it
whatever the machine's load (its slack on the host is 5 ms a call).
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
from pathlib import Path

import pytest

from zlf.testing import run_dir_from

zlf_taskpkg = pytest.importorskip("zlf_taskpkg")

from zlf_taskpkg import sandbox  # noqa: E402

from task_fixtures import VECADD, cheat_env, judge_task  # noqa: E402,F401  (cheat_env: a fixture)

PKG = VECADD
CHEATS = Path(__file__).resolve().parent / "data" / "cheats"
NO_BWRAP = sandbox.bwrap_problem()
needs_bwrap = pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap unusable here: {NO_BWRAP}")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cheat_env")]  # task_fixtures.cheat_env


def judge(tmp_path, capsys, candidate, *extra, pkg=PKG):
    j = judge_task(tmp_path, capsys, pkg, candidate, *extra)
    return j.rc, j.records, j.run_dir, j.out


def verdicts(records) -> list:
    return [r["extra"]["verdict"] for r in records]


# ----------------------------------------------------------------------------- 1. planted code
@needs_bwrap
def test_code_planted_in_the_package_reaches_no_later_checker(tmp_path, capsys):
    pkg = tmp_path / "pkg"
    shutil.copytree(PKG, pkg)
    before = (pkg / "problem.py").read_bytes()
    rc, records, _, _ = judge(tmp_path, capsys, CHEATS / "plant_problem.py", "--sandbox", "bwrap", pkg=pkg)
    assert verdicts(records) == ["Wrong Answer"] * 3  # not one case judged by a planted check
    assert (pkg / "problem.py").read_bytes() == before
    rc, records, _, _ = judge(tmp_path, capsys, PKG / "candidates" / "wrong.py", "--cases", "1", pkg=pkg)
    assert verdicts(records) == ["Wrong Answer"]


@needs_bwrap
def test_code_planted_in_site_packages_is_refused(tmp_path, capsys):
    planted = [Path(d) / "zlf_taskpkg_cheat_probe.pth" for d in site.getsitepackages()]
    try:
        rc, records, _, _ = judge(tmp_path, capsys, CHEATS / "plant_pth.py", "--cases", "1", "--sandbox", "bwrap")
        assert verdicts(records) == ["Accepted"]  # it computes; its write failed
        assert not any(p.exists() for p in planted)
    finally:
        for p in planted:
            if p.exists():
                p.unlink()


# ----------------------------------------------------------------------------- 2. the checker's memory
def checker_memory_modes():
    modes = [pytest.param("bwrap", marks=needs_bwrap)]
    # without a sandbox the non-dumpable checker is all there is: no use against root
    modes.append(pytest.param("none", marks=pytest.mark.skipif(os.geteuid() == 0, reason="root may ptrace anyone")))
    return modes


@pytest.mark.parametrize("mode", checker_memory_modes())
def test_the_checkers_memory_is_closed_to_the_candidate(tmp_path, capsys, mode):
    rc, records, _, _ = judge(tmp_path, capsys, CHEATS / "checker_memory.py", "--cases", "1", "--sandbox", mode)
    assert rc == 1 and verdicts(records) == ["Wrong Answer"], records[0]["extra"]["judge_output"]


# ----------------------------------------------------------------------------- 3. survivors
@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_a_detached_helper_does_not_outlive_its_case(tmp_path, capsys, monkeypatch, mode):
    rc, records, _, _ = judge(tmp_path, capsys, CHEATS / "survivor.py", "--cases", "1", "--sandbox", mode)
    assert verdicts(records) == ["Accepted"]
    pid_file = Path(os.environ["ZLF_CHEAT_DIR"]) / "survivor.pid"
    if mode == "none":  # it could say where it was: it is gone (killed and reaped)
        pid = int(pid_file.read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    else:
        assert not pid_file.exists()  # its sandbox let it write nothing outside
    # a later honest run is not touched: its shared buffers are not overwritten
    rc, records, _, _ = judge(tmp_path, capsys, PKG / "candidates" / "correct.py", "--cases", "3",
                              "--sandbox", mode)
    assert rc == 0 and verdicts(records) == ["Accepted"], records[0]["extra"]["judge_output"]


def test_kill_survivors_spares_the_processes_kept(tmp_path):
    kept = subprocess.Popen(["sleep", "60"])
    try:
        before = {p for p in sandbox._children_map().get(os.getpid(), ())}
        stray = subprocess.Popen(["sleep", "60"])
        killed = sandbox.kill_survivors(keep=[kept.pid, *(before - {kept.pid})])
        assert stray.pid in killed and kept.pid not in killed
        assert stray.wait(timeout=10) is not None and kept.poll() is None
    finally:
        kept.kill()
        kept.wait()


# ----------------------------------------------------------------------------- 4. judge-owned fields
@pytest.mark.parametrize("honest", [False, True])
def test_judge_owned_fields_are_the_judges(tmp_path, capsys, monkeypatch, honest):
    if honest:
        monkeypatch.setenv("FORGE_HONEST", "1")
    rc, records, _, out = judge(tmp_path, capsys, CHEATS / "forge_fields.py", "--cases", "1")
    r = records[0]
    x = r["extra"]
    assert x["verdict"] == "Accepted" and x["time_trusted"] is True, x["judge_output"]
    assert r["timer"] == "host_wall" and x["baseline_timer"] == "host_wall"  # a CPU run is never "cupti"
    assert x["speedup"] == pytest.approx(x["baseline_ms"] / r["median_ms"]) and x["speedup"] < 1  # 20 ms a call
    assert x["distinct_input_sets"] == x["generated_input_sets"] == 7
    assert x["judge_output"] == "" and x["suspicious"] == []
    assert "cupti" not in out


# ----------------------------------------------------------------------------- 5., 6. times
TIME_CHEATS = ["slow_clock.py",     # 5: its process's clocks run 1000x slow
               "side_thread.py",    # 5: the work on a thread, after the call returned
               "content_cache.py"]  # 6: a cache keyed on the inputs' content (the timed calls' sets repeat)
#: 6: skip the work where the answer is left in the output: every timed call finds poison instead
SKIP_CHEATS = ["skip_written.py",       # an output that is not poison is taken as done
               "skip_same_buffers.py"]  # ... on buffers an earlier call had


@pytest.mark.parametrize("candidate", TIME_CHEATS)
def test_a_forged_time_is_not_trusted(tmp_path, capsys, candidate):
    rc, records, _, out = judge(tmp_path, capsys, CHEATS / candidate, "--cases", "1")
    r = records[0]
    assert rc == 1, out
    if r["extra"]["verdict"] == "Wrong Answer":  # the work was not there when the checker looked
        return
    assert r["extra"]["verdict"] == "Accepted" and r["status"] == "FAILED"
    assert r["extra"]["time_trusted"] is False and r["extra"]["speedup"] is None
    assert "judge's clock" in r["extra"]["time_not_trusted"][0] and r["error"].startswith("time not trusted")
    assert "Accepted, time not trusted" in out and "1 case(s) Accepted with a time not trusted" in out
    meta = json.loads((run_dir_from(out) / "meta.json").read_text())
    assert meta["task"]["summary"]["time_not_trusted_cases"] == [1]


@pytest.mark.parametrize("candidate", SKIP_CHEATS)
def test_an_answer_left_in_the_output_is_never_there_for_a_timed_call(tmp_path, capsys, candidate):
    """Before every timed call its outputs are poisoned and its inputs hold the next input set:
    a candidate that returns early where the answer is already there does its work every call,
    and its time is its work's."""
    rc, records, _, out = judge(tmp_path, capsys, CHEATS / candidate, "--cases", "1")
    r = records[0]
    assert rc == 0 and r["extra"]["verdict"] == "Accepted" and r["extra"]["time_trusted"] is True, out
    assert r["median_ms"] >= 20.0  # its 20 ms of work, in every timed call
    assert r["extra"]["fresh_calls"]["prepared_calls"] >= len(r["samples"])


@pytest.mark.parametrize("candidate", TIME_CHEATS + SKIP_CHEATS + ["forge_fields.py"])
def test_the_honest_twin_keeps_a_trusted_time(tmp_path, capsys, monkeypatch, candidate):
    monkeypatch.setenv("FORGE_HONEST", "1")
    rc, records, _, out = judge(tmp_path, capsys, CHEATS / candidate, "--cases", "1")
    r = records[0]
    assert rc == 0 and r["extra"]["verdict"] == "Accepted" and r["extra"]["time_trusted"] is True, out
    assert r["median_ms"] >= 20.0  # its 20 ms of work, reported
    clock = r["extra"]["clock_check"]
    assert clock["calls"] == 3 and len(clock["batch_ms"]) >= 3 and len(clock["noop_ms"]) == 5


# ----------------------------------------------------------------------------- 7. inputs that repeat
def test_a_package_seeding_its_own_generator_still_gets_fresh_inputs(tmp_path, capsys, monkeypatch):
    pkg = CHEATS / "pkg_generator"
    rc, records, _, out = judge(tmp_path, capsys, CHEATS / "compute_once.py", "--cases", "1", pkg=pkg)
    assert rc == 1 and verdicts(records) == ["Wrong Answer"]
    assert "stale result" in records[0]["extra"]["judge_output"]
    monkeypatch.setenv("FORGE_HONEST", "1")
    rc, records, _, out = judge(tmp_path, capsys, CHEATS / "compute_once.py", "--cases", "1", pkg=pkg)
    assert rc == 0 and verdicts(records) == ["Accepted"]
    assert records[0]["extra"]["distinct_input_sets"] == records[0]["extra"]["generated_input_sets"] == 7
    assert "inputs repeat" not in out


def test_inputs_that_cannot_differ_are_said_and_a_fast_time_not_trusted(tmp_path, capsys, monkeypatch):
    pkg = tmp_path / "fixed"
    shutil.copytree(CHEATS / "pkg_generator", pkg)
    problem = pkg / "problem.py"
    text = problem.read_text().replace("torch.randn(n, dtype=torch.float32, device=device, generator=g)",
                                       "torch.arange(n, dtype=torch.float32, device=device)")
    text = text.replace("def baseline(a, b, out, n):\n", "def baseline(a, b, out, n):\n    import time\n"
                                                         "    time.sleep(0.02)\n")
    problem.write_text(text)
    rc, records, _, out = judge(tmp_path, capsys, CHEATS / "compute_once.py", "--cases", "1", pkg=pkg)
    x = records[0]["extra"]
    assert x["verdict"] == "Accepted" and x["distinct_input_sets"] == 1 and x["generated_input_sets"] == 7
    assert rc == 1 and x["time_trusted"] is False
    assert x["time_not_trusted"][0].startswith("inputs repeat: caching not excluded")
    assert "inputs repeat: caching not excluded on case(s) 1" in out


# ----------------------------------------------------------------------------- the choice
def test_the_sandbox_choice_says_what_it_leaves_open(monkeypatch):
    from zlf import UsageError

    monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    with pytest.raises(UsageError, match="bwrap not found on PATH .*install bubblewrap"):
        sandbox.choose("bwrap")
    mode, why = sandbox.choose("auto")
    assert mode == "none" and why.startswith("no sandbox (bwrap not found") and sandbox.NOT_PROTECTED in why
    assert sandbox.choose("none") == ("none", "--sandbox none: " + sandbox.NOT_PROTECTED)
    with pytest.raises(UsageError, match="--sandbox must be one of"):
        sandbox.choose("docker")


@needs_bwrap
def test_code_planted_in_zlfs_bytecode_cache_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ZLF_CACHE_DIR", str(tmp_path / "zlf-cache"))
    (tmp_path / "zlf-cache").mkdir()
    rc, records, _, _ = judge(tmp_path, capsys, CHEATS / "plant_pyc.py", "--cases", "1", "--sandbox", "bwrap")
    assert verdicts(records) == ["Accepted"]  # it computes; its write failed
    assert not (tmp_path / "zlf-cache" / "pycache" / "planted.pyc").exists()


def test_the_checker_never_shares_by_expandable_segments():
    env = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:True", "HOME": "/h"}
    assert sandbox.checker_env(env) == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64,expandable_segments:False",
                                        "HOME": "/h"}
    assert sandbox.checker_env({"HOME": "/h"}) == {"HOME": "/h"}
