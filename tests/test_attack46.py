"""attack46: issue 46 ("Host, step two") attacked with third-party extensions of our own
(tests/data/attack46_ext), a fresh venv with an unrelated pytest project, campaign.json files
with wrong-typed state, and walks of where each run option is declared.

A case that fails on main is marked ``xfail(strict=True, reason="ATTACK: ...")``.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from zlf.cli import main
from zlf import hookimpl
from zlf.config import RunConfig
from zlf.options import Number

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).parent / "data" / "attack46_ext"
sys.path.insert(0, str(HERE))

import zlf_attack46_campaign as camp_ext  # noqa: E402
import zlf_attack46_traits as traits_ext  # noqa: E402

OLD_CAMPAIGN = ROOT / "tests" / "data" / "ab_campaign_before_typed" / "campaign.json"


def _call(argv, plugins) -> tuple:
    """``main(argv)`` in this process: (exit code, stdout, stderr); an exception escaping main
    is returned as the code (a traceback for a user)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(map(str, argv)), extra_plugins=plugins)
    except SystemExit as exc:
        rc = exc.code
    except Exception as exc:  # noqa: BLE001 - what a user would see as a traceback
        rc = f"raised {type(exc).__name__}: {exc}"
    return rc, out.getvalue(), err.getvalue()


def _traits_plugins():
    return [("atk46", traits_ext.TraitsExtension())]


def _flags(help_text: str) -> set:
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", help_text))


# =============================================================================== (2) traits
#: per command of the third-party extension: flags it must offer, flags it must not
EXPECTED = {
    "mk": ({"--seed", "--backend", "--device"}, {"--timer", "--time-limit", "--shapes", "--dtype", "--cupti-source",
                                                  "--input-copies", "--ir"}),
    "plan": ({"--shapes", "--dtype", "--backend", "--device"}, {"--seed", "--timer", "--input-copies",
                                                                 "--cupti-source", "--cudagraph-probe", "--ir"}),
    "mkplan": ({"--seed", "--shapes", "--dtype"}, {"--timer", "--cupti-source", "--ir"}),
    "timeonly": ({"--timer", "--time-limit", "--warmup-ms", "--rep-ms", "--flush-l2", "--cupti-source",
                  "--cudagraph-probe", "--ir"}, {"--seed", "--shapes", "--dtype", "--input-copies"}),
    "timecfg": ({"--timer", "--seed", "--shapes", "--dtype", "--input-copies", "--config"}, set()),
    "plain": (set(), {"--seed", "--timer", "--shapes", "--backend", "--device", "--time-limit", "--dtype"}),
}


@pytest.mark.extensions("seed", "shapes", "cupti", "cudagraph", "ir_dump")
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_combination_of_traits_gets_exactly_the_options_of_what_it_does(name):
    rc, out, err = _call([f"atk-{name}", "--help"], _traits_plugins())
    assert rc == 0, err
    flags = _flags(out)
    must, must_not = EXPECTED[name]
    assert must <= flags, sorted(must - flags)
    assert not (must_not & flags), sorted(must_not & flags)


@pytest.mark.extensions("seed", "shapes", "cupti")
def test_options_of_each_trait_reach_the_third_party_command_typed(tmp_path):
    shapes = tmp_path / "s.yaml"
    shapes.write_text("add:\n  shapes: [[8]]\n")
    rc, out, err = _call(["atk-mk", "--seed", "3"], _traits_plugins())
    assert rc == 0, err
    assert json.loads(out)["options"]["seed"] == 3
    rc, out, err = _call(["atk-plan", "--shapes", shapes], _traits_plugins())
    assert rc == 0, err
    assert json.loads(out)["options"]["shapes"] == str(shapes)
    rc, out, err = _call(["atk-timeonly", "--timer", "cupti", "--time-limit", "4", "--cupti-source", "torch"],
                         _traits_plugins())
    assert rc == 0, err
    got = json.loads(out)
    assert (got["timer"], got["time_limit_s"], got["options"]["cupti_source"]) == ("cupti", 4.0, "torch")


@pytest.mark.extensions("seed")
def test_a_command_without_traits_refuses_a_run_option_in_one_line():
    rc, out, err = _call(["atk-plain", "--seed", "3"], _traits_plugins())
    assert rc == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "--seed" in err


@pytest.mark.extensions("seed")
@pytest.mark.parametrize("argv", [["atk-mk", "--seed", "-1"], ["atk-timeonly", "--time-limit", "nan"],
                                  ["atk-timeonly", "--rep-ms", "0"]])
def test_a_third_party_command_refuses_out_of_range_run_settings_as_zlf_run_does(argv):
    rc, out, err = _call(argv, _traits_plugins())
    assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("zlf: error: ")


def test_a_third_party_command_that_takes_a_config_file_reads_it(tmp_path):
    """CommandTraits.config_file: 'it takes its run settings from a RunConfig file (--config
    FILE)'. The builder gives such a command ``--config``; using it must work (or refuse in
    one line), never raise."""
    path = tmp_path / "c.json"
    RunConfig(command="atk-timecfg", time_limit_s=7.0).write(path)
    rc, out, err = _call(["atk-timecfg", "--config", path], _traits_plugins())
    assert rc == 0, (rc, err)
    assert json.loads(out)["time_limit_s"] == 7.0


@pytest.mark.extensions("shapes")  # --no-ext names an installed extension
def test_extension_selection_flags_are_accepted_by_a_third_party_command():
    rc, out, err = _call(["atk-timeonly", "--no-ext", "shapes"], _traits_plugins())
    assert rc == 0, err


class _DepthA:
    @hookimpl
    def add_options(self, parser, traits):
        parser.add_argument_group("atk-a").add_argument("--atk-a-depth", dest="depth", type=Number(int, 0, 9), default=1)


class _DepthB:
    @hookimpl
    def add_options(self, parser, traits):
        parser.add_argument_group("atk-b").add_argument("--atk-b-depth", dest="depth", default="deep")


def test_two_extensions_declaring_one_dest_is_a_conflict_naming_both():
    """ExtensionOptions: 'option names are unique across extensions (they share one command
    line)'. Two extensions that break it are a conflict to name, as two exclusive-hook providers
    are (one line naming both), not a wrong-type error about a value nobody gave."""
    rc, out, err = _call(["atk-timeonly"], [*_traits_plugins(), ("atk-a", _DepthA()), ("atk-b", _DepthB())])
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "'atk-a'" in err and "'atk-b'" in err and "expected" not in err, err


# =============================================================================== (4) campaign options
def test_campaign_options_of_every_argparse_kind_reach_campaign_setup_typed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    camp_ext.SEEN.clear()
    rc, out, err = _call(["ab", "add", "--switch", "ATK46", "--controls", "none", "--dry-run", "--atk-count", "5",
                          "--atk-ratio", "2", "--atk-flag", "--atk-off", "--atk-tag", "x", "--atk-tag", "y",
                          "--atk-mode", "slow", "--atk-pair", "1", "2", "-VV", "--atk-path", "/tmp/p",
                          "--atk-level"], [("atk46c", camp_ext.CampaignKinds())])
    assert rc == 0, err
    ((hook, options),) = camp_ext.SEEN
    from zlf.ab import CampaignOptions

    assert hook == "campaign_setup" and isinstance(options, CampaignOptions)
    got = options.campaign.values["atk46c"]
    assert got == {"atk_count": 5, "atk_ratio": 2.0, "atk_flag": True, "atk_on": False, "atk_tag": ("x", "y"),
                   "atk_mode": "slow", "atk_pair": (1, 2), "atk_verbose": 2, "atk_path": Path("/tmp/p"),
                   "atk_level": 7, "atk_half": 0.5}
    assert type(got["atk_ratio"]) is float and type(got["atk_half"]) is float
    assert options.atk_count == 5 and options.get("atk_mode") == "slow"
    assert options.ops == ("add",) and options.switch == "ATK46" and isinstance(options.run, RunConfig)
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_a_wrong_campaign_option_value_is_argparses_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _call(["ab", "add", "--switch", "ATK46", "--dry-run", "--atk-mode", "medium"],
                         [("atk46c", camp_ext.CampaignKinds())])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--atk-mode" in err


def test_a_run_option_whose_default_argparse_converts_is_accepted_with_a_config_file(tmp_path, monkeypatch):
    """argparse documents ``type=float, default="0.5"`` (a string default is converted); the
    option's value from the command line is 0.5. A run from a RunConfig file that does not set
    it must take the same 0.5, not refuse the extension's own default."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "c.json"
    RunConfig(command="run", ops=("atk_never_resolved",)).write(path)
    rc, out, err = _call(["run", "--config", path], [("atk46r", camp_ext.RunKinds())])
    assert "expected float, got '0.5'" not in err, err


def test_a_run_option_of_a_non_json_type_is_no_traceback_in_a_campaign(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = _call(["ab", "add", "--switch", "ATK46", "--controls", "none", "--dry-run",
                          "--atk-run-path", tmp_path], [("atk46r", camp_ext.RunKinds())])
    assert rc == 0 or (rc == 2 and len(err.strip().splitlines()) == 1), (rc, err[-500:])


@pytest.mark.slow
def test_after_campaign_receives_the_typed_campaign_options_on_a_run_and_on_resume(tmp_path, monkeypatch):
    """A real (cpu, 2 rounds) campaign: after_campaign gets a CampaignOptions whose campaign
    options are typed as declared; resumed when complete, it gets one again (that command
    line's, as hookspecs.after_campaign says)."""
    from zlf.ab import Campaign, CampaignOptions
    from zlf import schemas

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    camp_ext.SEEN.clear()
    plugins = [("atk46c", camp_ext.CampaignKinds())]
    rc, out, err = _call(["ab", "add", "--switch", "ATK46", "--rounds", "2", "--controls", "none", "--rep-ms", "5",
                          "--backend", "cpu", "--out", tmp_path / "o", "--atk-count", "9", "--atk-tag", "a",
                          "--atk-pair", "3", "4"], plugins)
    assert rc in (0, 1), err[-800:]
    assert [h for h, _ in camp_ext.SEEN] == ["campaign_setup", "after_campaign"]
    options = camp_ext.SEEN[1][1]
    assert isinstance(options, CampaignOptions) and not hasattr(options, "_get_kwargs")  # not a Namespace
    assert (options.atk_count, options.atk_tag, options.atk_pair, options.atk_ratio) == (9, ("a",), (3, 4), 0.25)
    (camp,) = (tmp_path / "o").glob("ab_*")
    schemas.validate("campaign", json.loads((camp / "campaign.json").read_text()))
    assert Campaign.open(camp).statistics.controls == "none"
    camp_ext.SEEN.clear()
    rc, out, err = _call(["ab", "--resume", camp, "--atk-count", "11"], plugins)
    assert rc in (0, 1), err[-800:]
    assert [h for h, _ in camp_ext.SEEN] == ["after_campaign"]
    assert camp_ext.SEEN[0][1].atk_count == 11 and camp_ext.SEEN[0][1].atk_tag is None


def test_a_third_party_command_with_an_alias_and_wiring_defaults_of_its_own(capsys):
    """``add_parser(..., aliases=[...])`` and ``set_defaults(func=..., tag=...)`` besides
    handler/traits: the alias gets the same options, the extra defaults are no run setting."""
    from zlf import CommandTraits, hookimpl

    def handler(args, session):
        print(json.dumps({"timer": session.config.timing.timer, "seed": session.config.options.get("seed")}))
        return 0

    class Wired:
        @hookimpl
        def add_commands(self, subparsers):
            p = subparsers.add_parser("atk-wired", aliases=["atk-w"], help="attack46")
            p.add_argument("target", nargs="?")
            p.set_defaults(handler=handler, traits=CommandTraits(times_points=True, makes_inputs=True),
                           func=object(), tag="t")

    for argv, want in ((["atk-wired", "x", "--timer", "cupti"], "cupti"), (["atk-w", "--timer", "core"], "core")):
        rc, out, err = _call(argv, [("wired", Wired())])
        assert rc == 0, err
        assert json.loads(out)["timer"] == want


# =============================================================================== (4) campaign.json typed
def _campaign_copy(tmp_path, mutate=None) -> Path:
    where = tmp_path / "ab_x"
    where.mkdir()
    data = json.loads(OLD_CAMPAIGN.read_text())
    if mutate:
        mutate(data)
    (where / "campaign.json").write_text(json.dumps(data))
    return where


def _stat(key, value):
    return lambda d: d["statistics"].__setitem__(key, value)


def _top(key, value):
    return lambda d: d.__setitem__(key, value)


def _look(key, value):
    return lambda d: d["looks"][0].__setitem__(key, value)


WRONG = [
    pytest.param(_stat("canary_ops", 5), id="canary_ops=5"),
    pytest.param(_stat("canary_ops", "add"), id="canary_ops='add'"),
    pytest.param(_stat("controls", 5), id="controls=5"),
    pytest.param(_stat("controls", "bogus"), id="controls=bogus"),
    pytest.param(_stat("controls_note", ["x"]), id="controls_note=list"),
    pytest.param(_stat("noise", {"p": 5}), id="noise-entry=5"),
    pytest.param(_top("frozen", {"p": 5}), id="frozen-entry=5"),
    pytest.param(_stat("first_look", "2"), id="first_look='2'"),
    pytest.param(_stat("until_confident", "yes"), id="until_confident='yes'"),
    pytest.param(_stat("trim", "0.1"), id="trim='0.1'"),
    pytest.param(_stat("noise", []), id="noise=[]"),
    pytest.param(_look("rounds", "2"), id="look.rounds='2'"),
    pytest.param(_look("ops_extended", 5), id="look.ops_extended=5"),
    pytest.param(_top("looks", [5]), id="looks=[5]"),
    pytest.param(_top("idle_wait", "x"), id="idle_wait='x'"),
    pytest.param(_top("require_idle", "yes"), id="require_idle='yes'"),
    pytest.param(_top("scale", 5), id="scale=5"),
]


@pytest.mark.parametrize("mutate", WRONG)
def test_a_wrong_typed_field_of_campaign_state_is_one_line_and_exit_2(tmp_path, monkeypatch, mutate):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    where = _campaign_copy(tmp_path, mutate)
    rc, out, err = _call(["ab", "--resume", where], [])
    assert rc == 2, (rc, err[-400:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zlf: error: ") and "Traceback" not in err


def test_a_campaign_of_an_older_zlf_without_the_newer_fields_resumes_and_keeps_its_schema(tmp_path, monkeypatch):
    """campaign.json of a zlf before controls, canaries, looks and the typed views: it finishes
    (nothing left to run), and what is written back still validates against the schema with
    the statistics it was decided by."""
    from zlf import schemas

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))

    def older(d):
        for k in ("controls", "canary_ops", "controls_note", "spending", "trim", "pairing"):
            d["statistics"].pop(k)
        d["statistics"]["until_confident"] = False
        d["statistics"]["first_look"] = d["statistics"]["max_rounds"] = 3
        for k in ("looks", "metric", "process", "frozen", "context"):
            d.pop(k, None)

    from zlf.ab.campaign import _sign_state, signing_key

    key = signing_key(create=True)  # this user's key exists: what is refused is the campaign itself
    where = _campaign_copy(tmp_path, older)
    rc, out, err = _call(["ab", "--resume", where], [])
    # its screening, looks and statistics are not signed: they cannot be verified, so not taken
    assert rc == 2 and "no signed decision state" in err and len(err.strip().splitlines()) == 1, err
    # the same fields once a save of this zlf signed them: it finishes
    data = json.loads((where / "campaign.json").read_text())
    data["state_mac"] = _sign_state(key, data)
    (where / "campaign.json").write_text(json.dumps(data))
    rc, out, err = _call(["ab", "--resume", where], [])
    assert rc in (0, 1), err
    assert "Traceback" not in err
    data = json.loads((where / "campaign.json").read_text())
    schemas.validate("campaign", data)
    assert "controls" not in data["statistics"] or data["statistics"]["controls"] == "none"


def test_the_campaign_schema_describes_every_field_the_typed_views_write():
    import attrs

    from zlf import schemas
    from zlf.ab import Driving, Look, Statistics

    schema = schemas.load("campaign")
    stats_props = set(schema["properties"]["statistics"]["properties"])
    assert set(Statistics().to_json()) - stats_props == set()
    look = schema["$defs"]["look"]["properties"]
    assert set(Look(1, 0.1, 1, 1, 0).to_json()) - set(look) == set()
    assert set(attrs.fields_dict(Driving)) - set(schema["properties"]) == set()


# =============================================================================== (3) one home per option
def _declarations(flag: str) -> list:
    """Every ``add_argument("FLAG"`` / ``deprecated(p, "FLAG"`` in core and the extensions' packages."""
    pattern = re.compile(r"""(add_argument|deprecated)\(\s*(\w+\s*,\s*)?["']""" + re.escape(flag) + r"""["']""")
    found = []
    files = [*ROOT.joinpath("core").rglob("*.py"), *ROOT.joinpath("extensions").glob("*/zlf_*/**/*.py")]
    for path in files:
        text = path.read_text()
        for m in pattern.finditer(text):
            found.append(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}")
    return found


#: the flags of RunConfig's own settings (zlf.config.ARGS) that a run is timed by
RUN_SETTING_FLAGS = ("--dtype", "--backend", "--device", "--time-limit", "--check", "--gpus", "--executor",
                     "--ray-address", "--retries", "--timer", "--warmup-ms", "--rep-ms", "--flush-l2",
                     "--input-copies")


def test_time_limit_is_declared_once():
    assert len(_declarations("--time-limit")) == 1, _declarations("--time-limit")


def test_each_run_setting_flag_is_declared_in_one_place():
    twice = {flag: _declarations(flag) for flag in RUN_SETTING_FLAGS}
    assert {f: w for f, w in twice.items() if len(w) != 1} == {}


@pytest.mark.extensions("seed", "shapes", "cupti", "cudagraph", "ir_dump", "flaggems", "autotune_replay", "history")
def test_each_extension_run_option_is_declared_in_one_place():
    from zlf.testing import extension_hooks

    hooks = extension_hooks("seed", "shapes", "cupti", "cudagraph", "ir_dump", "flaggems", "autotune_replay",
                            "history")
    flags = sorted({o.flag for s in hooks.option_sets for o in s.options})
    assert flags
    assert {f: w for f in flags if len(w := _declarations(f)) != 1} == {}


def test_the_numeric_run_settings_are_checked_by_runconfig_check_alone():
    """No file outside options.py/config.py refuses a run setting's value against a bound of its
    own (an ``if`` on the setting followed by a ``raise``): RunConfig.check is the one place."""
    pattern = re.compile(r"if .*\b(time_limit(_s)?|warmup_ms|rep_ms|input_copies|retries|device)\b\s*(<=?|>=?)\s*-?\d"
                         r"|isfinite\(\s*\w*\.?(time_limit(_s)?|warmup_ms|rep_ms)")
    offenders = []
    for path in [*ROOT.joinpath("core").rglob("*.py"), *ROOT.joinpath("extensions").glob("*/zlf_*/**/*.py")]:
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines, 1):
            if (pattern.search(line) and path.name not in ("options.py", "config.py")
                    and any("raise" in later for later in lines[n:n + 2])):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


def test_a_campaign_reads_its_run_settings_from_the_command_line_once(tmp_path, monkeypatch):
    """Issue 46 (3): 'RunConfig built twice' is what it removes; the walk is CLI -> config ->
    hook -> backend with no return to the parsed command line."""
    monkeypatch.chdir(tmp_path)
    calls = []
    original = RunConfig.from_args.__func__

    def counting(cls, *args, **kwargs):
        calls.append(1)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(RunConfig, "from_args", classmethod(counting))
    rc, out, err = _call(["ab", "add", "--switch", "ATK46", "--controls", "none", "--dry-run", "--time-limit", "9"], [])
    assert rc == 0, err
    assert len(calls) == 1, len(calls)


# =============================================================================== (5) surfaces
def test_readme_and_extensions_doc_name_every_hook():
    import pluggy

    from zlf import hookspecs

    pm = pluggy.PluginManager(hookspecs.NAME)
    pm.add_hookspecs(hookspecs)
    hooks = sorted(n for n in dir(pm.hook) if not n.startswith("_"))
    readme = (ROOT / "README.md").read_text()
    assert hooks and [h for h in hooks if f"`{h}`" not in readme] == []
    assert "make_inputs" not in hooks or "make_inputs" in (ROOT / "docs" / "extensions.md").read_text()


def test_architecture_lists_every_core_module():
    arch = (ROOT / "docs" / "architecture.md").read_text()
    table = "\n".join(line for line in arch.splitlines() if line.startswith("|"))
    top = [p.name for p in ROOT.joinpath("core").glob("*.py")]
    assert [m for m in top if f"`{m}`" not in table] == []
    ab_row = next(line for line in table.splitlines() if line.startswith("| `ab/`"))
    subs = [p.stem for p in ROOT.joinpath("core", "ab").glob("*.py") if p.stem != "__init__"]
    assert [m for m in subs if f"`{m}`" not in ab_row] == []
    dirs = [p.name for p in ROOT.joinpath("core").iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    assert [d for d in dirs if f"`{d}/`" not in table] == []


def test_no_public_namespace_hands_out_a_private_name():
    import importlib

    for name in ("zlf", "zlf.ab", "zlf.testing", "zlf.config", "zlf.options"):
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", ())
        assert [n for n in exported if n.startswith("_") and not n.startswith("__")] == [], name
    import zlf.ab

    for private in ("_new_campaign", "_preflight", "_plan", "_resume"):
        with pytest.raises(AttributeError):
            getattr(zlf.ab, private)


def test_extensions_doc_teaches_traits_not_command_names():
    import attrs

    from zlf import CommandTraits

    text = (ROOT / "docs" / "extensions.md").read_text()
    fields = set(attrs.fields_dict(CommandTraits))
    named = set(re.findall(r"`(\w+)=True`", text))
    assert named and named <= fields, sorted(named - fields)
    assert "argument `command` and return early" not in text


def test_hooks_has_a_followable_method_for_every_hook():
    """A reader follows ``hooks.NAME(...)`` to a method of :class:`zlf.plugins.Hooks`, not a
    ``__getattr__`` or a call by string."""
    import pluggy

    from zlf import hookspecs
    from zlf.plugins import Hooks

    pm = pluggy.PluginManager(hookspecs.NAME)
    pm.add_hookspecs(hookspecs)
    hooks = sorted(n for n in dir(pm.hook) if not n.startswith("_"))
    assert [h for h in hooks if not callable(Hooks.__dict__.get(h))] == []
    assert "__getattr__" not in Hooks.__dict__ and "call" not in Hooks.__dict__


# =============================================================================== (1) an unrelated pytest session
SNAPSHOT_TEST = r'''
import json, os, signal, sys, threading


def _children(root):
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                pass
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in found:
                found.add(child)
                todo.append(child)
    return sorted(found)


def test_snapshot(request):
    snap = {
        "plugin": request.config.pluginmanager.has_plugin("zlf"),
        "env": {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        "pycache_prefix": sys.pycache_prefix,
        "dont_write_bytecode": sys.dont_write_bytecode,
        "sys_path": [p for p in sys.path if "project" not in p],
        "meta_path": [f"{type(f).__module__}.{getattr(f, '__name__', type(f).__qualname__)}" for f in sys.meta_path],
        "path_hooks": [getattr(h, "__qualname__", repr(type(h))) for h in sys.path_hooks],
        "threads": sorted(t.name for t in threading.enumerate()),
        "children": _children(os.getpid()),
        "signals": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD,
                                                                 signal.SIGALRM, signal.SIGUSR1)},
        "excepthook": repr(sys.excepthook),
        "umask": os.umask(0o022),
        "heavy": sorted(m for m in ("torch", "triton", "numpy", "scipy", "matplotlib", "zlf_devsession",
                                    "zlf_spawn_server", "zlf_spawn_client", "sitecustomize") if m in sys.modules),
        "cwd": os.getcwd(),
    }
    os.umask(snap["umask"])
    with open(os.environ["ATK46_SNAP"], "a") as f:
        f.write(json.dumps(snap, sort_keys=True) + "\n")
'''

GPU_TEST = r'''
import json, os, sys
import pytest


@pytest.mark.gpu
def test_my_own_gpu_marker():
    with open(os.environ["ATK46_SNAP"], "a") as f:
        f.write(json.dumps({"ran": True, "torch": "torch" in sys.modules}) + "\n")
'''


def _files(root: Path) -> set:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def _marked_processes(marker: str) -> list:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if f"ATK46_MARK={marker}".encode() in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                pass
    return found


def test_zlf_testing_holds_no_suite_machinery():
    """zlf.testing (installed as a pytest11 plugin) holds fixtures and helpers, no spawn server,
    bytecode seeding or session helper of this repository's suite."""
    import zlf.testing as t

    text = Path(t.__file__).read_text()
    for word in ("_spawn_server", "_spawn_client", "PYTHONPYCACHEPREFIX", "OMP_NUM_THREADS", "forkserver",
                 "sitecustomize", "pytest_sessionstart", "pytest_unconfigure", "os.environ["):
        assert word not in text, word


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """python3 -m venv --system-site-packages; zlf installed editable from this worktree alone."""
    where = tmp_path_factory.mktemp("atk46venv")
    base = getattr(sys, "_base_executable", sys.executable)
    plain = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "PYTHONPYCACHEPREFIX", "OMP_NUM_THREADS") and not k.startswith(("ZLF_", "PYTEST_"))}
    subprocess.run([base, "-m", "venv", "--system-site-packages", str(where / "venv")], check=True, timeout=300,
                   env=plain, capture_output=True)
    python = str(where / "venv" / "bin" / "python")
    if subprocess.run([python, "-c", "import setuptools, pytest, pluggy, attrs"], env=plain,
                      capture_output=True, timeout=120).returncode:
        pytest.skip("the base interpreter's site-packages lack setuptools, pytest, pluggy or attrs")
    proc = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                           "-e", str(ROOT)], env=plain, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return python, plain, where


def _session(python, env, project, *extra):
    return subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:benchmark", "-p", "no:hypothesispytest", *extra], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_unrelated_session_keeps_its_interpreter_state_files_and_processes(fresh_venv, tmp_path):
    """Beyond the environment: the interpreter state of the session (bytecode prefix, import
    machinery, sys.path, threads, signal handlers, umask, heavy imports), the files under its
    HOME and caches, and no process left behind that descends from it."""
    python, plain, _ = fresh_venv
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_probe.py").write_text(SNAPSHOT_TEST)
    home, cache, config = tmp_path / "home", tmp_path / "cache", tmp_path / "config"
    for d in (home, cache, config):
        d.mkdir()
    marker = uuid.uuid4().hex
    env = {**plain, "HOME": str(home), "XDG_CACHE_HOME": str(cache), "XDG_CONFIG_HOME": str(config),
           "ATK46_SNAP": str(tmp_path / "snap.jsonl"), "ATK46_MARK": marker}
    written = []
    for extra in ([], ["-p", "no:zlf"]):
        proc = _session(python, env, project, *extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert _marked_processes(marker) == []  # nothing of the session outlives it
        written.append((_files(home), _files(cache), _files(config), _files(project)))
    with_zlf, without = [json.loads(line) for line in (tmp_path / "snap.jsonl").read_text().splitlines()]
    assert (with_zlf.pop("plugin"), without.pop("plugin")) == (True, False)  # zlf.testing was loaded, then not
    assert with_zlf == without
    assert with_zlf["children"] == [] and with_zlf["pycache_prefix"] is None
    assert written[0] == written[1] and written[0][:3] == (set(), set(), set())


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_unrelated_projects_own_gpu_marker_runs_as_without_zlf(fresh_venv, tmp_path):
    python, plain, _ = fresh_venv
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_gpu.py").write_text(GPU_TEST)
    (project / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: this project's own GPU tests\n")
    env = {**plain, "ATK46_SNAP": str(tmp_path / "snap.jsonl")}
    outcomes = []
    for extra in (["-p", "no:zlf"], []):
        proc = _session(python, env, project, "-rA", *extra)
        outcomes.append((proc.returncode, "1 passed" in proc.stdout))
    assert outcomes[1] == outcomes[0] == (0, True), outcomes
    runs = [json.loads(line) for line in (tmp_path / "snap.jsonl").read_text().splitlines()]
    assert runs == [{"ran": True, "torch": False}] * 2


@pytest.mark.slow
def test_strict_markers_judge_an_unrelated_project_as_without_zlf(fresh_venv, tmp_path):
    python, plain, _ = fresh_venv
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_slow.py").write_text("import pytest\n\n@pytest.mark.slow\ndef test_x():\n    pass\n")
    codes = [_session(python, plain, project, "--strict-markers", *extra).returncode for extra in (["-p", "no:zlf"], [])]
    assert codes[0] == codes[1], codes


@pytest.mark.parametrize("field, value", [("canary_ops", "add"), ("canary_ops", [5]), ("controls", "bogus"),
                                          ("controls_note", ["x"]), ("noise", [("p", {})]), ("until_confident", "yes")])
def test_statistics_refuses_a_wrong_typed_field_instead_of_coercing_it(field, value):
    """Statistics made in code (not read through the schema) refuses what it would have coerced:
    'add' is no list of canary ops ('a', 'd', 'd')."""
    from zlf.ab import Statistics

    with pytest.raises((TypeError, ValueError)):
        Statistics(**{field: value})
