"""zlf task against hostile or broken packages, candidates and compilers: a package whose check
raises, a problem module that exits the judge, a metadata file that is not UTF-8, a candidate that
floods its log with escape codes, an nvcc that succeeds without writing anything, a cache of
compiled libraries others could write."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from zlf import UsageError
from zlf.testing import read_records, run_dir_from

zlf_taskpkg = pytest.importorskip("zlf_taskpkg")

from zlf.cli import main  # noqa: E402
from zlf_taskpkg import judge as judge_mod  # noqa: E402
from zlf_taskpkg.candidate import Candidate, compile_cuda  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PKG = REPO / "tests" / "data" / "taskpkg_vecadd"


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("ZLF_TASK_SHARING", raising=False)


def copy_pkg(tmp_path) -> Path:
    pkg = tmp_path / "pkg"
    shutil.copytree(PKG, pkg)
    return pkg


def task(tmp_path, *args):
    return main(["task", *map(str, args), "--ext", "task", "--out", str(tmp_path / "runs")])


@pytest.mark.slow
def test_a_check_that_raises_is_a_judge_error(tmp_path, capsys):
    pkg = copy_pkg(tmp_path)
    problem = pkg / "problem.py"
    problem.write_text(problem.read_text() + "\n\ndef check(*args, **kwargs):\n    raise KeyError('oops')\n")
    rc = task(tmp_path, pkg, "--candidate", PKG / "candidates" / "correct.py", "--cases", "1")
    records = read_records(run_dir_from(capsys.readouterr().out))
    assert rc == 1 and records[0]["extra"]["verdict"] == "Judge Error"
    assert "check() raised" in records[0]["extra"]["judge_output"] and "KeyError" in records[0]["extra"]["judge_output"]


@pytest.mark.parametrize("code", ["import os\nos._exit(3)\n", "import sys\nsys.exit(4)\n"])
def test_a_problem_module_that_exits_is_one_line(tmp_path, capsys, code):
    pkg = copy_pkg(tmp_path)
    problem = pkg / "problem.py"
    problem.write_text(code + problem.read_text())
    assert task(tmp_path, pkg, "--candidate", PKG / "candidates" / "correct.py") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zlf: error: ") and "must not exit the judge" in err and "\n" not in err
    assert not (tmp_path / "runs").exists()


def test_metadata_that_is_not_utf8_is_one_line(tmp_path, capsys):
    pkg = copy_pkg(tmp_path)
    (pkg / "meta.json").unlink()
    (pkg / "problem.json").write_bytes(b'{"name": "caf\xe9"}')
    assert task(tmp_path, pkg, "--candidate", PKG / "candidates" / "correct.py") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zlf: error: ") and "not UTF-8" in err and "\n" not in err


@pytest.mark.slow
def test_a_flood_of_output_is_capped_and_control_bytes_escaped(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(judge_mod, "LOG_CAP_BYTES", 256 << 10)
    flood = tmp_path / "flood.py"
    flood.write_text("import sys, torch\n\ndef run_kernel(a, b, out, n):\n"
                     "    sys.stdout.write('\\x1b[31mred\\x07' * 20000 + '\\n')\n"
                     "    torch.add(a, b, out=out)\n")
    rc = task(tmp_path, PKG, "--candidate", flood, "--cases", "1")
    run_dir = run_dir_from(capsys.readouterr().out)
    assert rc == 0
    log = (run_dir / "task" / "worker-case1.log").read_bytes()
    assert len(log) < (256 << 10) * 2  # escaped bytes take four: at most twice the cap here
    assert b"\x1b" not in log and b"\x07" not in log and b"\\x1b[31mred\\x07" in log
    assert b"not kept" in log


def fake_nvcc(tmp_path, body: str) -> Path:
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\ncase "$1" in --version) echo "fake nvcc 12.0"; exit 0;; esac\n'
                    'echo run >> "$(dirname "$0")/calls"\n'
                    'while [ "$#" -gt 0 ]; do [ "$1" = "-o" ] && OUT="$2"; shift; done\n' + body)
    fake.chmod(0o755)
    return fake


def test_an_nvcc_that_writes_nothing_is_a_compile_error(tmp_path, monkeypatch):
    fake_nvcc(tmp_path, "exit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cand = compile_cuda(Candidate.open(PKG / "candidates" / "correct.cu"), tmp_path / "cache", "sm_90a")
    assert cand.compile_failed and "wrote no library" in cand.compile_output
    assert not list((tmp_path / "cache").rglob("candidate.so"))


def test_a_cached_library_is_used_only_when_private_and_unchanged(tmp_path, monkeypatch, capsys):
    fake_nvcc(tmp_path, 'printf "\\177ELF library" > "$OUT"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    calls = tmp_path / "bin" / "calls"
    cache = tmp_path / "cache"
    source = Candidate.open(PKG / "candidates" / "correct.cu")
    first = compile_cuda(source, cache, "sm_90a")
    assert not first.compile_cached and calls.read_text().count("run") == 1
    assert compile_cuda(source, cache, "sm_90a").compile_cached  # private and unchanged: used
    Path(first.library).write_bytes(b"\x7fELF planted")  # replaced behind the judge's back
    again = compile_cuda(source, cache, "sm_90a")
    assert not again.compile_cached and calls.read_text().count("run") == 2
    assert Path(again.library).read_bytes() == b"\x7fELF library"
    assert "do not match the hash" in capsys.readouterr().err
    entry = Path(again.library).parent
    entry.chmod(entry.stat().st_mode | stat.S_IWOTH)  # a folder others may write: not trusted
    with pytest.raises(UsageError, match="writable by others"):
        compile_cuda(source, cache, "sm_90a")


def _enospc(*_a, **_k):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("where", ["setup", pytest.param("record", marks=pytest.mark.slow)])
def test_a_full_disk_leaves_a_consistent_meta_and_no_reserve(tmp_path, capsys, monkeypatch, where):
    import json

    from zlf.config import RunConfig
    from zlf.rundir import RESERVE, RunDir

    if where == "setup":  # the run configuration the children read cannot be written
        monkeypatch.setattr(RunConfig, "write", _enospc)
    else:  # the first finished case cannot be appended
        monkeypatch.setattr(RunDir, "append", _enospc)
    rc = task(tmp_path, PKG, "--candidate", PKG / "candidates" / "correct.py", "--cases", "1")
    err = capsys.readouterr().err
    assert rc == 2 and "No space left on device" in err and "Traceback" not in err
    (run_dir,) = (tmp_path / "runs").iterdir()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "disk full"
    assert not (run_dir / RESERVE).exists()


# ---------------------------------------------------------------- the problem module, read in a child
def test_the_package_is_read_in_a_child_with_the_same_facts():
    from zlf_taskpkg import probe
    from zlf_taskpkg.package import TaskPackage

    pkg = TaskPackage.open(PKG)
    facts = probe.read(pkg, "2-3")
    assert facts.cases == [2, 3] and facts.base_seed == pkg.base_seed() and facts.outputs == pkg.declared_outputs()
    assert facts.case_shapes(3) == [list(s) for s in pkg.case_sizes(3)[0]] and facts.case_shapes(1) is None


@pytest.mark.parametrize("code, step", [
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "importing it killed its process with SIGKILL"),
    ("import ctypes\nctypes.string_at(0)\n", "importing it killed its process with SIGSEGV"),
    ("\n\ndef getTestCaseSize():\n    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)\n",
     "calling getTestCaseSize() for case 1 killed its process with SIGKILL"),
], ids=["import_sigkill", "import_segfault", "sizes_sigkill"])
def test_a_problem_module_that_kills_its_process_is_one_line_and_the_judge_lives(tmp_path, capsys, code, step):
    pkg = copy_pkg(tmp_path)
    problem = pkg / "problem.py"
    problem.write_text(problem.read_text() + code if code.startswith("\n") else code + problem.read_text())
    assert task(tmp_path, pkg, "--candidate", PKG / "candidates" / "correct.py") == 2  # this process lives
    err = capsys.readouterr().err.strip()
    assert err.startswith("zlf: error: problem module ") and step in err and "\n" not in err, err
    assert not (tmp_path / "runs").exists()


def test_a_problem_module_that_never_finishes_importing_is_stopped(tmp_path):
    """A module that sleeps forever on import: stopped at the limit, with what it started. It never
    ends by itself, so the outcome does not depend on the machine's speed (only how far the child
    got: still starting, or importing)."""
    from zlf_taskpkg import probe
    from zlf_taskpkg.package import TaskPackage

    pkg = copy_pkg(tmp_path)
    problem = pkg / "problem.py"
    problem.write_text("import os, subprocess, sys, time\n"
                       f"open({str(tmp_path / 'helper.pid')!r}, 'w').write(str(subprocess.Popen("
                       "[sys.executable, '-c', 'import time; time.sleep(1000)']).pid))\n"
                       "time.sleep(1000)\n" + problem.read_text())
    with pytest.raises(UsageError, match=r": (starting|importing it) did not finish within 0.5 s$"):
        probe.read(TaskPackage.open(pkg), None, limit=0.5)
    pid = (tmp_path / "helper.pid").read_text() if (tmp_path / "helper.pid").exists() else ""
    if pid.isdigit():  # the module got that far within the limit: its helper went with it
        assert _gone(int(pid)), "the module's helper outlived the judge's reading of the package"


def _gone(pid: int, ceiling: float = 120.0) -> bool:
    """Whether ``pid`` ends (or is a zombie) within a ceiling for a loaded machine (never a
    measured time: the wait returns as soon as it is gone)."""
    import time

    deadline = time.monotonic() + ceiling
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.05)
    return False
