"""A third-party extension core has never heard of takes part in a ``zlf ab`` campaign.

``tests/thirdparty_ext/zlf_thirdparty_stamp.py`` is installed the way any extension is: a
distribution whose entry point in group ``zlf`` names it (here a dist-info folder put on
PYTHONPATH by a fixture, so the campaign's own ``zlf run`` processes find it too). Through the
``campaigns`` hooks alone, later runs receive a file produced by round 1's A run, and its
context line reaches campaign.json and the report.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _env
from zlf.testing import pythonpath

HERE = Path(__file__).parent / "thirdparty_ext"
sys.path.insert(0, str(HERE))
import zlf_thirdparty_stamp as stamp  # noqa: E402


@pytest.fixture
def stamp_installed(tmp_path):
    """The stamp extension as an installed distribution (entry point ``stamp``), for this
    process's children: returns their environment."""
    site = tmp_path / "site"
    info = site / "zlf_thirdparty_stamp-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zlf-thirdparty-stamp\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[zlf]\nstamp = zlf_thirdparty_stamp:StampExtension\n")
    return _env(pythonpath(site, HERE))


def _zlf(*args, cwd, env):
    return subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_core_names_no_such_extension():
    core = Path(__file__).parent.parent / "core"
    for word in ("zlf_thirdparty_stamp", "stamp_from", "StampExtension"):
        assert not any(word in p.read_text() for p in core.rglob("*.py")), word


def test_the_extension_is_installed_like_any_other(stamp_installed, tmp_path):
    proc = _zlf("plugins", "--json", cwd=tmp_path, env=stamp_installed)
    assert proc.returncode == 0, proc.stderr
    found = {p["name"]: p for p in json.loads(proc.stdout)}
    assert found["stamp"]["status"] == "active" and "campaign_run_needs" in found["stamp"]["hooks"]


@pytest.mark.slow
def test_a_third_party_extension_joins_a_campaign(stamp_installed, tmp_path):
    # two ops in one process per round and side: round 1 A's process is kept for the later
    # runs to read from, and each op's run directory gets its copy of the stamp
    proc = _zlf("ab", "add", "softmax", "--switch", "ZLF_STAMP_NULL",
                "--rounds", "2", "--rep-ms", "5", "--ext", "stamp", "--controls", "none",
                "--out", "o", cwd=tmp_path, env=stamp_installed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (camp,) = (tmp_path / "o").glob("ab_*")
    state = json.loads((camp / "campaign.json").read_text())
    assert state["process"] == "shared" and state["stamp"] == {"writer": "r1_A"}
    assert stamp.CONTEXT in state["context"]  # campaign_context reached campaign.json ...
    assert stamp.CONTEXT in (camp / "summary.log").read_text()  # ... and the report
    assert stamp.CONTEXT in proc.stderr  # ... and the start of the campaign
    assert [r["status"] for r in state["runs"]] == ["ok"] * 8
    for op in ("add", "softmax"):
        written = json.loads((camp / op / "r1_A" / "meta.json").read_text())["stamp"]
        assert written["mode"] == "wrote" and (camp / op / "r1_A" / "stamp" / "stamp.txt").is_file()
        for run in ("r1_B", "r2_B", "r2_A"):  # campaign_run_needs reached every later run
            meta = json.loads((camp / op / run / "meta.json").read_text())["stamp"]
            assert meta["mode"] == "read" and meta["token"] == written["token"], (op, run, meta)
            assert meta["source"].endswith("_shared/r1_A")  # the kept process of round 1 A
            # ... as a value in the run's configuration, not a flag on its command line
            command = (camp / op / "logs" / f"{run}.txt").read_text().splitlines()[0]
            assert "--stamp-from" not in command
            config = json.loads((camp / "_shared" / "logs" / f"{run}.json").read_text())
            assert command.endswith(f"--config {camp / '_shared' / 'logs' / f'{run}.json'}")
            assert config["options"]["stamp"]["stamp_from"] == meta["source"]
            assert json.loads((camp / op / run / "meta.json").read_text())["options"]["stamp_from"] == meta["source"]
        command = (camp / op / "logs" / "r1_A.txt").read_text().splitlines()[0]
        assert "--stamp-from" not in command and command.endswith(f"--config {camp / '_config' / 'A.json'}")
    assert state["configs"] == {"A": "_config/A.json", "B": "_config/B.json"}
    for side in "AB":  # what the campaign was given, for every run of the side
        config = json.loads((camp / "_config" / f"{side}.json").read_text())
        assert config["timing"]["rep_ms"] == 5.0 and config["ext"] == ["stamp"] and config["options"]["stamp"] == {"stamp_from": None}


def test_the_campaign_refuses_the_option_it_sets(stamp_installed, tmp_path):
    proc = _zlf("ab", "add", "--switch", "X", "--stamp-from", "x", "--ext", "stamp", "--dry-run",
                cwd=tmp_path, env=stamp_installed)
    assert proc.returncode == 2 and "--stamp-from is set by the campaign" in proc.stderr


def test_dry_run_shows_the_extensions_context(stamp_installed, tmp_path):
    proc = _zlf("ab", "add", "--switch", "X", "--ext", "stamp", "--dry-run",
                cwd=tmp_path, env=stamp_installed)
    assert proc.returncode == 0, proc.stderr
    assert stamp.CONTEXT in proc.stdout
