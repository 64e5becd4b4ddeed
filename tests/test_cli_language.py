"""One CLI language: spellings, formats, verdict words, --version, zlf ops, scoped options."""
from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path

import pytest

from zlf import hookimpl
from zlf.cli import build_parser, main
from zlf.console import results_table
from zlf.records import PointRecord
from zlf.session import Session

ARITY = "TypeError: function takes exactly 25 arguments (21 given)"


def _parser(*plugins):
    session = Session.create(argparse.Namespace(), extra_plugins=plugins)
    return build_parser(session.hooks)


def _help(parser, command) -> str:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command].format_help()


# ----------------------------------------------------------------------------- --version, plugins
def test_version_names_python_torch_triton_and_active_extensions(capsys, monkeypatch):
    from zlf.plugins import installed_extensions

    monkeypatch.delenv("ZLF_DISABLE", raising=False)  # the first installed extension, active
    if installed_extensions():
        monkeypatch.setenv("ZLF_EXTENSIONS", next(iter(installed_extensions())))
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("zlf ") and out[1].startswith("Python 3.")
    assert out[2].startswith("torch ") and out[3].startswith("triton ")
    if installed_extensions():
        name = next(iter(installed_extensions()))
        assert any(line.split()[:1] == [name] for line in out[5:]), out


def test_plugins_shows_entry_point_and_distribution(capsys):
    from zlf.plugins import installed_extensions

    found = installed_extensions()
    if not found:
        pytest.skip("no extension installed")
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "entry point" in out and "distribution" in out
    name, ep = next(iter(found.items()))
    line = next(l for l in out.splitlines() if l.startswith(name + " "))
    assert ep.value in line and ep.dist.metadata["Name"] in line


# ----------------------------------------------------------------------------- zlf ops, run names, --format
OP_FILE = '''
import torch
from zlf.ops import Op

def _inputs(shape, dtype, device):
    return (torch.randn(shape, dtype=getattr(torch, dtype), device=device),)

RELU = Op(name="relu", fn=torch.relu, make_inputs=_inputs, shapes=[(64,)], reference=torch.relu)
NEG = Op(name="neg", fn=torch.neg, make_inputs=_inputs, shapes=[(64,), (128,)], reference=torch.neg)
'''


def test_ops_lists_points_without_running_anything(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_ops.py").write_text(OP_FILE)
    assert main(["ops", "my_ops.py", "add", "--dtype", "float16,float32", "--format", "json"]) == 0
    rows = {r["op"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["neg"]["dtypes"] == ["float16", "float32"] and rows["neg"]["points"] == 4
    assert rows["neg"]["source"] == "my_ops.py" and rows["add"]["source"] == "built-in"
    # no run directory (the op file's bytecode may be there where the environment keeps bytecode)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["my_ops.py"]


def test_run_of_an_op_file_is_named_after_it_and_speaks_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    (tmp_path / "my_ops.py").write_text(OP_FILE)
    assert main(["run", "my_ops.py", "--format", "csv", "--warmup-ms", "0", "--rep-ms", "1"]) == 0
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == ["point", "status", "timer", "median_ms", "gbps", "tflops", "note"]
    assert [r["point"] for r in rows] == ["relu/64/float32", "neg/64/float32", "neg/128/float32"]
    assert float(rows[0]["median_ms"]) > 0 and "run dir:" in err  # stdout is the csv alone
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("my_ops_")


def _failed(n, error=ARITY, op="mm"):
    return [PointRecord(point=f"{op}/{k}/float16", op=op, shape=(k,), dtype="float16", status="FAILED", error=error)
            for k in range(1, n + 1)]


def test_identical_failures_are_one_row_with_count_and_likely_cause():
    from zlf.output import failure_lines

    records = _failed(60) + _failed(1, "ValueError: other", op="add")
    table = results_table(records, colour=False)
    assert len([l for l in table.splitlines() if "FAILED" in l]) == 2
    assert "mm/1/float16 and 59 more" in table
    lines = failure_lines(records)
    assert lines[0].startswith("60 points FAILED with the same error") and "takes exactly 25" in lines[0]
    assert "likely cause" in lines[1] and "Triton" in lines[1] and "harness" in lines[1]
    assert len(lines) == 2  # the single ValueError stays a row of its own, no summary line
    rows = list(csv.DictReader(io.StringIO(results_table(records, fmt="csv"))))
    assert len(rows) == 61  # machine formats list every point


# ----------------------------------------------------------------------------- spellings
def test_old_spellings_are_hidden_aliases_of_the_one_spelling():
    parser = _parser()
    args = parser.parse_args(["run", "--dtypes", "float16", "--json"])
    assert args.dtype == ["float16"] and args.format == "json"
    args = parser.parse_args(["ab", "--label", "x", "--fail-on-slower", "add"])
    assert args.label == "x" and args.fail_if_slower == 0.0
    args = parser.parse_args(["ab", "--name", "y", "--fail-if-slower", "3", "add"])
    assert args.label == "y" and args.fail_if_slower == 3.0
    assert parser.parse_args(["compare", "a", "b", "--fail-if-slower"]).fail_if_slower == 0.0
    for command, old in (("run", "--dtypes"), ("run", "--json"), ("ab", "--label"), ("ab", "--fail-on-slower"),
                         ("ab", "--dtypes")):
        assert old not in _help(parser, command), (command, old)
    assert "--format" in _help(parser, "ab") and "--name" in _help(parser, "ab")


class _RunOnly:
    @hookimpl
    def add_options(self, parser, command):
        if command == "run":
            parser.add_argument("--only-on-run")


class _Everywhere:
    @hookimpl
    def add_options(self, parser):  # no command argument: every command that takes run options
        parser.add_argument("--everywhere")


def test_extension_options_appear_only_on_the_commands_they_affect():
    parser = _parser(("runonly", _RunOnly()), ("everywhere", _Everywhere()))
    assert "--only-on-run" in _help(parser, "run")
    for command in ("ops", "ab"):
        assert "--only-on-run" not in _help(parser, command)
        assert "--everywhere" in _help(parser, command) or command == "ab"
    assert parser.parse_args(["ab", "--everywhere", "1", "add"]).everywhere == "1"  # ab folds them into a line
    assert "--everywhere" in _help(parser, "ab").split("passed on to every run")[1]
    with pytest.raises(SystemExit):
        parser.parse_args(["ops", "--only-on-run", "1"])


def test_an_option_of_another_command_is_refused_in_one_line_that_says_where_it_belongs(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["ops", "--only-on-run", "1"], extra_plugins=[("runonly", _RunOnly())])
    assert exc.value.code == 2
    assert capsys.readouterr().err == "zlf: error: --only-on-run: an option of zlf run, not with zlf ops\n"


# ----------------------------------------------------------------------------- words
def test_compare_formats_share_field_names_and_verdict_words(tmp_path, capsys):
    from test_compare import write_run

    a = write_run(tmp_path / "A", {"k/1/float32": (1.0, "t"), "k/2/float32": (1.0, "t")})
    b = write_run(tmp_path / "B", {"k/1/float32": (1.5, "t"), "k/2/float32": (1.0, "t")})
    outs = {}
    for fmt in ("table", "markdown", "csv", "json"):
        assert main(["compare", str(a), str(b), "--threshold", "5", "--format", fmt]) == 0
        outs[fmt] = capsys.readouterr().out
    doc = json.loads(outs["json"])
    assert [r["verdict"] for r in doc["rows"]] == ["SLOWER", "SAME"] and doc["summary"]["same"] == 1
    csv_rows = list(csv.DictReader(io.StringIO(outs["csv"])))
    assert [r["verdict"] for r in csv_rows] == ["SLOWER", "SAME"]
    for fmt in ("table", "markdown", "csv"):
        assert "median_ms_A" in outs[fmt] and "SLOWER" in outs[fmt] and "SAME" in outs[fmt], fmt
        assert "unchanged" not in outs[fmt] and "bandwidth_GB_s" not in outs[fmt]


def test_campaign_summary_formats_share_field_names_and_verdict_words(tmp_path):
    from types import SimpleNamespace

    from zlf.output import campaign_summary
    from zlf.stats import PointStats

    r = PointStats(point="mm/64/float16", rounds=6, a_median_ms=1.0, b_median_ms=1.2, delta_median_pct=20.0,
                   delta_lo_pct=15.0, delta_hi_pct=25.0, noise_a_pct=1.0, noise_b_pct=1.5, flips=0, verdict="SLOWER",
                   min_effect_pct=1.0, mde_pct=2.0, p_value=0.001, confidence=0.95, delta_pct=19.5)
    campaign = SimpleNamespace(path=tmp_path, data={"metric": "time"})
    (tmp_path / "report.md").write_text("# the report\n")
    doc = json.loads(campaign_summary(campaign, [r], "TEXT", "json"))
    point = doc["points"][0]
    assert point["verdict"] == "SLOWER" and point["gmean_ms_B"] == 1.2 and point["delta_pct"] == 19.5
    rows = list(csv.DictReader(io.StringIO(campaign_summary(campaign, [r], "TEXT", "csv"))))
    assert list(rows[0]) == list(point) and rows[0]["verdict"] == "SLOWER"
    assert campaign_summary(campaign, [r], "TEXT", "table") == "TEXT"
    assert campaign_summary(campaign, [r], "TEXT", "markdown") == "# the report\n"
    campaign.data["metric"] = "cycles"
    assert "cycles_A" in campaign_summary(campaign, [r], "TEXT", "csv").splitlines()[0]


# ----------------------------------------------------------------------------- report
def test_report_of_a_campaign_directory_points_at_its_report(tmp_path, capsys):
    camp = tmp_path / "ab_x_20260101-000000"
    camp.mkdir()
    (camp / "campaign.json").write_text("{}")
    assert main(["report", str(camp)]) == 2
    assert "zlf ab --resume" in capsys.readouterr().err
    (camp / "report.md").write_text("# campaign\n")
    (camp / "summary.log").write_text("verdicts: 1 SLOWER\n")
    assert main(["report", str(camp)]) == 0
    out = capsys.readouterr().out
    assert "verdicts: 1 SLOWER" in out and f"report: {camp / 'report.md'}" in out


def test_environment_section_shows_what_differs_first_and_folds_the_rest():
    from zlf import report

    a = {"device_name": "X", "started": "1", "command": ["zlf", "run"], "environment": {"DISABLE_MMA_V3": "1"},
         "gpu_clock": {"sm_mhz": 1980, "mem_mhz": 2619}}
    b = {"device_name": "X", "started": "2", "command": ["zlf", "run"], "environment": {},
         "gpu_clock": {"sm_mhz": 1755, "mem_mhz": 2619}}
    text = report.environment_section({"A": a, "B": b})
    short, full = text.split("<details>")
    assert "$DISABLE_MMA_V3" in short and "gpu_clock.sm_mhz" in short
    rows = [l.split("|")[1].strip() for l in short.splitlines() if l.startswith("|")][2:]
    assert rows == ["$DISABLE_MMA_V3", "gpu_clock.sm_mhz"]  # started differs too, as for any two runs
    assert "started" in full and "device_name" in full and "</details>" in full
    assert '{"' not in text  # nested values are rows, not JSON


# ----------------------------------------------------------------------------- terminal
def test_status_line_only_on_a_terminal_and_without_escape_codes(monkeypatch):
    from zlf.console import StatusLine

    monkeypatch.delenv("ZLF_NO_PROGRESS", raising=False)
    class Tty(io.StringIO):
        def isatty(self):
            return True

    pipe = io.StringIO()
    StatusLine(pipe).show("[1/2] case 1: timing (10 s of 60 s left)")
    assert pipe.getvalue() == ""
    tty = Tty()
    line = StatusLine(tty)
    line.show("[1/2] case 1: compiling (first call) (60 s of 60 s left)")
    line.show("[1/2] case 1: timing (41 s of 60 s left)")
    line.clear()
    assert "\r[1/2] case 1: timing" in tty.getvalue() and "\x1b" not in tty.getvalue()


def test_task_case_phases_say_what_runs_and_the_time_left(monkeypatch):
    judge = pytest.importorskip("zlf_taskpkg.judge")
    from zlf.console import StatusLine

    monkeypatch.delenv("ZLF_NO_PROGRESS", raising=False)
    monkeypatch.setenv("COLUMNS", "100")  # a terminal the line fits (StatusLine cuts at its width), not the shell's

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    from zlf.testing import FakeClock

    clock = FakeClock()  # the line must not depend on how long this test waits between two lines
    phase = judge.Phase(StatusLine(tty), "[2/5] case 2", 60.0, clock=clock)
    phase.set("checking", clock() + 41.2)
    assert tty.getvalue().endswith("[2/5] case 2: checking (41 s of 60 s left)")
    assert "\x1b" not in tty.getvalue()
