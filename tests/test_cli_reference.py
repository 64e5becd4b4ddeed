"""docs/cli.md is ``--help``: the page fails this test as soon as an option or a help text changes."""
from __future__ import annotations

import importlib.metadata
import runpy
import sys

import pytest

from conftest import ROOT

EXTENSIONS = ("autotune_replay", "cudagraph", "cupti", "flaggems", "ir_dump", "maca", "musa", "profile", "seed",
              "shapes", "task")


def test_cli_reference_matches_help(monkeypatch):
    installed = {ep.name for ep in importlib.metadata.entry_points(group="zlf")}
    if not set(EXTENSIONS) <= installed:
        pytest.skip("docs/cli.md documents the CLI with every extension installed")
    if sys.version_info < (3, 10):
        pytest.skip("argparse before 3.10 titles the options section differently")
    ref = runpy.run_path(str(ROOT / "scripts" / "cli_reference.py"))
    monkeypatch.setenv("COLUMNS", ref["WIDTH"])
    page = (ROOT / "docs" / "cli.md").read_text()
    assert page == ref["render"](), "docs/cli.md differs from --help: run python scripts/cli_reference.py"
    for command in ("run", "ops", "compare", "report", "ab", "task", "plugins"):
        assert f"## zlf {command}\n" in page
