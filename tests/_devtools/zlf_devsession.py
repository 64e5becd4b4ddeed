"""This repository's test sessions, made fast: a pytest plugin for zlf's own suite, not shipped
with zlf.

The repository's top-level ``conftest.py`` loads it (``pyproject.toml`` puts this folder on the
session's ``sys.path``), so every session run from the checkout (core's tests, an extension's
tests, ``make test``) gets it, and a user's session where zlf is installed does not. It changes
the session's environment, which the processes the tests start inherit:

- :func:`session_threads`: under pytest-xdist, the cores shared out among the workers as OpenMP
  threads;
- :func:`session_bytecode_cache`: where the environment keeps no bytecode, the session's processes
  keep theirs in zlf's cache directory, seeded with the installation's own;
- :func:`session_spawn_server`: a process that has imported torch once forks the ``python -m``
  processes the tests start (``zlf_spawn_server.py`` and its ``sitecustomize`` stand-in,
  ``zlf_spawn_client.py``, both in this folder).

and it ends each test's changes to the environment with the test
(:func:`zlf_environment_ends_with_the_test`), and those of a module's, class's or the session's
fixtures with their scope (:func:`pytest_fixture_post_finalizer`).

``ZLF_SPAWN_SERVER=`` (empty) runs a session's processes plainly; the ``zlf_plain_processes``
fixture does it for one test. docs/testing.md says what each costs and saves.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from zlf.procs import die_with_parent, python_child_env
from zlf.testing import pythonpath

#: the environment variable naming the test session's spawn server (:func:`session_spawn_server`).
SPAWN_ENV = "ZLF_SPAWN_SERVER"
#: this folder: the server and its stand-in are copied from here.
HERE = Path(__file__).resolve().parent


def pytest_configure(config):
    session_threads(config)
    session_bytecode_cache()
    session_spawn_server(config)


@pytest.fixture(autouse=True)
def zlf_environment_ends_with_the_test():
    """What a test changes in ``os.environ`` ends with it. In-process code that sets a variable (the
    cpu backend sets ``TRITON_INTERPRET``) would otherwise reach every later test on that worker and
    the processes they start, so that a test's result depended on which tests ran before it."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


#: ``os.environ`` as it was before each module-, class-, package- or session-scoped fixture now set
#: up was set up (:func:`pytest_fixture_setup`)
_BEFORE_FIXTURE: dict = {}


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """A fixture of a scope above the test's changes the environment for its scope's tests, and
    that change ends with it (:func:`pytest_fixture_post_finalizer`): the test's own changes end
    with the test (:func:`zlf_environment_ends_with_the_test`), which sees what a higher-scoped
    fixture set as the session's. An in-process ``zlf task --backend cpu`` in a module fixture
    sets ``TRITON_INTERPRET=1``: for the module's tests, and for no later module."""
    if fixturedef.scope != "function":
        _BEFORE_FIXTURE[fixturedef] = dict(os.environ)
    return (yield)


def pytest_fixture_post_finalizer(fixturedef, request):
    """Once a fixture of a scope above the test's is torn down, the environment is what it was
    before it was set up (:func:`pytest_fixture_setup`)."""
    saved = _BEFORE_FIXTURE.pop(fixturedef, None)
    if saved is not None and dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def zlf_plain_processes(monkeypatch):
    """The Python processes this test starts run plainly, not forked from the session's spawn
    server: for tests that look at the process tree (a child's parent, a judge's workers)."""
    monkeypatch.setenv(SPAWN_ENV, "")


# ----------------------------------------------------------------------------- threads


def session_threads(config) -> None:
    """Under pytest-xdist, the machine's cores shared out among the workers as OpenMP threads
    (``OMP_NUM_THREADS``: cores ÷ workers, at least one) unless the environment sets it. Each
    worker and every zlf process it starts would otherwise run torch with a thread per core,
    whose waits spin: a tenth of the suite's CPU time on a 2-core machine. It also keeps Ray's
    task processes forked from the spawn server: Ray sets the variable in its workers where the
    driver left it unset, and a value other than the server's is refused. A session without
    workers keeps torch's default."""
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers < 1 or "OMP_NUM_THREADS" in os.environ:
        return
    os.environ["OMP_NUM_THREADS"] = str(max(1, usable_cores() // workers))


def usable_cores() -> int:
    """The cores this process may run on (its affinity, where the platform says)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# ----------------------------------------------------------------------------- bytecode


def session_bytecode_cache() -> None:
    """Where this environment keeps no compiled bytecode, the processes a test session starts
    (hundreds of zlf processes, and pytest-xdist's workers) keep theirs where zlf's own children
    do (:func:`zlf.procs.python_child_env`: ``pycache`` in zlf's cache directory), instead of each
    compiling zlf, its extensions and their imports from source again; tests that point
    ``ZLF_CACHE_DIR`` elsewhere do not send them back to an empty one. It outlives the session: the
    next session (``make test`` runs two) finds zlf compiled and the test modules' rewritten
    asserts in it. Bytecode records its source's size and time, so an edited source is compiled
    anew."""
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    folder = python_child_env(os.environ).get("PYTHONPYCACHEPREFIX")
    if not folder:  # the environment keeps bytecode, or zlf's cache directory cannot be made
        return
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = folder
    import threading

    threading.Thread(target=seed_bytecode_prefix, args=(Path(folder),), name="zlf-seed-bytecode",
                     daemon=True).start()


#: in a bytecode prefix: the installation folders :func:`seed_bytecode_prefix` last linked from,
#: with their modification times
SEEDED_STAMP = ".zlf-seeded.json"


def seed_bytecode_prefix(prefix: Path, roots: Optional[list] = None) -> int:
    """Link (or, across file systems, copy) the bytecode the installation already has
    (``__pycache__`` beside the standard library's and site-packages' sources, written when they
    were installed) to where a process with ``PYTHONPYCACHEPREFIX=prefix`` looks for it. With a
    prefix, Python reads no bytecode beside its sources, so on a machine's first session every
    process would otherwise compile what it imports (Ray's daemons, the test workers' pytest, scipy,
    matplotlib, pip) until one of them has written it: about 4 s of a first session's wall time on
    two cores (two paired runs of core's tests). Done again only when an installation folder changed
    (a package installed or removed); a source edited since its bytecode was written is compiled
    anew as it would be anyway. Returns the files linked or copied.

    :param roots: the installation folders (default: the standard library's and site-packages)."""
    import sysconfig

    if roots is None:
        paths = sysconfig.get_paths()
        roots = sorted({paths[k] for k in ("stdlib", "purelib", "platlib") if paths.get(k)})
    seen = {root: os.stat(root).st_mtime_ns for root in roots if os.path.isdir(root)}
    try:
        if json.loads((prefix / SEEDED_STAMP).read_text()) == seen:
            return 0
    except (OSError, ValueError):
        pass
    tag = f".{sys.implementation.cache_tag}.pyc"
    linked = 0
    for root in seen:
        for folder, _, names in os.walk(root):
            if os.path.basename(folder) != "__pycache__":
                continue
            sources = os.path.dirname(folder)
            # this interpreter's bytecode, not the optimised (NAME.cpython-311.opt-1.pyc), of a
            # source that is still there
            names = [n for n in names
                     if n.endswith(tag) and os.path.exists(os.path.join(sources, n[:-len(tag)] + ".py"))]
            if not names:
                continue
            target_dir = prefix.as_posix() + sources  # the prefix mirrors absolute paths
            try:
                os.makedirs(target_dir, exist_ok=True)
            except OSError:
                continue
            for name in names:
                target = os.path.join(target_dir, name)
                if not os.path.exists(target):
                    linked += link_or_copy(os.path.join(folder, name), target)
    try:
        (prefix / SEEDED_STAMP).write_text(json.dumps(seen))
    except OSError:
        pass
    return linked


def link_or_copy(source: str, target: str) -> int:
    """``target`` made the same file as ``source``: a hard link, or a copy put in place whole
    where the two are on different file systems (through a temporary file of this thread's own:
    two sessions may seed one prefix at once). 1 when done, 0 when not (a process wrote it
    meanwhile, or the folder cannot be written; no temporary file is left)."""
    import shutil
    import threading

    try:
        os.link(source, target)
        return 1
    except FileExistsError:
        return 0
    except OSError:
        tmp = f"{target}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            shutil.copyfile(source, tmp)
            os.replace(tmp, target)
            return 1
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return 0


# ----------------------------------------------------------------------------- the spawn server


def start_spawn_server(folder: Path, env: dict, log) -> tuple:
    """Start a spawn server (``zlf_spawn_server.py``) in ``folder``, with ``env`` (its
    ``PYTHONPATH`` led by ``folder``, where the stand-in is the ``sitecustomize``) and its log lines
    on the open file ``log``. Returns ``(process, env)`` once the server listens: ``env`` is what
    the stand-ins need (``PYTHONPATH`` and :data:`SPAWN_ENV`), None if the server did not come up
    (it is stopped then). The server imports its modules after that, while the session goes on;
    a stand-in that asks meanwhile waits for its answer, and one that finds the server gone (its
    imports failed) starts normally."""
    import select
    import shutil

    shutil.copyfile(HERE / "zlf_spawn_client.py", folder / "sitecustomize.py")
    shutil.copyfile(HERE / "zlf_spawn_server.py", folder / "zlf_spawn_server.py")
    env = {**{k: v for k, v in env.items() if k != SPAWN_ENV}, **pythonpath(folder, env=env)}
    socket_path = socket_folder(folder) / "socket"
    proc = subprocess.Popen([sys.executable, str(folder / "zlf_spawn_server.py"), str(socket_path)], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
                            preexec_fn=die_with_parent(signal.SIGTERM))
    proc.socket_path = socket_path
    if select.select([proc.stdout], [], [], 120)[0] and proc.stdout.readline().strip() == "listening":
        return proc, {"PYTHONPATH": env["PYTHONPATH"], SPAWN_ENV: str(socket_path)}
    stop_spawn_server(proc)
    return proc, None


def stop_spawn_server(proc) -> None:
    import shutil

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    proc.stdout.close()
    if getattr(proc, "socket_path", None) is not None and proc.socket_path.parent.name.startswith(SOCKET_PREFIX):
        shutil.rmtree(proc.socket_path.parent, ignore_errors=True)  # the short folder socket_folder made


#: the longest path an AF_UNIX socket binds to on Linux (``sun_path`` holds 108 bytes, its NUL included)
UNIX_PATH_MAX = 107
#: the name of the short folders :func:`socket_folder` makes
SOCKET_PREFIX = "zlf-sock-"


def socket_folder(folder: Path, name: str = "socket") -> Path:
    """Where a Unix socket ``name`` of ``folder`` can be bound: ``folder`` itself, or, where that
    path would pass :data:`UNIX_PATH_MAX` bytes (a long ``TMPDIR``: a cluster node's scratch
    folder, a CI job's), a fresh folder of this user's under ``/tmp``."""
    import tempfile

    if len(os.fsencode(folder / name)) <= UNIX_PATH_MAX:
        return folder
    return Path(tempfile.mkdtemp(prefix=SOCKET_PREFIX, dir="/tmp"))


def session_spawn_server(config) -> None:
    """Start the session's spawn server (:func:`start_spawn_server`): the ``python -m MODULE``
    processes the session's tests start (directly, or through zlf ab, task workers and sweeps)
    fork from a process that has imported torch once, instead of each importing it again (about
    two of a CPU ``zlf run``'s four seconds). The server's ``sitecustomize`` stand-in keeps what
    a test can see of a process: its pid is the one signals and waits go to, it exits as the
    child does, and the child dies with it; a process the server would not run the same way
    starts normally (docs/testing.md).

    Not started where ``ZLF_SPAWN_SERVER`` is already set (an outer session's server, shared by
    pytest-xdist's workers; set it empty to run every process plainly), nor off Linux or before
    Python 3.10. If the server does not come up, the session runs without it."""
    import shutil
    import tempfile

    if SPAWN_ENV in os.environ or not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open") \
            or not hasattr(sys, "orig_argv"):
        return
    folder = Path(tempfile.mkdtemp(prefix="zlf-spawn-"))
    # a line per request (forked or refused, and why) on the server's log
    with open(os.environ.get("ZLF_SPAWN_SERVER_LOG") or folder / "server.log", "a") as log:
        proc, env = start_spawn_server(folder, dict(os.environ), log)
    if env is None:
        shutil.rmtree(folder, ignore_errors=True)
        return
    old = {key: os.environ.get(key) for key in env}
    os.environ.update(env)

    def stop() -> None:
        stop_spawn_server(proc)
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(folder, ignore_errors=True)

    config.add_cleanup(stop)
