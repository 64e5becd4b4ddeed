"""Fixtures of the history tests (imported by the test modules that use them: a ``conftest.py``
here would shadow the suite's own ``tests/conftest.py``, both imported as ``conftest``).

The history tests run against SQLite always, and against a real PostgreSQL server where one can
be had: ``ZLF_TEST_POSTGRES_URL`` names one (CI starts it), else a throwaway cluster is started
from the machine's PostgreSQL binaries (``initdb``, as the ``postgres`` user when we are root)."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest


def _binaries():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def postgres_server():
    """A PostgreSQL server's base URL (no database part), or a skip saying why there is none."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'zlf-history[postgres]')")
    url = os.environ.get("ZLF_TEST_POSTGRES_URL")
    if url:
        yield url.rstrip("/")
        return
    bindir = _binaries()
    if not bindir:
        pytest.skip("no PostgreSQL server: set ZLF_TEST_POSTGRES_URL or install postgresql")
    prefix = []
    # a short path of its own: pytest's temporary folders are private to us (the server runs as
    # another user when we are root), and a socket's path must stay under ~100 characters
    base = Path(tempfile.mkdtemp(prefix="zlf-pg-"))
    if os.geteuid() == 0:  # postgres refuses to run as root
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no 'postgres' user to start a server as")
        os.chmod(base, 0o755)
        os.chown(base, pw.pw_uid, pw.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, sock, port = base / "data", base, _free_port()
    subprocess.run(prefix + [f"{bindir}/initdb", "-D", str(data), "-U", "postgres", "-A", "trust"],
                   check=True, capture_output=True)
    subprocess.run(prefix + [f"{bindir}/pg_ctl", "-D", str(data), "-w", "-l", str(base / "log"), "-o",
                             f"-k {sock} -p {port} -c listen_addresses=''", "start"], check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@/?host={sock}&port={port}"
    finally:
        subprocess.run(prefix + [f"{bindir}/pg_ctl", "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _database(server: str) -> str:
    import psycopg

    name = "zlf_" + uuid.uuid4().hex[:12]
    head, _, query = server.partition("?")
    with psycopg.connect(head.rstrip("/") + "/postgres" + ("?" + query if query else ""), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return head.rstrip("/") + "/" + name + ("?" + query if query else "")


@pytest.fixture(params=["sqlite", "postgresql"])
def history_db(request, tmp_path):
    """A fresh, empty history database of each kind: an SQLite path, then a PostgreSQL URL."""
    if request.param == "sqlite":
        return str(tmp_path / "history.sqlite")
    return _database(request.getfixturevalue("postgres_server"))
