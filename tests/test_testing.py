"""zlf.testing, the pytest plugin for zlf's tests and extension authors: its fixtures do what
docs/extensions.md ("Testing your extension") says."""
from __future__ import annotations

import argparse
import json

from zlf import schemas
from zlf.rundir import RunDir
from zlf.session import Session
from zlf.testing import FakeBackend, fake_backend_class, installed_extensions, read_records, run_dir_from


def test_the_plugin_is_installed_as_a_pytest_entry_point(pytestconfig):
    assert pytestconfig.pluginmanager.get_plugin("zlf") is not None
    assert "gpu" in "\n".join(pytestconfig.getini("markers"))


def test_zlf_cli_in_process_returns_code_and_output(zlf_cli):
    proc = zlf_cli.inprocess("plugins", "--json")
    assert proc.returncode == 0 and isinstance(json.loads(proc.stdout), (list, dict))
    bad = zlf_cli.inprocess("run", "--no-such-flag")
    assert bad.returncode == 2 and "--no-such-flag" in bad.stderr


def test_zlf_core_only_leaves_no_extension_active(zlf_core_only, zlf_cli):
    proc = zlf_cli("plugins", "--json", check_rc=0)
    doc = json.loads(proc.stdout)
    rows = doc if isinstance(doc, list) else doc.get("extensions", [])
    assert all(r["status"] != "active" for r in rows)
    assert {r["name"] for r in rows} == set(installed_extensions())


def test_zlf_run_dir_writes_what_readers_and_schemas_accept(zlf_run_dir):
    run = zlf_run_dir({"add/1024/float32": 1.5, "add/4096/float32": None}, name="a", timer="cuda_event")
    records, skipped = RunDir.open(run).records()
    assert [(r.point, r.status, r.median_ms, r.timer) for r in records] == [
        ("add/1024/float32", "ok", 1.5, "cuda_event"), ("add/4096/float32", "FAILED", None, None)]
    assert skipped == 0 and schemas.check_run_dir(run) == 3
    assert RunDir(run).meta()["counts"] == {"ok": 1, "FAILED": 1}


def test_zlf_op_file_runs_on_the_cpu_backend(zlf_op_file, zlf_cli, zlf_core_only, tmp_path):
    path = zlf_op_file("flip", shapes=[(32,)])
    proc = zlf_cli("run", f"{path}::flip", "--backend", "cpu", "--rep-ms", "1", "--warmup-ms", "1", "--out", "r",
                   check_rc=0)
    [record] = read_records(run_dir_from(proc.stdout, tmp_path))
    assert record["point"] == "flip/32/float32" and record["status"] == "ok"


def test_zlf_fake_op_checks_against_its_reference(zlf_fake_op):
    import torch

    op = zlf_fake_op("neg", shapes=[(8,)])
    x, out = op.make_inputs((8,), "float32", "cpu")
    op.fn(x, out)
    assert op.name == "neg" and torch.equal(out, op.reference(x, out))


def test_zlf_fake_backend_is_chosen_by_name(zlf_fake_backend, zlf_core_only):
    session = Session.create(argparse.Namespace(), extra_plugins=[("fakebackend", zlf_fake_backend)])
    backend = session.choose_backend("fake")
    assert isinstance(backend, FakeBackend) and backend.device == "cpu" and backend.host_timing
    assert not FakeBackend.contract_problems()
    assert fake_backend_class("other").name == "other" and FakeBackend.name == "fake"


def test_xdist_workers_share_the_cores_as_openmp_threads_unless_told_otherwise(tmp_path):
    """pytest-xdist runs workers side by side; torch in each of them and in every zlf process they
    start would otherwise run a spinning OpenMP thread per core. A session without workers, or an
    environment that says, keeps its value."""
    import os
    import subprocess
    import sys

    (tmp_path / "test_inner.py").write_text(
        "import os, subprocess, sys\n"
        "def test_threads():\n"
        "    child = subprocess.run([sys.executable, '-c', 'import os; print(os.environ.get(\"OMP_NUM_THREADS\"))'],\n"
        "                           capture_output=True, text=True, check=True).stdout.strip()\n"
        "    print('SEEN', os.environ.get('OMP_NUM_THREADS'), child)\n")
    seen = {}
    for given, xdist in ((None, ["-n", "2"]), ("3", ["-n", "2"]), (None, ["-p", "no:xdist"])):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTEST_ADDOPTS")}
        env["ZLF_SPAWN_SERVER"] = ""  # no server: this is about the environment alone
        if given:
            env["OMP_NUM_THREADS"] = given
        # the inner sessions run outside this repository's settings: the plugins it leaves out
        # (pyproject.toml says why) are left out here by name
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rP", "-p", "no:cacheprovider",
                               "-p", "no:hypothesispytest", "-p", "no:benchmark", *xdist, "test_inner.py"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        seen[given, xdist[1]] = next(line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("SEEN"))
    each = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert seen == {(None, "2"): [each, each], ("3", "2"): ["3", "3"], (None, "no:xdist"): ["None", "None"]}


def test_the_suite_starts_without_pytest_xdist():
    """The suite's conftest implements a pytest-xdist hook; a session that turns xdist off (to
    profile tests one by one, or on a machine without it) must start all the same."""
    import os
    import pathlib
    import subprocess
    import sys

    tests = pathlib.Path(__file__).resolve().parent
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["ZLF_SPAWN_SERVER"] = ""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "--co", "-q",
                           str(tests / "test_clock.py")], cwd=tests.parent, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "INTERNALERROR" not in proc.stdout + proc.stderr


def test_a_bytecode_prefix_is_seeded_with_the_installations_own_bytecode(tmp_path):
    """A process with PYTHONPYCACHEPREFIX reads no bytecode beside its sources: the session links
    the installation's into the prefix, so a process reads it instead of compiling. Optimised
    bytecode, bytecode without its source and other interpreters' bytecode are left out; the work
    is done again only when an installation folder changed."""
    import os
    import py_compile
    import subprocess
    import sys

    from zlf.testing import SEEDED_STAMP, seed_bytecode_prefix

    root, prefix = tmp_path / "site", tmp_path / "prefix"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text("VALUE = 42\n")
    cache = root / "pkg" / "__pycache__"
    tag = sys.implementation.cache_tag
    for name, suffix, level in (("__init__", "", -1), ("mod", "", -1), ("mod", ".opt-1", 1)):
        # beside the source, as installed (this session's own processes may write under a prefix)
        py_compile.compile(str(root / "pkg" / f"{name}.py"), cfile=str(cache / f"{name}.{tag}{suffix}.pyc"),
                           doraise=True, optimize=level)
    (cache / f"gone.{tag}.pyc").write_bytes((cache / f"mod.{tag}.pyc").read_bytes())  # its source is gone
    (cache / "mod.otherpython-99.pyc").write_bytes(b"")

    assert seed_bytecode_prefix(prefix, [str(root)]) == 2
    mirrored = prefix / str(root / "pkg").lstrip("/")
    assert sorted(p.name for p in mirrored.iterdir()) == [f"__init__.{tag}.pyc", f"mod.{tag}.pyc"]
    linked = mirrored / f"mod.{tag}.pyc"
    assert os.path.samefile(linked, cache / f"mod.{tag}.pyc")

    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONPATH": str(root), "ZLF_SPAWN_SERVER": ""}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", "import pkg.mod; print(pkg.mod.VALUE)"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "42" and os.path.samefile(linked, cache / f"mod.{tag}.pyc")  # read, not written anew

    assert json.loads((prefix / SEEDED_STAMP).read_text()) == {str(root): os.stat(root).st_mtime_ns}
    linked.unlink()
    assert seed_bytecode_prefix(prefix, [str(root)]) == 0  # nothing installed since: not walked again
    (root / "newpkg").mkdir()
    assert seed_bytecode_prefix(prefix, [str(root)]) == 1 and linked.exists()


def test_a_bytecode_prefix_on_another_file_system_gets_copies(tmp_path, monkeypatch):
    """Where the cache and the installation are on different file systems no hard link can be
    made: the bytecode is copied instead, put in place whole (no half-written file left)."""
    import errno
    import os
    import py_compile
    import sys

    from zlf.testing import seed_bytecode_prefix

    root, prefix = tmp_path / "site", tmp_path / "prefix"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("VALUE = 7\n")
    cached = root / "pkg" / "__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc"
    py_compile.compile(str(root / "pkg" / "mod.py"), cfile=str(cached), doraise=True)

    def no_link(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    assert seed_bytecode_prefix(prefix, [str(root)]) == 1
    copied = prefix / str(cached.parent.parent).lstrip("/") / cached.name
    assert copied.read_bytes() == cached.read_bytes() and not os.path.samefile(copied, cached)
    assert not list(copied.parent.glob("*.tmp"))


def test_a_copy_that_fails_half_way_leaves_no_temporary_file(tmp_path, monkeypatch):
    """A full disk (or a source gone) in the middle of a copy: nothing is seeded and no
    half-written temporary file stays in the prefix."""
    import errno
    import os
    import shutil

    from zlf.testing import _link_or_copy

    (tmp_path / "src.pyc").write_bytes(b"x" * 100)
    (tmp_path / "out").mkdir()

    def no_link(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    def half_copy(source, target):
        with open(target, "wb") as f:
            f.write(b"x" * 10)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "link", no_link)
    monkeypatch.setattr(shutil, "copyfile", half_copy)
    assert _link_or_copy(str(tmp_path / "src.pyc"), str(tmp_path / "out" / "src.pyc")) == 0
    assert list((tmp_path / "out").iterdir()) == []
