"""``zlf ab --task PKG --a-candidate A --b-candidate B``: a campaign of two task-package candidates."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from zlf import ab
from zlf.ab import OK, Campaign, CampaignPlan, Side
from zlf.config import Declaring, option_sets_of
from zlf.errors import UsageError
from zlf.options import add_run_options
from zlf.testing import ExtensionInfo as Info
from zlf.testing import FakeHooks, campaign_data
from zlf.testing import extension_hooks as real_hooks

pytest.importorskip("zlf_taskpkg")
from zlf_taskpkg import campaign as task_campaign  # noqa: E402

PKG = Path(__file__).resolve().parents[3] / "tests" / "data" / "taskpkg_vecadd"
CANDIDATES = PKG / "candidates"


#: the task extension's campaign options, typed as zlf.plugins.Hooks declares them
TASK_OPTIONS = []


def parse(*argv):
    """``zlf ab``'s parser with the task extension's campaign options."""
    parser = argparse.ArgumentParser()
    ab.configure_parser(parser)
    add_run_options(parser, ab.TRAITS)
    view = Declaring(parser)
    task_campaign.add_options(view)
    TASK_OPTIONS[:] = option_sets_of([("task", view.added)])
    return parser.parse_args(list(argv))


def plan_of(args) -> CampaignPlan:
    """The plan the extension's campaign_setup makes of ``args`` (as ``zlf ab`` hands them to it)."""
    plan = CampaignPlan()
    hooks = SimpleNamespace(option_sets=(), campaign_option_sets=tuple(TASK_OPTIONS))
    task_campaign.setup(plan, ab.CampaignOptions.from_args(args, hooks))
    return plan


def build_sides(args):
    return ab.build_sides(args, plan_of(args).side_args)


def test_candidates_define_the_sides():
    a, b = build_sides(parse("--task", str(PKG), "--a-candidate", str(CANDIDATES / "correct.py"),
                                "--b-candidate", str(CANDIDATES / "correct_triton.py")))
    assert a.args == ("--candidate", str(CANDIDATES / "correct.py"))
    assert b.args == ("--candidate", str(CANDIDATES / "correct_triton.py"))
    assert a.cache_key() != b.cache_key() and "correct_triton.py" in b.describe()
    a, b = build_sides(parse("--task", str(PKG), "--aa", "--a-candidate", str(CANDIDATES / "correct.py")))
    assert a.args == b.args
    with pytest.raises(UsageError, match="needs --task"):
        build_sides(parse("--a-candidate", str(CANDIDATES / "correct.py")))
    with pytest.raises(UsageError, match="side B has no candidate"):
        build_sides(parse("--task", str(PKG), "--a-candidate", str(CANDIDATES / "correct.py"), "--switch", "S"))
    with pytest.raises(UsageError, match="not a file"):
        build_sides(parse("--task", str(PKG), "--a-candidate", "nope.py", "--b-candidate", "nope.py"))


def test_task_op_and_its_command_line(tmp_path):
    op = task_campaign.task_op(str(PKG))
    assert (op.name, op.command, op.run_spec) == ("vecadd", "task", str(PKG))
    args = parse("--task", str(PKG), "--a-candidate", str(CANDIDATES / "correct.py"),
                 "--b-candidate", str(CANDIDATES / "correct.py"), "--cases", "1,2")
    plan = plan_of(args)
    assert plan.ops == [op] and plan.run_args == ["--reuse-worker", "--cases", "1,2"] and plan.extensions == ["task"]
    assert plan.per_op and plan.label == "vecadd"
    assert ab.selection(FakeHooks([Info("seed")]), plan.extensions) == {"ext": ("seed", "task"), "no_ext": None}
    # the candidate variable differs by design: no switch the guard looks for
    sides = (Side("A", {"ZLF_TASK_CANDIDATE": "/a.py"}), Side("B", {"ZLF_TASK_CANDIDATE": "/b.py"}))
    assert ab.switch_guard(sides, [], ["/nonexistent"], plan.not_switches) == []
    with pytest.raises(UsageError, match="--cases needs --task"):
        plan_of(parse("--switch", "X", "--cases", "1"))
    with pytest.raises(UsageError, match="not both"):
        plan_of(parse("add", "--task", str(PKG), "--a-candidate", str(CANDIDATES / "correct.py")))
    data = campaign_data(tmp_path)
    data["ops"] = [op.to_json()]
    data["sides"][0]["args"] = ["--candidate", "/c/a.py"]
    data["sides"][1]["args"] = ["--candidate", "/c/b.py"]
    data["run_args"] = plan.run_args
    c = Campaign.create(tmp_path / "o", "t", data, real_hooks("task"))
    c.add_round(1)
    cmd = c.command(c.runs[1], Path("/s"))
    assert cmd[3:5] == ["task", str(PKG)] and cmd[-4:] == ["--candidate", "/c/b.py", "--config", str(c.path / "_config" / "B.json")]
    assert cmd.index("--candidate") == len(cmd) - 4  # the side's candidate is the last --candidate
    assert "--reuse-worker" in cmd and c.config("B").command == "task"  # zlf task --config reads it
    assert [r["dir"] for r in c.runs] == ["vecadd/r1_A", "vecadd/r1_B"]


@pytest.mark.slow
def test_two_correct_candidates_end_to_end(zlf_cli, tmp_path):
    proc = zlf_cli("ab", "--task", PKG, "--a-candidate", CANDIDATES / "correct.py",
                   "--b-candidate", CANDIDATES / "correct_triton.py", "--rounds", "2", "--cases", "1,2",
                   "--rep-ms", "5", "--ext", "task", "--out", "o", check_rc=0)
    (camp,) = (tmp_path / "o").glob("ab_vecadd_*")
    state = json.loads((camp / "campaign.json").read_text())
    assert [(r["dir"], r["status"]) for r in state["runs"]] == [
        ("vecadd/r1_A", OK), ("vecadd/r1_B", OK), ("vecadd/r2_B", OK), ("vecadd/r2_A", OK)]
    for r in state["runs"]:
        meta = json.loads((camp / r["dir"] / "meta.json").read_text())
        assert meta["task"]["candidate"]["path"].endswith("correct.py" if r["side"] == "A" else "correct_triton.py")
        # every run judged with its side's configuration file: the campaign's run options, no flags
        command = (camp / "vecadd" / "logs" / f"r{r['round']}_{r['side']}.txt").read_text().splitlines()[0]
        assert command.endswith(f"--config {camp / '_config' / (r['side'] + '.json')}") and "--rep-ms" not in command
        ran = json.loads((camp / r["dir"] / "task" / "config.json").read_text())
        assert ran["command"] == "task" and ran["timing"]["rep_ms"] == 5.0 and "task" in ran["ext"]
    summary = json.loads((camp / "summary.json").read_text())
    assert sorted(p["point"] for p in summary["points"]) == ["vecadd/1000/float32/case1", "vecadd/4096/float32/case2"]
    assert "verdicts:" in proc.stdout and "--candidate" in proc.stderr
