"""Core's tests run with no extension active (they pass with only core installed): every test
and the zlf processes it starts see ``ZLF_DISABLE`` naming every installed extension. A test of
core against real extensions says which with ``@pytest.mark.extensions("seed", ...)``: it is
skipped where one is not installed, and those stay active.

The fixtures come from zlf.testing (a pytest plugin installed with zlf), the session's speed-ups
from tests/_devtools (loaded by the repository's conftest.py); the names below keep
``from conftest import ...`` working in core's test files."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from zlf.testing import (HeldDispatch, clean_env as _env, core_only_env, gpu_available,  # noqa: F401
                         installed_extensions, read_records, run_dir_from, run_zlf)

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser):
    parser.addoption("--only-marked-extensions", action="store_true",
                     help="of core's tests, run only those marked `extensions` (make test runs them "
                          "beside the extensions' own tests, in one session)")


def pytest_configure(config):
    config.addinivalue_line("markers", "extensions(*names): the installed extensions a core test needs active")


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a session run with -p no:xdist must still start
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (make test): a worker more than the machine has cores. Many tests wait (on a
    time limit, a child's start, the disk), and the core a waiting worker leaves is then another
    worker's: on a 2-core machine the suite ran ~10 % faster with 3 workers than with 2."""
    # imported here: op files that tests write import this module in zlf's child processes,
    # where the development plugin's folder is not on the path
    from zlf_devsession import usable_cores

    return usable_cores() + 1


def pytest_ignore_collect(collection_path, config):
    """With ``--only-marked-extensions``, a core test file that marks no test ``extensions`` is not
    even imported (each pytest-xdist worker would import and assert-rewrite it, to deselect all
    of it)."""
    if (config.getoption("--only-marked-extensions") and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_") and collection_path.resolve().parent == ROOT / "tests"
            and "mark.extensions" not in collection_path.read_text()):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    if config.getoption("--only-marked-extensions"):
        keep, drop = [], []
        for item in items:
            core_test = ROOT / "tests" in Path(str(item.path)).resolve().parents
            (drop if core_test and item.get_closest_marker("extensions") is None else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    # The tests that start several zlf processes (`slow`) first, in their order: pytest-xdist's
    # workers then end the session on short tests that the idle one can steal, not one worker on
    # a long test while the other core waits.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _only_core_unless_marked(request, monkeypatch):
    marker = request.node.get_closest_marker("extensions")
    wanted = set(marker.args) if marker else set()
    installed = installed_extensions()
    missing = sorted(wanted - set(installed))
    if missing:
        pytest.skip(f"needs the extension(s) {', '.join(missing)} installed")
    monkeypatch.setenv("ZLF_DISABLE", ",".join(n for n in installed if n not in wanted))
    monkeypatch.delenv("ZLF_EXTENSIONS", raising=False)


def zlf_core(*args, cwd, env=None):
    """``python -m zlf ARGS`` in ``cwd`` with only core active and a private cache dir
    (ceilings); a module-level helper for module-scoped fixtures, which cannot use ``zlf_cli``."""
    full_env = {**core_only_env(), "ZLF_CACHE_DIR": str(Path(cwd) / "cache")}
    full_env.update(env or {})
    return run_zlf(*args, cwd=cwd, env=full_env, timeout=300)


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    """One real run of the built-in ``add`` on the CPU backend per test module, copied
    (:func:`copy_run`) by the tests that spoil it."""
    cwd = tmp_path_factory.mktemp("base_run")
    proc = zlf_core("run", "add", "--out", "runs", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return run_dir_from(proc.stdout, cwd)


def copy_run(base: Path, dest: Path) -> Path:
    shutil.copytree(base, dest)
    return dest
