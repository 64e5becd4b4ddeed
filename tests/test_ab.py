"""``zlf ab``: sides, pass-through, guards, campaign state, reports, resume and failed rounds."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zlf import ab, cli, stats
from zlf.ab import cli as ab_cli
from zlf.ab import report as ab_report
from zlf.ab import FAILED, OK, PENDING, SKIPPED, Campaign, OpSpec, Side, device_flags
from zlf.config import RunConfig
from zlf.options import add_run_options
from zlf.errors import UsageError
from zlf.records import PointRecord
from zlf.rundir import RunDir
from zlf import testing
from zlf.testing import ExtensionInfo as Info
from zlf.testing import campaign_data
from zlf.testing import extension_hooks as real_hooks

from conftest import _env


# ----------------------------------------------------------------------------- helpers
def parse(*argv):
    parser = argparse.ArgumentParser()
    ab.configure_parser(parser)
    add_run_options(parser, ab.TRAITS)
    return parser.parse_args(list(argv))


def _seed_like_options(parser):
    g = parser.add_argument_group("seed")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--shapes", metavar="FILE")
    g.add_argument("--fast", action="store_true")
    g.add_argument("--replay-from", metavar="RUN_DIR")


def FakeHooks(infos=()):
    """Hooks of a "seed" extension with a few run options (zlf.testing.FakeHooks)."""
    return testing.FakeHooks(infos, declare=_seed_like_options, owner="seed")


def fake_run(campaign, run, times: dict, timer="host_wall", status="ok", meta=None):
    """File a run as if ``zlf run`` had written it: one record per point."""
    d = campaign.run_dir(run)
    d.mkdir(parents=True)
    rd = RunDir(d)
    rd.write_meta(meta or {"status": "complete", "warnings": []})
    for point, ms in times.items():
        op, shape, dtype = point.split("/")
        rd.append(PointRecord(point=point, op=op, shape=(int(shape),), dtype=dtype, status=status,
                              timer=timer, median_ms=ms if status == "ok" else None))
    run.update(status=OK if status == "ok" else FAILED, rc=0 if status == "ok" else 1, seconds=0.1,
               error=None if status == "ok" else f"{point} FAILED: wrong result", flags=device_flags(d))
    campaign.save()


def fill(campaign, effect=1.6, jitter=(1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.002, 0.998, 1.003, 0.997, 1.0, 1.0)):
    for run in campaign.runs:
        if run["status"] != PENDING:
            continue
        k = run["round"]
        j = jitter[(k - 1 + (2 if run["side"] == "B" else 0)) % len(jitter)]
        scale = effect if run["side"] == "B" else 1.0
        fake_run(campaign, run, {f"{run['op']}/1024/float32": 1.0 * j * scale, f"{run['op']}/4096/float32": 2.0 * j})


# ----------------------------------------------------------------------------- sides and arguments
def test_sides_from_switch_env_and_python():
    a, b = ab.build_sides(parse("--switch", "S", "--a-env", "K=1", "--b-env", "K=2", "--b-python", sys.executable))
    assert a.env == {"S": "0", "K": "1"} and b.env == {"S": "1", "K": "2"}
    assert b.python == os.path.abspath(sys.executable) and a.python == ""
    assert a.cache_key() != b.cache_key() and a.cache_key().startswith("A-")


def test_aa_copies_a_and_refuses_a_b_definition():
    a, b = ab.build_sides(parse("--aa", "--a-env", "K=1"))
    assert b.env == a.env == {"K": "1"} and b.name == "B"
    assert a.cache_key() != b.cache_key()  # own cache per side even in an A/A
    with pytest.raises(UsageError, match="--aa"):
        ab.build_sides(parse("--aa", "--switch", "S"))
    with pytest.raises(UsageError, match="say what differs"):
        ab.build_sides(parse())
    with pytest.raises(UsageError, match="K=V"):
        ab.build_sides(parse("--a-env", "nonsense"))


def test_op_specs(tmp_path):
    f = tmp_path / "ops.py"
    assert OpSpec.parse("add") == OpSpec("add", "add")
    assert OpSpec.parse(f"neg:{f}") == OpSpec("neg", f"{f}::neg", str(f))
    assert OpSpec.parse(f"{f}::neg").run_spec == f"{f}::neg"
    assert OpSpec.parse(str(f)).name == "ops"


def test_side_configs_carry_the_run_options_typed():
    from zlf.ab import CampaignPlan

    hooks = FakeHooks([Info("seed")])
    p = argparse.ArgumentParser()
    ab.configure_parser(p)
    add_run_options(p, ab.TRAITS)
    hooks.add_options(p)
    awkward = 'my "shapes" -- --rep-ms 9 \'x\'.yaml'  # flags re-spelt for a shell or argv would break it
    args = p.parse_args(["--switch", "S", "--rep-ms", "5", "--no-flush-l2", "--dtype", "float16", "--dtype", "bfloat16",
                         "--seed", "3", f"--shapes={awkward}", "--fast", "--gpus", "0,1", "--out", "o", "--format", "json",
                         "--time-limit", "7"])
    sides = ab.build_sides(args)
    configs = ab.side_configs(args, hooks, CampaignPlan(ops=[OpSpec("add", "add")]), sides)
    assert set(configs) == {"A", "B"}
    config = configs["A"]
    assert config.timing.rep_ms == 5.0 and config.timing.flush_l2 is False and config.dtypes == ("float16", "bfloat16")
    assert config.options.seed == 3 and config.options.shapes == awkward and config.options.fast is True
    assert config.time_limit_s == 7.0 and config.command == "run" and config.ext == ("seed",)
    # the campaign's own settings never reach its runs
    assert (config.ops, config.out, config.summary_format, config.gpus) == ((), "runs", "table", None)
    assert RunConfig.from_json(json.loads(json.dumps(config.to_json()))) == config  # the file holds it exactly
    # an option a campaign sets itself (CampaignPlan.own_options, from an extension's campaign_setup)
    args = p.parse_args(["--switch", "S", "--replay-from", "x"])
    with pytest.raises(UsageError, match="--replay-from is set by zlf ab itself"):
        ab.side_configs(args, hooks, CampaignPlan(own_options=["replay_from"]), sides)
    # what an extension's campaign_setup sets is a value in the configuration
    config = ab.side_configs(args, hooks, CampaignPlan(options={"fast": True}), sides)["B"]
    assert config.options.fast is True and config.options.replay_from == "x"
    with pytest.raises(UsageError, match="'nope' is not declared"):
        ab.side_configs(args, hooks, CampaignPlan(options={"nope": 1}), sides)


def test_extensions_are_selected_explicitly():
    assert ab.selection(FakeHooks([Info("seed"), Info("shapes", "inactive")])) == {"ext": ("seed",), "no_ext": None}
    assert ab.selection(FakeHooks([Info("seed", "disabled")])) == {"ext": None, "no_ext": ("seed",)}
    assert ab.selection(FakeHooks([Info("seed")]), ["task"]) == {"ext": ("seed", "task"), "no_ext": None}


def test_a_run_need_changes_the_run_configuration_not_its_command_line(tmp_path):
    hooks = real_hooks("autotune_replay")
    data = campaign_data(tmp_path)
    data["replay"] = True
    c = Campaign.create(tmp_path / "out", "t", data, hooks)
    for k in (1, 2):
        c.add_round(k)
    assert json.loads((c.path / "_config" / "A.json").read_text()) == RunConfig().to_json()
    assert c.data["configs"] == {"A": "_config/A.json", "B": "_config/B.json"}
    assert c.run_config(c.runs[1]).options.get("replay_from") is None  # nothing recorded yet
    (c.path / "add" / "r1_A" / "autotune_records").mkdir(parents=True)
    assert [(r["round"], r["side"]) for r in c.runs] == [(1, "A"), (1, "B"), (2, "B"), (2, "A")]
    assert c.run_config(c.runs[0]) == c.config("A")  # round 1 A records: its side's configuration as written
    for run in c.runs[1:]:
        assert c.run_config(run).options.replay_from == str(c.path / "add" / "r1_A")
        cmd = c.command(run, Path("/s"))
        assert "--replay-from" not in cmd and cmd[-2:] == ["--config", str(c.path / "_config" / f"{run['side']}.json")]
    spec = c.run_spec(c.runs[1])
    assert spec["config"] == {"base": "_config/B.json", "options": {}, "extensions": [], "file": "add/logs/r1_B.json"}
    assert spec["needs"] == ["_config/B.json", "add/r1_A/autotune_records"]
    assert spec["if_exists"] == [{"path": "add/r1_A/autotune_records", "extensions": [],
                                  "options": {"autotune_replay": {"replay_from": "{campaign}/add/r1_A"}}}]
    env_a, env_b = c.environment(c.runs[0]), c.environment(c.runs[1])
    assert env_a["X"] == "0" and env_b["X"] == "1"
    assert env_a["TRITON_CACHE_DIR"] != env_b["TRITON_CACHE_DIR"]


def test_the_campaign_fixture_plans_rounds_with_side_configurations(zlf_campaign):
    c = zlf_campaign(ops=("add", "mm"), rounds=2, configs={"A": RunConfig(backend="cpu"), "B": RunConfig(backend="cpu")})
    assert [r["dir"] for r in c.runs][:4] == ["add/r1_A", "add/r1_B", "mm/r1_A", "mm/r1_B"] and len(c.runs) == 8
    assert c.config("A").backend == "cpu" and c.run_config(c.runs[0]) == c.config("A")
    assert Campaign.open(c.path).data["configs"] == {"A": "_config/A.json", "B": "_config/B.json"}


def test_a_run_spec_writes_the_configuration_its_run_gets(tmp_path):
    from zlf.executors import run_config_file

    root = tmp_path / "c"
    RunConfig(backend="cpu").with_changes(rep_ms=3.0).write(root / "_config" / "A.json")
    spec = {"config": {"base": "_config/A.json", "options": {}, "extensions": [], "file": "op/logs/r1_A.json"},
            "if_exists": [{"path": "op/r1_A/rec", "options": {"x": {"src": "{campaign}/op/r1_A"}}, "extensions": ["x"]}]}
    assert run_config_file(spec, root) == root / "_config" / "A.json"  # nothing to change: the side's file
    (root / "op" / "r1_A" / "rec").mkdir(parents=True)
    path = run_config_file(spec, root)
    assert path == root / "op" / "logs" / "r1_A.json"
    config = RunConfig.read(path)
    assert config.options.values == {"x": {"src": str(root / "op" / "r1_A")}} and config.ext == ("x",)
    assert config.timing.rep_ms == 3.0 and config.backend == "cpu"
    spec["config"]["file"] = "../outside.json"  # campaign.json is editable: no file outside the campaign
    with pytest.raises(UsageError, match="outside"):
        run_config_file(spec, root)


# ----------------------------------------------------------------------------- guards
def test_switch_guard_searches_bytes_and_warns_when_unreferenced(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libfake.so").write_bytes(b"\x00\x7fELF" + b"\x00" * 100 + b"MY_SWITCH\x00" + b"\x01" * 50)
    sides = (Side("A", {"MY_SWITCH": "0", "NULL_ONE": "0"}), Side("B", {"MY_SWITCH": "1", "NULL_ONE": "1"}))
    found = {r["name"]: r["found"] for r in ab.switch_guard(sides, [], [str(lib)])}
    assert found == {"MY_SWITCH": [str(lib / "libfake.so")], "NULL_ONE": []}
    lines = ab.switch_guard_messages(ab.switch_guard(sides, [], [str(lib)]))
    assert len(lines) == 1 and "NULL_ONE is not referenced" in lines[0]


def test_default_switch_sources_are_triton_and_the_op_files(tmp_path):
    f = tmp_path / "ops.py"
    f.write_text("import os\nos.environ.get('ZZ')\n")
    paths = ab.default_switch_sources([Side("A"), Side("B")], [OpSpec.parse(f"neg:{f}"), OpSpec("add", "add")])
    assert any(Path(p).name == "triton" for p in paths)
    assert str(f) in paths and any(p.endswith("builtin.py") for p in paths)


def test_null_switch_dry_run_warns_and_runs_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["ab", "add", "--switch", "ZLF_AB_NOBODY_READS_THIS", "--dry-run", "--out", "o"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "ZLF_AB_NOBODY_READS_THIS is not referenced" in err and "NOT FOUND" in out
    assert not (tmp_path / "o").exists()


def test_device_flags_from_meta(tmp_path):
    RunDir(tmp_path).write_meta({"warnings": ["another process is using GPU 0: 123, python, 500 MiB"],
                                 "device_state_start": {"clocks_throttle_reasons.active": "0x0000000000000001"},
                                 "device_state_end": {"clocks_throttle_reasons.active": "0x0000000000000004"}})
    flags = device_flags(tmp_path)
    assert flags[0].startswith("another process") and "throttled at end (reasons 0x0000000000000004)" in flags


class BusyBackend:
    def __init__(self, busy_for):
        self.calls, self.busy_for = 0, busy_for

    def busy_warnings(self):
        self.calls += 1
        return ["another process is using GPU 0"] if self.calls <= self.busy_for else []


def test_require_idle_waits_then_refuses(tmp_path):
    assert ab.wait_until_idle(BusyBackend(1), wait_s=5, poll_s=0.01) == []
    c = Campaign.create(tmp_path, "t", campaign_data(tmp_path))
    c.add_round(1)
    with pytest.raises(ab.Stopped, match="still busy"):
        ab.run_pending(c, ab.Printer(c), busy=BusyBackend(10**6), idle_wait=0.05)
    assert all(r["status"] == PENDING for r in c.runs)


def _ir(run_dir, text):
    d = run_dir / "ir" / "1024" / "add_kernel"
    d.mkdir(parents=True)
    (d / "w4s3.ttgir").write_text(text)


def test_ir_guard_says_prominently_when_nothing_changed(tmp_path):
    c = Campaign.create(tmp_path, "t", campaign_data(tmp_path, ops=("add", "mm")), real_hooks("ir_dump"))
    c.add_round(1)
    fill(c)
    _ir(c.run_dir(c.find("add", 1, "A")), "tt.load\n")
    _ir(c.run_dir(c.find("add", 1, "B")), "tt.load\n")
    _ir(c.run_dir(c.find("mm", 1, "A")), "tt.dot\n")
    _ir(c.run_dir(c.find("mm", 1, "B")), "ttng.warp_group_dot\n")
    lines = ab.campaign_guards(c, ["add", "mm"])  # ir_dump's campaign_guards
    assert len(lines) == 2 and lines[0].startswith("!!! add: the switch changed NO compiled code")
    assert lines[1].startswith("mm: IR differs between A and B on 1 of 1 shapes")


# ----------------------------------------------------------------------------- statistics over a campaign, report
def test_report_of_a_complete_campaign(tmp_path, capsys):
    c = Campaign.create(tmp_path, "t", campaign_data(tmp_path, rounds_first=6, max_rounds=6))
    for k in range(1, 7):
        c.add_round(k)
    fill(c)
    c.data["status"] = "complete"
    c.save()
    rc = cli.main(["ab", "--resume", str(c.path)])
    out = capsys.readouterr().out
    assert rc == 1  # --fail-on-slower and add/1024 is 60% slower
    summary = (c.path / "summary.log").read_text()
    for column in ab_report.HEADERS:
        assert column in summary
    assert "add/1024/float32" in summary and "SLOWER" in summary and "SAME" in summary
    assert "verdicts: 0 FASTER, 1 SLOWER, 1 SAME, 0 UNSURE" in out
    doc = json.loads((c.path / "summary.json").read_text())
    assert {p["point"]: p["verdict"] for p in doc["points"]} == {"add/1024/float32": "SLOWER", "add/4096/float32": "SAME"}
    assert (c.path / "report.md").read_text().count("| add/") == 2
    assert (c.path / "delta_intervals.png").stat().st_size > 1000


def test_mixed_timers_and_missing_points(tmp_path):
    c = Campaign.create(tmp_path, "t", campaign_data(tmp_path))
    c.add_round(1)
    c.add_round(2)
    for run in c.runs:
        timer = "cudagraph" if (run["round"], run["side"]) == (2, "B") else "cuda_event"
        times = {"add/1024/float32": 3.0 if run["side"] == "B" else 1.0}
        if run["side"] == "A":
            times["add/8/float32"] = 1.0
        fake_run(c, run, times, timer=timer)
    results, remarks, excluded, _ = ab.analyse(c)
    (r,) = results
    assert r.verdict == stats.UNSURE and r.note.startswith("mixed timers")
    assert excluded == {"add/8/float32": "no time in r1_B, r2_B"}


def test_failed_op_gets_no_report_and_remaining_runs_are_skipped(tmp_path):
    c = Campaign.create(tmp_path, "t", campaign_data(tmp_path, ops=("add", "bad")))
    c.add_round(1)
    c.add_round(2)
    for run in c.runs:
        if run["op"] == "add" or run["round"] == 1:
            fake_run(c, run, {f"{run['op']}/8/float32": 1.0}, status="ok" if run["op"] == "add" else "FAILED")
    ab.run_pending(c, ab.Printer(c))  # only 'bad' runs are left: skipped without starting a process
    assert [r["status"] for r in c.runs if r["op"] == "bad"] == [FAILED, FAILED, SKIPPED, SKIPPED]
    results, *_ = ab.analyse(c)
    assert [r.point for r in results] == ["add/8/float32"]
    assert "NO REPORT for bad: run r1_A failed" in ab_report.render(c, results, {}, {}, 0.05, [])


def test_until_confident_adds_rounds_and_stops(tmp_path, monkeypatch):
    c = Campaign.create(tmp_path, "t", campaign_data(tmp_path, rounds_first=3, until=True, max_rounds=8))
    for k in (1, 2, 3):
        c.add_round(k)

    def execute(self, run):
        fill(self)

    monkeypatch.setattr(Campaign, "execute", execute)
    ab.drive(c, ab.Printer(c))
    looks = c.data["looks"]
    assert looks[0]["rounds"] == 3 and looks[-1]["rounds"] == c.planned_rounds() <= 8
    assert sum(l["alpha"] for l in looks) <= 0.05 + 1e-12
    results, *_ = ab.analyse(c)
    assert looks[-1]["undecided"] == 0 or c.planned_rounds() == 8
    assert {r.verdict for r in results} <= {stats.SLOWER, stats.SAME, stats.UNSURE}


def test_until_confident_freezes_verdicts_and_extends_only_undecided_ops(tmp_path, monkeypatch):
    import numpy as np

    c = Campaign.create(tmp_path, "t", campaign_data(tmp_path, ops=("clear", "noisy"), rounds_first=3, until=True, max_rounds=6))
    for k in (1, 2, 3):
        c.add_round(k)
    rng = np.random.default_rng(0)

    def execute(self, run):
        for r in self.runs:
            if r["status"] != PENDING:
                continue
            wiggle = 1.0 + 0.0005 * (-1) ** (r["round"] + (r["side"] == "B"))
            if r["op"] == "clear":
                ms = (1.5 if r["side"] == "B" else 1.0) * wiggle
            else:
                ms = float(np.exp(rng.normal(0.0, 0.2)))
            fake_run(self, r, {f"{r['op']}/8/float32": ms})

    monkeypatch.setattr(Campaign, "execute", execute)
    ab.drive(c, ab.Printer(c))
    rounds = {op: max(r["round"] for r in c.runs if r["op"] == op) for op in ("clear", "noisy")}
    assert rounds == {"clear": 3, "noisy": 6}  # decided after the first look: no more runs for it
    assert c.data["frozen"]["clear/8/float32"] == [stats.SLOWER, 3]
    assert c.data["looks"][0]["ops_extended"] == ["noisy"]
    results, *_ = ab.analyse(c)
    by = {r.point: r for r in results}
    assert by["clear/8/float32"].verdict == stats.SLOWER and by["clear/8/float32"].decided_at == 3


def test_fewer_than_three_rounds_warn_loudly_and_margin_is_an_alias(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["ab", "--switch", "X", "--rounds", "2", "--margin", "3", "--dry-run", "add"])
    err = capsys.readouterr().err
    assert rc == 0 and "fewer than 3 rounds" in err and "--margin is deprecated" in err
    with pytest.raises(SystemExit):  # refused while parsing (zlf.options.Number): a percentage above 0
        parse("--switch", "X", "--min-effect", "0", "add")


def test_an_old_campaign_json_still_reports(tmp_path):
    data = campaign_data(tmp_path, rounds_first=3, max_rounds=3)
    data["statistics"] = {"alpha": 0.05, "margin_pct": 2.0, "min_effect_pct": 1.0, "noise_from": "/gone",
                          "floors": {"add/1024/float32": 3.0}, "until_confident": False, "first_look": 3, "max_rounds": 3}
    c = Campaign.create(tmp_path, "t", data)
    for k in (1, 2, 3):
        c.add_round(k)
    fill(c)
    results, remarks, excluded, alpha = ab.analyse(c)
    text = ab_report.write(c, results, remarks, excluded, alpha, [])
    assert "older zlf" in text and {r.point: r.verdict for r in results}["add/1024/float32"] == stats.SLOWER
    doc = json.loads((c.path / "summary.json").read_text(), parse_constant=lambda x: pytest.fail(x))
    assert doc["min_effect_pct"] == 1.0


def test_noise_from_reads_an_aa_campaign(tmp_path):
    aa = Campaign.create(tmp_path, "aa", campaign_data(tmp_path, rounds_first=3, aa=True))
    for k in (1, 2, 3):
        aa.add_round(k)
    fill(aa, effect=1.0)
    results, remarks, excluded, alpha = ab.analyse(aa)
    ab_report.write(aa, results, remarks, excluded, alpha, [])
    noise = ab.load_noise(aa.path)
    assert set(noise) == {"add/1024/float32", "add/4096/float32"}
    assert all(len(n["a_ms"]) == len(n["b_ms"]) == 3 for n in noise.values())
    assert "run-to-run noise" in (aa.path / "summary.log").read_text()
    # an A/A summary written before per-side times were kept: its per-round deltas still serve
    doc = json.loads((aa.path / "summary.json").read_text())
    for p in doc["points"]:
        del p["a_ms"], p["b_ms"]
    (aa.path / "summary.json").write_text(json.dumps(doc))
    old = ab.load_noise(aa.path)
    assert set(old) == set(noise) and all(len(n["deltas_pct"]) == 3 and "a_ms" not in n for n in old.values())
    assert all(stats.aa_noise_at(old, p, 0.0).df_paired == 2 for p in old)
    ab_dir = Campaign.create(tmp_path, "ab", campaign_data(tmp_path))
    ab_dir.data["status"] = "complete"
    results, *_ = ab.analyse(ab_dir)
    ab_report.write(ab_dir, results, {}, {}, 0.05, [])
    with pytest.raises(UsageError, match="not an A/A"):
        ab.load_noise(ab_dir.path)


# ----------------------------------------------------------------------------- real processes (CPU, tiny)
def _zlf(*args, cwd, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


@pytest.mark.slow
def test_resume_after_a_killed_campaign(tmp_path):
    proc = _zlf("ab", "add", "--switch", "ZLF_AB_TEST_NULL", "--rounds", "2", "--rep-ms", "5", "--controls", "none",
                "--out", "o", cwd=tmp_path)
    deadline = time.monotonic() + 120
    state = None
    while time.monotonic() < deadline:
        files = list((tmp_path / "o").glob("ab_*/campaign.json"))
        if files:
            try:
                state = json.loads(files[0].read_text())
            except json.JSONDecodeError:
                state = None
            if state and [r["status"] for r in state["runs"]][:2] == ["ok", "running"]:
                break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"campaign never reached its second run: {state}")
    os.kill(proc.pid, signal.SIGKILL)  # the second run in flight (whether it has finished or not, resume completes)
    proc.communicate()
    camp = files[0].parent
    done = _zlf("ab", "--resume", camp, cwd=tmp_path)
    out, err = done.communicate(timeout=180)
    assert done.returncode == 0, out + err
    state = json.loads((camp / "campaign.json").read_text())
    assert [r["status"] for r in state["runs"]] == ["ok"] * 4 and state["status"] == "complete"
    assert [r["dir"] for r in state["runs"]] == ["add/r1_A", "add/r1_B", "add/r2_B", "add/r2_A"]
    for r in state["runs"]:
        records, _ = RunDir(camp / r["dir"]).records()
        assert len(records) == 2 and json.loads((camp / r["dir"] / "meta.json").read_text())["status"] == "complete"
    assert not list(camp.glob("add/.staging/*"))
    assert "add/5000/float32" in (camp / "summary.log").read_text()
    assert "ZLF_AB_TEST_NULL is not referenced" in (camp / "summary.log").read_text()


OP_FILE = '''
import os
import torch
import zlf


def make(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))


def _neg(x, out):
    if os.environ.get("ZLF_AB_TEST_BREAK") == "1":  # side B's "compiler" is broken
        out.copy_(x)
    else:
        torch.neg(x, out=out)


neg = zlf.Op(name="neg", fn=_neg, make_inputs=make, shapes=[(256,)], reference=lambda x, out: -x, outputs=(1,))
'''


@pytest.mark.slow
def test_an_op_failing_on_one_side_gets_no_report(tmp_path):
    (tmp_path / "my_ops.py").write_text(OP_FILE)
    proc = _zlf("ab", "neg:my_ops.py", "--switch", "ZLF_AB_TEST_BREAK", "--rounds", "2", "--controls", "none", "--rep-ms", "5",
                "--out", "o", cwd=tmp_path)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, out + err
    (camp,) = (tmp_path / "o").glob("ab_ZLF_AB_TEST_BREAK_*")
    state = json.loads((camp / "campaign.json").read_text())
    assert [(r["dir"], r["status"]) for r in state["runs"]] == [
        ("neg/r1_A", "ok"), ("neg/r1_B", "failed"), ("neg/r2_B", "skipped"), ("neg/r2_A", "skipped")]
    assert "wrong result" in state["runs"][1]["error"]
    assert "NO REPORT for neg: run r1_B failed" in out
    assert "(no point has a complete pair of rounds)" in out
    assert (camp / "neg" / "r1_B" / "results.jsonl").is_file()  # the raw runs stay on disk
    assert "is not referenced" not in err  # the switch guard found it in the op file


# ----------------------------------------------------------------------------- review fixes
def test_an_incomplete_round_gets_no_report(tmp_path):
    c = Campaign.create(tmp_path / "o", "t", campaign_data(tmp_path, ops=("add", "mm")))
    for k in (1, 2):
        c.add_round(k)
    fill(c)
    c.find("add", 2, "A").update(status=PENDING)  # e.g. a run that exited 130 under --gpus
    c.find("add", 2, "B").update(status=SKIPPED)
    assert c.incomplete_ops() == {"add": ["r2_B skipped", "r2_A pending"]}
    values, _, _, _ = ab.collect(c)
    assert values and all(p.startswith("mm/") for p in values)
    text = ab_report.render(c, [], {}, {}, 0.05, [])
    assert "NO REPORT for add: run(s) not done: r2_B skipped, r2_A pending" in text


def test_op_spec_passes_an_extension_spelling_through(tmp_path):
    assert OpSpec.parse("mm:blas_perf") == OpSpec("mm", "mm:blas_perf")
    assert OpSpec.parse("mm:blas_perf::test_blas_benchmark") == OpSpec("mm", "mm:blas_perf::test_blas_benchmark")
    f = tmp_path / "ops.py"
    assert OpSpec.parse(f"neg:{f}").source == str(f)  # .py: a file, even before it exists
    with pytest.raises(UsageError, match="not both"):
        OpSpec.parse(f"neg:{f}::neg")


def test_an_extensions_side_variable_is_no_switch_and_its_dry_run_names_its_command(capsys):
    sides = (Side("A", {"ZLF_TASK_CANDIDATE": "/a.py"}), Side("B", {"ZLF_TASK_CANDIDATE": "/b.py"}))
    assert [r["name"] for r in ab.switch_guard(sides, [], ["/nonexistent"])] == ["ZLF_TASK_CANDIDATE"]
    assert ab.switch_guard(sides, [], ["/nonexistent"], not_switches=("ZLF_TASK_CANDIDATE",)) == []
    data = {"statistics": {"first_look": 2, "until_confident": False, "max_rounds": 2}, "replay": False,
            "extension_args": [], "run_args": ["--reuse-worker"]}
    config = RunConfig(command="task", ext=("seed",))
    ab_cli._print_dry_run(data, *sides, [OpSpec("vecadd", "/pkg", "/pkg", command="task")], [], {"A": config, "B": config})
    out = capsys.readouterr().out
    assert "  zlf task /pkg --reuse-worker --config _config/<side>.json" in out
    assert f"_config/A.json: {json.dumps(config.to_json(), sort_keys=True)}" in out


def test_campaign_json_is_fsynced_before_the_rename(tmp_path, monkeypatch):
    from zlf import rundir as campaign_module

    synced = []
    real = os.fsync
    monkeypatch.setattr(campaign_module.os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    campaign_module.write_atomic(tmp_path / "x.json", "{}\n")
    assert synced and (tmp_path / "x.json").read_text() == "{}\n"


def test_a_refused_option_combination_leaves_no_campaign(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["ab", "add", "--switch", "S", "--require-idle", "--gpus", "0", "--out", "o"])
    assert rc == 2 and "--require-idle" in capsys.readouterr().err
    assert not list(tmp_path.glob("o/ab_*"))
    c = Campaign.create(tmp_path / "r", "t", campaign_data(tmp_path))
    c.add_round(1)
    c.data["require_idle"] = True
    c.save()
    before = (c.path / "campaign.json").read_text()
    rc = cli.main(["ab", "--resume", str(c.path), "--gpus", "0"])
    assert rc == 2 and (c.path / "campaign.json").read_text() == before


# ----------------------------------------------------------------------------- shared processes
SHARED_OPS = '''
import os
import sys
import torch
import zlf


def make(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))


def _neg(x, out):
    torch.neg(x, out=out)


def _boom(x, out):
    if sum("my_ops.py" in a for a in sys.argv) > 1:  # dies whenever it shares its process
        os._exit(3)
    torch.neg(x, out=out)


def _bad(x, out):
    if os.environ.get("ZLF_AB_TEST_BREAK") == "1":  # side B's "compiler" is broken
        out.copy_(x)
    else:
        torch.neg(x, out=out)


def _op(name, fn):
    return zlf.Op(name=name, fn=fn, make_inputs=make, shapes=[(256,), (512,)], reference=lambda x, out: -x, outputs=(1,))


neg, boom, bad = _op("neg", _neg), _op("boom", _boom), _op("bad", _bad)
'''


@pytest.mark.slow
def test_shared_processes_isolate_a_crashing_and_a_failing_op(tmp_path):
    (tmp_path / "my_ops.py").write_text(SHARED_OPS)
    proc = _zlf("ab", "neg:my_ops.py", "boom:my_ops.py", "bad:my_ops.py", "--switch", "ZLF_AB_TEST_BREAK",
                "--rounds", "2", "--controls", "none", "--rep-ms", "2", "--warmup-ms", "1", "--out", "o", cwd=tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, out + err  # bad failed, as it would alone
    (camp,) = (tmp_path / "o").glob("ab_*")
    state = json.loads((camp / "campaign.json").read_text())
    assert state["process"] == "shared"
    runs = {r["dir"]: r for r in state["runs"]}
    # neg shared every process; its run directories hold its records only
    assert all(runs[f"neg/{d}"]["process"].startswith("_shared/") and runs[f"neg/{d}"]["status"] == "ok"
               for d in ("r1_A", "r1_B", "r2_B", "r2_A"))
    for d in ("r1_A", "r2_A"):
        records, _ = RunDir(camp / "neg" / d).records()
        assert {r.op for r in records} == {"neg"} and len(records) == 2
        meta = json.loads((camp / "neg" / d / "meta.json").read_text())
        assert meta["ops"] == ["neg"] and meta["counts"]["ok"] == 2 and meta["shared_process"]["ops"]
    # boom crashed the first shared process: its rounds ran alone, and it is reported
    assert "crashed in _shared/r1_A" in runs["boom/r1_A"]["shared_error"] and "exit code 3" in runs["boom/r1_A"]["shared_error"]
    assert all(runs[f"boom/{d}"]["status"] == "ok" and runs[f"boom/{d}"].get("alone") and "process" not in runs[f"boom/{d}"]
               for d in ("r1_A", "r1_B", "r2_B", "r2_A"))
    assert "boom/256/float32" in out and "boom r1_A: crashed in _shared/r1_A" in err
    # bad failed its check in the shared B process, then alone: no report, as today
    assert runs["bad/r1_B"]["status"] == "failed" and "wrong result" in runs["bad/r1_B"]["error"]
    assert runs["bad/r1_A"]["status"] == "ok" and runs["bad/r1_A"].get("alone")  # A re-ran alone too: one pair, one way
    assert [runs[f"bad/{d}"]["status"] for d in ("r2_B", "r2_A")] == ["skipped", "skipped"]
    assert "NO REPORT for bad: run r1_B failed" in out
    assert "neg/512/float32" in out


def test_process_per_op_and_task_campaigns_keep_one_process_per_run(tmp_path, capsys):
    args = parse("add", "softmax", "--switch", "X", "--process-per-op", "--dry-run")
    session = type("S", (), {"hooks": FakeHooks([Info("seed")]), "config": None})()
    ab_cli._new_campaign(args, session)
    out = capsys.readouterr().out
    assert "  zlf run add " in out and "  zlf run softmax " in out
    ab_cli._new_campaign(parse("add", "softmax", "--switch", "X", "--dry-run"), session)
    assert "  zlf run add softmax " in capsys.readouterr().out
    with pytest.raises(UsageError, match="_shared"):
        ab_cli._new_campaign(parse("_shared", "--switch", "X", "--dry-run"), session)


def test_a_shared_run_directory_is_split_per_op_with_its_ir_shapes(tmp_path):
    from zlf.ab import split_run_dir

    hooks = real_hooks("ir_dump")  # ir/<shape>/ is split per shape by the extension that writes it
    raw = tmp_path / "raw"
    (raw / "ir" / "256").mkdir(parents=True)
    (raw / "ir" / "64x64").mkdir(parents=True)
    (raw / "ir" / "index.tsv").write_text("all\n")
    (raw / "ir" / "256" / "k.ttgir").write_text("neg kernel")
    (raw / "ir" / "64x64" / "k.ttgir").write_text("mm kernel")
    (raw / "autotune_records").mkdir()
    (raw / "autotune_records" / "k.json").write_text("{}")
    rd = RunDir(raw)
    rd.write_meta({"status": "crashed", "ops": ["mm", "neg"], "points": 2})
    rd.write_shapes({"neg": [(256,)], "mm": [(64, 64)]})
    rd.append(PointRecord(point="neg/256/float32", op="neg", shape=(256,), dtype="float32", status="ok", median_ms=1.0))
    rd.append(PointRecord(point="mm/64x64/float32", op="mm", shape=(64, 64), dtype="float32", status="ok", median_ms=2.0))
    dest = tmp_path / "neg" / "r1_A"
    split_run_dir(raw, dest, {"neg"}, 1, {"key": "_shared/r1_A", "ops": ["neg", "mm"], "rc": 1}, hooks)
    records, _ = RunDir(dest).records()
    assert [r.point for r in records] == ["neg/256/float32"]
    assert sorted(p.name for p in (dest / "ir").iterdir()) == ["256", "index.tsv"]
    assert (dest / "autotune_records" / "k.json").is_file()
    meta = RunDir(dest).meta()
    assert meta["ops"] == ["neg"] and meta["status"] == "complete" and meta["shared_process"]["status"] == "crashed"
    assert list(RunDir(dest).shapes()) == ["neg"]


def test_plan_line_counts_the_named_ops_and_one_process_per_round_and_side(tmp_path, monkeypatch):
    from zlf.ab.cli import plan_line
    from zlf.ab.layout import SHARED_PROCESS

    data = campaign_data(tmp_path, ops=("relu", "canary_matmul", "canary_add"), rounds_first=3, max_rounds=3,
                         canary_ops=["canary_matmul", "canary_add"])
    data["process"] = SHARED_PROCESS
    c = ab.Campaign.create(tmp_path / "o", "t", data)
    for k in (1, 2, 3):
        c.add_round(k)
    # before round 1 A has run, a run that will read it (autotune replay) names its own op's directory
    monkeypatch.setattr(ab.Campaign, "origin", lambda self, run: (run["op"],))
    assert plan_line(c) == "1 op (+2 control ops) x 3 rounds x 2 sides; 6 processes to go"
