"""What the task tests share (imported by the test modules that use them: a ``conftest.py`` here
would shadow the suite's own): the vecadd package, ``zlf task`` judged in this process, and the
environment of the cheat tests."""
from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from zlf.testing import read_records, run_dir_from

REPO = Path(__file__).resolve().parents[3]
#: the small task package every task test judges (three cases of a vector add)
VECADD = REPO / "tests" / "data" / "taskpkg_vecadd"


@attrs.frozen
class Judged:
    """One ``zlf task`` judged in this process: exit code, records, run directory, stdout, stderr."""

    rc: int
    records: list
    run_dir: Path
    out: str
    err: str


def judge_task(tmp_path, capsys, pkg, candidate, *extra) -> Judged:
    """``zlf task PKG --candidate CANDIDATE EXTRA...`` in this process (its checker and worker are
    real child processes), its run directory under ``tmp_path/runs``."""
    from zlf.cli import main

    rc = main(["task", str(pkg), "--candidate", str(candidate), "--ext", "task",
               "--out", str(tmp_path / "runs"), *map(str, extra)])
    cap = capsys.readouterr()
    run_dir = run_dir_from(cap.out)
    return Judged(rc, read_records(run_dir), run_dir, cap.out, cap.err)


@pytest.fixture
def cheat_env(monkeypatch, tmp_path):
    """No progress line, no colour, the judge's own choice of sharing, no honest twin, and a
    folder of its own for each cheat (``ZLF_CHEAT_DIR``); a helper a cheat left running stops
    when the test ends (it watches for ``stop`` there)."""
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("ZLF_TASK_SHARING", raising=False)
    monkeypatch.delenv("FORGE_HONEST", raising=False)
    cheat_dir = tmp_path / "cheat"
    cheat_dir.mkdir()
    monkeypatch.setenv("ZLF_CHEAT_DIR", str(cheat_dir))
    yield cheat_dir
    (cheat_dir / "stop").write_text("")
