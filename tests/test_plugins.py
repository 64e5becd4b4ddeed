"""Extension discovery, selection, blocking before import, and loud failures."""
import json
import textwrap

import pytest

from zlf import hookimpl
from zlf.errors import ExtensionError, UsageError
from zlf.plugins import Hooks, Selection, build_plugin_manager
from zlf.testing import pythonpath


def make_fake_distribution(root, dist, version, ep_name, module, source):
    """A minimal installed distribution (dist-info with an entry point) on ``root``."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[zlf]\n{ep_name} = {module}\n")
    (root / f"{module}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def fake_site(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    return site


def test_broken_extension_is_named_with_the_way_out(zlf_cli, fake_site):
    make_fake_distribution(fake_site, "zlf-broken", "9.1", "broken", "zlf_fake_broken",
                           "raise ImportError('needs libfoo.so')\n")
    env = pythonpath(fake_site)
    proc = zlf_cli("run", "add", env=env)
    assert proc.returncode == 2
    line = proc.stderr.strip()
    assert len(line.splitlines()) == 1
    for needle in ("'broken'", "zlf_fake_broken", "zlf-broken 9.1", "ImportError: needs libfoo.so", "--no-ext broken"):
        assert needle in line
    # Blocked before import: the same broken module no longer matters.
    ok = zlf_cli("run", "add", "--no-ext", "broken", "--rep-ms", "2", "--no-ext", "broken", env=env)
    assert ok.returncode == 0, ok.stderr
    ok_env = zlf_cli("plugins", "--json", env={**env, "ZLF_DISABLE": "broken"}, check_rc=0)
    status = {e["name"]: e["status"] for e in json.loads(ok_env.stdout)}
    assert status["broken"] == "disabled"
    listing = zlf_cli("plugins", "--json", env=env, check_rc=0)
    entry = next(e for e in json.loads(listing.stdout) if e["name"] == "broken")
    assert entry["status"] == "broken" and "needs libfoo.so" in entry["error"]
    assert set(entry) >= {"name", "distribution", "version", "status", "hooks"}


@pytest.mark.extensions("seed", "shapes")
def test_plugins_json_lists_active_extensions_with_hooks(zlf_cli):
    proc = zlf_cli("plugins", "--json", "--ext", "seed", check_rc=0)
    entries = {e["name"]: e for e in json.loads(proc.stdout)}
    assert entries["seed"]["status"] == "active"
    assert entries["seed"]["distribution"] == "zlf-seed"
    assert "before_point" in entries["seed"]["hooks"]
    assert entries["shapes"]["status"] == "inactive"


@pytest.mark.extensions("seed")
def test_unknown_extension_lists_installed(zlf_cli):
    proc = zlf_cli.inprocess("run", "add", "--ext", "no_such_thing")
    assert proc.returncode == 2
    assert "no_such_thing" in proc.stderr and "seed" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_misspelled_hook_is_named(fake_site, zlf_cli):
    make_fake_distribution(fake_site, "zlf-typo", "0.1", "typo", "zlf_fake_typo", """
        from zlf import hookimpl

        @hookimpl
        def before_runn(run):
            pass
    """)
    proc = zlf_cli("run", "add", env=pythonpath(fake_site))
    assert proc.returncode == 2
    assert "'typo'" in proc.stderr and "before_runn" in proc.stderr and "--no-ext typo" in proc.stderr


class TimerA:
    @hookimpl
    def time_fn(self, fn, point, backend, options):
        return "A"


class TimerB:
    @hookimpl
    def time_fn(self, fn, point, backend, options):
        return "B"


def test_two_timers_are_an_error_unless_one_is_chosen():
    sel = Selection(only=("timer_a", "timer_b"))
    pm, infos = build_plugin_manager(sel, extra_plugins=[("timer_a", TimerA()), ("timer_b", TimerB())])
    hooks = Hooks(pm, infos)  # listing extensions or comparing runs needs no timer: no error yet
    with pytest.raises(ExtensionError) as err:
        hooks.check_exclusive()
    assert "timer_a" in str(err.value) and "timer_b" in str(err.value) and "--timer" in str(err.value)
    with pytest.raises(ExtensionError):
        hooks.time_fn(fn=None, point=None, backend=None, options=None)
    hooks = Hooks(pm, infos, preferred={"time_fn": "timer_b"})
    hooks.check_exclusive()
    assert hooks.time_fn(fn=None, point=None, backend=None, options=None) == "B"
    with pytest.raises(UsageError):
        Hooks(pm, infos, preferred={"time_fn": "nobody"}).check_exclusive()


@pytest.mark.extensions("seed", "shapes")
def test_disabled_wins_over_selected():
    sel = Selection.from_args(ext=["seed,shapes"], no_ext=["shapes"], environ={})
    pm, infos = build_plugin_manager(sel)
    status = {i.name: i.status for i in infos}
    assert status["seed"] == "active" and status["shapes"] == "disabled"
    assert pm.get_plugin("shapes") is None


@pytest.mark.extensions("shapes")
def test_environment_selection():
    sel = Selection.from_args(environ={"ZLF_EXTENSIONS": "shapes", "ZLF_DISABLE": ""})
    _, infos = build_plugin_manager(sel)
    assert {i.name for i in infos if i.status == "active"} == {"shapes"}


def test_fresh_plugin_manager_per_invocation():
    a, _ = build_plugin_manager(Selection())
    b, _ = build_plugin_manager(Selection())
    assert a is not b and a.get_plugin("core") is not None


def test_extension_sees_the_run_lifecycle(zlf_cli, fake_site, tmp_path):
    log = tmp_path / "events.jsonl"
    make_fake_distribution(fake_site, "zlf-observer", "0.2", "observer", "zlf_fake_observer", f"""
        import json
        from zlf import hookimpl

        def _emit(*item):
            with open({str(log)!r}, "a") as f:
                f.write(json.dumps(item) + "\\n")

        @hookimpl
        def before_run(run):
            _emit("before_run", run.backend.name)

        @hookimpl
        def after_point(run, point, record):
            _emit("point", record.point, record.status)

        @hookimpl
        def after_run(run, results):
            _emit("after_run", run.status, len(results))
    """)
    env = pythonpath(fake_site)
    zlf_cli("run", "add", "--no-ext", "observer", "--rep-ms", "2", env=env, check_rc=0)
    assert not log.exists()  # blocked: the observer stays out
    zlf_cli("run", "add", "--ext", "observer", "--rep-ms", "2", env=env, check_rc=0)
    events = [json.loads(l) for l in log.read_text().splitlines()]
    assert events[0] == ["before_run", "cpu"]
    assert [e[0] for e in events].count("point") == 2
    assert events[-1] == ["after_run", "complete", 2]
