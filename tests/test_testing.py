"""zlf.testing, the pytest plugin for zlf's tests and extension authors: its fixtures do what
docs/extensions.md ("Testing your extension") says."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

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
    environment that says, keeps its value. (This repository's development plugin does it, not
    zlf.testing: the inner sessions load it by name.)"""
    import os
    import subprocess
    import sys

    from zlf_devsession import HERE as DEVTOOLS

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
        env["PYTHONPATH"] = str(DEVTOOLS)
        if given:
            env["OMP_NUM_THREADS"] = given
        # the inner sessions run outside this repository's settings: the plugins it leaves out
        # (pyproject.toml says why) are left out here by name, and its own is loaded by name
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rP", "-p", "no:cacheprovider",
                               "-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "zlf_devsession", *xdist,
                               "test_inner.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        seen[given, xdist[1]] = next(line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("SEEN"))
    each = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert seen == {(None, "2"): [each, each], ("3", "2"): ["3", "3"], (None, "no:xdist"): ["None", "None"]}


def test_a_tests_changes_to_the_environment_end_with_it(tmp_path):
    """In-process code may set a variable for good (the cpu backend sets TRITON_INTERPRET): the next
    test on the worker, and the processes it starts, see the session's environment, whatever ran
    before it."""
    import os
    import subprocess
    import sys

    from zlf_devsession import HERE as DEVTOOLS

    (tmp_path / "test_inner.py").write_text(
        "import os, subprocess, sys\n"
        "def test_a_sets():\n"
        "    os.environ['TRITON_INTERPRET'] = '1'\n"
        "    os.environ.pop('ZLF_INNER_KEPT')\n"
        "def test_b_sees_the_sessions():\n"
        "    child = subprocess.run([sys.executable, '-c', 'import os; print(os.environ.get(\"TRITON_INTERPRET\"))'],\n"
        "                           capture_output=True, text=True, check=True).stdout.strip()\n"
        "    assert (os.environ.get('TRITON_INTERPRET'), child, os.environ.get('ZLF_INNER_KEPT')) == (None, 'None', 'x')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTEST_ADDOPTS")}
    env.update(ZLF_SPAWN_SERVER="", PYTHONPATH=str(DEVTOOLS), ZLF_INNER_KEPT="x")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                           "-p", "no:benchmark", "-p", "no:xdist", "-p", "no:randomly", "-p", "zlf_devsession",
                           "test_inner.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout + proc.stderr


SCOPED_FIXTURES = {
    "test_one.py": (
        "import os, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def module_env():\n"
        "    os.environ['ZLF_INNER_MODULE'] = 'm'\n"
        "    yield\n"
        "class TestK:\n"
        "    @pytest.fixture(scope='class')\n"
        "    def class_env(self):\n"
        "        os.environ['ZLF_INNER_CLASS'] = 'c'\n"
        "        yield\n"
        "    def test_a(self, module_env, class_env):\n"
        "        pass\n"
        "    def test_b(self):\n"
        "        assert (os.environ.get('ZLF_INNER_MODULE'), os.environ.get('ZLF_INNER_CLASS')) == ('m', 'c')\n"
        "def test_c():\n"
        "    assert (os.environ.get('ZLF_INNER_MODULE'), os.environ.get('ZLF_INNER_CLASS')) == ('m', None)\n"),
    "test_two.py": (
        "import os\n"
        "def test_d():\n"
        "    assert (os.environ.get('ZLF_INNER_MODULE'), os.environ.get('ZLF_INNER_CLASS')) == (None, None)\n"),
}


def test_a_scoped_fixtures_changes_to_the_environment_last_for_its_scope_and_end_with_it(tmp_path):
    """A module- (class-) scoped fixture's change to the environment is seen by every test of its
    module (class), and by none after it: the per-test restoration sees it as the session's."""
    import os
    import subprocess
    import sys

    from zlf_devsession import HERE as DEVTOOLS

    for name, text in SCOPED_FIXTURES.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS",)}
    env.update(ZLF_SPAWN_SERVER="", PYTHONPATH=str(DEVTOOLS))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                           "-p", "no:benchmark", "-p", "no:xdist", "-p", "no:randomly", "-p", "zlf_devsession",
                           "test_one.py", "test_two.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "4 passed" in proc.stdout, proc.stdout + proc.stderr


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

    from zlf_devsession import SEEDED_STAMP, seed_bytecode_prefix

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

    from zlf_devsession import seed_bytecode_prefix

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

    from zlf_devsession import link_or_copy

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
    assert link_or_copy(str(tmp_path / "src.pyc"), str(tmp_path / "out" / "src.pyc")) == 0
    assert list((tmp_path / "out").iterdir()) == []


UNRELATED_TEST = r'''
import json, os, subprocess, sys


def descendants(root):
    """The processes under ``root``, with their command lines."""
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                pass
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in found:
                try:
                    with open(f"/proc/{child}/cmdline", "rb") as f:
                        found[child] = f.read().decode(errors="replace").split("\0")
                except OSError:
                    found[child] = []
                todo.append(child)
    return found


def test_something(request):
    import zlf.testing

    session = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
    others = {pid: argv for pid, argv in descendants(session).items() if pid != os.getpid()}
    site = subprocess.run([sys.executable, "-m", "site_probe"], capture_output=True, text=True, check=True).stdout
    with open(os.environ["REPORT"], "a") as f:
        f.write(json.dumps({"env": dict(os.environ), "processes": others, "site": site,
                            "plugin": request.config.pluginmanager.has_plugin("zlf"),
                            "testing": zlf.testing.__file__}) + "\n")
'''

SITE_PROBE = "import sys\nprint(getattr(sys.modules.get('sitecustomize'), '__file__', None))\n"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_unrelated_projects_pytest_session_runs_as_without_zlf(tmp_path):
    """Installing zlf installs its pytest plugin in every session of the environment. In a
    project that has nothing to do with zlf (one trivial test, with and without pytest-xdist) the
    plugin is loaded and changes nothing: no environment variable (OMP_NUM_THREADS,
    PYTHONPYCACHEPREFIX, a spawn server's PYTHONPATH), no process of zlf's, no bytecode cache
    written, the same ``sitecustomize`` in a ``python -m`` child."""
    import os
    import shutil
    import subprocess
    import venv

    root = Path(__file__).resolve().parent.parent
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, src / name)
    shutil.copytree(root / "core", src / "core", ignore=shutil.ignore_patterns("__pycache__"))
    # a fresh environment beside this one's packages (pytest, torch), zlf installed into it as a
    # user installs it: not editable, nothing of this checkout on its path
    env_dir = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)], check=True,
                   timeout=120)
    python = str(env_dir / "bin" / "python")
    plain = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "PYTHONPYCACHEPREFIX", "OMP_NUM_THREADS") and not k.startswith(("ZLF_", "PYTEST_"))}
    has = subprocess.run([python, "-c", "import setuptools, pip, pytest, xdist, torch"], env=plain,
                         capture_output=True, timeout=120)
    if has.returncode:
        pytest.skip("this interpreter's own site-packages lack setuptools, pip, pytest, pytest-xdist or torch")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", str(src)],
                   env=plain, check=True, capture_output=True, timeout=600)

    project = tmp_path / "project"
    project.mkdir()
    (project / "test_something.py").write_text(UNRELATED_TEST)
    (project / "site_probe.py").write_text(SITE_PROBE)
    cache = tmp_path / "zlf-cache"
    given = {**plain, "REPORT": str(tmp_path / "report.jsonl"), "ZLF_CACHE_DIR": str(cache),
             # where the environment keeps no bytecode, zlf's own children keep it in its cache
             "PYTHONDONTWRITEBYTECODE": "1"}
    site = subprocess.run([python, "-m", "site_probe"], cwd=project, env=given, capture_output=True, text=True,
                          check=True).stdout
    # each session beside one with the plugin off (`-p no:zlf`): what pytest itself sets is set in both
    for extra in ([], ["-p", "no:zlf"], ["-n", "2"], ["-n", "2", "-p", "no:zlf"]):
        proc = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra], cwd=project,
                              env=given, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    reports = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text().splitlines()]
    assert [r["plugin"] for r in reports] == [True, False, True, False]
    assert Path(reports[0]["testing"]).is_relative_to(env_dir)  # the zlf just installed
    for report, without in (reports[:2], reports[2:]):
        assert ({k: v for k, v in report["env"].items() if not k.startswith("PYTEST_")}
                == {k: v for k, v in without["env"].items() if not k.startswith("PYTEST_")})
        assert report["site"] == without["site"] == site
        assert sorted(report["processes"].values()) == sorted(without["processes"].values())
    assert reports[0]["processes"] == {}  # without xdist none; with it, its other worker
    assert not cache.exists()
