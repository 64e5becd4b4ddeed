"""Scale-out: the scheduler with fake workers, worker pools with fake runs (a killed worker is
recovered), ``zlf run --gpus`` merge and layout, ``zlf ab --gpus`` and a Ray local cluster with fake
GPU resources running a tiny campaign end to end."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from zlf.ab import OK, PENDING, Campaign, campaign_units
from zlf.executors import ROOT
from zlf.executors import LocalPool, RayPool, parse_gpus
from zlf.errors import UsageError
from zlf.rundir import RunDir
from zlf.scheduler import DONE, GAVE_UP, SKIPPED, Scheduler, Unit

from conftest import read_records, run_dir_from
from zlf.testing import campaign_data
from zlf.testing import extension_hooks as real_hooks


# ----------------------------------------------------------------------------- the scheduler alone
def test_units_go_to_free_workers_and_wait_for_their_record():
    s = Scheduler([Unit("add/r1", ["add/r1_A", "add/r1_B"], "add"),
                   Unit("add/r2", ["add/r2_B", "add/r2_A"], "add", after=("add/r1",)),
                   Unit("mm/r1", ["mm/r1_A", "mm/r1_B"], "mm")])
    for w in ("0", "1"):
        s.add_worker(w)
    assert s.take("0").id == "add/r1"
    assert s.take("1").id == "mm/r1"  # add/r2 waits for the run that writes its replay record
    assert s.take("1") is None
    s.done("add/r1", "0", seconds=2.0, runs=2)
    assert s.take("1").id == "add/r2"
    s.done("mm/r1", "1", runs=2, failed_runs=1)
    s.done("add/r2", "1", runs=2)
    assert s.finished
    assert {r["worker"]: (r["units"], r["runs"], r["failed_runs"]) for r in s.summary_rows()} == {"0": (1, 2, 0), "1": (2, 4, 1)}


def test_a_lost_unit_is_retried_elsewhere_then_given_up():
    s = Scheduler([Unit("u", ["a", "b"]), Unit("v", ["c"], after=("u",))], retries=1)
    for w in ("0", "1"):
        s.add_worker(w)
    assert s.take("0").id == "u"
    assert s.lost("u", "0", "worker died") is True
    assert s.take("0") is None  # not back to the worker it died on while another one is free
    assert s.take("1").id == "u"
    assert s.lost("u", "1", "worker died") is False
    assert s.state["u"] == GAVE_UP and "tried 2 times: 0, 1" in s.given_up()["u"]
    assert s.take("0") is None and s.state["v"] == GAVE_UP  # it needed u's record
    assert s.finished and {r["worker"]: r["lost"] for r in s.summary_rows()} == {"0": 1, "1": 1}


def test_a_failed_op_skips_its_remaining_units():
    s = Scheduler([Unit("bad/r1", ["x"], "bad"), Unit("bad/r2", ["y"], "bad"), Unit("ok/r1", ["z"], "ok")])
    s.add_worker("0")
    unit = s.take("0", skip=lambda u: "op failed" if u.group == "bad" else None)
    assert unit.id == "ok/r1" and s.state["bad/r1"] == s.state["bad/r2"] == SKIPPED


def test_parse_gpus():
    assert parse_gpus("0, 1,3") == ["0", "1", "3"]
    for bad in ("", "0,0"):
        with pytest.raises(UsageError):
            parse_gpus(bad)


def test_campaign_units_keep_pairs_together(tmp_path):
    data = campaign_data(tmp_path, ops=("add", "mm"))
    data["replay"] = True
    c = Campaign.create(tmp_path / "o", "t", data, real_hooks("autotune_replay"))
    c.add_round(1)
    c.add_round(2)
    units = {u.id: u for u in campaign_units(c)}
    assert units["add/r1"].keys == ("add/r1_A", "add/r1_B") and units["add/r2"].keys == ("add/r2_B", "add/r2_A")
    assert units["add/r2"].after == ("add/r1",) and units["add/r1"].after == ()
    assert [u.keys for u in campaign_units(c, per="op")][0] == ("add/r1_A", "add/r1_B", "add/r2_B", "add/r2_A")
    # a pair half done on some GPU when the campaign stopped is run again whole
    c.find("mm", 2, "B").update(status=OK, gpu="1")
    assert {u.id: u for u in campaign_units(c)}["mm/r2"].keys == ("mm/r2_B", "mm/r2_A")
    c.find("add", 1, "A").update(status=OK)  # the plain path's resume runs only what is missing
    assert {u.id: u for u in campaign_units(c)}["add/r1"].keys == ("add/r1_B",)


# ----------------------------------------------------------------------------- pools with fake runs
FAKE_RUN = """
import os, pathlib, sys
staging, mark = pathlib.Path(sys.argv[1]), sys.argv[2]
if mark != "-" and not pathlib.Path(mark).exists():
    pathlib.Path(mark).write_text("died once")
    os.kill(os.getppid(), 9)  # the worker that started this run dies (a lost GPU or node)
d = staging / "r_x"
d.mkdir(parents=True)
(d / "results.jsonl").write_text("{}\\n")
(d / "meta.json").write_text('{"fingerprint": {"uuid": "GPU-%s"}}' % os.environ.get("ZLF_GPU", "ray"))
print("ran", sys.argv[1])
"""


class FakeJob:
    """What an executor needs of a campaign, recording every call."""

    def __init__(self, root, keys, kill_mark=None):
        self.root = Path(root)
        self.events, self.status, self.where = [], {}, {}
        self.specs = {}
        for k in keys:
            mark = str(kill_mark) if kill_mark and k == keys[0] else "-"
            self.specs[k] = {"key": k, "argv": [sys.executable, "-c", FAKE_RUN, f"{ROOT}/{k}/.staging", mark],
                             "env": {}, "cwd": str(root), "staging": f"{k}/.staging", "dir": f"{k}/run",
                             "log": f"logs/{k}.txt", "needs": []}

    def spec(self, key):
        return self.specs[key]

    def skip(self, unit):
        return None

    def started(self, key, worker):
        self.events.append(("start", key, worker["gpu"]))

    def finished(self, key, outcome, worker):
        self.status[key], self.where[key] = outcome["rc"], worker["gpu"]
        return outcome["rc"] == 0

    def skipped(self, keys, reason):
        self.events.append(("skipped", tuple(keys)))

    def lost(self, unit):
        self.events.append(("lost", unit.id))
        for k in unit.keys:
            self.status.pop(k, None)

    def discard(self, key):
        pass

    def identity(self, key):
        meta = self.root / self.specs[key]["dir"] / "meta.json"
        return json.loads(meta.read_text())["fingerprint"]["uuid"] if meta.is_file() else ""

    def note(self, text):
        self.events.append(("note", text))


def _pair_units(keys):
    return [Unit(f"u{i}", keys[2 * i:2 * i + 2]) for i in range(len(keys) // 2)]


def test_local_pool_recovers_a_killed_worker(tmp_path):
    keys = [f"k{i}" for i in range(6)]
    job = FakeJob(tmp_path, keys, kill_mark=tmp_path / "killed")
    scheduler = Scheduler(_pair_units(keys), retries=1)
    LocalPool(["0", "1"], pin_env="ZLF_TEST_VISIBLE", retries=1).run(job, scheduler)
    assert (tmp_path / "killed").is_file()
    assert scheduler.finished and all(s == DONE for s in scheduler.state.values())
    assert job.status == {k: 0 for k in keys}
    assert ("lost", "u0") in job.events
    assert job.where["k0"] == job.where["k1"]  # a pair is re-run whole, on one worker
    for k in keys:
        assert (tmp_path / k / "run" / "results.jsonl").is_file()
    rows = {r["worker"]: r for r in scheduler.summary_rows()}
    assert sum(r["lost"] for r in rows.values()) == 1 and sum(r["units"] for r in rows.values()) == 3
    assert {r["identity"] for r in rows.values() if r["units"]} <= {"GPU-0", "GPU-1"}


def test_local_pool_with_one_gpu_gives_up_after_its_retries(tmp_path):
    job = FakeJob(tmp_path, ["a", "b"], kill_mark=tmp_path / "killed")
    scheduler = Scheduler([Unit("u", ["a", "b"])], retries=0)
    LocalPool(["0"], pin_env=None, retries=0).run(job, scheduler)
    assert scheduler.given_up() and job.status == {}  # left for --resume
    assert any(e[0] == "note" and "retired" in e[1] for e in job.events)



@pytest.mark.slow
def test_ray_pool_with_fake_gpus_recovers_a_killed_task(tmp_path):
    pytest.importorskip("ray")
    keys = [f"k{i}" for i in range(4)]
    job = FakeJob(tmp_path, keys, kill_mark=tmp_path / "killed")
    scheduler = Scheduler(_pair_units(keys), retries=1)
    RayPool(None, ["0", "1"], pin_env="ZLF_TEST_VISIBLE", retries=1).run(job, scheduler)
    assert job.status == {k: 0 for k in keys} and ("lost", "u0") in job.events
    for k in keys:  # written back into the driver's directory
        assert (tmp_path / k / "run" / "results.jsonl").is_file() and (tmp_path / "logs" / f"{k}.txt").is_file()
    assert job.where["k0"] == job.where["k1"] and ":gpu" in job.where["k0"]


# ----------------------------------------------------------------------------- real zlf processes (CPU)
def _layout(run_dir: Path) -> list:
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))


@pytest.mark.slow
def test_run_gpus_0_is_the_plain_layout_and_gpus_0_1_merges(zlf_cli, tmp_path):
    plain = run_dir_from(zlf_cli("run", "add", "--rep-ms", "5", "--out", "p", check_rc=0).stdout, tmp_path)
    one = run_dir_from(zlf_cli("run", "add", "--rep-ms", "5", "--out", "g", "--gpus", "0",
                               check_rc=0).stdout, tmp_path)
    assert _layout(one) == _layout(plain) and one.name.startswith("add_")
    assert [r["point"] for r in read_records(one)] == [r["point"] for r in read_records(plain)]
    assert json.loads((one / "meta.json").read_text())["scale"]["shards"][0]["gpu"] == "0"
    two = run_dir_from(zlf_cli("run", "add", "softmax", "--rep-ms", "5", "--out", "m", "--gpus", "0,1",
                               check_rc=0).stdout, tmp_path)
    assert _layout(two) == _layout(plain) and two.name.startswith("suite_")
    assert [r["op"] for r in read_records(two)] == ["add", "add", "softmax", "softmax"]
    meta = json.loads((two / "meta.json").read_text())
    assert meta["ops"] == ["add", "softmax"] and meta["counts"]["ok"] == 4 and meta["status"] == "complete"
    assert {s["gpu"] for s in meta["scale"]["shards"]} == {"0", "1"}
    assert not list((tmp_path / "m").glob(".zlf-shards-*"))


def _campaign(tmp_path, out) -> tuple:
    (camp,) = (tmp_path / out).glob("ab_*")
    return camp, json.loads((camp / "campaign.json").read_text())


@pytest.mark.slow
def test_ab_on_two_gpus_keeps_pairs_on_one_gpu(zlf_cli, tmp_path):
    proc = zlf_cli("ab", "add", "--switch", "ZLF_SCALE_NULL", "--rounds", "2", "--controls", "none", "--controls", "none", "--rep-ms", "5",
                   "--out", "o", "--gpus", "0,1", check_rc=0)
    camp, state = _campaign(tmp_path, "o")
    assert [r["dir"] for r in state["runs"]] == ["add/r1_A", "add/r1_B", "add/r2_B", "add/r2_A"]
    assert all(r["status"] == OK and r["device_id"] for r in state["runs"])
    gpu = {(r["round"], r["side"]): r["gpu"] for r in state["runs"]}
    assert gpu[(1, "A")] == gpu[(1, "B")] and gpu[(2, "A")] == gpu[(2, "B")]
    assert sum(w["units"] for w in state["workers"]) == 2
    assert "per worker (GPU):" in proc.stdout and "per worker (GPU):" in (camp / "summary.log").read_text()
    assert "add/5000/float32" in (camp / "summary.log").read_text()


@pytest.mark.slow
def test_ray_local_cluster_with_fake_gpus_runs_a_campaign(zlf_cli, tmp_path):
    pytest.importorskip("ray")
    zlf_cli("ab", "add", "--switch", "ZLF_SCALE_NULL", "--rounds", "2", "--controls", "none", "--rep-ms", "5",
            "--out", "o", "--executor", "ray", "--gpus", "0,1", check_rc=0, timeout=300)
    camp, state = _campaign(tmp_path, "o")
    assert all(r["status"] == OK and ":gpu" in r["gpu"] for r in state["runs"])
    for r in state["runs"]:  # written back into the campaign directory on the driver
        assert len(read_records(camp / r["dir"])) == 2
        assert (camp / "add" / "logs" / f"r{r['round']}_{r['side']}.txt").is_file()
    gpu = {(r["round"], r["side"]): r["gpu"] for r in state["runs"]}
    assert gpu[(1, "A")] == gpu[(1, "B")] and gpu[(2, "A")] == gpu[(2, "B")]
    assert "add/1024/float32" in (camp / "summary.log").read_text()


# ----------------------------------------------------------------------------- review fixes
@pytest.mark.extensions("autotune_replay")
@pytest.mark.slow
@pytest.mark.parametrize("process", ["per-op", "shared"])
def test_ab_on_two_gpus_replays_round_1_a(zlf_cli, tmp_path, process):
    per_op = ["--process-per-op"] if process == "per-op" else []
    zlf_cli("ab", "matmul", "--switch", "ZLF_SCALE_NULL", "--rounds", "2", "--controls", "none", "--rep-ms", "5", "--warmup-ms", "1",
            "--ext", "autotune_replay", "--out", "o", "--gpus", "0,1", *per_op, check_rc=0)
    camp, state = _campaign(tmp_path, "o")
    assert state["replay"] and all(r["status"] == OK for r in state["runs"]) and state["process"] == process
    assert (camp / "matmul" / "r1_A" / "autotune_records").is_dir()
    # the record is the directory of the process that ran round 1's A: the op's own, or the shared one
    source = camp / "matmul" / "r1_A" if process == "per-op" else camp / "_shared" / "r1_A"
    assert (source / "autotune_records").is_dir()
    for r in state["runs"]:
        if r["dir"] == "matmul/r1_A":
            continue
        command = (camp / "matmul" / "logs" / f"r{r['round']}_{r['side']}.txt").read_text().splitlines()[0]
        # the replay is in the run's configuration (the file its command names), not a flag
        assert "--replay-from" not in command and command.split()[-2] == "--config", command
        config = json.loads(Path(command.split()[-1]).read_text())
        assert config["options"]["autotune_replay"]["replay_from"] == str(source)
        assert not (camp / r["dir"] / "autotune_records").exists()
        assert RunDir(camp / r["dir"]).meta()["autotune"]["mode"] == "replay"


def test_an_interrupted_run_leaves_its_unit_pending_not_skipped(tmp_path):
    from zlf.executors import _UnitTally

    job = FakeJob(tmp_path, ["a", "b"])
    s = Scheduler([Unit("u", ["a", "b"])])
    s.add_worker("0")
    tally = _UnitTally(s.take("0"))
    tally.add("a", {"rc": 130, "seconds": 1.0}, False)
    tally.finish(job, s, "0")
    assert not any(e[0] == "skipped" for e in job.events)
    assert s.stats["0"].failed_runs == 0


def test_a_worker_stops_quietly_on_ctrl_c(tmp_path, zlf_plain_processes):
    """Plain processes: the stand-in of a spawn-server child passes SIGINT on a moment later, and by
    then the closed stdin below may have ended the worker normally."""
    import os
    import signal
    import subprocess
    import time

    # Background shells (nohup, CI) start jobs with SIGINT ignored: give the worker a terminal's default.
    proc = subprocess.Popen([sys.executable, "-m", "zlf.executors"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert json.loads(proc.stdout.readline())["event"] == "hello"
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err, err


DIES = '''
import os, signal
import torch
import zlf


def dies(x, out):
    os.kill(os.getpid(), signal.SIGKILL)


dies_op = zlf.Op(name="dies", fn=dies, make_inputs=lambda s, d, dev: (torch.ones(s), torch.empty(s)),
                 shapes=[(256,)], reference=lambda x, out: x, outputs=(1,))
'''


@pytest.mark.slow
def test_run_gpus_names_a_crashed_shard_and_passes_bad_input_on(zlf_cli, tmp_path):
    (tmp_path / "dies.py").write_text(DIES)
    proc = zlf_cli("run", "add", "dies.py", "--rep-ms", "5", "--out", "c", "--gpus", "0,1", check_rc=1)
    assert "shard dies.py failed" in proc.stderr and "1 shard(s) failed" in proc.stdout
    assert "add/1024/float32" in proc.stdout  # the good shard's points are kept
    assert not list((tmp_path / "c").glob(".zlf-shards-*"))
    zlf_cli.inprocess("run", "no_such_op", "--out", "u", "--gpus", "0", check_rc=2)
    assert not list((tmp_path / "u").glob(".zlf-shards-*"))


@pytest.mark.slow
def test_ab_on_two_gpus_shares_processes_and_isolates_a_crashing_op(zlf_cli, tmp_path):
    from test_ab import SHARED_OPS

    (tmp_path / "my_ops.py").write_text(SHARED_OPS)
    zlf_cli("ab", "neg:my_ops.py", "boom:my_ops.py", "--switch", "ZLF_SCALE_NULL", "--rounds", "2", "--controls", "none", "--rep-ms", "2",
            "--warmup-ms", "1", "--out", "o", "--gpus", "0,1", check_rc=0)
    camp, state = _campaign(tmp_path, "o")
    runs = {r["dir"]: r for r in state["runs"]}
    assert all(r["status"] == OK for r in state["runs"])
    assert all(runs[f"neg/{d}"]["process"].startswith("_shared/") for d in ("r1_A", "r1_B", "r2_B", "r2_A"))
    assert all(runs[f"boom/{d}"].get("alone") and "process" not in runs[f"boom/{d}"]
               for d in ("r1_A", "r1_B", "r2_B", "r2_A"))
    for op in ("neg", "boom"):
        for k in (1, 2):  # a pair never spans two GPUs, shared or alone
            assert runs[f"{op}/r{k}_A"]["gpu"] == runs[f"{op}/r{k}_B"]["gpu"]
    summary = (camp / "summary.log").read_text()
    assert "neg/256/float32" in summary and "boom/512/float32" in summary


def test_shared_campaign_units_are_rounds_and_alone_ops_wait_for_their_record(tmp_path):
    data = campaign_data(tmp_path, ops=("add", "mm"))
    data.update(replay=True, process="shared")
    c = Campaign.create(tmp_path / "o", "t", data, real_hooks("autotune_replay"))
    c.add_round(1)
    c.add_round(2)
    units = {u.id: u for u in campaign_units(c)}
    assert list(units) == ["r1", "r2"]
    assert units["r1"].keys == ("_shared/r1_A", "_shared/r1_B") and units["r2"].keys == ("_shared/r2_B", "_shared/r2_A")
    assert units["r2"].after == ("r1",) and units["r1"].after == ()
    assert c.groups["_shared/r1_A"] == ["add/r1_A", "mm/r1_A"]
    # r1_B replays the record of the process that runs r1_A, even before it ran
    spec = c.shared_spec("_shared/r1_B", [c.find("add", 1, "B")])
    assert spec["needs"] == ["_config/B.json", "_shared/r1_A/autotune_records"]
    assert spec["if_exists"] == [{"path": "_shared/r1_A/autotune_records", "extensions": [],
                                  "options": {"autotune_replay": {"replay_from": "{campaign}/_shared/r1_A"}}}]
    assert spec["config"]["file"] == "_shared/logs/r1_B.json"
    # mm's round 1 went alone: its runs are per-op pair units, the later one waits for its r1_A
    for side in "AB":
        c.find("mm", 1, side).update(alone=True)
    c.groups.clear()
    units = {u.id: u for u in campaign_units(c)}
    assert units["mm/r1"].keys == ("mm/r1_A", "mm/r1_B") and units["mm/r2"].after == ("mm/r1",)
    assert units["r1"].keys == ("_shared/r1_A", "_shared/r1_B") and c.groups["_shared/r1_A"] == ["add/r1_A"]
    assert units["r2"].after == ("r1",)
