"""Core as a host: its own commands come through ``add_commands`` like an extension's, the
environment a run records is named by extensions (``env_prefixes``), backends supersede one
another by declaration, and core's modules import one another without a circle."""
import json
from pathlib import Path

import pytest

from zlf import Backend, CommandTraits, hookimpl
from zlf.cli import main
from zlf.errors import UsageError
from zlf.plugins import DEFAULT_PLUGINS, Selection, build_plugin_manager
from zlf.session import select_backend

CORE = Path(__file__).resolve().parents[1] / "core"


class Greeter:
    """A third-party extension with a command that starts runs and a run option."""

    @hookimpl
    def add_commands(self, subparsers):
        p = subparsers.add_parser("greet", help="say hello from an extension")
        p.add_argument("--ext", action="append")
        p.set_defaults(handler=lambda args, session: print(f"hello {args.greeting}") or 0,
                       traits=CommandTraits(times_points=True))
        q = subparsers.add_parser("wave", help="a command that starts no run")
        q.add_argument("--ext", action="append")
        q.set_defaults(handler=lambda args, session: 0)

    @hookimpl
    def add_options(self, parser):
        parser.add_argument("--greeting", default="world")


def test_built_in_commands_come_from_a_default_plugin():
    pm, _ = build_plugin_manager(Selection(only=()))
    assert [impl.plugin_name for impl in pm.hook.add_commands.get_hookimpls()] == ["core.commands"]
    assert pm.get_plugin("core.commands").__name__ == DEFAULT_PLUGINS["core.commands"]


def test_command_of_a_plugin_appears_in_help_and_takes_run_options(monkeypatch, capsys):
    monkeypatch.setenv("ZLF_EXTENSIONS", "greeter")
    with pytest.raises(SystemExit) as exit_:
        main(["--help"], extra_plugins=[("greeter", Greeter())])
    assert exit_.value.code == 0
    listing = capsys.readouterr().out
    for command in ("run", "plugins", "compare", "report", "calibrate", "ab", "greet", "wave"):
        assert f"\n    {command} " in listing or f"\n    {command}\n" in listing, command
    assert listing.index("    run ") < listing.index("    greet ")  # core's commands first

    assert main(["greet", "--greeting", "zlf"], extra_plugins=[("greeter", Greeter())]) == 0
    assert capsys.readouterr().out == "hello zlf\n"
    # its traits (it times points) gave greet the run options; wave starts no run and has none
    with pytest.raises(SystemExit) as exit_:
        main(["wave", "--greeting", "zlf"], extra_plugins=[("greeter", Greeter())])
    assert exit_.value.code == 2 and "--greeting" in capsys.readouterr().err
    # and core's own run command declares it the same way
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--greeting", "x", "--rep-ms", "-1"], extra_plugins=[("greeter", Greeter())])
    assert exit_.value.code == 2 and "--rep-ms -1: expected a positive" in capsys.readouterr().err


class MyRuntime:
    @hookimpl
    def env_prefixes(self):
        return ("MYRT_",)


def _run_environment(monkeypatch, capsys, tmp_path, plugins) -> dict:
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    monkeypatch.setenv("ZLF_EXTENSIONS", ",".join(name for name, _ in plugins) or "myrt")
    rc = main(["run", "add", "--dtype", "float32", "--backend", "cpu", "--warmup-ms", "0", "--rep-ms", "1",
               "--out", str(tmp_path / "runs"), "--json"], extra_plugins=plugins)
    assert rc == 0
    run_dir = Path(json.loads(capsys.readouterr().out)["run_dir"])
    return json.loads((run_dir / "meta.json").read_text())["environment"]


def test_env_prefixes_of_an_extension_reach_the_recorded_environment(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("MYRT_FAST_PATH", "1")
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")  # core's own prefix
    monkeypatch.setenv("FLAGGEMS_DIR", "/src/gems")  # an extension's, not active here
    env = _run_environment(monkeypatch, capsys, tmp_path, [("myrt", MyRuntime())])
    assert env["MYRT_FAST_PATH"] == "1" and env["TRITON_ALWAYS_COMPILE"] == "1"
    assert "FLAGGEMS_DIR" not in env  # core names no extension's variables

    (tmp_path / "runs").rename(tmp_path / "first")
    monkeypatch.setenv("ZLF_DISABLE", "myrt")
    assert "MYRT_FAST_PATH" not in _run_environment(monkeypatch, capsys, tmp_path, [("myrt", MyRuntime())])


@pytest.mark.extensions("flaggems", "maca")
def test_the_extensions_name_their_variables():
    pytest.importorskip("zlf_flaggems")
    pytest.importorskip("zlf_backend_maca")
    from zlf.session import Session

    import argparse

    session = Session.create(argparse.Namespace(ext=["flaggems", "maca"], no_ext=None, timer=None))
    prefixes = session.hooks.env_prefixes()
    assert {"FLAGGEMS", "GEMS_", "USE_FLAGTUNE", "MACA_", "TRITON_", "CUDA_"} <= set(prefixes)
    assert len(prefixes) == len(set(prefixes))


# ----------------------------------------------------------------------------- backends
class Plain(Backend):
    name, description, priority = "plain", "a platform's own API", 10
    visible_devices_env = "PLAIN_VISIBLE_DEVICES"

    @classmethod
    def is_available(cls):
        return True


class Claimer(Backend):
    """Answers through Plain's API; its detector says whether this machine is really its own."""

    name, description, priority = "claimer", "another platform behind plain's API", 5
    supersedes = ("plain",)
    visible_devices_env = "CLAIMER_VISIBLE_DEVICES"
    detected = False

    @classmethod
    def is_available(cls):
        return cls.detected

    @classmethod
    def available_when_forced(cls):
        return True


@pytest.fixture
def known(monkeypatch):
    monkeypatch.delenv("ZLF_BACKEND", raising=False)
    monkeypatch.setattr(Claimer, "detected", False)
    return {"plain": Plain, "claimer": Claimer}


def test_supersedes_picks_the_claimer_when_its_detector_says_so(known, monkeypatch):
    assert select_backend(known) is Plain
    assert select_backend(known, "claimer") is Claimer  # forced where detection says no
    monkeypatch.setattr(Claimer, "detected", True)
    assert select_backend(known) is Claimer  # although its priority is lower
    with pytest.raises(UsageError, match="backend 'plain' stands aside.*--backend claimer"):
        select_backend(known, "plain")
    assert select_backend(known, "plain", check=False) is Plain  # a driver names it for its workers


def test_drivers_pin_workers_with_the_same_choice(known, monkeypatch):
    from zlf.executors import pin_variable

    class FakeSession:
        def backends(self):
            return known

    assert pin_variable(FakeSession(), None) == "PLAIN_VISIBLE_DEVICES"
    monkeypatch.setattr(Claimer, "detected", True)
    assert pin_variable(FakeSession(), None) == "CLAIMER_VISIBLE_DEVICES"
    monkeypatch.setenv("ZLF_BACKEND", "plain")
    assert pin_variable(FakeSession(), None) == "PLAIN_VISIBLE_DEVICES"
