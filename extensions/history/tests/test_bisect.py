"""zlf bisect: the search on constructed states, and end to end over a generated repository."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from zlf_history import bisect as b

from bisect_fixtures import commit_series, fake_clock, work_op  # noqa: F401  (fake_clock: a fixture)

def make_repo(tmp_path, n=16, slow_at=10, broken_at=8, reps=4):
    """A repository whose commit 0 is good and commits 1..n follow; commit ``slow_at`` makes the op
    ``reps`` times slower for good, commit ``broken_at`` alone does not import. Returns (repo, shas)."""
    def write(repo, k):
        (repo / "ops").mkdir(exist_ok=True)
        (repo / "ops" / "work_ops.py").write_text(work_op(k, reps if k >= slow_at else 1, broken=k == broken_at))

    def message(k):
        return f"revision {k}" + (" (slow)" if k == slow_at else "") + (" (broken)" if k == broken_at else "")

    return commit_series(tmp_path / "opsrepo", n + 1, write, message)


def fake_search(tmp_path, n, outcomes):
    commits = [f"{i:040x}" for i in range(1, n + 1)]
    s = b.Search(tmp_path, {"commits": commits, "steps": []})
    for i, o in outcomes.items():
        s.steps.append({"commit": commits[i], "outcome": o})
    return s, commits


def test_the_bad_end_is_tested_first_then_the_middle(tmp_path):
    s, commits = fake_search(tmp_path, 16, {})
    assert b.next_commit(s) == 15
    s.steps.append({"commit": commits[15], "outcome": b.BAD})
    assert b.next_commit(s) == 7


def test_a_skipped_commit_is_stepped_around_and_may_stay_a_candidate(tmp_path):
    s, commits = fake_search(tmp_path, 16, {15: b.BAD, 7: b.SKIP})
    assert b.next_commit(s) == 6  # the nearest untested to the middle
    s, commits = fake_search(tmp_path, 4, {3: b.BAD, 0: b.GOOD, 1: b.SKIP, 2: b.SKIP})
    assert b.next_commit(s) is None
    s.data.update(good="g" * 40, bad="b" * 40, alpha_step=0.01, direction="slower", repo=str(tmp_path))
    res = b.result(s)
    assert res["first_bad"] is None and res["candidates"] == commits[1:4]
    assert res["skipped"] == commits[1:3]


def test_a_search_whose_bad_end_is_not_bad_says_so(tmp_path):
    s, _ = fake_search(tmp_path, 8, {7: b.GOOD})
    s.data.update(good="g" * 40, bad="b" * 40, alpha_step=0.01, direction="slower", repo=str(tmp_path))
    res = b.result(s)
    assert res["first_bad"] is None and "nothing to bisect" in res["why"]


@pytest.mark.parametrize("verdicts, outcome, disagree", [
    (["SLOWER", "SAME"], b.BAD, []),
    (["SAME", "SAME"], b.GOOD, []),
    (["SLOWER", "FASTER"], b.BAD, ["p1"]),
    (["SAME", "FASTER"], b.GOOD, ["p1"]),
    (["SAME", "UNSURE"], b.UNSURE, []),
])
def test_a_step_is_classified_from_its_verdicts(verdicts, outcome, disagree):
    summary = {"points": [{"point": f"p{i}", "verdict": v, "delta_pct": 1.0} for i, v in enumerate(verdicts)]}
    got, details = b.classify(summary, [], "slower")
    assert got == outcome and details.get("disagree", []) == disagree


def test_a_summary_without_the_chosen_points_is_a_skip():
    got, details = b.classify({"points": [{"point": "x", "verdict": "SLOWER"}]}, ["y"], "slower")
    assert got == b.SKIP


@pytest.mark.parametrize("args, message", [
    (["--good", "HEAD"], "--good REV and --bad REV are both needed"),
    (["--good=--upload-pack=x", "--bad", "HEAD"], "not a revision"),
    (["--good", "nosuchrev", "--bad", "HEAD"], "no such commit"),
    (["--good", "HEAD", "--bad", "HEAD"], "the same commit"),
    (["--good", "HEAD", "--bad", "HEAD~3"], "not an ancestor"),
    (["--good", "HEAD~2", "--bad", "HEAD", "--build", "make"], "--build needs --python"),
])
def test_bad_input_is_one_line_before_anything_runs(zlf_cli, tmp_path, args, message):
    repo, _ = make_repo(tmp_path, n=4, slow_at=99, broken_at=99)
    p = zlf_cli.inprocess("bisect", "ops/work_ops.py::work_op", "--repo", str(repo), "--out", str(tmp_path / "out"),
                          *args)
    assert p.returncode == 2 and message in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_an_op_file_outside_the_repository_is_refused(zlf_cli, tmp_path):
    repo, _ = make_repo(tmp_path, n=2, slow_at=99, broken_at=99)
    p = zlf_cli.inprocess("bisect", "../x.py::op", "--repo", str(repo), "--good", "HEAD~1", "--bad", "HEAD")
    assert p.returncode == 2 and "relative to the repository's top" in p.stderr


def test_resume_takes_no_command_from_the_state_file(zlf_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # this test's own signing key
    state = tmp_path / "bisect_x"
    state.mkdir()
    (state / b.STATE).write_text(json.dumps({
        "format": 1, "repo": str(tmp_path), "good": "a" * 40, "bad": "b" * 40, "commits": ["b" * 40], "steps": [],
        "ops": ["matmul"], "mode": "compiler", "alpha_step": 0.01, "build": "touch /tmp/zlf_pwned",
        "python": "/usr/bin/python3", "good_python": "/usr/bin/python3"}))
    p = zlf_cli.inprocess("bisect", "--resume", str(state))
    assert p.returncode == 2 and "not what zlf bisect wrote for this user" in p.stderr
    assert not Path("/tmp/zlf_pwned").exists()
    # signed by this user's zlf, the build command must still come from the command line
    from zlf.trust import seal

    doc = json.loads((state / b.STATE).read_text())
    (state / b.STATE).write_text(json.dumps(seal(doc)))
    p = zlf_cli.inprocess("bisect", "--resume", str(state))
    assert p.returncode == 2 and "give its --build command again" in p.stderr
    assert not Path("/tmp/zlf_pwned").exists()
    (state / b.STATE).write_text('{"format": 1, "commits": ["../../etc"]}')
    p = zlf_cli.inprocess("bisect", "--resume", str(state))
    assert p.returncode == 2 and "bisect.json" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_bisect_names_the_slow_commit_and_skips_the_broken_one(zlf_cli, tmp_path, fake_clock):
    """16 commits after the good one: commit 10 makes the op 4x slower, commit 8 does not import.
    The campaigns are real zlf ab campaigns; only their timer is the fake clock above."""
    repo, shas = make_repo(tmp_path, n=16, slow_at=10, broken_at=8)
    p = zlf_cli("bisect", "ops/work_ops.py::work_op", "--repo", repo, "--good", shas[0], "--bad", shas[-1],
                "--rounds", "3", "--out", tmp_path / "out", "--format", "json", "--ab-arg=--timer=fakeclock",
                env=fake_clock, timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    res, steps = doc["result"], doc["steps"]
    assert res["first_bad"] == shas[10]
    assert shas[8] in res["skipped"] and "does not import" in next(s["why"] for s in steps if s["commit"] == shas[8])
    assert res["error_bound"] <= 0.05
    by_commit = {s["commit"]: s["outcome"] for s in steps}
    assert all(by_commit[c] == b.GOOD for c in shas[1:10] if c in by_commit and c != shas[8])
    assert all(by_commit[c] == b.BAD for c in shas[10:] if c in by_commit)
    # the state is on disk; a resumed finished search prints the same result without new steps
    folder = next((tmp_path / "out").glob("bisect_*"))
    again = zlf_cli("bisect", "--resume", folder, "--format", "json", env=fake_clock, check_rc=0)
    assert json.loads(again.stdout)["result"]["first_bad"] == shas[10]
    assert len(json.loads(again.stdout)["steps"]) == len(steps)
