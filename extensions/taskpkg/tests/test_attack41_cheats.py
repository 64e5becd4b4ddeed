"""atk41: a red team's cheating candidates against ``zlf task`` (issue 41), beyond test_cheats.py.

Each test judges one cheat (``data/attack41/cands/``) on the CPU and asserts what docs/taskpkg.md
and issue 41 promise: no Accepted with forged work, no forged time left trusted, no effect on a
later run, no way out of the sandbox. A cheat that succeeds today is ``xfail(strict=True)``.
``slowadd`` is the vecadd package with a baseline that costs 20 ms a call (a sleep), so that a
candidate's honest 20 ms of work is far above the host's 5 ms slack of the judge's clock.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

from zlf.testing import read_records, run_dir_from

zlf_taskpkg = pytest.importorskip("zlf_taskpkg")

from zlf.cli import main  # noqa: E402
from zlf_taskpkg import sandbox  # noqa: E402

from task_fixtures import VECADD, cheat_env, judge_task  # noqa: E402,F401  (cheat_env: a fixture)

DATA = Path(__file__).resolve().parent / "data" / "attack41"
SLOW = DATA / "slowadd"
C = DATA / "cands"
NO_BWRAP = sandbox.bwrap_problem()
needs_bwrap = pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap unusable here: {NO_BWRAP}")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("cheat_env")]  # task_fixtures.cheat_env


def judge(tmp_path, capsys, candidate, *extra, pkg=VECADD):
    j = judge_task(tmp_path, capsys, pkg, candidate, *extra)
    return j.rc, j.records, j.run_dir, j.out, j.err


def forged_but_trusted(r, honest_ms: float = 20.0) -> bool:
    """Accepted, its time trusted, and reported far below the work it must do."""
    x = r["extra"]
    return x["verdict"] == "Accepted" and x.get("time_trusted") is True and r["median_ms"] is not None \
        and r["median_ms"] < honest_ms / 4


def probes(log: Path) -> dict:
    return dict(re.findall(r"^PROBE (\w+): (.*)$", log.read_text(errors="replace"), re.M))


# ----------------------------------------------------------------------------- forged work / time
def test_predicted_witness_sets_are_not_accepted_with_a_trusted_time(tmp_path, capsys):
    rc, records, _, out, _ = judge(tmp_path, capsys, C / "predict_witness.py", "--cases", "1", pkg=SLOW)
    r = records[0]
    assert not forged_but_trusted(r), (r["median_ms"], r["extra"]["clock_check"], out)
    assert rc == 1


def test_predict_witness_honest_twin_is_accepted(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FORGE_HONEST", "1")
    rc, records, _, out, _ = judge(tmp_path, capsys, C / "predict_witness.py", "--cases", "1", pkg=SLOW)
    assert rc == 0 and records[0]["extra"]["time_trusted"] is True and records[0]["median_ms"] >= 20, out


def test_work_overlapped_across_the_clocked_batch_is_not_trusted(tmp_path, capsys):
    rc, records, _, out, _ = judge(tmp_path, capsys, C / "parallel_pool.py", "--cases", "1", pkg=SLOW)
    r = records[0]
    assert not forged_but_trusted(r), (r["median_ms"], r["extra"]["clock_check"], out)


@pytest.mark.parametrize("cheat", ["batch_aware.py",   # honest only with Worker.batch on its stack
                                   "input_alias.py",   # memo keyed on the output pointer and a[:8]
                                   "lazy_writer.py",   # the work on a thread nobody joins
                                   "desync.py"])       # an extra 'batched' reply: a stale clock stop
def test_time_cheats_on_a_slow_package_are_refused(tmp_path, capsys, cheat):
    rc, records, _, out, _ = judge(tmp_path, capsys, C / cheat, "--cases", "1", pkg=SLOW)
    r = records[0]
    assert not forged_but_trusted(r), (r["median_ms"], r["extra"].get("clock_check"), out)
    if rc == 0:  # every timed call is now prepared (fresh inputs, poisoned outputs): a cheat that
        # can skip nothing pays for its work, and an honest time is no forgery
        assert r["extra"]["verdict"] == "Accepted" and r["median_ms"] >= 15.0, out
        return
    if r["extra"]["verdict"] == "Accepted":  # then the judge's clock saw the real work
        assert min(r["extra"]["clock_check"]["batch_ms"]) >= 3 * 15.0


def test_a_stopped_clock_is_not_a_trusted_zero(tmp_path, capsys):
    rc, records, _, out, _ = judge(tmp_path, capsys, C / "zero_clock.py", "--cases", "1")
    r = records[0]
    assert r["extra"]["verdict"] == "Accepted"
    assert not (r["median_ms"] == 0 and r["extra"]["time_trusted"] is True), out
    assert rc == 1


def test_a_clock_running_backwards_does_not_pass_without_a_time(tmp_path, capsys):
    rc, records, _, out, _ = judge(tmp_path, capsys, C / "backwards_clock.py", "--cases", "1", pkg=SLOW)
    r = records[0]
    # a timing the judge cannot take is not an Accepted case with a trusted (absent) time and exit 0
    assert not (r["extra"]["verdict"] == "Accepted" and r["median_ms"] is None and rc == 0), (r, out)


def test_forged_checker_events_on_the_worker_pipe_are_not_a_verdict(tmp_path, capsys):
    rc, records, _, out, _ = judge(tmp_path, capsys, C / "forged_events.py", "--cases", "1")
    assert rc == 1 and records[0]["extra"]["verdict"] != "Accepted", out


@needs_bwrap
def test_cpu_burners_do_not_forge_the_next_cases_speedup(tmp_path, capsys):
    """--reuse-worker: the worker's burners spin while the checker times case 3's baseline."""
    rc, records, _, out, _ = judge(tmp_path, capsys, C / "burner.py", "--cases", "1,3", "--reuse-worker",
                                   "--sandbox", "bwrap")
    r = records[-1]
    assert r["extra"]["verdict"] == "Accepted"
    assert (r["extra"]["speedup"] or 0) < 3.0, (r["extra"]["baseline_ms"], r["median_ms"], out)


# ----------------------------------------------------------------------------- sandbox escapes
ESCAPES = ["proc", "write_package", "write_site", "write_home", "write_rundir", "write_tmp", "write_zlf_cache",
           "net", "fds", "shm", "userns", "spawn_server", "survivor"]


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe")
    cheat = tmp / "cheat"
    cheat.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"ZLF_NO_PROGRESS": "1", "NO_COLOR": "1", "ZLF_CHEAT_DIR": str(cheat)}.items():
            mp.setenv(k, v)
        mp.delenv("FORGE_HONEST", raising=False)
        mp.delenv("ZLF_TASK_SHARING", raising=False)
        if os.environ.get("ZLF_SPAWN_SERVER"):  # this session's spawn server, if any, for probe_spawn_server
            mp.setenv("ATK41_SPAWN_SOCKET", os.environ["ZLF_SPAWN_SERVER"])
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            rc = main(["task", str(VECADD), "--candidate", str(C / "escape_probe.py"), "--ext", "task",
                       "--cases", "1", "--sandbox", "bwrap", "--out", str(tmp / "runs")])
    run_dir = run_dir_from(buf.getvalue())
    found = probes(run_dir / "task" / "worker-case1.log")
    import time
    time.sleep(1.0)  # a survivor would have written by now
    yield rc, read_records(run_dir), found, cheat
    for p in [Path(os.path.expanduser("~")) / ".atk41_planted", Path("/tmp/atk41_planted"),
              Path("/var/tmp/atk41_planted"), Path(os.path.expanduser("~")) / ".cache" / "zlf" / "atk41_planted"]:
        with contextlib.suppress(OSError):
            p.unlink()


@needs_bwrap
@pytest.mark.parametrize("probe", ESCAPES)
def test_no_way_out_of_the_sandbox(probe_run, probe):
    rc, records, found, cheat = probe_run
    assert records[0]["extra"]["verdict"] == "Accepted" and records[0]["extra"]["sandbox"] == "bwrap"
    assert probe in found, found
    print(probe, found[probe])
    assert found[probe].startswith("held"), found[probe]
    if probe == "survivor":
        assert not (cheat / "survivor_wrote").exists()
    assert not list(cheat.iterdir()), list(cheat.iterdir())


@needs_bwrap
def test_later_honest_run_is_untouched_after_the_probes(probe_run, tmp_path, capsys):
    rc, records, _, out, _ = judge(tmp_path, capsys, VECADD / "candidates" / "wrong.py", "--cases", "1")
    assert records[0]["extra"]["verdict"] == "Wrong Answer", out
    assert not (VECADD / "planted.py").exists() and not (VECADD / "userns_planted").exists()


@pytest.fixture
def unix_server(monkeypatch):
    """A Unix socket listening under /tmp (outside any folder the worker is given)."""
    import shutil
    import socket
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="zlf-atk41-sock-", dir="/tmp"))
    path = folder / "listen.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    monkeypatch.setenv("ATK41_UNIX_SOCKET", str(path))
    yield server, path
    server.close()
    shutil.rmtree(folder, ignore_errors=True)


@needs_bwrap
def test_a_unix_socket_under_tmp_is_out_of_reach(tmp_path, capsys, unix_server):
    import socket

    server, path = unix_server
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:  # it is connectable from outside
        client.connect(str(path))
        server.accept()[0].close()
    rc, records, run_dir, out, _ = judge(tmp_path, capsys, C / "unix_socket.py", "--cases", "1",
                                         "--sandbox", "bwrap")
    found = probes(run_dir / "task" / "worker-case1.log")
    assert rc == 0 and records[0]["extra"]["sandbox"] == "bwrap", out
    assert found["unix_socket"].startswith("held"), found
    server.setblocking(False)
    with pytest.raises(BlockingIOError):  # no connection from the sandbox is pending
        server.accept()


# ----------------------------------------------------------------------------- what the record says
@pytest.mark.parametrize("mode", ["none", pytest.param("auto", marks=needs_bwrap),
                                  pytest.param("bwrap", marks=needs_bwrap)])
def test_the_record_says_the_sandbox_that_was_in_force(tmp_path, capsys, mode):
    rc, records, run_dir, out, err = judge(tmp_path, capsys, C / "reality_probe.py", "--cases", "1",
                                           "--sandbox", mode)
    found = probes(run_dir / "task" / "worker-case1.log")
    meta = json.loads((run_dir / "meta.json").read_text())
    in_force = "none" if found["ns"] == os.readlink("/proc/self/ns/pid") else "bwrap"
    assert rc == 0 and records[0]["extra"]["sandbox"] == in_force == meta["task"]["sandbox"]["mode"]
    assert f"sandbox: {in_force} (" in err
    if in_force == "none":
        assert found["sees_checker"] == "yes"  # what it says it leaves open, it does
        assert "sandbox: none: not protected" in out and meta["task"]["sandbox"]["not_protected"]
        assert sandbox.NOT_PROTECTED in (run_dir / "run.log").read_text()
    else:
        assert found["sees_checker"] == "no" and "not protected" not in out
    assert in_force == ("none" if mode == "none" else "bwrap")
