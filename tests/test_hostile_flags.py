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
])
def test_a_prefix_of_a_flag_is_refused_not_expanded(argv, whole, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and whole not in err.split("unrecognized arguments")[1]


def test_no_parser_of_any_command_expands_a_prefix():
    """argparse builds sub-command parsers without passing allow_abbrev on: each must have it off."""
    parser = _parser()
    assert parser.allow_abbrev is False
    commands = _commands(parser)
    assert {"run", "ab", "ops", "compare", "report", "calibrate", "plugins"} <= set(commands)
    for name, sub in commands.items():
        assert sub.allow_abbrev is False, name
