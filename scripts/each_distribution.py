"""Test each distribution with core and itself alone: one fresh virtual environment per extension.

``make test`` runs core's tests with core alone, then every extension's tests with all of them
installed; an extension that quietly needs another (an import, an entry point, an option another
extension declares) passes there. This script installs core and one extension (with the
extensions its pyproject.toml requires, ``zlf-shapes`` for ``profile``) into a fresh virtual
environment and runs that extension's tests, for every extension (or those named)::

    python scripts/each_distribution.py                 # every extension, one after another
    python scripts/each_distribution.py seed history    # these (folder names under extensions/)
    python scripts/each_distribution.py --keep DIR      # keep the environments under DIR

The environments see the interpreter's own packages (``--system-site-packages``: torch and triton
are not installed again), so run it with an interpreter that has no zlf distribution installed:
one there would be seen beside the environment's (the script refuses to start then). An
extension's own dependencies come from the package index as its pyproject.toml declares them.
Prints one line per distribution and exits 1 if any failed.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import subprocess
import sys
import re
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTENSIONS = ROOT / "extensions"


def extensions() -> list:
    return sorted(p.name for p in EXTENSIONS.iterdir()
                  if (p / "pyproject.toml").is_file() and not p.name.startswith("_") and (p / "tests").is_dir())


def local_needs(name: str) -> list:
    """The folders of the other extensions ``name`` declares it needs (``zlf-shapes`` ...), and
    theirs: an extension is tested with core, itself and what its pyproject.toml requires."""
    folders = {tomllib.loads((EXTENSIONS / f / "pyproject.toml").read_text())["project"]["name"].lower(): f
               for f in extensions()}
    found, todo = [], [name]
    while todo:
        project = tomllib.loads((EXTENSIONS / todo.pop() / "pyproject.toml").read_text())["project"]
        for req in project.get("dependencies", []):
            dist = re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower().replace("_", "-")
            if dist in folders and folders[dist] not in found and folders[dist] != name:
                found.append(folders[dist])
                todo.append(folders[dist])
    return found


def visible_zlf() -> list:
    """zlf distributions this interpreter already sees (they would leak into every environment)."""
    return sorted({d.metadata["Name"] for d in md.distributions()
                   if (d.metadata["Name"] or "").lower().replace("_", "-").startswith("zlf")})


def run(cmd: list, log, env=None) -> int:
    log.write(f"$ {' '.join(map(str, cmd))}\n")
    log.flush()
    return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode


def one(name: str, where: Path, log_path: Path, workers: str) -> tuple:
    venv = where / name
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        steps = [
            [sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "setuptools>=70.1", "wheel"],
            [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-build-isolation",
             "-e", str(ROOT), *[a for dep in local_needs(name) for a in ("-e", str(EXTENSIONS / dep))],
             "-e", str(EXTENSIONS / name)],
        ]
        for cmd in steps:
            if run(cmd, log, env):
                return "setup failed", time.monotonic() - t0
        cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXTENSIONS / name / "tests")]
        if workers != "0":
            cmd[3:3] = ["-n", workers]
        rc = run(cmd, log, env)
    tail = [line for line in log_path.read_text().splitlines() if " passed" in line or " failed" in line
            or " error" in line or "no tests ran" in line]
    return ("ok" if rc == 0 else f"FAILED (rc {rc})") + (f": {tail[-1].strip('= ')}" if tail else ""), \
        time.monotonic() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="extension folders (default: every one with tests)")
    p.add_argument("--keep", metavar="DIR", help="build the environments under DIR and keep them")
    p.add_argument("-n", dest="workers", default="2", help="pytest-xdist workers per session (0: none)")
    args = p.parse_args(argv)
    known = extensions()
    unknown = [n for n in args.names if n not in known]
    if unknown:
        p.exit(2, f"each_distribution: error: no extension with tests named {', '.join(unknown)} "
                  f"(known: {', '.join(known)})\n")
    leaked = visible_zlf()
    if leaked:
        p.exit(2, f"each_distribution: error: this interpreter already sees {', '.join(leaked)}: "
                  "run it with one that has no zlf distribution installed\n")
    where = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="zlf-dists-"))
    where.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.names or known:
        outcome, seconds = one(name, where, where / f"{name}.log", args.workers)
        failed += not outcome.startswith("ok")
        print(f"{name:20} {outcome}  ({seconds:.0f} s; log {where / (name + '.log')})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
