"""One home per run option: every run option is declared in one place (whatever command takes
it), its range is checked in one place (:meth:`zlf.config.RunConfig.check`, with the ``type=``
of its flag taking the same range), and its value is read from the typed config."""
import argparse
import re
from pathlib import Path

import attrs
import pytest

from zlf.cli import build_parser
from zlf.config import ARGS
from zlf.options import NUMBERS, Number, number_type
from zlf.session import Session

ROOT = Path(__file__).resolve().parents[1]
#: what a command runs, where its output goes and how it prints: a command's own, not a run setting
OWN = {"command", "ops", "out", "name", "format", "ext", "no_ext"}


def _declaring_sites(monkeypatch) -> tuple:
    """Build every command's parser with every installed extension active, recording where each
    argument was added: ``({command: {dest: {(file, function)}}}, {command: traits}, hooks)``."""
    import sys

    sites: dict = {}
    original = argparse._ActionsContainer.add_argument

    def recording(self, *args, **kwargs):
        action = original(self, *args, **kwargs)
        frame = sys._getframe(1)
        # the function that declared it: past argparse, the add_options view (zlf.config.Declaring)
        # and the deprecated-alias helper, which add on someone's behalf
        while frame.f_code.co_name in ("add_argument", "deprecated") or frame.f_code.co_filename == argparse.__file__:
            frame = frame.f_back
        where = (str(Path(frame.f_code.co_filename).resolve().relative_to(ROOT)), frame.f_code.co_name)
        sites.setdefault(id(self), []).append((action.dest, where))
        return action

    monkeypatch.delenv("ZLF_DISABLE")  # every installed extension: their commands and options too
    monkeypatch.setattr(argparse._ActionsContainer, "add_argument", recording)
    hooks = Session.create(argparse.Namespace()).hooks
    parser = build_parser(hooks)
    monkeypatch.undo()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    by_command, traits = {}, {}
    for name, p in sub.choices.items():
        containers = [p, *p._action_groups, *p._mutually_exclusive_groups]
        declared: dict = {}
        for c in containers:
            for dest, where in sites.get(id(c), ()):
                declared.setdefault(dest, set()).add(where)
        by_command[name] = declared
        traits[name] = p.get_default("traits")
    return by_command, traits, hooks


@pytest.mark.extensions("seed", "shapes", "task", "cupti", "cudagraph", "ir_dump", "flaggems")
def test_every_run_option_has_one_declaring_site_across_the_commands_that_take_it(monkeypatch):
    by_command, traits, hooks = _declaring_sites(monkeypatch)
    runs = [name for name, t in traits.items() if t is not None and t.run_options]
    assert {"run", "ab", "ops", "task"} <= set(runs)
    run_settings = (set(ARGS) - OWN) | {o.dest for s in hooks.option_sets for o in s.options}
    homes: dict = {}
    for name in runs:
        for dest, where in by_command[name].items():
            if dest in run_settings:
                homes.setdefault(dest, set()).update(where)
    listing = {dest: sorted(where) for dest, where in homes.items()}
    assert {d: w for d, w in listing.items() if len(w) != 1} == {}
    # the timing options: core's one function; the time limit, backend, device and dtype: the one
    # helper each that other commands (zlf sweep, zlf calibrate) also declare them with
    helpers = {"time_limit": "add_time_limit_argument", "backend": "add_backend_argument",
               "device": "add_device_argument", "dtype": "add_dtype_argument"}
    for dest in ("timer", "warmup_ms", "rep_ms", "flush_l2", "input_copies", "time_limit", "backend", "device", "dtype"):
        assert listing[dest] == [("core/options.py", helpers.get(dest, "add_run_options"))], dest
    assert listing["seed"] == [("extensions/seed/zlf_seed/plugin.py", "add_options")]


def test_each_numeric_run_setting_has_one_range_for_its_flag_and_its_config():
    """The flag's type and RunConfig.check take the range from one table (zlf.options.NUMBERS)."""
    from zlf.config import RunConfig

    parser = build_parser(Session.create(argparse.Namespace()).hooks)
    run = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    for field, (flag, number) in NUMBERS.items():
        assert number_type(flag) == attrs.evolve(number, flag=flag)
        action = next((a for a in run._actions if flag in a.option_strings), None)
        if action is not None:  # --warmup-calls and --iters are zlf task's
            assert action.type == number_type(flag), flag
        section, _, name = field.rpartition(".")
        bad = number.high * 10 if number.high else -1
        config = RunConfig().with_changes(**{name: int(bad) if number.kind is int else float(bad)})
        with pytest.raises(Exception, match=re.escape(flag)):
            config.check()


def test_no_other_module_refuses_a_numeric_run_setting_itself():
    """A copy of a range check elsewhere (as commands.py and ab/sides.py had for --time-limit) is
    a second home that drifts."""
    flags = [flag for flag, _ in NUMBERS.values()]
    pattern = re.compile(r"""UsageError\(f?["'](%s)[ :][^"']*(expected|must be)""" % "|".join(map(re.escape, flags)))
    found = [f"{p.relative_to(ROOT)}:{n}" for p in [*ROOT.glob("core/**/*.py"), *ROOT.glob("extensions/*/zlf_*/**/*.py")]
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
    assert all(isinstance(n, Number) for _, n in NUMBERS.values())
