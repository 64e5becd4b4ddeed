"""autotune_replay: record Triton autotune decisions in one process, replay them in another.

The end-to-end tests run real ``zlf run`` processes on the cpu backend (Triton interpreter):
one record run over the built-in matmul, kernels behind ``triton.heuristics`` (above and below
the autotuner) and a stand-in for FlagGems' libentry/libtuner; then replays of it, of doctored
copies of it, and of a replay run (refused).
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

from zlf.testing import pythonpath, read_records, run_dir_from

EXT = ("--ext", "autotune_replay")
FAST = ("--warmup-ms", "1", "--rep-ms", "3")
MARKER = "AUTOTUNE_REPLAY_FALLBACK"
MATMUL = "zlf.ops.builtin.matmul_kernel"

# A stand-in for flag_gems.utils.libentry (flag-gems 5.0.2): the API zlf's replay relies on.
# LibTuner overrides Autotuner.run and keeps winners in sqlite at FLAGGEMS_DB_URL (read at
# import); LibEntry caches a launcher per argument signature and bypasses the tuner after it.
FAKE_LIBENTRY = '''
import json, os, sqlite3
import triton

FLAGGEMS_DB_URL = os.getenv("FLAGGEMS_DB_URL", None)
DB_PATH = FLAGGEMS_DB_URL[len("sqlite:///"):]


class ConfigCache:
    def __init__(self, table):
        self.table = table
        self.db = sqlite3.connect(DB_PATH)
        self.db.execute("CREATE TABLE IF NOT EXISTS configs (tbl TEXT, key TEXT, config TEXT, PRIMARY KEY (tbl, key))")

    def get(self, key):
        row = self.db.execute("SELECT config FROM configs WHERE tbl=? AND key=?", (self.table, repr(key))).fetchone()
        return triton.Config(**json.loads(row[0])) if row else None

    def __contains__(self, key):
        return self.get(key) is not None

    def __getitem__(self, key):
        config = self.get(key)
        if config is None:
            raise KeyError(key)
        return config

    def __setitem__(self, key, config):
        doc = {"kwargs": config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
        self.db.execute("INSERT OR REPLACE INTO configs VALUES (?, ?, ?)", (self.table, repr(key), json.dumps(doc)))
        self.db.commit()


class LibTuner(triton.runtime.Autotuner):
    def __init__(self, fn, arg_names, configs, key):
        super().__init__(fn, arg_names, configs, key, None, None)
        self.cache = ConfigCache(self.base_fn.__name__)

    def run(self, *args, **kwargs):
        self.nargs = dict(zip(self.arg_names, args))
        all_args = {**self.nargs, **kwargs}
        key = tuple(all_args[k] for k in self.keys) + tuple(
            str(a.dtype) for k, a in all_args.items() if k in self.arg_names and hasattr(a, "dtype"))
        if key not in self.cache:
            timings = {c: self._bench(*args, config=c, **kwargs) for c in self.prune_configs(kwargs)}
            self.bench_time = 0.0
            self.cache[key] = min(timings, key=timings.get)
            self.configs_timings = timings
        config = self.cache[key]
        for original in self.configs:
            if original.all_kwargs() == config.all_kwargs():
                config = original
        self.best_config = config
        ret = self.fn.run(*args, **kwargs, **config.all_kwargs())
        self.nargs = None
        return ret


def libtuner(configs, key):
    return lambda fn: LibTuner(fn, fn.arg_names, configs, key)


class LibEntry(triton.KernelInterface):
    def __init__(self, fn):
        self.fn = fn
        self.arg_names = fn.arg_names
        self.kernel_cache = (dict(),)
        self.jit = fn
        while isinstance(self.jit, (triton.runtime.Autotuner, triton.runtime.Heuristics)):
            self.jit = self.jit.fn

    def run(self, *args, grid, warmup=False, **kwargs):
        sig = tuple((str(a.dtype), tuple(a.shape)) if hasattr(a, "dtype") else a for a in args)
        cache = self.kernel_cache[0]
        if sig not in cache:
            self.fn.run(*args, grid=grid, warmup=warmup, **kwargs)
            cache[sig] = self.fn.best_config.all_kwargs()
            return
        self.jit.run(*args, grid=grid, warmup=warmup, **kwargs, **cache[sig])  # the tuner is not asked


def libentry():
    return LibEntry
'''

OPS = '''
import torch
import triton
import triton.language as tl
import zlf
from flag_gems.utils.libentry import libentry, libtuner

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((32, 1), (64, 2), (128, 4))]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})
@triton.jit
def scale_kernel(x, out, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out + offs, tl.load(x + offs) * 2)
    else:
        tl.store(out + offs, tl.load(x + offs, mask=offs < n) * 2, mask=offs < n)


@triton.heuristics({"UNIT": lambda a: a["alpha"] == 1.0})
@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def axpb_kernel(x, out, alpha, n, BLOCK: tl.constexpr, UNIT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x + offs, mask=offs < n)
    y = x + 1 if UNIT else x * alpha + 1
    tl.store(out + offs, y, mask=offs < n)


@libentry()
@libtuner(configs=CONFIGS, key=["n"])
@triton.jit
def gems_kernel(x, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(x + offs, mask=offs < n) + 1, mask=offs < n)


def grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK"]),)


def scale(x, out):
    scale_kernel[grid(x.numel())](x, out, x.numel())


def axpb(x, out):
    axpb_kernel[grid(x.numel())](x, out, 3.0, x.numel())


def gems_add(x, out):
    gems_kernel[grid(x.numel())](x, out, x.numel())


def make(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))


# Like a library warming up at import: fills the libentry launcher before zlf watches.
gems_add(*make((4096,), "float32", "cpu"))

common = dict(make_inputs=make, shapes=[(1000,), (4096,)], outputs=(1,))
scale_op = zlf.Op(name="scale", fn=scale, reference=lambda x, out: x * 2, **common)
axpb_op = zlf.Op(name="axpb", fn=axpb, reference=lambda x, out: x * 3.0 + 1, **common)
gems_op = zlf.Op(name="gems_add", fn=gems_add, reference=lambda x, out: x + 1, **common)
'''


def decisions_by_point(run_dir) -> dict:
    """point id -> sorted [(kernel, key, config)] as the point's ``autotune`` annotation says."""
    out = {}
    for r in read_records(run_dir):
        assert r["status"] == "ok", r
        used = r["extra"].get("autotune", [])
        out[r["point"]] = sorted((d["kernel"], json.dumps(d["key"]), json.dumps(d["config"], sort_keys=True)) for d in used)
    return out


def record_files(run_dir) -> dict:
    return {json.loads(p.read_text())["kernel"]: json.loads(p.read_text())
            for p in (Path(run_dir) / "autotune_records").glob("*.json")}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("autotune_replay")
    pkg = root / "fakes" / "flag_gems" / "utils"
    pkg.mkdir(parents=True)
    (root / "fakes" / "flag_gems" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "libentry.py").write_text(textwrap.dedent(FAKE_LIBENTRY))
    (root / "replay_ops.py").write_text(textwrap.dedent(OPS))
    env = {**pythonpath(root / "fakes"), "FLAGGEMS_DB_URL": f"sqlite:///{root / 'user.db'}"}
    return root, env


def zlf_run(root, env, *args, rc=0, extra_env=None):
    """``zlf run ARGS`` as a fresh process in ``root``: (CompletedProcess, run dir or None)."""
    full_env = {**os.environ, **env, **(extra_env or {}), "ZLF_NO_PROGRESS": "1"}
    full_env.pop("FORCE_COLOR", None)
    proc = subprocess.run([sys.executable, "-m", "zlf", "run", *map(str, args), *EXT, *FAST, "--out", str(root / "runs")],
                          cwd=root, env=full_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == rc, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc, (run_dir_from(proc.stdout, root) if rc == 0 else None)


class Recorded(NamedTuple):
    proc: subprocess.CompletedProcess
    run_dir: Path
    user_db_after: bool  # whether the user's libtuner cache existed right after the run


@pytest.fixture(scope="module")
def recorded(workspace):
    """One record run (fresh libtuner cache) over matmul and the three ops of replay_ops.py.
    Whether it left the user's cache alone is read here, at once: pytest-xdist may run a test
    that fills that cache (``replayed``) before a test that reads this fixture."""
    root, env = workspace
    proc, run_dir = zlf_run(root, env, "matmul", "replay_ops.py", "--libtuner-cache", "fresh",
                            extra_env={"TRITON_PRINT_AUTOTUNING": "1"})
    return Recorded(proc, run_dir, (root / "user.db").exists())


@pytest.fixture(scope="module")
def replayed(recorded, workspace):
    """A replay of ``recorded`` while the user's shared libtuner cache holds other winners."""
    rec = recorded.run_dir
    root, env = workspace
    gems = record_files(rec)["zlf_user_ops_replay_ops.gems_kernel"]
    db = sqlite3.connect(root / "user.db")
    db.execute("CREATE TABLE IF NOT EXISTS configs (tbl TEXT, key TEXT, config TEXT, PRIMARY KEY (tbl, key))")
    for d in gems["decisions"]:
        other = next(c for c in gems["config_space"] if c != d["config"])
        db.execute("INSERT OR REPLACE INTO configs VALUES (?, ?, ?)", ("gems_kernel", repr(tuple(d["key"])), json.dumps(other)))
    db.commit()
    return zlf_run(root, env, "matmul", "replay_ops.py", "--replay-from", rec, "--libtuner-cache", "shared",
                   extra_env={"TRITON_PRINT_AUTOTUNING": "1"})


def test_record_run_writes_every_decision(recorded):
    proc, run_dir = recorded.proc, recorded.run_dir
    assert "Autotuning kernel" in proc.stdout  # it really swept
    files = record_files(run_dir)
    assert set(files) == {MATMUL, "zlf_user_ops_replay_ops.scale_kernel", "zlf_user_ops_replay_ops.axpb_kernel",
                          "zlf_user_ops_replay_ops.gems_kernel"}
    mm = files[MATMUL]
    assert len(mm["source_sha256"]) == 64 and mm["key_names"] == ["M", "N", "K"] and len(mm["config_space"]) == 4
    assert [d["key"][:3] for d in mm["decisions"]] == [[64, 64, 64], [96, 80, 48]]
    for d in mm["decisions"]:
        assert d["how"] == "swept" and len(d["timings_ms"]) == 4 and set(d["config"]) >= {
            "kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg"}
    # gems: key 4096 was swept at import (into the fresh sqlite), so the run read it from there.
    gems = {d["key"][0]: d["how"] for d in files["zlf_user_ops_replay_ops.gems_kernel"]["decisions"]}
    assert gems == {1000: "swept", 4096: "libtuner_cache"}
    meta = json.loads((run_dir / "meta.json").read_text())["autotune"]
    assert meta["mode"] == "record" and meta["source"] is None and meta["libtuner_cache"] == "fresh"
    assert meta["libtuner_db_kept_as"] == "libtuner_cache.db" and meta["libentry_launchers_cleared"] == 1
    rows = sqlite3.connect(run_dir / "libtuner_cache.db").execute("SELECT key FROM configs").fetchall()
    assert len(rows) == 2
    assert not recorded.user_db_after  # fresh never touched the user's cache
    for point, used in decisions_by_point(run_dir).items():
        assert len(used) == 1, (point, used)


def test_replay_pins_every_config_without_sweeping(recorded, replayed):
    rec, (proc, rep) = recorded.run_dir, replayed
    assert "Autotuning kernel" not in proc.stdout  # no sweep at all
    assert decisions_by_point(rep) == decisions_by_point(rec)
    for r in read_records(rep):
        assert {d["how"] for d in r["extra"]["autotune"]} == {"replayed"} and not r["markers"], r
    assert not (rep / "autotune_records").exists()
    meta = json.loads((rep / "meta.json").read_text())["autotune"]
    assert meta["mode"] == "replay" and meta["source"] == str(rec.resolve()) and meta["pinned"] == 8
    assert meta["fallbacks"] == [] and meta["libtuner_cache"] == "shared"
    assert MARKER not in (rep / "run.log").read_text()


def _doctored(rec: Path, dest: Path, change) -> Path:
    shutil.copytree(rec, dest)
    path = next(p for p in (dest / "autotune_records").glob("*.json") if json.loads(p.read_text())["kernel"] == MATMUL)
    doc = json.loads(path.read_text())
    change(doc["decisions"])
    path.write_text(json.dumps(doc))
    return dest


@pytest.mark.parametrize("defect, reason", [("missing_key", "missing_key"), ("impossible_config", "compile_error")])
def test_doctored_record_falls_back_with_marker(recorded, workspace, defect, reason):
    rec = recorded.run_dir
    root, env = workspace

    def change(decisions):
        if defect == "missing_key":
            decisions[0]["key"][0] = 65  # nothing asks for M=65
        else:
            decisions[0]["config"]["kwargs"]["BLOCK_M"] = 3  # tl.arange needs a power of 2

    source = _doctored(rec, root / f"doctored_{defect}", change)
    _, rep = zlf_run(root, env, "matmul", "--replay-from", source)
    records = {r["point"]: r for r in read_records(rep)}
    bad, good = records["matmul/64x64x64/float32"], records["matmul/96x80x48/float32"]
    expected = f"{MARKER} op=matmul point=matmul/64x64x64/float32 kernel={MATMUL} reason={reason}"
    assert bad["status"] == "ok" and bad["markers"] == [expected]
    assert bad["extra"]["autotune"][0]["how"] == "swept" and bad["extra"]["autotune"][0]["fallback_reason"] == reason
    assert good["status"] == "ok" and not good["markers"] and good["extra"]["autotune"][0]["how"] == "replayed"
    assert (rep / "run.log").read_text().count(MARKER) == 1
    meta = json.loads((rep / "meta.json").read_text())["autotune"]
    assert [f["reason"] for f in meta["fallbacks"]] == [reason] and meta["pinned"] == 1


def test_replay_from_a_replay_run_is_refused(recorded, replayed, workspace):
    rec, (_, rep) = recorded.run_dir, replayed
    root, env = workspace
    for args, extra_env in ((("--replay-from", rep), None), ((), {"ZLF_REPLAY_FROM": str(rep)})):
        before = set((root / "runs").iterdir())
        proc, _ = zlf_run(root, env, "matmul", *args, rc=2, extra_env=extra_env)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "zlf: error:" in lines[0], proc.stderr
        assert f"replayed its autotune configs from {rec.resolve()}" in lines[0]
        assert set((root / "runs").iterdir()) == before  # refused before a run directory exists


def test_not_a_record_run_is_refused(workspace, tmp_path):
    root, env = workspace
    proc, _ = zlf_run(root, env, "matmul", "--replay-from", tmp_path, rc=2)
    assert "no autotune_records/" in proc.stderr


# ----------------------------------------------------------------------------- in-process units
def test_keys_and_configs_round_trip():
    import triton

    from zlf_autotune_replay.records import canonical_key, config_from_json, config_to_json

    key = (4096, 1024.0, True, "torch.bfloat16")
    assert canonical_key(key) == canonical_key(json.loads(json.dumps(list(key))))
    config = triton.Config({"BLOCK_M": 128, "SPLIT": False}, num_warps=8, num_stages=3, num_ctas=1, maxnreg=128)
    again = config_from_json(json.loads(json.dumps(config_to_json(config))))
    assert again.all_kwargs() == config.all_kwargs()
    with pytest.raises(ValueError):
        config_from_json({"BLOCK_M": 3})


def test_record_writer_is_atomic_and_keeps_same_named_kernels_apart(tmp_path):
    from zlf_autotune_replay.records import KernelIdentity, RecordWriter, ReplaySource

    class Tuner:
        keys, configs = ["n"], []

    writer = RecordWriter(tmp_path / "autotune_records")
    a, b = KernelIdentity("m.k", "a" * 64), KernelIdentity("m.k", "b" * 64)
    cfg = {"kwargs": {"B": 1}, "num_warps": 4}
    writer.add(a, Tuner(), {"key": [1], "config": cfg})
    writer.add(a, Tuner(), {"key": [1], "config": {**cfg, "num_warps": 8}})  # same key: replaced
    writer.add(b, Tuner(), {"key": [2], "config": cfg})
    names = sorted(p.name for p in (tmp_path / "autotune_records").iterdir())
    assert names == ["m.k.json", "m.k@bbbbbbbb.json"]  # no .tmp left behind
    (tmp_path / "meta.json").write_text(json.dumps({"autotune": {"mode": "record"}}))
    source = ReplaySource.open(tmp_path)
    assert source.lookup(a, "[1]").config["num_warps"] == 8
    assert source.lookup(a, "[2]").reason == "missing_key"
    assert source.lookup(KernelIdentity("m.k", "c" * 64), "[1]").reason == "source_changed"
    assert source.lookup(KernelIdentity("m.other", "a" * 64), "[1]").reason == "missing_kernel"


def test_patch_wraps_subclasses_defined_later_and_comes_off():
    from triton.runtime.autotuner import Autotuner

    from zlf_autotune_replay.tuners import Tracker, TunerPatch

    original = Autotuner.run
    patch = TunerPatch(Tracker(None, lambda *a: None, lambda *a: None))
    patch.install()
    try:
        assert Autotuner.run.__zlf_original__ is original

        class LateTuner(Autotuner):  # like FlagGems' LibTuner, imported after the run started
            def run(self, *args, **kwargs):
                return "late"

        assert LateTuner.run.__zlf_original__.__qualname__.endswith("LateTuner.run")
    finally:
        patch.remove()
    assert Autotuner.run is original and "__zlf_original__" not in vars(LateTuner.run)
    assert "__init_subclass__" not in vars(Autotuner)


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_record_then_replay_gives_identical_configs(tmp_path, zlf_cli):
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("matmul:\n  shapes: [[512, 512, 512], [128, 1024, 512]]\n")
    common = ("matmul", "--dtype", "float16", "--ext", "autotune_replay", "--ext", "shapes", "--shapes", shapes)
    rec = run_dir_from(zlf_cli("run", *common, check_rc=0).stdout, tmp_path)
    rep = run_dir_from(zlf_cli("run", *common, "--replay-from", rec, check_rc=0).stdout, tmp_path)
    assert decisions_by_point(rep) == decisions_by_point(rec)
    assert all(d["how"] == "replayed" for r in read_records(rep) for d in r["extra"]["autotune"])


def test_replay_options_are_refused_where_they_would_be_ignored(tmp_path):
    import subprocess
    import sys

    pytest.importorskip("zlf_taskpkg", reason="needs the task extension (zlf-taskpkg) installed")
    pkg = Path(__file__).resolve().parents[3] / "tests" / "data" / "taskpkg_vecadd"
    proc = subprocess.run([sys.executable, "-m", "zlf", "task", str(pkg), "--candidate", str(pkg / "candidates" / "correct.py"),
                           "--ext", "task", "--ext", "autotune_replay", "--replay-from", str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "not with zlf task" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()
