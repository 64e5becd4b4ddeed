"""Install core and every extension in editable mode (one command for development).

torch is installed first only when missing (vendor stacks bring their own builds; 2.13.0 is the
CPU build a laptop wants). Builds run without isolation so an offline GPU box can install too.
"""
import importlib.util
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]


def missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


if missing("torch"):
    subprocess.check_call(pip + ["torch==2.13.0"])
try:
    import setuptools

    old = int(setuptools.__version__.split(".")[0]) < 64
except ImportError:
    old = True
if old:  # editable installs of pyproject-only packages need PEP 660 support
    subprocess.check_call(pip + ["setuptools>=64"])
extensions = sorted(p.parent for p in (root / "extensions").glob("*/pyproject.toml") if not p.parent.name.startswith("_"))
args = ["--no-build-isolation", "-e", str(root)]
for ext in extensions:
    args += ["-e", str(ext)]
extra = ["pytest>=7"] if missing("pytest") else []
subprocess.check_call(pip + args + extra)
print(f"installed zlf and {len(extensions)} extensions: {', '.join(e.name for e in extensions)}")
