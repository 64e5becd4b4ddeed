"""Hostile input (docs/hostile.md, "Trust boundary: bad input"): files zlf reads back that are not
what they claim to be. Each case failed before zlf.readers: a hang on a FIFO, MemoryError on
/dev/zero, a traceback, a YAML alias bomb of gigabytes, a NaN or 1e308 taken as a time, a wrong
type taken as data, a point measured twice under one id. Now: one line naming the file (and the
line), exit code 2, in bounded time and memory; a record's number out of range reads as "no time".

Children run under a 2 GiB address-space limit and a generous timeout, so that a regression fails
(MemoryError, TimeoutExpired) instead of taking the machine; no assertion is on time.
"""
from __future__ import annotations

import json
import math
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, read_records, run_dir_from
from zlf.ab import Campaign
from zlf.ab.analysis import load_noise
from zlf.config import RunConfig
from zlf.errors import UsageError
from zlf.rundir import RunDir

V0 = ROOT / "tests" / "data" / "format_v0"
MESSAGE_CHARS = 200  # docs/hostile.md: an error names the file and line in fewer characters


def limited():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def zlf(*args, cwd, env=None, timeout=120):
    full_env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    # the autouse fixture left active only the extensions a test is marked with
    full_env.update({"ZLF_NO_PROGRESS": "1", "ZLF_CACHE_DIR": str(Path(cwd) / "cache")})
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=limited)


def one_line_error(proc, *needles) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, f"rc={proc.returncode}\n{out[-2000:]}"
    assert "Traceback" not in out, out[-2000:]
    lines = [l for l in proc.stderr.splitlines() if l.strip() and not l.startswith("zlf: warning:")]
    assert len(lines) == 1 and lines[0].startswith("zlf: error: "), proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def refused(call, *needles) -> str:
    """``call()`` raises a one-line UsageError holding ``needles``, short enough to read."""
    with pytest.raises(UsageError) as info:
        call()
    text = str(info.value)
    assert "\n" not in text and len(text) < MESSAGE_CHARS, text
    for needle in needles:
        assert needle in text, text
    return text


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A real run directory (format 0: what every zlf since reads) to spoil."""
    return Path(shutil.copytree(V0 / "run", tmp_path / "run"))


@pytest.fixture
def campaign_dir(tmp_path) -> Path:
    return Path(shutil.copytree(V0 / "campaign", tmp_path / "camp"))


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


# ----------------------------------------------------------------------------- regular files only
def _fifo(path):
    os.mkfifo(path)


def _dev_zero(path):
    path.symlink_to("/dev/zero")


def _directory(path):
    path.mkdir()


def _socket(path):
    s = socket.socket(socket.AF_UNIX)
    here = os.getcwd()
    os.chdir(path.parent)  # bound by its name: under a long TMPDIR the whole path passes AF_UNIX's 107 bytes
    try:
        s.bind(path.name)  # left bound: the file is a socket for the test's life
    finally:
        os.chdir(here)
    _socket.keep = s


@pytest.mark.parametrize("make,kind", [(_fifo, "FIFO"), (_dev_zero, "character device"),
                                       (_directory, "directory"), (_socket, "socket")])
def test_compare_refuses_a_meta_json_that_is_no_regular_file(run_dir, tmp_path, make, kind):
    """A FIFO hung zlf compare; /dev/zero ran out of memory; a directory or socket: a traceback."""
    (run_dir / "meta.json").unlink()
    make(run_dir / "meta.json")
    line = one_line_error(zlf("compare", V0 / "run", run_dir, cwd=tmp_path), "meta.json", kind)
    assert len(line) < MESSAGE_CHARS


@pytest.mark.parametrize("make,kind", [(_fifo, "FIFO"), (lambda p: p.symlink_to("/dev/urandom"), "character device")])
def test_compare_refuses_a_results_file_that_is_no_regular_file(run_dir, tmp_path, make, kind):
    (run_dir / "results.jsonl").unlink()
    make(run_dir / "results.jsonl")
    one_line_error(zlf("compare", V0 / "run", run_dir, cwd=tmp_path), "results.jsonl", kind)


def test_a_sparse_gigabyte_results_file_is_refused_unread(run_dir, tmp_path):
    with open(run_dir / "results.jsonl", "r+b") as f:
        f.truncate(1 << 30)  # a gigabyte of holes: no disk used, MemoryError under the child's limit
    one_line_error(zlf("compare", V0 / "run", run_dir, cwd=tmp_path), "results.jsonl", "256 MiB")


def test_a_config_file_that_is_a_fifo_is_one_line(tmp_path):
    os.mkfifo(tmp_path / "c.json")
    one_line_error(zlf("run", "--config", "c.json", cwd=tmp_path), "c.json", "FIFO")


# ----------------------------------------------------------------------------- JSON: parse, depth, numbers, types
def test_meta_json_nested_a_hundred_thousand_deep_is_one_line(run_dir):
    (run_dir / "meta.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(RunDir(run_dir).meta, "meta.json", "nested more than 64 deep")
    (run_dir / "meta.json").write_text('{"fingerprint": ' + "[" * 70 + "]" * 70 + "}")  # under the recursion limit
    refused(RunDir(run_dir).meta, "nested more than 64 deep")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400", str(10 ** 30)])
def test_meta_json_numbers_are_finite_and_in_range(run_dir, value):
    text = (run_dir / "meta.json").read_text()
    (run_dir / "meta.json").write_text(re.sub(r'"points": \d+', f'"points": {value}', text))
    refused(RunDir(run_dir).meta, "meta.json", "not a zlf meta.json")


@pytest.mark.parametrize("field,value", [("status", 5), ("command", "rm -rf /"), ("environment", ["LD_PRELOAD=x"]),
                                         ("points", -3), ("extensions", {"a": 1}), ("backend", None)])
def test_meta_json_fields_of_the_wrong_type_are_one_line(run_dir, field, value):
    edit_json(run_dir / "meta.json", lambda d: d.update({field: value}))
    refused(RunDir(run_dir).meta, "meta.json", field)


def test_a_key_given_twice_in_a_json_object_is_refused(run_dir):
    """Two readers of one file must not see two documents: the last ``status`` would win here."""
    text = (run_dir / "meta.json").read_text()
    (run_dir / "meta.json").write_text(text.replace('"status": "complete"', '"status": "complete", "status": "running"'))
    refused(RunDir(run_dir).meta, "'status' is given twice")


def test_a_utf8_bom_is_read_and_utf16_is_one_line(run_dir):
    text = (run_dir / "meta.json").read_text()
    (run_dir / "meta.json").write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert RunDir(run_dir).meta()["status"] == "complete"
    (run_dir / "meta.json").write_bytes(text.encode("utf-16"))
    refused(RunDir(run_dir).meta, "meta.json", "UTF-16")


@pytest.mark.parametrize("median", ["1e308", "1e400", "-1e308", str(10 ** 25)])
def test_a_median_out_of_range_is_no_time(run_dir, median):
    """A 1e308 ms median was a time: means and variances of it overflow to inf and NaN."""
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    doc = json.loads(lines[0])
    lines[0] = json.dumps({**doc, "median_ms": "@"}).replace('"@"', median)
    (run_dir / "results.jsonl").write_text("\n".join(lines) + "\n")
    records, skipped = RunDir(run_dir).records()
    first = {r.point: r for r in records}.get(doc["point"])
    assert first is None or first.median_ms is None, first  # no time, or the line left out and counted
    assert first is not None or skipped == 1


@pytest.mark.parametrize("change", [{"shape": ["a"]}, {"point": 5}, {"samples": "fast"}, {"samples": [-1.0]},
                                    {"median_ms": -2.0}, {"shape": [10 ** 30]}, {"status": "PASSED"},
                                    {"extra": []}], ids=str)
def test_a_result_line_of_the_wrong_types_is_skipped_and_counted(run_dir, change):
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), **change})
    (run_dir / "results.jsonl").write_text("\n".join(lines) + "\n")
    records, skipped = RunDir(run_dir).records()
    assert skipped == 1 and len(records) == len(lines) - 1


@pytest.mark.parametrize("change,needle", [
    (lambda d: d["runs"][0].update(round="1"), "round"),
    (lambda d: d["sides"][0].update(env={"LD_PRELOAD": 1}), "env"),
    (lambda d: d.update(runs={}), "runs"),
    (lambda d: d["statistics"].update(alpha=float("nan")), "NaN"),
    (lambda d: d["runs"][0].update(round=10 ** 30), "out of range"),
], ids=["round-text", "env-number", "runs-object", "alpha-nan", "round-huge"])
def test_campaign_json_of_the_wrong_types_is_one_line(campaign_dir, change, needle):
    path = campaign_dir / "campaign.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    refused(lambda: Campaign.open(campaign_dir), "campaign.json", needle)


def _aa_summary(campaign_dir: Path, change) -> Path:
    path = campaign_dir / "summary.json"
    doc = json.loads(path.read_text())
    doc["aa"] = True
    for p in doc["points"]:
        p.update(a_ms=[1.0, 1.1], b_ms=[1.0, 1.05])
    change(doc)
    path.write_text(json.dumps(doc))
    return campaign_dir


@pytest.mark.parametrize("change,needle", [
    (lambda d: d["points"][0].update(rounds=-3), "rounds"),
    (lambda d: d["points"][0].update(a_ms="1.0"), "a_ms"),
    (lambda d: d.update(points={"add": 1}), "points"),
    (lambda d: d["points"][0].update(deltas_pct=[float("inf"), 1.0]), "Infinity"),
], ids=["negative-rounds", "text-times", "points-object", "infinite-delta"])
def test_noise_from_a_summary_of_the_wrong_types_is_one_line(campaign_dir, change, needle):
    _aa_summary(campaign_dir, change)
    refused(lambda: load_noise(campaign_dir), "--noise-from", "summary.json", needle)


@pytest.mark.parametrize("text,needle", [('{"rep_ms": NaN}', "NaN"), ('{"rep_ms": 1e999}', "out of range"),
                                         ("[" * 50_000, "nested"), ('{"seed": 1, "seed": 2}', "given twice")])
def test_a_config_file_is_strict_json(tmp_path, text, needle):
    (tmp_path / "c.json").write_text(text)
    refused(lambda: RunConfig.read(tmp_path / "c.json"), "c.json", needle)


def test_a_file_deep_in_a_long_folder_is_refused_with_its_reason_whole(tmp_path):
    """A long folder (TMPDIR exported to a cluster node's scratch space) took the message's room:
    the path was kept to 120 characters and the reason cut to 40 ('... 1e999 is out of rang...')."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / "c.json").write_text('{"rep_ms": 1e999}')
    text = refused(lambda: RunConfig.read(deep / "c.json"), "c.json", "out of range")
    assert text.startswith("config ...") and "/c.json: " in text  # the path shortened from its start


def test_a_ceilings_cache_of_the_wrong_types_is_measured_again(tmp_path, monkeypatch):
    """A cached ``bandwidth_GB_s`` of "fast" or NaN was divided by (TypeError, NaN percentages)."""
    from zlf import ceilings

    monkeypatch.setenv("ZLF_CACHE_DIR", str(tmp_path))
    path = ceilings.ceilings_path("GPU X")
    path.parent.mkdir(parents=True)
    good = {"device_name": "GPU X", "backend": "cuda", "bandwidth_GB_s": 3000.0, "tflops": {"float16": 700.0}}
    path.write_text(json.dumps(good))
    assert ceilings.load("GPU X").bandwidth_GB_s == 3000.0
    for bad in ({**good, "bandwidth_GB_s": "fast"}, {**good, "tflops": {"float16": -1}}, {**good, "bandwidth_GB_s": 0}):
        path.write_text(json.dumps(bad))
        assert ceilings.load("GPU X") is None, bad
    path.write_text(json.dumps(good).replace("3000.0", "NaN"))
    assert ceilings.load("GPU X") is None


@pytest.mark.extensions("autotune_replay")
@pytest.mark.parametrize("decisions", [[{"key": 1, "config": {"kwargs": {}}}], [{"key": [1], "config": "BLOCK=64"}],
                                       [{"key": [1], "config": {"kwargs": {}, "num_warps": -4}}], {"a": 1}], ids=str)
def test_an_autotune_record_of_the_wrong_types_is_one_line(tmp_path, decisions):
    from zlf_autotune_replay.records import FORMAT, RECORDS_DIR, ReplaySource

    (tmp_path / RECORDS_DIR).mkdir()
    doc = {"format": FORMAT, "kernel": "m.k", "source_sha256": "0" * 64, "decisions": decisions}
    (tmp_path / RECORDS_DIR / "k.json").write_text(json.dumps(doc))
    refused(lambda: ReplaySource.open(tmp_path), "--replay-from", "k.json", "decisions")


@pytest.mark.extensions("ir_dump")
def test_an_ir_index_row_of_the_wrong_kind_is_left_out(tmp_path):
    from zlf_ir_dump.irtree import INDEX, read_index

    head = "shape\tkernel\tname\tfile\tstatus\tlaunches\thash"
    good = "1024\tk\tk\t1024/k/k\tlaunched\t1\tabc"
    (tmp_path / INDEX).write_text("\n".join([head, good, "../../etc\tk\tk\tx\tlaunched\tmany\tabc",
                                             "1024\tk\tk\tx\tpwned\t1\tabc"]) + "\n")
    assert [r["file"] for r in read_index(tmp_path)] == ["1024/k/k"]


# ----------------------------------------------------------------------------- YAML: bounded expansion
LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f'{c}: &{c} [{",".join(["*" + p] * 9)}]\n' for p, c in zip("abcdefgh", "bcdefghi")) + "softmax: {shapes: *i}\n"
MERGE_BOMB = "m0: &m0 {k0: 1, k1: 2}\n" + "".join(
    f"m{i + 1}: &m{i + 1} {{<<: [*m{i}, *m{i}], z{i}: 1}}\n" for i in range(40)) + "softmax: {shapes: [[4, 8]]}\n"


def shapes_cli(tmp_path, name, content, *extra):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return zlf("ops", "softmax", "--ext", "shapes", "--shapes", name, *extra, cwd=tmp_path)


@pytest.mark.extensions("shapes")
@pytest.mark.parametrize("name,content,needles", [
    ("laughs.yaml", LAUGHS, ("laughs.yaml:", "expands to more than")),
    ("merge.yaml", MERGE_BOMB, ("merge.yaml:", "expands to more than")),
    ("self.yaml", "softmax: &s {shapes: [[4, 8]], again: *s}\n", ("self.yaml:1:", "inside the value it names")),
    ("deep.yaml", "softmax: " + "[" * 100_000 + "]" * 100_000 + "\n", ("deep.yaml:1:", "nested more than 64")),
    ("tag.yaml", "softmax: !!python/object/apply:os.system ['touch pwned']\n", ("tag.yaml:1:", "constructor")),
    ("tabs.yaml", "softmax:\n\tshapes: [[4, 8]]\n", ("tabs.yaml:2:", "not valid YAML")),
    ("twice.yaml", "softmax: {shapes: [[4, 8]]}\nadd: {shapes: [[8]]}\nsoftmax: {shapes: [[2, 2]]}\n",
     ("twice.yaml:3:", "'softmax' is given twice (lines 1 and 3)")),
    ("latin1.yaml", "softmax: {shapes: [[4, 8]]}  # größe\n".encode("latin-1"), ("latin1.yaml:1:", "not UTF-8")),
    ("utf16.yaml", "softmax: {shapes: [[4, 8]]}\n".encode("utf-16"), ("utf16.yaml:", "UTF-16")),
    ("big.yaml", "softmax: {shapes: [[4, 8]]}\n" + "# padding\n" * 500_000, ("big.yaml:", "4 MiB")),
    ("two.yaml", "softmax: {shapes: [[4, 8]]}\n---\nadd: {}\n", ("two.yaml:2:", "single document")),
    ("huge.yaml", "softmax: {shapes: [[99999999999999999999999, 2]]}\n", ("huge.yaml", "below 2**63")),
    ("long.yaml", "softmax: {shapes: [[" + ", ".join(["1"] * 100_000) + "]]}\n", ("long.yaml", "at most 64")),
], ids=lambda v: v if isinstance(v, str) and v.endswith(".yaml") else "")
def test_a_hostile_shape_file_is_one_short_line_naming_file_and_line(tmp_path, name, content, needles):
    proc = shapes_cli(tmp_path, name, content)
    line = one_line_error(proc, *needles)
    assert len(line) < MESSAGE_CHARS, line
    assert not (tmp_path / "pwned").exists()


@pytest.mark.extensions("shapes")
def test_a_shape_file_that_is_a_fifo_is_one_line(tmp_path):
    os.mkfifo(tmp_path / "f.yaml")
    proc = zlf("ops", "softmax", "--ext", "shapes", "--shapes", "f.yaml", cwd=tmp_path,
               )
    one_line_error(proc, "f.yaml", "FIFO")


@pytest.mark.extensions("shapes")
def test_anchors_aliases_and_merge_keys_of_real_shape_files_still_work(tmp_path):
    """FlagGems' shape files share lists through anchors and merge keys: they keep working."""
    text = ("common: &common\n  shapes: [[4, 8], [2, 16]]\n  shape_desc: M, N\n"
            "sizes: &sizes [[8, 8]]\n"
            "softmax:\n  <<: *common\n  shape_desc: rows, cols\n"
            "add:\n  shapes: *sizes\n")
    proc = shapes_cli(tmp_path, "ok.yaml", text, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["shapes"] == ["4x8", "2x16"]


def test_a_shapes_yaml_bomb_in_a_run_directory_is_one_line(run_dir):
    (run_dir / "shapes.yaml").write_text(LAUGHS)
    refused(RunDir(run_dir).shapes, "shapes.yaml", "expands to more than")


# ----------------------------------------------------------------------------- a point listed twice
OP_FILE = '''
import torch, zlf

def make(shape, dtype, device):
    return (torch.ones(shape, dtype=getattr(torch, dtype), device=device),)

twice = zlf.Op(name="twice", fn=lambda x: x + 1, make_inputs=make, shapes=[(64,), (128,), (64,)],
               reference=lambda x: x + 1, dtypes=["float32"])
'''


@pytest.mark.extensions("shapes")
def test_a_shape_listed_twice_in_a_shape_file_runs_once_with_a_note(tmp_path):
    (tmp_path / "s.yaml").write_text("softmax:\n  shapes: [[4, 8], [2, 16], [4, 8]]\n")
    proc = zlf("run", "softmax", "--ext", "shapes", "--shapes", "s.yaml", "--out", "runs", "--rep-ms", "1",
               "--warmup-ms", "1", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    points = [r["point"] for r in read_records(run_dir_from(proc.stdout, tmp_path))]
    assert points == ["softmax/4x8/float32", "softmax/2x16/float32"]
    notes = [l for l in proc.stderr.splitlines() if "listed more than once" in l]
    assert len(notes) == 1 and "softmax/4x8/float32" in notes[0], proc.stderr
    log = (run_dir_from(proc.stdout, tmp_path) / "run.log").read_text()
    assert log.count("softmax/4x8/float32 is listed more than once") == 1


@pytest.mark.parametrize("args,points", [(("ops.py::twice",), 2), (("add", "--dtype", "float32,float32"), 2)])
def test_a_point_listed_twice_in_an_op_file_or_dtype_list_is_planned_once(tmp_path, args, points):
    (tmp_path / "ops.py").write_text(OP_FILE)
    proc = zlf("ops", *args, "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)[0]["points"] == points
    assert "listed more than once" in proc.stderr


@pytest.mark.extensions("flaggems")
def test_a_sweep_state_that_is_a_fifo_is_one_line(tmp_path):
    """``zlf sweep --resume D`` read D/sweep.json with read_text: a FIFO there hung it."""
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "sweep.json")
    one_line_error(zlf("sweep", "--resume", "d", cwd=tmp_path, env={"FLAGGEMS_DIR": ""}),
                   "--resume 'd': not a sweep directory", "FIFO")


@pytest.mark.extensions("seed", "autotune_replay")
def test_a_replay_source_whose_meta_json_is_a_device_is_one_line(tmp_path):
    (tmp_path / "rec" / "autotune_records").mkdir(parents=True)
    (tmp_path / "rec" / "meta.json").symlink_to("/dev/zero")
    proc = zlf("run", "add", "--out", "out", "--replay-from", tmp_path / "rec", cwd=tmp_path)
    one_line_error(proc, "--replay-from", "meta.json", "character device")
    assert not (tmp_path / "out").exists()
