"""zlf run --check warn: a point whose result fails its reference check is timed anyway and
marked UNCHECKED in its record, the run's table and zlf compare; --check fail (the default)
keeps it FAILED and untimed."""
from __future__ import annotations

import json

from conftest import read_records, run_dir_from

FAST = ("--warmup-ms", "1", "--rep-ms", "3", "--dtype", "float32")


def wrong_op_file(path):
    """An op whose reference is another function: -x for a kernel that computes 2x."""
    path.write_text(
        "import torch\nimport zlf\n\n\n"
        "def _make(shape, dtype, device):\n"
        "    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)\n"
        "    return (x, torch.empty_like(x))\n\n\n"
        "def _twice(x, out):\n    torch.mul(x, 2.0, out=out)\n\n\n"
        "twice = zlf.Op(name='twice', fn=_twice, make_inputs=_make, shapes=[(64,), (128,)],\n"
        "               reference=lambda x, out: -x, outputs=(1,))\n")
    return path


def test_check_fail_is_the_default_and_warn_times_the_point_marked_unchecked(zlf_cli, tmp_path):
    ops = wrong_op_file(tmp_path / "wrong_ops.py")
    proc = zlf_cli("run", f"{ops}::twice", *FAST, "--name", "fail", check_rc=1)
    recs = read_records(run_dir_from(proc.stdout, tmp_path))
    assert all(r["status"] == "FAILED" and r["median_ms"] is None and r["unchecked"] is None for r in recs)
    proc = zlf_cli("run", f"{ops}::twice", *FAST, "--check", "warn", "--name", "warn", check_rc=0)
    warn_dir = run_dir_from(proc.stdout, tmp_path)
    recs = read_records(warn_dir)
    assert len(recs) == 2
    for r in recs:
        assert r["status"] == "ok" and r["median_ms"] > 0 and r["error"] is None
        assert r["unchecked"].startswith("wrong result (output 0): relative error")
    assert proc.stdout.count("UNCHECKED: wrong result") == 2
    assert json.loads((warn_dir / "meta.json").read_text())["options"]["check"] == "warn"
    # zlf compare marks the side that was not checked
    proc = zlf_cli("run", f"{ops}::twice", *FAST, "--check", "warn", "--name", "warn2", check_rc=0)
    other = run_dir_from(proc.stdout, tmp_path)
    proc = zlf_cli("compare", warn_dir, other, check_rc=0)
    assert proc.stdout.count("(UNCHECKED A B)") == 2
    proc = zlf_cli("compare", warn_dir, other, "--format", "json", check_rc=0)
    assert [r["unchecked"] for r in json.loads(proc.stdout)["rows"]] == ["A B", "A B"]


def test_check_takes_fail_or_warn(zlf_cli, tmp_path):
    proc = zlf_cli.inprocess("run", "add", "--check", "maybe")
    assert proc.returncode == 2 and "invalid choice: 'maybe'" in proc.stderr
