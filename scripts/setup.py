"""Install core and every extension in editable mode (one command for development).

``--tests`` also installs what the test suite needs: pytest, pytest-xdist 3.2 or later (``make
test`` runs the suite on every core, idle workers stealing tests), and the optional Ray executor
(zlf[ray]) so that its tests run instead of skipping. ``--core`` installs core alone and removes
the extensions of this repository if they are installed: core's tests pass without any (``make
test`` runs them so first).

torch is installed first only when missing (vendor stacks bring their own builds; 2.13.0 is the
CPU build a laptop wants). Builds run without isolation so an offline GPU box can install too.
"""
import importlib.metadata
import importlib.util
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def step(what: str) -> None:
    """One line before each pip call: pip runs quietly and a download can take a minute."""
    print(f"setup: {what} ...", flush=True)


def missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def _older(distribution: str, version: tuple) -> bool:
    try:
        found = tuple(int(n) for n in re.findall(r"\d+", importlib.metadata.version(distribution))[:len(version)])
    except importlib.metadata.PackageNotFoundError:
        return True
    return found < version


if missing("torch"):
    step("installing torch 2.13.0 (missing here)")
    subprocess.check_call(pip + ["torch==2.13.0"])
# editable installs of pyproject-only packages need PEP 660 (setuptools 64), and without build
# isolation a bdist_wheel command: inside setuptools from 70.1, else the wheel package (a fresh
# Python 3.11 venv has setuptools 65 and no wheel); no setuptools at all counts as older
if _older("setuptools", (64,)) or (_older("setuptools", (70, 1)) and missing("wheel")):
    step("upgrading setuptools to 70.1 or later (editable installs need it)")
    subprocess.check_call(pip + ["setuptools>=70.1"])
extensions = sorted(p.parent for p in (root / "extensions").glob("*/pyproject.toml") if not p.parent.name.startswith("_"))
core_only = "--core" in sys.argv[1:]
if core_only:
    names = [re.search(r'^name = "([^"]+)"', (e / "pyproject.toml").read_text(), re.M).group(1) for e in extensions]
    installed = [n for n in names if _installed(n)]
    if installed:
        step(f"removing this repository's extensions (core's tests run without them): {', '.join(installed)}")
        subprocess.check_call([sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes", *installed])
    extensions = []
args = ["--no-build-isolation", "-e", str(root)]
for ext in extensions:
    args += ["-e", str(ext)]
extra = []
# zlf's own dependencies (argcomplete for shell completion included) come with -e root; named again
# so that an environment that installed zlf with --no-deps before gets completion too.
extra += ["argcomplete>=2.0"] if missing("argcomplete") else []
extra += ["detect-secrets>=1.4"] if missing("detect_secrets") else []
if "--tests" in sys.argv[1:]:
    extra += ["pytest>=7"] if missing("pytest") else []
    # --dist worksteal (make test): from pytest-xdist 3.2
    extra += ["pytest-xdist>=3.2"] if missing("xdist") or _older("pytest-xdist", (3, 2)) else []
    extra += ["ray>=2.9"] if missing("ray") else []
    if not core_only:  # zlf-history's PostgreSQL tests and its dashboard's browser test
        extra += ["psycopg[binary]>=3.1"] if missing("psycopg") else []
        extra += ["selenium>=4.10"] if missing("selenium") else []
step(f"installing zlf and {len(extensions)} extension(s) in editable mode"
     + (f", with {', '.join(extra)}" if extra else "") + " and their dependencies")
subprocess.check_call(pip + args + extra)
print(f"installed zlf and {len(extensions)} extensions" + (f": {', '.join(e.name for e in extensions)}" if extensions else " (core alone)"))
