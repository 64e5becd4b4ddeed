"""The profile extension: ncu's CSV (real output recorded on an H200), the profiled process,
zlf profile and zlf triage end to end with a stand-in ncu that prints the recorded CSV.

With core and this extension alone every test here runs but those that need another extension:
the IR diff (ir_dump's IR tree) and the end-to-end runs (a profiled process selects ``shapes``;
the runs profiled use seed, autotune_replay and ir_dump) skip, naming what is missing."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from zlf.records import LaunchEvent, Point
from zlf_profile import ncu
from zlf_profile.child import ProfiledPoint
from zlf_profile.launches import LaunchRecorder, from_ir_index
from zlf_profile.profile import folder_name, parse_point
from zlf_profile.triage import NO_IR_DUMP, beyond_noise, counter_phrases, ir_changes, key_change

DATA = Path(__file__).parent / "data" / "ncu"
BASE = DATA / "ncu_matmul_base.csv"  # default build, H200, 3 launches of matmul_kernel
NOMMA = DATA / "ncu_matmul_nomma.csv"  # the same with DISABLE_MMA_V3=1

FAKE_NCU = '''#!{python}
"""Stand-in for ncu: records its arguments and environment, runs the application, then writes a
recorded CSV (side B's when DISABLE_MMA_V3=1) to --log-file."""
import json, os, subprocess, sys
args = sys.argv[1:]
src = os.environ["FAKE_NCU_CSV_B" if os.environ.get("DISABLE_MMA_V3") == "1" else "FAKE_NCU_CSV"]
if args[0] == "--import":  # read a report back: the recorded CSV on stdout
    print(open(src).read())
    sys.exit(0)
with open(os.environ["FAKE_NCU_LOG"], "a") as f:
    f.write(json.dumps({{"args": args, "point": os.environ.get("ZLF_PROFILE_POINT"),
                        "switch": os.environ.get("DISABLE_MMA_V3")}}) + "\\n")
with_value = {{"--clock-control", "--profile-from-start", "--log-file", "--metrics", "-k", "--launch-count", "--export"}}
i = 0
while i < len(args) and args[i].startswith("-"):
    i += 2 if args[i] in with_value else 1
rc = subprocess.call(args[i:])
with open(args[args.index("--log-file") + 1], "w") as out:
    if "--export" in args:  # as ncu may: results only in the report
        open(args[args.index("--export") + 1] + ".ncu-rep", "w").write("binary")
        out.write("==PROF== Report: report.ncu-rep\\n")
    else:
        out.write(open(src).read())
sys.exit(rc)
'''


def _launches(path):
    return ncu.parse_csv(Path(path).read_text())


def _profile(path, calls=3):
    return ncu.summarise(ncu.split_calls(_launches(path), calls))


class _P:
    """Just what the triage functions read of a Profile."""

    def __init__(self, kernels):
        self.kernels, self.ok, self.calls = kernels, True, 3


# ----------------------------------------------------------------------------- the CSV
def test_real_ncu_csv_is_read_without_the_applications_output():
    launches = _launches(BASE)
    assert [l.id for l in launches] == [0, 1, 2]
    first = launches[0]
    assert first.kernel == "matmul_kernel" and first.grid == "(8, 1, 1)" and first.block == "(256, 1, 1)"
    v = first.values
    assert v["duration_us"] == pytest.approx(9.760)  # "9,760" ns
    assert v["registers"] == 200
    assert v["smem_bytes"] == 147456  # static 0 + dynamic "147,456"
    assert v["local_bytes"] == 0
    assert v["instructions"] == 126528
    assert v["grid"] == 8 and v["block"] == 256
    assert v["occupancy_pct"] == pytest.approx(12.38)
    assert set(v) == set(ncu.METRIC_KEYS)


def test_units_are_converted_to_base_units():
    text = ('"ID","Kernel Name","Block Size","Grid Size","Metric Name","Metric Unit","Metric Value"\n'
            '"0","k","(1, 1, 1)","(1, 1, 1)","gpu__time_duration.sum","usecond","1.5"\n'
            '"0","k","(1, 1, 1)","(1, 1, 1)","launch__shared_mem_per_block_dynamic","Kbyte/block","2"\n')
    v = ncu.parse_csv(text)[0].values
    assert v["duration_us"] == pytest.approx(1.5) and v["smem_bytes"] == 2000


def test_noise_is_the_spread_over_calls_and_only_deltas_beyond_it_count():
    a, b = _profile(BASE)[0], _profile(NOMMA)[0]
    assert a.samples == 3 and a.noise["duration_us"] == pytest.approx(0.032)
    assert a.noise["registers"] == 0
    assert beyond_noise("duration_us", a, b) and beyond_noise("registers", a, b) and beyond_noise("instructions", a, b)
    assert not beyond_noise("occupancy_pct", a, b)  # 12.38 vs 12.37..12.38: inside the noise
    phrases = counter_phrases(_P([a]), _P([b]))
    assert "registers 200 → 255" in phrases and "1.6× instructions" in phrases
    assert not any("occupancy" in p for p in phrases)


def test_launches_split_into_calls_by_the_launch_record():
    launches = _launches(BASE)
    assert [len(c) for c in ncu.split_calls(launches, 3)] == [1, 1, 1]
    assert [len(c) for c in ncu.split_calls(launches, 1, per_call=3)] == [3]
    assert [len(c) for c in ncu.split_calls(launches, 2)] == [3]  # does not divide: one call, noise unknown


def test_ncu_command_never_touches_clocks_and_profiles_only_the_recorded_kernels():
    cmd = ncu.command("ncu", "log.csv", ["python", "-m", "zlf"], kernels=["matmul_kernel", "a.b"], launch_count=6)
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"
    assert cmd[cmd.index("--log-file") + 1] == "log.csv" and "--csv" in cmd
    assert cmd[cmd.index("-k") + 1] == r"regex:^(matmul_kernel|a\.b)$"
    assert cmd[cmd.index("--launch-count") + 1] == "6" and cmd[-3:] == ["python", "-m", "zlf"]
    assert "-k" not in ncu.command("ncu", "l", ["x"])


# ----------------------------------------------------------------------------- names and records
def test_point_folder_names_stay_inside_their_parent(tmp_path):
    for pid in ("matmul/4096x4096x4096/float16", "../../etc/passwd", "..", "a/./b", "/abs/x"):
        name = folder_name(pid)
        assert "/" not in name and name not in (".", "..") and not name.startswith(".")
        assert (tmp_path / name).resolve().parent == tmp_path.resolve()
    assert folder_name("matmul/4096x4096x4096/float16") == "matmul_4096x4096x4096_float16"


def test_point_ids_parse_with_slashes_in_the_op_name():
    assert parse_point("matmul/128x4096x4096/bfloat16") == Point("matmul", (128, 4096, 4096), "bfloat16")
    assert parse_point("gems/mm/64x64/float16/v1") == Point("gems/mm", (64, 64), "float16", "v1")
    from zlf import UsageError

    with pytest.raises(UsageError):
        parse_point("matmul")


def test_the_profiled_process_gets_the_runs_recorded_environment_not_this_shells(monkeypatch, tmp_path):
    from zlf_profile.profile import Target, child_environment

    monkeypatch.setenv("DISABLE_MMA_V3", "1")
    monkeypatch.setenv("TRITON_DEBUG", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("ZLF_DISABLE", "seed")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/mine")
    meta = {"environment": {"DISABLE_MMA_V3": "0", "TRITON_CACHE_DIR": "/c/A", "CUDA_VISIBLE_DEVICES": "0"}}
    env = child_environment(Target(Point("m", (1,), "float32"), "m", tmp_path, None, meta), {"MY_SWITCH": "on"})
    assert env["DISABLE_MMA_V3"] == "0" and env["MY_SWITCH"] == "on"
    assert env["TRITON_CACHE_DIR"] == "/mine"  # a record names no place to load compiled code from
    assert "TRITON_DEBUG" not in env  # the run did not have it
    assert env["CUDA_VISIBLE_DEVICES"] == "3"  # device visibility stays this machine's
    assert "ZLF_DISABLE" not in env  # the process's extensions are the run's, named with --ext


def test_the_profiled_process_drops_variables_of_the_extensions_prefixes(monkeypatch, tmp_path):
    from zlf_profile.profile import Target, child_environment

    monkeypatch.setenv("MYRT_FAST_MODE", "1")  # this shell's; the run did not have it
    meta = {"environment": {"MYRT_TILES": "4"}}
    target = Target(Point("m", (1,), "float32"), "m", tmp_path, None, meta)
    assert child_environment(target)["MYRT_FAST_MODE"] == "1"  # core's prefixes do not name it
    env = child_environment(target, prefixes=("TRITON_", "MYRT_"))  # an extension's env_prefixes do
    assert "MYRT_FAST_MODE" not in env and env["MYRT_TILES"] == "4"


def test_autotune_choice_falls_back_to_the_record_files(tmp_path):
    from zlf.records import PointRecord
    from zlf_profile.triage import _autotune_lines

    (tmp_path / "A" / "autotune_records").mkdir(parents=True)
    (tmp_path / "B").mkdir()
    (tmp_path / "A" / "autotune_records" / "m.json").write_text(json.dumps({"kernel": "mod.matmul_kernel", "decisions": [
        {"key": [64], "point": "m/64/float16", "how": "swept", "config": {"kwargs": {"BLOCK_M": 128}, "num_warps": 8}},
        {"key": [32], "point": "m/32/float16", "how": "swept", "config": {"kwargs": {"BLOCK_M": 64}, "num_warps": 4}}]}))
    rec = PointRecord(point="m/64/float16", op="m", shape=(64,), dtype="float16", status="ok")
    assert _autotune_lines(rec, tmp_path / "A", {}) == ["matmul_kernel: BLOCK_M=128 num_warps=8 (swept)"]
    replayed = _autotune_lines(rec, tmp_path / "B", {"autotune": {"mode": "replay", "source": str(tmp_path / "A")}})
    assert replayed == ["matmul_kernel: BLOCK_M=128 num_warps=8 (replayed from the record)"]
    assert "no autotune decision" in _autotune_lines(rec, tmp_path / "B", {})[0]


def test_launch_recorder_keeps_the_calls_own_launches_and_counts_the_sweep():
    rec = LaunchRecorder()
    for name, sweep in (("k", True), ("k", True), ("k", False), ("epilogue", False)):
        rec.add(LaunchEvent(name=name, in_autotune=sweep))
    assert rec.to_json() == {"kernels": ["k", "epilogue"], "sweep": 2}
    rec.reset()
    assert rec.to_json() is None


def _ir_tree(run: Path, body: str, dtype="fp16"):
    d = run / "ir" / "64x64x64" / "matmul_kernel"
    d.mkdir(parents=True)
    (d / "w8s3.ttgir").write_text(body)
    (run / "ir" / "index.tsv").write_text(
        "shape\tkernel\tname\tfile\tstatus\tsignature\n"
        f"64x64x64\tmatmul_kernel\tw8s3\t64x64x64/matmul_kernel/w8s3\tlaunched\t*{dtype},*{dtype},*{dtype},i32\n")


def needs(*names):
    """Skip unless these extensions are installed (what the test runs uses them)."""
    from zlf.plugins import installed_extensions

    missing = [n for n in names if n not in installed_extensions()]
    if missing:
        pytest.skip(f"needs the extension(s) {', '.join(missing)}, not installed")


def test_ir_diff_of_a_point_names_the_key_op_change(tmp_path):
    needs("ir_dump")
    _ir_tree(tmp_path / "A", "%0 = ttng.warp_group_dot %a, %b\n%1 = ttng.warp_group_dot_wait %0\n")
    _ir_tree(tmp_path / "B", "%0 = tt.dot %a, %b\n")
    rows, changes, why = ir_changes(tmp_path / "A", tmp_path / "B", Point("matmul", (64, 64, 64), "float16"), tmp_path / "out")
    assert why == "" and rows[0][:3] == ["matmul_kernel", "changed", "w8s3.ttgir"]
    assert "tt.dot 0→1" in rows[0][3] and "ttng.warp_group_dot 1→0" in rows[0][3]
    assert key_change(changes) == "ttng.warp_group_dot → tt.dot"
    assert (tmp_path / "out" / "matmul_kernel" / "w8s3.ttgir.diff").read_text().startswith("--- A/")
    # another dtype's point of the same shape: that file is not its IR
    rows, _, why = ir_changes(tmp_path / "A", tmp_path / "B", Point("matmul", (64, 64, 64), "bfloat16"), tmp_path / "o2")
    assert rows == [] and "no IR file" in why
    assert from_ir_index(tmp_path / "A", (64, 64, 64), "float16").kernels == ("matmul_kernel",)


def test_a_missing_ir_tree_names_its_cause_from_the_runs_meta(tmp_path):
    """The cpu backend compiles no IR: a cpu run with ir_dump active is not 'ir_dump not active'."""
    needs("ir_dump")
    _ir_tree(tmp_path / "B", "%0 = tt.dot %a, %b\n")
    cases = {"cpu": ({"backend": "cpu", "extensions": [{"name": "ir_dump"}]}, "the cpu backend compiles no IR"),
             "off": ({"backend": "cuda", "extensions": [{"name": "seed"}]}, "ir_dump was not active"),
             "on": ({"backend": "cuda", "extensions": [{"name": "ir_dump"}]}, "ir_dump was active but wrote no IR tree")}
    for name, (meta, cause) in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "meta.json").write_text(json.dumps(meta))
        _, _, why = ir_changes(tmp_path / name, tmp_path / "B", Point("matmul", (64, 64, 64), "float16"), tmp_path / "o")
        assert why.startswith(f"no IR tree on side A ({cause}"), why


def test_without_ir_dump_a_bundle_says_there_is_no_ir_comparison(tmp_path, monkeypatch):
    _ir_tree(tmp_path / "A", "%0 = tt.dot %a, %b\n")
    _ir_tree(tmp_path / "B", "%0 = tt.dot %a, %b\n")
    monkeypatch.setitem(sys.modules, "zlf_ir_dump", None)  # not installed: importing it fails
    monkeypatch.setitem(sys.modules, "zlf_ir_dump.irtree", None)
    assert ir_changes(tmp_path / "A", tmp_path / "B", Point("matmul", (64, 64, 64), "float16"), tmp_path / "o") == \
        ([], [], NO_IR_DUMP)
    assert not from_ir_index(tmp_path / "A", (64, 64, 64), "float16").known  # no kernel names from its index


def test_the_profiled_process_wraps_only_the_first_calls_and_restores_the_op():
    from zlf.ops import Op

    calls = []
    op = Op(name="t", fn=lambda x: calls.append(x), make_inputs=lambda *a: (1,), shapes=[(1,)])
    original = op.fn

    class Backend:
        def synchronize(self):
            pass

    p = ProfiledPoint("t/1/float32", calls=2)
    p.begin(op, Backend())
    assert op.fn is not original
    for i in range(4):
        op.fn(i)
    assert calls == [0, 1, 2, 3] and p.done == 2
    assert p.end()["calls"] == 2 and op.fn is original


# ----------------------------------------------------------------------------- end to end (CPU, stand-in ncu)
def _env(tmp_path, with_ncu=True):
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "ZLF_NCU")}
    bin_dir = tmp_path / "bin"
    if with_ncu:
        bin_dir.mkdir(exist_ok=True)
        fake = bin_dir / "ncu"
        fake.write_text(FAKE_NCU.format(python=sys.executable))
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "ncu").exists()]
    env.update(PATH=os.pathsep.join(([str(bin_dir)] if with_ncu else []) + path), ZLF_NO_PROGRESS="1", CUDA_HOME=str(tmp_path / "nocuda"),
               FAKE_NCU_LOG=str(tmp_path / "ncu_calls.jsonl"), FAKE_NCU_CSV=str(BASE), FAKE_NCU_CSV_B=str(NOMMA))
    return env


def _zlf(args, cwd, env, timeout=600):
    return subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


EXTS = ["--ext", "seed", "--ext", "autotune_replay", "--ext", "ir_dump", "--ext", "profile"]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    needs("seed", "autotune_replay", "ir_dump", "shapes")
    tmp = tmp_path_factory.mktemp("profile_run")
    proc = _zlf(["run", "matmul", "--dtype", "float32", *EXTS, "--out", tmp / "runs"], tmp, _env(tmp))
    assert proc.returncode == 0, proc.stderr
    return tmp, next((tmp / "runs").glob("matmul_*"))


def test_zlf_profile_runs_the_point_alone_under_ncu_as_the_run_ran_it(cpu_run, tmp_path):
    tmp, run = cpu_run
    env = _env(tmp_path)
    proc = _zlf(["profile", run, "matmul/64x64x64/float32", "--out", tmp_path / "p", *EXTS], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = tmp_path / "p" / "profile" / "matmul_64x64x64_float32"
    assert sorted(p.name for p in folder.iterdir()) == ["child.log", "command.sh", "config.json", "metrics.json", "metrics.md",
                                                        "ncu.csv", "run", "shapes.yaml"]
    m = json.loads((folder / "metrics.json").read_text())
    assert m["ok"] and m["profiler"] == "ncu" and m["kernels"][0]["mean"]["registers"] == 200
    assert m["replay_from"] == str(run.resolve())  # the run recorded its autotune choices: replayed
    call = json.loads((tmp_path / "ncu_calls.jsonl").read_text().splitlines()[0])
    args = call["args"]
    assert call["point"] == "matmul/64x64x64/float32"
    assert args[args.index("--clock-control") + 1] == "none" and "--profile-from-start" in args
    app = args[args.index("-m") - 1:]
    assert app[1:] == ["-m", "zlf", "run", "--config", app[5], "--out", app[-1]] and app[5].endswith("config.json")
    # the profiled process's configuration: the run's, for the one point, kept beside command.sh
    config = json.loads((folder / "config.json").read_text())
    assert config["ops"] == ["matmul"] and config["dtypes"] == ["float32"] and config["timing"]["timer"] == "core"
    assert config["options"]["autotune_replay"]["replay_from"] == str(run.resolve())
    assert config["options"]["shapes"]["shapes"] == str(folder / "shapes.yaml")
    assert config["options"]["seed"]["seed"] == json.loads((run / "meta.json").read_text())["options"]["seed"]  # the run's seed
    assert {"seed", "autotune_replay", "ir_dump", "profile", "shapes"} <= set(config["ext"])
    assert f"--config {folder / 'config.json'}" in (folder / "command.sh").read_text()
    child = json.loads((folder / "run" / "results.jsonl").read_text().splitlines()[0])
    assert [r for r in [child["point"]]] == ["matmul/64x64x64/float32"]  # the profiled process ran that one point
    assert child["extra"]["profiled"]["calls"] == 3
    assert "registers per thread" in (folder / "metrics.md").read_text()


def test_zlf_profile_keeps_the_ncu_report_and_reads_it_back(cpu_run, tmp_path):
    tmp, run = cpu_run
    proc = _zlf(["profile", run, "matmul/64x64x64/float32", "--out", tmp_path / "p", "--ncu-rep", *EXTS], tmp_path, _env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = tmp_path / "p" / "profile" / "matmul_64x64x64_float32"
    assert (folder / "report.ncu-rep").is_file()
    assert json.loads((folder / "metrics.json").read_text())["kernels"][0]["mean"]["instructions"] == 126528


def test_zlf_profile_uses_the_runs_launch_record_to_name_the_kernels(cpu_run, tmp_path):
    import shutil

    tmp, run = cpu_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    lines = (copy / "results.jsonl").read_text().splitlines()
    recs = [json.loads(l) for l in lines]
    recs[0]["extra"]["launches"] = {"kernels": ["matmul_kernel"], "sweep": 4}
    (copy / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    proc = _zlf(["profile", copy, recs[0]["point"], "--calls", "3", *EXTS], tmp_path, _env(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    args = json.loads((tmp_path / "ncu_calls.jsonl").read_text().splitlines()[0])["args"]
    assert args[args.index("-k") + 1] == "regex:^(matmul_kernel)$" and args[args.index("--launch-count") + 1] == "3"
    m = json.loads(next((copy / "profile").glob("*/metrics.json")).read_text())
    assert "the run's launch record" in m["launches"]


def test_zlf_profile_without_a_profiler_says_so_in_one_line(cpu_run, tmp_path):
    tmp, run = cpu_run
    proc = _zlf(["profile", run, "matmul/64x64x64/float32", *EXTS], tmp_path, _env(tmp_path, with_ncu=False))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "no profiler: ncu not found" in proc.stderr
    # a run of the cpu backend has no GPU kernels: that cause comes first, the missing ncu second
    assert proc.stderr.index("ran on the cpu backend") < proc.stderr.index("no profiler")
    bad = _zlf(["profile", run, "matmul/1x1x1/float32", *EXTS], tmp_path, _env(tmp_path))
    assert bad.returncode == 2 and "not in run" in bad.stderr


def test_zlf_profile_reports_ncus_own_error_when_nothing_was_profiled(cpu_run, tmp_path):
    tmp, run = cpu_run
    denied = tmp_path / "denied.csv"
    denied.write_text("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
                      "permission to access NVIDIA GPU Performance Counters\n")
    env = {**_env(tmp_path), "FAKE_NCU_CSV": str(denied)}
    proc = _zlf(["profile", run, "matmul/64x64x64/float32", "--out", tmp_path / "p", *EXTS], tmp_path, env)
    assert proc.returncode == 1 and "ERR_NVGPUCTRPERM" in proc.stdout
    m = json.loads(next((tmp_path / "p" / "profile").glob("*/metrics.json")).read_text())
    assert not m["ok"] and "ncu profiled no kernel" in m["why"] and "ERR_NVGPUCTRPERM" in m["why"]
    # the run was made on the cpu backend: said before what ncu made of it
    assert m["why"].startswith(f"run {str(run.resolve())!r} ran on the cpu backend")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    needs("seed", "autotune_replay", "ir_dump", "shapes")
    tmp = tmp_path_factory.mktemp("triage_campaign")
    proc = _zlf(["ab", "--switch", "DISABLE_MMA_V3", "--rounds", "2", "matmul", "--dtype", "float32", *EXTS,
                 "--out", tmp / "runs", "--triage"], tmp, _env(tmp))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    path = next((tmp / "runs").glob("ab_*"))
    # the campaign's own triage index, read now: `zlf triage` in another test adds its point to it
    # (pytest-xdist may run that test first)
    index = (path / "triage" / "triage.md").read_text() if (path / "triage" / "triage.md").is_file() else None
    return tmp, path, proc, index


def test_ab_triage_runs_after_the_campaign_and_is_no_run_option(campaign):
    tmp, path, proc, index = campaign
    data = json.loads((path / "campaign.json").read_text())
    assert "--triage" not in data["run_args"] and "--triage-calls" not in data["run_args"]
    assert "triage dir:" in proc.stdout and index is not None
    # two rounds on the interpreter decide nothing: the index says so, no bundle is written
    assert "nothing to triage" in index


def test_zlf_triage_writes_a_bundle_that_explains_the_point(campaign):
    tmp, path, _, _ = campaign
    env = _env(tmp)
    proc = _zlf(["triage", path, "matmul/64x64x64/float32", *EXTS], tmp, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bundle = path / "triage" / "matmul_64x64x64_float32"
    b = json.loads((bundle / "bundle.json").read_text())
    assert b["counters"] == "ok" and "registers 200 → 255" in b["summary"]
    assert ["side env DISABLE_MMA_V3", "0", "1"] in b["env"]
    assert "DISABLE_MMA_V3=1" in b["repro"]["B"] and b["repro"]["B"].endswith(f"--config {bundle / 'repro_B.json'}")
    repro_config = json.loads((bundle / "repro_B.json").read_text())  # side B's configuration for the one point
    assert repro_config["options"]["autotune_replay"]["replay_from"] == str(path / "matmul" / "r1_A")
    assert repro_config["options"]["shapes"]["shapes"] == str(bundle / "shapes.yaml")
    assert repro_config["dtypes"] == ["float32"] and repro_config["ops"] == ["matmul"]
    assert all("(replayed)" in line for line in b["autotune"]["B"])
    md = (bundle / "triage.md").read_text()
    assert "**1.27×**" in md  # registers beyond their (zero) noise: bold
    assert "| achieved occupancy (%)" in md and "**1×**" not in md
    calls = [json.loads(l) for l in (tmp / "ncu_calls.jsonl").read_text().splitlines()]
    assert {c["switch"] for c in calls} == {"0", "1"}  # each side profiled with its own environment
    index = (path / "triage" / "triage.md").read_text()
    assert "[matmul/64x64x64/float32](matmul_64x64x64_float32/triage.md)" in index and "s per point" in index
    # the repro line reproduces the measurement alone: one point, side B's switch
    repro = b["repro"]["B"].split(" && ", 1)[1]
    out = subprocess.run(repro + f" --out {tmp / 'repro'}", shell=True, cwd=tmp, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    rd = next((tmp / "repro").glob("*"))
    assert [json.loads(l)["point"] for l in (rd / "results.jsonl").read_text().splitlines()] == ["matmul/64x64x64/float32"]
    assert json.loads((rd / "meta.json").read_text())["environment"]["DISABLE_MMA_V3"] == "1"


def test_triage_without_a_profiler_still_writes_the_bundle_and_says_why(campaign):
    tmp, path, _, _ = campaign
    proc = _zlf(["triage", path, "matmul/96x80x48/float32", *EXTS], tmp, _env(tmp, with_ncu=False))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = (path / "triage" / "matmul_96x80x48_float32" / "triage.md").read_text()
    assert "no profiler: ncu not found" in md and "## Reproduce one side alone" in md
    assert "Without counters: no profiler" in (path / "triage" / "triage.md").read_text()
    bad = _zlf(["triage", path, "matmul/1x1x1/float32", *EXTS], tmp, _env(tmp))
    assert bad.returncode == 2 and "not in the campaign" in bad.stderr


def test_triage_out_puts_the_bundles_under_the_folder_given(campaign):
    tmp, path, _, _ = campaign
    out = tmp / "elsewhere"
    proc = _zlf(["triage", path, "matmul/96x80x48/float32", "--no-profile", "--out", out, *EXTS], tmp, _env(tmp))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "triage" / "matmul_96x80x48_float32" / "triage.md").is_file() and (out / "triage" / "triage.md").is_file()
    assert f"triage dir: {out / 'triage'}" in proc.stdout
