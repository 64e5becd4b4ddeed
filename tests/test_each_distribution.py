"""scripts/each_distribution.py: its refusals (building the environments is the script's run, not a test's)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "each_distribution.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_an_unknown_extension_is_one_line_and_exit_2():
    r = run("no_such_extension")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "no extension with tests named no_such_extension" in r.stderr
    assert "seed" in r.stderr  # the known ones are listed


def test_an_interpreter_that_sees_zlf_is_refused_before_any_environment_is_built(tmp_path):
    # the test session's interpreter has zlf installed: every environment would see it too
    r = run("seed", "--keep", str(tmp_path / "envs"))
    assert r.returncode == 2 and "already sees zlf" in r.stderr
    assert not (tmp_path / "envs").exists()
