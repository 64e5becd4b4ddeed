"""Install core and every extension in editable mode (one command for development).

torch is installed first only when missing: vendor stacks bring their own builds, and the
CPU-only build keeps a laptop install small.
"""
import importlib.util
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parent.parent
pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]

if importlib.util.find_spec("torch") is None:
    subprocess.check_call(pip + ["torch==2.13.0"])
extensions = sorted(p.parent for p in (root / "extensions").glob("*/pyproject.toml") if not p.parent.name.startswith("_"))
args = ["-e", str(root)]
for ext in extensions:
    args += ["-e", str(ext)]
subprocess.check_call(pip + args + ["pytest>=7"])
print(f"installed zlf and {len(extensions)} extensions: {', '.join(e.name for e in extensions)}")
