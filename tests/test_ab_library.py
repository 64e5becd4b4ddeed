"""``zlf ab --library``: a campaign over a whole op library, its table, its time split, --status.

The campaigns here run on ``libfake`` (tests/library_ext/zlf_test_library.py): a backend whose
clock only the ops move, so every verdict is what the generated library's recipes say, whatever
the machine's load; crashes and hangs are real (an aborting worker, a sleeping point past
``--time-limit``).
"""
from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from zlf import cli, stats
from zlf.ab import FAILED, OK, SKIPPED, library
from zlf.errors import UsageError
from zlf.run import SPLIT, TimeSplit
from zlf.testing import pythonpath

from conftest import _env

HERE = Path(__file__).parent / "library_ext"
sys.path.insert(0, str(HERE))
import zlf_test_library as fakelib  # noqa: E402


# ----------------------------------------------------------------------------- which ops
LIB = [f"op{i:03d}:/lib/ops.py" for i in range(50)]


def test_sample_is_the_sweeps_sample_of_the_library():
    assert library.select(LIB, sample=7, seed=22) == random.Random(22).sample(LIB, 7)
    assert library.select(LIB) == LIB
    assert library.select(LIB, names=["op003", "op001:/lib/ops.py"]) == ["op003:/lib/ops.py", "op001:/lib/ops.py"]


@pytest.mark.parametrize("kwargs, words", [
    ({"names": ["nosuch"]}, "unknown op 'nosuch'"),
    ({"sample": 51}, "has 50 ops"),
    ({"names": ["op001"], "sample": 2}, "not both"),
])
def test_bad_selection_is_one_line(kwargs, words):
    with pytest.raises(UsageError, match=words):
        library.select(LIB, source="ops.txt", **kwargs)


def test_op_list_file(tmp_path):
    f = tmp_path / "ops.txt"
    f.write_text("# a library\nadd\n\nsoftmax  # the second\nadd\n")
    assert library.read_op_list(str(f)) == ["add", "softmax"]
    f.write_text("add softmax\n")
    with pytest.raises(UsageError, match="line 1: one op per line"):
        library.read_op_list(str(f))
    f.write_text("# nothing\n")
    with pytest.raises(UsageError, match="no op in it"):
        library.read_op_list(str(f))


# ----------------------------------------------------------------------------- outcomes and the table
def _result(point, verdict, delta, p):
    return SimpleNamespace(point=point, verdict=verdict, delta_pct=delta, delta_median_pct=delta, delta_lo_pct=delta - 1,
                           delta_hi_pct=delta + 1, a_mean_ms=1.0, b_mean_ms=1.0 + delta / 100, a_median_ms=1.0,
                           b_median_ms=1.0, p_value=p, note="")


def _file(campaign, op, side, status, error=None, rc=None):
    run = campaign.find(op, 1, side)
    run.update(status=status, error=error, rc=rc)


def test_table_puts_b_only_failures_first_then_evidence(zlf_campaign):
    ops = ("same", "slow", "big", "crashb", "refa", "hang")
    c = zlf_campaign(ops=ops, rounds=1, library={"source": "test"})
    for op in ops:
        for side in "AB":
            _file(c, op, side, OK, rc=0)
    _file(c, "crashb", "B", FAILED, "crashb/8/float32 FAILED: worker died: SIGABRT (signal 6)", 1)
    _file(c, "refa", "A", FAILED, "exit code 2: zlf: error: FlagGems skips this op here", 2)
    _file(c, "hang", "A", FAILED, "hang/8/float32 FAILED: time limit: no result within 2 s", 1)
    _file(c, "hang", "B", FAILED, "hang/8/float32 FAILED: time limit: no result within 2 s", 1)
    results = [_result("same/8/float32", stats.SAME, 0.1, 0.001), _result("slow/8/float32", stats.SLOWER, 20.0, 0.01),
               _result("big/8/float32", stats.SLOWER, 200.0, 0.0001)]
    outcome = library.outcomes(c)
    assert outcome["crashb"].where == "B only" and outcome["crashb"].b.word == library.CRASHED
    assert outcome["refa"].where == "A only" and outcome["refa"].a.word == library.REFUSED
    assert outcome["hang"].where == "A and B" and outcome["hang"].a.word == library.HUNG
    rows = library.table_rows(c, results, outcome)
    assert [(r[0], r[1]) for r in rows] == [
        ("crashb", "CRASHED on B only"), ("refa", "REFUSED on A only"),
        ("big/8/float32", "SLOWER"), ("slow/8/float32", "SLOWER"),  # by evidence: the smaller p first
        ("same", "SAME"), ("hang", "HUNG on A and B")]
    line = library.counts_line(c, results, outcome)
    assert line.startswith("6 ops: 2 with a SLOWER point, 0 with a FASTER point, 1 all SAME")
    assert "3 failed (1 on A and B, 1 on A only, 1 on B only" in line


def test_a_side_never_run_is_not_a_failure_of_it(zlf_campaign):
    c = zlf_campaign(ops=("x",), rounds=2)
    _file(c, "x", "A", FAILED, "x/8/float32 FAILED: wrong result", 1)
    _file(c, "x", "B", SKIPPED, "op failed in r1_A")
    for side in "AB":
        c.find("x", 2, side).update(status=SKIPPED, error="op failed in r1_A")
    o = library.outcomes(c)["x"]
    assert (o.a.word, o.b.word, o.where) == ("failed", SKIPPED, "A")


def test_a_compile_in_a_later_round_is_marked(zlf_campaign):
    c = zlf_campaign(ops=("x",), rounds=0)
    split = {k: 1.0 for k in SPLIT}
    c.data["processes"] = {
        "_shared/r1_A": {"round": 1, "side": "A", "ops": 1, "seconds": 10.0, "split": {**split, "compiled": 40}},
        "_shared/r2_B": {"round": 2, "side": "B", "ops": 1, "seconds": 8.0, "split": {**split, "compiled": 3}},
        "_shared/r2_A": {"round": 2, "side": "A", "ops": 1, "seconds": 7.0, "split": {**split, "compiled": 0}},
    }
    assert library.later_compiles(c) == [("_shared/r2_B", 2, "B", 3)]
    text = "\n".join(library.lines(c, []))
    assert "!!! COMPILED in round 2: _shared/r2_B (side B) compiled 3 Triton kernel(s)" in text
    split_all = library.time_split(c)
    assert split_all["wall"] == 25.0 and split_all["start"] == 3.0 and split_all["other"] == 7.0
    assert "where the time went (3 processes, 25 s): start 3.0 s (12 %)" in text
    c.data["driver_s"] = 40.0  # the campaign's own elapsed time: what the processes' wall does not hold
    assert "; the campaign ran 40 s, measuring 8 % of it, the driver's own work 15 s" in "\n".join(library.lines(c, []))


def test_time_split_counts_compiles_and_cache_hits():
    split = TimeSplit({"start": 1.5, "compiled": 2})
    split.count(SimpleNamespace(cache_hit=False))
    split.count(SimpleNamespace(cache_hit=True))
    split.add("imports", 2.0)
    with split.phase("measuring"):
        pass
    doc = split.to_json()
    assert doc["start"] == 1.5 and doc["imports"] == 2.0 and doc["compiled"] == 3 and doc["cache_hits"] == 1
    assert set(SPLIT) <= set(doc)


# ----------------------------------------------------------------------------- the command line
@pytest.mark.parametrize("argv, words", [
    (["--sample", "3"], "--sample needs --library"),
    (["--library", "nosuch.txt"], "neither an op source an active extension knows"),
    (["--library", "{lib}", "--sample", "0"], "--sample 0: expected a whole number"),
    (["--library", "{lib}", "nosuch"], "unknown op 'nosuch'"),
    (["--status", "{tmp}/nowhere"], "is not a zlf ab campaign"),
])
def test_bad_input_is_one_line_and_exit_2(argv, words, tmp_path, capsys, zlf_core_only):
    listing = tmp_path / "ops.txt"
    listing.write_text("add\nsoftmax\n")
    argv = [a.format(lib=listing, tmp=tmp_path) for a in argv]
    try:
        code = cli.main(["ab", "--switch", "X", "--dry-run", "--out", str(tmp_path), *argv])
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("zlf: error:") and words in err[0], err


def test_help_answers_the_library_questions(capsys, zlf_core_only):
    with pytest.raises(SystemExit):
        cli.main(["ab", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for words in ("--library SOURCE", "file with one OP per line", "--sample N", "--sample-seed S", "--status DIR",
                  "fails on B only", "--time-limit default 60"):
        assert words in out, words


def test_dry_run_of_a_listed_library(tmp_path, capsys, zlf_core_only):
    listing = tmp_path / "ops.txt"
    listing.write_text("add\nsoftmax\nmatmul\n")
    assert cli.main(["ab", "--switch", "X", "--dry-run", "--controls", "none", "--library", str(listing),
                     "--sample", "2", "--sample-seed", "1"]) == 0
    out = capsys.readouterr().out
    chosen = random.Random(1).sample(["add", "softmax", "matmul"], 2)
    assert f"ops: {', '.join(chosen)}; 3 rounds, then up to 12 until confident" in out
    assert '"time_limit_s": 60.0' in out


# ----------------------------------------------------------------------------- campaigns (processes)
@pytest.fixture
def libfake(tmp_path):
    """The libfake extension installed for this test's children: their environment."""
    site = tmp_path / "site"
    info = site / "zlf_test_library-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zlf-test-library\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[zlf]\nlibfake = zlf_test_library:LibraryFake\n")
    return _env(pythonpath(site, HERE))


def _ab(tmp_path, env, *args):
    argv = [sys.executable, "-m", "zlf", "ab", "--ext", "libfake", "--backend", "libfake", "--switch", fakelib.SWITCH,
            "--controls", "none", "--out", str(tmp_path / "runs"), *map(str, args)]
    return argv


def _campaign_dir(text: str) -> Path:
    return Path(next(l for l in text.splitlines() if l.startswith("campaign dir: ")).split(": ", 1)[1])


def _recipes(n=200):
    recipes = {f"op{i:03d}": "same" for i in range(n)}
    for i in (7, 41, 88, 130, 177):
        recipes[f"op{i:03d}"] = "slow"
    for i in (15, 99, 150):
        recipes[f"op{i:03d}"] = "crash"
    for i in (60, 190):
        recipes[f"op{i:03d}"] = "hang"
    return recipes


@pytest.mark.slow
def test_a_library_of_200_ops(tmp_path, libfake):
    """The must-show: 5 ops 3x slower on B, 3 crashing on B only, 2 hanging, 190 unchanged."""
    recipes = _recipes()
    _, listing = fakelib.write_library(tmp_path, recipes)
    proc = subprocess.run(_ab(tmp_path, libfake, "--library", listing, "--time-limit", 2), cwd=tmp_path, env=libfake,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 1, proc.stderr[-3000:]  # ops fail on B only: a regression of their own
    out = proc.stdout
    d = _campaign_dir(out)
    doc = json.loads((d / library.JSON).read_text())
    rows = doc["rows"]
    # the crashes on B only come first, each named as such
    crashes = {f"op{i:03d}" for i in (15, 99, 150)}
    assert {r["op / point"] for r in rows[:3]} == crashes
    assert all(r["outcome"] == "CRASHED on B only" and "worker died: SIGABRT" in r["why"] for r in rows[:3])
    by_op = {r["op / point"].split("/")[0]: r for r in rows}
    for op in ("op060", "op190"):  # bounded by --time-limit, on both sides
        assert by_op[op]["outcome"] == "HUNG on A and B" and "no result within 2 s" in by_op[op]["why"]
    verdicts = {r["op / point"].split("/")[0]: r["outcome"] for r in rows if "/" in r["op / point"] or r["outcome"] == "SAME"}
    slow = {op for op, recipe in recipes.items() if recipe == "slow"}
    assert {op for op, v in verdicts.items() if v == "SLOWER"} == slow
    assert all(by_op[op]["change"] == "3× slower" for op in slow)
    same = {op for op, recipe in recipes.items() if recipe == "same"}
    assert all(verdicts[op] in (stats.SAME, stats.UNSURE) for op in same)  # no false verdict
    assert not [op for op, v in verdicts.items() if v == stats.FASTER]
    assert len(rows) == 200  # every op has its row (all SAME: one row per op)
    # the time split: printed, stored per process and in total; rounds after the first compiled nothing
    assert "where the time went (" in out and all(f" {k} " in out.split("where the time went")[1] for k in SPLIT)
    campaign = json.loads((d / "campaign.json").read_text())
    for op in ("op060", "op190"):  # both hung in round 1's shared process: each is told its own point
        first = next(r for r in campaign["runs"] if r["op"] == op and r["round"] == 1 and r["side"] == "A")
        assert f"{op}/8/float32 FAILED: time limit" in first["shared_error"], first
    split = campaign["time_split"]
    assert split["wall"] > 0 and set(SPLIT) <= set(split) and split == doc["time_split"]
    assert all(set(SPLIT) | {"compiled", "cache_hits"} <= set(p["split"]) for p in campaign["processes"].values())
    assert doc["later_compiles"] == [] and "!!! COMPILED" not in out
    # one process per round and side for all ops: the screen's 3 rounds x 2 sides, one confirmation
    # round for the ops the screen did not clear (the slow ones), and each failed op's round alone
    shared = [k for k in campaign["processes"] if k.startswith("_shared/")]
    assert sorted(shared) == [f"_shared/r{k}_{s}" for k in (1, 2, 3, 4) for s in "AB"]
    assert {r["op"] for r in campaign["runs"] if r["round"] == 4} == slow
    assert len(campaign["processes"]) == 8 + 2 * 5
    assert campaign["screening"]["state"]["screened"] and len(campaign["screening"]["state"]["cleared"]) == 190
    assert "200 ops: 5 with a SLOWER point, 0 with a FASTER point" in out


def _small_library(tmp_path):
    recipes = {f"op{i:03d}": "same" for i in range(6)}
    recipes.update(op001="slow", op004="crash")
    return fakelib.write_library(tmp_path, recipes)[1]


@pytest.mark.slow
def test_interrupted_then_resumed_gives_the_same_table(tmp_path, libfake):
    listing = _small_library(tmp_path)
    whole = subprocess.run(_ab(tmp_path / "whole", libfake, "--library", listing), cwd=tmp_path, env=libfake,
                           capture_output=True, text=True, timeout=900)
    assert whole.returncode == 1, whole.stderr[-3000:]
    expected = json.loads((_campaign_dir(whole.stdout) / library.JSON).read_text())["rows"]

    # a shell's background jobs (nohup, CI) start with SIGINT ignored: give zlf a terminal's default
    proc = subprocess.Popen(_ab(tmp_path / "cut", libfake, "--library", listing), cwd=tmp_path, env=libfake,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    for line in proc.stderr:  # stop it once a process of round 1 is filed
        seen.append(line)
        if line.startswith("[1/"):
            proc.send_signal(signal.SIGINT)
            break
    rest, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, "".join(seen)
    cut = next((tmp_path / "cut" / "runs").glob("ab_*"))
    # a partial table at any time: the stopped campaign's, read without writing
    before = (cut / "campaign.json").read_text()
    status = subprocess.run([sys.executable, "-m", "zlf", "ab", "--status", str(cut)], cwd=tmp_path, env=libfake,
                            capture_output=True, text=True, timeout=300)
    assert status.returncode == 0, status.stderr
    assert "PARTIAL" in status.stdout and "interrupted" in status.stderr and "of 36 runs done" in status.stderr
    assert (cut / "campaign.json").read_text() == before
    resumed = subprocess.run([sys.executable, "-m", "zlf", "ab", "--resume", str(cut), "--library", str(listing),
                              "--sample", "2"], cwd=tmp_path, env=libfake, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    # the options a resumed campaign does not take are said to be ignored, in one line
    assert "--resume runs the campaign as it was planned: ignoring --library, --sample\n" in resumed.stderr
    assert json.loads((cut / library.JSON).read_text())["rows"] == expected
    # progress: processes done and to go, the time left, and after the screen the points decided
    assert "screen after round 3: 4 of 5 points decided (4 cleared SAME at the screen); another round for 1 op" \
        in resumed.stderr
    assert re.search(r"^\[\d+/\d+\] r4_B op001 ok [\d.]+s  \(elapsed \d+:\d\d, ~\d+:\d\d left, 4/5 points decided\)$",
                     resumed.stderr, re.M), resumed.stderr
    assert [r["outcome"] for r in expected][:2] == ["CRASHED on B only", "SLOWER"]


def test_a_library_over_gpus_gives_every_gpu_a_share_of_each_round(zlf_campaign):
    from zlf.ab.execute import campaign_units
    from zlf.ab.layout import SHARED_PROCESS

    c = zlf_campaign(ops=("a", "b", "c", "d", "e"), rounds=2, process=SHARED_PROCESS, library={"source": "t", "chunks": 2})
    units = campaign_units(c)
    assert [u.id for u in units] == ["r1/c0", "r1/c1", "r2/c0", "r2/c1"]
    r1c0 = [c.groups[k] for k in units[0].keys]  # side A's process, then B's, of ops a, c, e
    assert r1c0 == [["a/r1_A", "c/r1_A", "e/r1_A"], ["a/r1_B", "c/r1_B", "e/r1_B"]]
    assert [c.groups[k] for k in units[3].keys] == [["b/r2_B", "d/r2_B"], ["b/r2_A", "d/r2_A"]]  # even rounds: B first
    assert c.processes_left() == 8


def test_the_mde_of_a_confirmation_look_does_not_hang():
    # a library's first confirmation look asks the noncentral t at df 1.2 and level 6e-8, where
    # scipy's nctdtrinc never returns: the MDE is then not shown (inf), and the look goes on
    code = "from zlf import stats; print(stats._ncp(1.2, 6.07e-08, 0.8))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "inf", proc.stderr


def test_a_failure_on_b_is_b_only_while_later_rounds_wait(zlf_campaign):
    # round 1: A ok, B crashed; rounds 2 and 3 still pending (they will be skipped): B only, now
    c = zlf_campaign(ops=("x",), rounds=3, library={"source": "t"})
    _file(c, "x", "A", OK, rc=0)
    _file(c, "x", "B", FAILED, "x/8/float32 FAILED: worker died: SIGABRT (signal 6)", 1)
    o = library.outcomes(c)["x"]
    assert (o.a.word, o.b.word, o.where) == (OK, library.CRASHED, "B only")
