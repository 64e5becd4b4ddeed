"""Hostile flags: a flag is spelt whole, and every number a flag takes is finite and in range.

Each refusal is one line (``zlf: error: ...``) and exit code 2, before anything is created."""
import argparse

import pytest

from zlf.cli import build_parser, main
from zlf.session import Session


def _parser(*plugins):
    return build_parser(Session.create(argparse.Namespace(), extra_plugins=plugins).hooks)


def _commands(parser) -> dict:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


# ----------------------------------------------------------------------------- no prefixes
@pytest.mark.parametrize("argv, whole", [
    (["run", "add", "--warmup", "10"], "--warmup-ms"),
    (["ab", "--switch", "X", "--round", "3", "add"], "--rounds"),
    (["run", "add", "--time-lim", "5"], "--time-limit"),
    (["compare", "a", "b", "--thresh", "5"], "--threshold"),
    (["ab", "--switch", "X", "--until", "add"], "--until-confident"),
    (["run", "add", "--warmup=10"], "--warmup-ms"),  # the = form goes through another branch of argparse
    (["run", "add", "--rep", "5", "--warmup-ms", "1"], "--rep-ms"),
])
def test_a_prefix_of_a_flag_is_refused_not_expanded(argv, whole, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and whole not in err.split("unrecognized arguments")[1]


def test_a_prefix_of_a_command_is_no_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["ru", "add"])
    assert exc.value.code == 2 and "invalid choice: 'ru'" in capsys.readouterr().err


def test_no_parser_of_any_command_expands_a_prefix():
    """argparse builds sub-command parsers without passing allow_abbrev on: each must have it off."""
    parser = _parser()
    assert parser.allow_abbrev is False
    commands = _commands(parser)
    assert {"run", "ab", "ops", "compare", "report", "calibrate", "plugins"} <= set(commands)
    for name, sub in commands.items():
        assert sub.allow_abbrev is False, name


# ----------------------------------------------------------------------------- numbers in range
BAD_NUMBERS = [
    (["run", "add", "--time-limit", "inf"], "--time-limit inf"),
    (["run", "add", "--time-limit", "1e300"], "--time-limit 1e300"),
    (["run", "add", "--time-limit", "nan"], "--time-limit nan"),
    (["run", "add", "--time-limit", "-0.5"], "--time-limit -0.5"),
    (["run", "add", "--warmup-ms", "inf"], "--warmup-ms inf"),
    (["run", "add", "--rep-ms", "1e-400"], "--rep-ms 1e-400"),  # underflows to 0: not positive
    (["run", "add", "--input-copies", "0"], "--input-copies 0"),
    (["run", "add", "--input-copies", "1e9"], "--input-copies 1e9"),  # an int spelt as a float
    (["run", "add", "--device", "-1"], "--device -1"),
    (["run", "add", "--retries", "1000000", "--gpus", "0"], "--retries 1000000"),
    (["ops", "--device", "0x10"], "--device 0x10"),
    (["compare", "a", "b", "--threshold", "nan"], "--threshold nan"),
    (["compare", "a", "b", "--threshold", "-1"], "--threshold -1"),
    (["compare", "a", "b", "--fail-if-slower", "nan"], "--fail-if-slower nan"),
    (["report", "a", "--threshold", "inf"], "--threshold inf"),
    (["ab", "--aa", "add", "--fail-if-slower", "inf", "--dry-run"], "--fail-if-slower inf"),
    (["ab", "--aa", "add", "--alpha", "1", "--dry-run"], "--alpha 1"),
    (["ab", "--aa", "add", "--alpha", "nan", "--dry-run"], "--alpha nan"),
    (["ab", "--aa", "add", "--min-effect", "100", "--dry-run"], "--min-effect 100"),
    (["ab", "--aa", "add", "--margin", "nan", "--dry-run"], "--margin nan"),
    (["ab", "--aa", "add", "--rounds", "1e3", "--dry-run"], "--rounds 1e3"),
    (["ab", "--aa", "add", "--max-rounds", "100000", "--until-confident", "--dry-run"], "--max-rounds 100000"),
    (["ab", "--aa", "add", "--idle-wait", "inf", "--require-idle", "--dry-run"], "--idle-wait inf"),
    (["ab", "--aa", "add", "--time-limit", "inf", "--dry-run"], "--time-limit inf"),
    (["calibrate", "--reps", "0", "--backend", "cpu"], "--reps 0"),
    (["calibrate", "--copy-mib", "nan", "--backend", "cpu"], "--copy-mib nan"),
]


def _refused(argv, capsys, plugins=()) -> str:
    """``argv`` exits 2 with one line on stderr, and nothing was written where it ran."""
    try:
        rc = main(argv, extra_plugins=plugins)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2, (argv, err)
    assert err.startswith("zlf: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("argv, shown", BAD_NUMBERS, ids=[" ".join(a) for a, _ in BAD_NUMBERS])
def test_a_number_out_of_range_is_one_line_and_exit_2(argv, shown, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _refused(argv, capsys)
    assert shown + ": expected" in err
    assert list(tmp_path.iterdir()) == []  # refused before anything was created


@pytest.mark.extensions("seed")
@pytest.mark.parametrize("value", ["1e26", "-1", "4294967296", "nan"])
def test_a_seed_numpy_cannot_take_is_refused(value, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert f"--seed {value}: expected a non-negative whole number" in _refused(["run", "add", "--seed", value], capsys)


@pytest.mark.extensions("cudagraph")
def test_an_extensions_numbers_are_checked_the_same_way(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "--cudagraph-replay-ms 0: expected a positive" in _refused(["run", "add", "--cudagraph-replay-ms", "0"], capsys)
    assert "--cudagraph-max-calls 2.5: expected" in _refused(["run", "add", "--cudagraph-max-calls", "2.5"], capsys)


@pytest.mark.extensions("task")
def test_a_tolerance_that_is_not_a_number_is_refused_by_zlf_task(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "--rtol nan: expected" in _refused(["task", "pkg", "--rtol", "nan"], capsys)
    assert "--iters 0: expected" in _refused(["task", "pkg", "--iters", "0"], capsys)


@pytest.mark.parametrize("name", ["A B", "1X", "X=1", "", "X;rm -rf /", "\x1b[31mX"])
def test_a_switch_that_is_not_a_variable_name_is_refused(name, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _refused(["ab", "--switch", name, "add", "--dry-run"], capsys)
    assert "expected an environment variable name" in err and "\x1b" not in err


def test_a_side_environment_name_that_is_not_a_variable_name_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = _refused(["ab", "--switch", "X", "--a-env", "BAD-NAME=1", "add", "--dry-run"], capsys)
    assert "--a-env BAD-NAME: expected an environment variable name" in err


@pytest.mark.parametrize("field, value, shown", [
    ("time_limit_s", float("inf"), "--time-limit inf"),
    ("time_limit_s", 1e300, "--time-limit 1e+300"),
    ("device", -3, "--device -3"),
])
def test_a_config_file_is_held_to_the_same_ranges(field, value, shown, capsys, tmp_path, monkeypatch):
    """--config FILE bypasses argparse: RunConfig.check refuses the same values."""
    from zlf.config import RunConfig

    monkeypatch.chdir(tmp_path)
    path = RunConfig(ops=("add",)).with_changes(**{field: value}).write(tmp_path / "c.json")
    err = _refused(["run", "--config", str(path)], capsys)
    # refused by RunConfig.check, or earlier by the reader, which takes no number beyond 2**63
    # and no Infinity (zlf.readers): either way one line, and nothing made
    assert shown + ": expected" in err or ("c.json: not a zlf config file" in err and (
        "out of range" in err or "Infinity" in err)), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json"]


@pytest.mark.extensions("seed")
def test_an_extension_option_in_a_config_file_is_held_to_its_range(capsys, tmp_path, monkeypatch):
    from zlf.config import RunConfig

    monkeypatch.chdir(tmp_path)
    path = RunConfig(ops=("add",)).with_options({"seed": {"seed": 2**40}}).write(tmp_path / "c.json")
    assert "expected a non-negative whole number" in _refused(["run", "--config", str(path)], capsys)


@pytest.mark.extensions("task", "flaggems", "profile")
def test_every_numeric_flag_of_every_command_takes_a_checked_number(monkeypatch):
    """The audit: no command declares a bare ``type=int``/``type=float`` (which take nan, inf and
    1e300), core's and every installed extension's."""
    from zlf.options import Number

    monkeypatch.delenv("ZLF_DISABLE")  # every installed extension active: their commands and options too
    parser = _parser()
    assert {"task", "sweep", "profile", "triage"} <= set(_commands(parser))
    bare = [f"zlf {name} {max(a.option_strings, key=len)}" for name, sub in _commands(parser).items()
            for a in sub._actions if a.type in (int, float)]
    assert bare == []
    numbers = [a for sub in _commands(parser).values() for a in sub._actions if isinstance(a.type, Number)]
    assert len(numbers) >= 20
