"""docs/walkthrough.md is the transcript scripts/walkthrough.py writes: the same steps, in order."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("walkthrough", ROOT / "scripts" / "walkthrough.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_walkthrough_page_holds_the_scripts_steps():
    script = _script()
    assert script.steps_of(script.PAGE.read_text()) == script.expected_steps(), \
        "docs/walkthrough.md is stale: run python scripts/walkthrough.py"


def test_walkthrough_step_check_sees_a_missing_command():
    script = _script()
    page = script.render({})
    assert script.steps_of(page) == script.expected_steps()
    assert script.steps_of(page.replace("$ zlf ops my_ops.py\n", "")) != script.expected_steps()


def test_walkthrough_uses_the_op_file_of_ops_md():
    assert "torch.clamp(x, min=0, out=out)" in _script().op_file()


def test_normalise_hides_machine_paths_and_timestamps(tmp_path):
    script = _script()
    text = (f"run dir: {tmp_path}/runs/relu_20261205-080711\nstarted 2026-12-05T08:07:11+00:00\n"
            "not referenced in /root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/triton")
    assert script.normalise(text, tmp_path) == ("run dir: ./runs/relu_<YYYYmmdd-HHMMSS>\nstarted <timestamp>\n"
                                                "not referenced in <site-packages>/triton")


def _tables(page: str) -> list:
    """``[(command, [column header, ...])]``: each table header line in the page's outputs (a
    plain table's cells are 2+ spaces apart, a markdown table's between pipes)."""
    import re

    found, command = [], None
    for line in page.split("\n"):
        if line.startswith("$ "):
            command = line[2:]
        elif command and line.startswith("point "):
            found.append((command, re.split(r"\s{2,}", line.strip())))
        elif command and line.startswith("| point "):
            found.append((command, [c.strip() for c in line.strip().strip("|").split("|")]))
    return found


def _expected_columns(command: str, columns: list) -> list:
    """What the command prints now, from the header constants in code."""
    from zlf import compare
    from zlf.ab import report as ab_report
    from zlf.console import RUN_HEADERS

    words = command.split()
    campaign = any("ab_" in w for w in words[2:]) and len(words) == 3
    if words[1] == "ab" or (words[1] == "report" and campaign):
        return ab_report.headers(aa="--aa" in words or (words[1] == "report" and "ab_aa_" in words[2]))
    if words[1] == "compare" or (words[1] == "report" and len(words) >= 4):
        headers = compare.table_headers()
        return list(headers[:6]) + [h for h in headers[6:] if h in columns]
    if words[1] in ("run", "report"):
        return list(RUN_HEADERS)
    raise AssertionError(f"no known table for {command!r}")


def test_walkthrough_tables_have_the_columns_the_commands_print():
    script = _script()
    tables = _tables(script.PAGE.read_text())
    assert any(c.startswith("zlf ab") for c, _ in tables) and any(c.startswith("zlf compare") for c, _ in tables)
    for command, columns in tables:
        assert columns == _expected_columns(command, columns), \
            f"docs/walkthrough.md is stale ({command}): run python scripts/walkthrough.py"


def test_walkthrough_table_check_sees_an_old_header():
    old = ("$ zlf ab --aa --rounds 3 --name aa my_ops.py::relu\n"
           "point   median_ms_A   median_ms_B   delta_pct   verdict\n")
    (command, columns), = _tables(old)
    assert columns != _expected_columns(command, columns)
