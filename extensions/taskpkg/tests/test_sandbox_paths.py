"""zlf task's sandbox hides /tmp behind a private tmpfs: what the worker's Python needs from there
(an environment or an editable checkout under /tmp, as throwaway and CI environments have) is
bound back read-only, so an honest candidate is judged the same wherever the environment lies."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

zlf_taskpkg = pytest.importorskip("zlf_taskpkg")

from zlf_taskpkg import sandbox  # noqa: E402

from task_fixtures import VECADD  # noqa: E402

NO_BWRAP = sandbox.bwrap_problem()


def test_an_interpreter_prefix_under_tmp_is_bound_back_read_only(tmp_path, monkeypatch):
    env_dir = Path(tempfile.mkdtemp(prefix="zlf-env-", dir="/tmp"))
    try:
        monkeypatch.setattr(sys, "prefix", str(env_dir))
        place = sandbox.Place(tmp_path / "out")
        try:
            cmd = sandbox.bwrap_command([sys.executable, "-c", "pass"], place, share_pid=False)
        finally:
            place.remove()
        binds = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--ro-bind-try"]
        assert str(env_dir.resolve()) in binds
        assert cmd.index("--tmpfs") < cmd.index("--ro-bind-try")  # bound over the private /tmp
    finally:
        env_dir.rmdir()


@pytest.mark.slow
@pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap unusable here: {NO_BWRAP}")
def test_an_environment_under_tmp_judges_an_honest_candidate_under_bwrap(tmp_path):
    # a throwaway environment under /tmp that sees this one's packages (zlf among them)
    env_dir = Path(tempfile.mkdtemp(prefix="zlf-env-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir / "v")], check=True)
        python = env_dir / "v" / "bin" / "python"
        purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages())
        Path(purelib, "outer.pth").write_text(lines)
        out = tmp_path / "runs"
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "ZLF_SPAWN_SERVER")}
        r = subprocess.run([str(python), "-m", "zlf", "task", str(VECADD), "--candidate",
                            str(VECADD / "candidates" / "correct.py"), "--sandbox", "bwrap", "--cases", "1",
                            "--out", str(out)], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        records = [json.loads(line) for p in out.glob("*/results.jsonl") for line in p.read_text().splitlines()]
        assert records and {rec["extra"]["verdict"] for rec in records} == {"Accepted"}
    finally:
        subprocess.run(["rm", "-rf", str(env_dir)])


@pytest.mark.skipif(NO_BWRAP is not None, reason=f"bubblewrap unusable here: {NO_BWRAP}")
def test_the_checker_of_a_cuda_pair_has_the_pairs_directory_as_its_dev_shm(tmp_path):
    """The CUDA driver keeps part of a legacy IPC export in /dev/shm (``cuda.shm.*``), where the
    importer opens it. The sandboxed worker sees only the pair's directory there, so the checker
    runs with that directory as its /dev/shm too: before, every sandboxed case on a GPU failed
    with "mapping of buffer object failed". What the checker writes there lands in the pair's
    directory, not the machine's, and its control descriptors still reach it."""
    place = sandbox.Place(tmp_path / "out")
    name = f"cuda.shm.zlf-test-{os.getpid()}"
    r, w = os.pipe()
    try:
        code = f"import os, sys; open('/dev/shm/{name}', 'w').write('x'); os.write(int(sys.argv[1]), b'ok')"
        argv = sandbox.shm_view_command([sys.executable, "-c", code, str(w)], place)
        done = subprocess.run(argv, pass_fds=(w,), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert os.read(r, 2) == b"ok"
        assert (place.shm / name).exists() and not os.path.exists(f"/dev/shm/{name}")
    finally:
        os.close(r)
        os.close(w)
        place.remove()


@pytest.mark.parametrize("mode, share_pid, viewed", [(sandbox.BWRAP, True, True), (sandbox.BWRAP, False, False),
                                                     (sandbox.NONE, True, False)],
                         ids=["bwrap-ipc", "bwrap-shm", "none"])
def test_the_judge_gives_the_checker_the_pairs_dev_shm_only_for_a_sandboxed_cuda_pair(tmp_path, monkeypatch,
                                                                                        mode, share_pid, viewed):
    from zlf_taskpkg import judge

    seen = {}

    class Started(Exception):
        pass

    def popen(argv, **kw):
        seen.update(argv=argv, env=kw["env"])
        for fd in kw.get("pass_fds", ()):
            os.close(fd)
        raise Started

    monkeypatch.setattr(judge.subprocess, "Popen", popen)
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: "/usr/bin/bwrap")
    place = sandbox.Place(tmp_path / "out")
    try:
        with pytest.raises(Started):
            judge.WorkerProcess(tmp_path / "spec.json", tmp_path / "checker.log", 1, "zlf_taskpkg.checker",
                                place=place, mode=mode, share_pid=share_pid)
    finally:
        place.remove()
    assert (seen["argv"][0] == "/usr/bin/bwrap") is viewed
    assert seen["env"][judge.SHM_DIR_ENV] == ("/dev/shm" if viewed else str(place.shm))
    assert seen["env"].get(sandbox.SHM_VIEW_ENV) == ("1" if viewed else None)
    if viewed:
        assert seen["argv"][seen["argv"].index("--bind") + 1:][:2] == [str(place.shm), "/dev/shm"]


def test_a_checker_whose_dev_shm_would_follow_links_does_not_start(tmp_path, monkeypatch, capsys):
    """In the view the candidate can write to the checker's /dev/shm: where the kernel cannot make
    it follow no links (before Linux 5.10), the checker refuses to run rather than write through a
    link the candidate planted."""
    from zlf_taskpkg import checker

    monkeypatch.setattr(checker.faulthandler, "enable", lambda: None)  # needs a real stderr
    monkeypatch.setattr(checker, "make_undumpable", lambda: True)
    monkeypatch.setattr(checker, "follow_no_links", lambda: "mount(2) refused: Invalid argument")
    monkeypatch.setenv(sandbox.SHM_VIEW_ENV, "1")
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    assert checker.main([str(spec), "0", "1"]) == 70
    assert "will not share the candidate's /dev/shm: mount(2) refused" in capsys.readouterr().err
