"""A third party's command that times points gets every option that applies to timing points,
from core and from every extension, without any of them naming it: each asks the command's
:class:`zlf.CommandTraits` (tests/thirdparty_ext/zlf_thirdparty_bench.py)."""
import json
import sys
from pathlib import Path

import pytest

from zlf.cli import main

HERE = Path(__file__).parent / "thirdparty_ext"
sys.path.insert(0, str(HERE))

import zlf_thirdparty_bench as bench  # noqa: E402

EXTENSIONS = Path(__file__).resolve().parents[1] / "extensions"
#: option -> the extension that adds it, and what a command must do to get it
OPTIONS = {"--seed": ("seed", "makes_inputs"), "--shapes": ("shapes", "plans_shapes"),
           "--cupti-source": ("cupti", "times_points"), "--cudagraph-probe": ("cudagraph", "times_points"),
           "--ir": ("ir_dump", "times_points")}
CORE = ("--timer", "--warmup-ms", "--rep-ms", "--flush-l2", "--time-limit", "--backend", "--device")


def _help(capsys, command) -> str:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"], extra_plugins=[("bench", bench.BenchExtension())])
    assert exc.value.code == 0
    return capsys.readouterr().out


@pytest.mark.extensions(*{name for name, _ in OPTIONS.values()})
def test_a_command_that_times_points_gets_the_options_of_timing_points(capsys):
    text = _help(capsys, "bench")
    for flag in (*OPTIONS, *CORE, "--dtype", "--input-copies"):
        assert flag in text, flag
    probe = _help(capsys, "probe")  # it times points, but makes no inputs and plans no shapes
    for flag, (_, trait) in OPTIONS.items():
        assert (flag in probe) == (trait == "times_points"), flag
    for flag in CORE:
        assert flag in probe, flag
    assert "--dtype" not in probe and "--seed" not in probe


@pytest.mark.extensions("seed", "shapes", "cupti")
def test_the_options_reach_the_command_typed(capsys, tmp_path):
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("add:\n  shapes: [[8]]\n")
    rc = main(["bench", "--seed", "7", "--shapes", str(shapes), "--cupti-source", "torch", "--timer", "cupti",
               "--time-limit", "5"], extra_plugins=[("bench", bench.BenchExtension())])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["timer"], out["time_limit_s"]) == ("cupti", 5.0)
    assert out["options"]["seed"] == 7 and out["options"]["shapes"] == str(shapes)
    assert out["options"]["cupti_source"] == "torch"


def test_no_extension_names_a_command_to_decide_its_options():
    """The old way (``if command in ("run", "ab", "task")``) is gone from every extension."""
    import re

    # the name an add_options implementation was handed, or a tuple of command names
    pattern = re.compile(r"""(?<![.\w])command\s+(not\s+)?in\s+\(|(?<![.\w])command\s*==\s*["']|COMMANDS\s*=""")
    offenders = [f"{p.relative_to(EXTENSIONS)}:{n}" for p in EXTENSIONS.glob("*/zlf_*/**/*.py")
                 for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []
