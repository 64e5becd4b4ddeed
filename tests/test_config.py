"""The run's typed configuration (zlf.config): JSON round trip, frozen values, one reader of the
command line, ``zlf run --config``, child processes started from a config file, and the run
engine's public point lifecycle."""
import argparse
import json

import attrs
import pytest

from zlf import hookimpl
from zlf.cli import build_parser, main
from zlf.config import (ARGS, NOT_SETTINGS, ConfigError, ExtensionOptions, Option, OptionSet, RunConfig,
                        TimingBudget, as_budget)
from zlf.errors import UsageError
from zlf.records import Point, PointRecord
from zlf.session import Session


def _config(**kw):
    base = dict(ops=["add", "softmax"], dtypes=["float32"], backend="cpu", device=1, out="o", name="n",
                time_limit_s=30.0, ext=["seed"], timing=TimingBudget(warmup_ms=0.0, rep_ms=2.5, flush_l2=False),
                options=ExtensionOptions({"seed": {"seed": 7}, "x": {"tags": ["a", "b"]}}))
    base.update(kw)
    return RunConfig(**base)


def _run_parser(ext=None):
    session = Session.create(argparse.Namespace(ext=ext))  # default: every installed extension
    parser = build_parser(session.hooks)
    return parser, parser._subparsers._group_actions[0].choices["run"], session.hooks


# ----------------------------------------------------------------------------- the value
def test_a_config_survives_json_and_a_file(tmp_path):
    config = _config()
    assert RunConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
    path = config.write(tmp_path / "run.json")
    again = RunConfig.read(path)
    assert again == config
    assert again.options.tags == ("a", "b") and again.timing.rep_ms == 2.5
    assert again.timing.extensions is again.options  # the budget carries the extension options


def test_a_config_and_its_budget_are_frozen():
    config = _config()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.backend = "cuda"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.timing.rep_ms = 1.0
    changed = config.with_changes(backend="cuda", rep_ms=9.0)
    assert (changed.backend, changed.timing.rep_ms, changed.timing.warmup_ms) == ("cuda", 9.0, 0.0)
    assert (config.backend, config.timing.rep_ms) == ("cpu", 2.5)


@pytest.mark.parametrize("data, needle", [
    ({"ops": ["add"], "rep_ms": 3}, "unknown key 'rep_ms'"),
    ({"timing": {"rep": 3}}, "timing: unknown key 'rep'"),
    ({"options": ["seed"]}, "options: expected"),
    ({"format": 2}, "format 2 is not 1"),
])
def test_an_unknown_key_is_a_clear_error(data, needle):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json(data, source="config x.json")
    assert needle in str(info.value) and "config x.json" in str(info.value)


def test_extension_options_are_typed_by_their_declaration():
    sets = (OptionSet("seed", (Option("seed", "--seed", "int", 0),)),)
    assert RunConfig().bound(sets).options.seed == 0  # missing: the declared default
    with pytest.raises(ConfigError, match="--seed of extension 'seed': expected int"):
        RunConfig(options=ExtensionOptions({"seed": {"seed": "7"}})).bound(sets)
    with pytest.raises(ConfigError, match="'cudagraph_probe' of extension 'cudagraph' is not declared"):
        RunConfig(options=ExtensionOptions({"cudagraph": {"cudagraph_probe": "inline"}})).bound(sets)


def test_the_budget_reads_as_the_namespace_did():
    budget = _config().timing
    assert budget.option("seed") == 7 and budget.seed == 7  # old getattr(options, ...) readers
    assert getattr(budget, "cudagraph_replay_ms", None) is None
    assert as_budget(argparse.Namespace(rep_ms=4.0, flush_l2=True)).budgets(_Backend()) == (25.0, 4.0)
    assert as_budget(None).flush(_Backend()) is True


class _Backend:
    warmup_ms, rep_ms, flush_l2_default = 25.0, 100.0, True


# ----------------------------------------------------------------------------- the command line
def test_from_args_maps_every_option_of_zlf_run():
    """A new run option without a config field (or an extension's declaration) fails here."""
    parser, run, hooks = _run_parser()
    declared = {o.dest for s in hooks.option_sets for o in s.options}
    dests = {a.dest for a in run._actions if a.dest != "help"}
    assert dests - set(ARGS) - declared - NOT_SETTINGS == set()
    # and every value comes back: command line -> RunConfig -> JSON -> the namespace it stands for
    argv = ["run", "add", "softmax", "--dtype", "float16,bfloat16", "--out", "o", "--name", "n", "--backend", "cpu",
            "--device", "1", "--timer", "core", "--warmup-ms", "3", "--rep-ms", "4", "--no-flush-l2",
            "--time-limit", "5", "--json", "--gpus", "0,1", "--executor", "local", "--ray-address", "a",
            "--retries", "2", "--ext", "seed", "--no-ext", "shapes"]
    args = parser.parse_args(argv)
    config = RunConfig.from_json(RunConfig.from_args(args, hooks.option_sets).to_json()).bound(hooks.option_sets)
    ns = config.namespace()
    for dest in dests - NOT_SETTINGS:
        expected = getattr(args, dest)
        if dest == "dtype":
            expected = ["float16", "bfloat16"]
        assert getattr(ns, dest) == expected, dest
    assert config.timing == TimingBudget(timer="core", warmup_ms=3.0, rep_ms=4.0, flush_l2=False)


def _records(zlf_cli, *argv):
    out = json.loads(zlf_cli("run", *argv, check_rc=0).stdout)
    return [(r["point"], r["status"], r["timer"]) for r in out["records"]], out["run_dir"]


@pytest.mark.extensions("seed")
def test_zlf_run_config_runs_the_points_the_flags_run(zlf_cli, tmp_path):
    flags = ["add", "softmax", "--backend", "cpu", "--dtype", "float32", "--warmup-ms", "0", "--rep-ms", "1",
             "--ext", "seed", "--seed", "3", "--json", "--out", "a"]
    by_flags, dir_a = _records(zlf_cli, *flags)
    parser, _, hooks = _run_parser(ext=["seed"])  # the same extensions as the flags select
    config = RunConfig.from_args(parser.parse_args(["run", *flags]), hooks.option_sets)
    path = config.with_changes(out="b").write(tmp_path / "run.json")
    by_file, dir_b = _records(zlf_cli, "--config", path)
    assert by_file == by_flags and len(by_file) >= 2
    assert dir_b.startswith("b/")
    meta_a, meta_b = (json.loads((tmp_path / d / "meta.json").read_text()) for d in (dir_a, dir_b))
    assert meta_b["seed"] == meta_a["seed"] == {"base": 3, "per_point": "sha256(base:point_id)[:4]"}
    assert [e["name"] for e in meta_b["extensions"]] == ["seed"]
    assert meta_b["options"]["rep_ms"] == 1.0
    # OPs, --out, --name and --json may override the file's: what runs, where it goes and how it prints
    by_op, dir_c = _records(zlf_cli, "--config", path, "--out", "c", "--name", "mine", "softmax")
    assert dir_c.startswith("c/") and "mine" in dir_c
    assert by_op == [r for r in by_flags if r[0].startswith("softmax/")] and by_op


def test_zlf_run_config_refuses_run_options_beside_it(tmp_path, capsys):
    path = RunConfig(ops=["add"], backend="cpu").write(tmp_path / "run.json")
    assert main(["run", "--config", str(path), "--rep-ms", "5"]) == 2
    assert "also given on the command line: --rep-ms" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"ops": ["add"], "repms": 1}))
    assert main(["run", "--config", str(bad)]) == 2
    assert "unknown key 'repms'" in capsys.readouterr().err


# ----------------------------------------------------------------------------- children and the lifecycle
def test_a_probe_child_rebuilds_its_point_from_a_config_file(tmp_path, monkeypatch, capsys):
    pytest.importorskip("zlf_timing_cudagraph")
    import io

    from zlf_timing_cudagraph import probe

    path = RunConfig(ops=["add"], backend="cpu", ext=["cudagraph"]).write(tmp_path / "run.json")
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"op": "add", "shape": [64], "dtype": "float32"})))
    assert probe.main([str(path)]) == 0
    answer = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert answer["ok"] is False and answer["reason"] == "unsupported" and "host clock" in answer["detail"]
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"op": "nope", "shape": [64], "dtype": "float32"})))
    probe.main([str(path)])
    assert "op 'nope' not found from ['add']" in capsys.readouterr().out


class Recorder:
    def __init__(self):
        self.calls = []

    @hookimpl
    def before_run(self, run):
        self.calls.append("before_run")
        run.meta["recorder"] = run.config.options.get("seed", "none")

    @hookimpl
    def before_point(self, run, point):
        self.calls.append(f"before_point {point.id}")
        run.mark(f"MARK {point.id}")

    @hookimpl
    def time_fn(self, fn, point, backend, options):
        self.calls.append(f"time_fn rep_ms={options.rep_ms}")  # attribute access, as on the namespace
        return None

    @hookimpl
    def after_point(self, run, point, record):
        self.calls.append("after_point")
        run.annotate("seen", True)

    @hookimpl
    def after_run(self, run, results):
        self.calls.append(f"after_run {run.status} {len(results)}")


def test_the_public_point_lifecycle(tmp_path):
    from zlf.run import Run
    from zlf.rundir import RunDir

    recorder = Recorder()
    config = RunConfig(backend="cpu", ext=["recorder"], timing=TimingBudget(warmup_ms=0.0, rep_ms=1.0))
    session = Session.open(config, extra_plugins=[("recorder", recorder)])
    backend = session.choose_backend(config.backend, config.device)
    run = Run.open(session, RunDir.create(tmp_path, "life"))
    run.begin()
    point = Point("sum", (8,), "float32")
    run.begin_point(point)
    timing = run.time_point(lambda: sum(range(10)), point)
    assert timing.timer == backend.timer_name
    record = PointRecord(point=point.id, op=point.op, shape=point.shape, dtype=point.dtype, status="ok",
                         markers=run.markers, extra=run.extra, median_ms=timing.value_ms)
    record = run.end_point(point, record)
    assert record.markers == ("MARK sum/8/float32",) and record.extra == {"seen": True}
    assert run.current_point is None
    run.records.append(record)
    run.close("complete")
    assert recorder.calls == ["before_run", "before_point sum/8/float32", "time_fn rep_ms=1.0", "after_point",
                              "after_run complete 1"]
    meta = json.loads((run.dir / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["counts"]["ok"] == 1 and meta["recorder"] == "none"


def test_session_open_selects_and_configures_from_the_config():
    seen = []

    class Configured:
        @hookimpl
        def configure(self, session):
            seen.append((session.config.backend, session.options.backend, session.options.command))

    session = Session.open(RunConfig(backend="cpu", ext=["c"]), extra_plugins=[("c", Configured())])
    assert seen == [("cpu", "cpu", "run")]
    assert [i.name for i in session.hooks.infos if i.status == "active"] == []  # only "c", registered directly
    with pytest.raises(UsageError, match="unknown extension 'nope'"):
        Session.open(RunConfig(ext=["nope"]))


def test_an_option_of_the_extensions_own_type_holds_json_values():
    """A run's configuration is a JSON file: a path-valued run option holds its string (as a file
    read back gives it), a value that is no JSON is refused in one line naming flag and owner;
    a campaign option keeps what its type= returned."""
    from pathlib import Path

    parser = argparse.ArgumentParser()
    path = Option.from_action(parser.add_argument("--where", type=Path))
    assert path.check(Path("/tmp/x"), "ext", as_json=True) == "/tmp/x"
    paths = Option.from_action(parser.add_argument("--wheres", type=Path, action="append"), "append")
    assert paths.check([Path("a"), Path("b")], "ext", as_json=True) == ("a", "b")
    assert path.check(Path("/tmp/x"), "ext") == Path("/tmp/x")
    odd = Option.from_action(parser.add_argument("--odd", type=lambda s: object()))
    with pytest.raises(ConfigError, match=r"--odd of extension 'ext'.*no JSON value"):
        odd.check(object(), "ext", as_json=True)
