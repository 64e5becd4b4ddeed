"""``zlf.testing``: fixtures for tests of zlf and its extensions, for extension authors too.

Installed with zlf (entry point ``pytest11``: ``zlf``), so any test suite that has zlf installed
gets these fixtures without a conftest (``-p no:zlf`` turns it off). Like pytest's ``pytester``,
it only offers them: a session that asks for none runs as it would without zlf (no environment
variable set, no process started, no file written). What makes zlf's own suite fast is the
repository's, not this plugin's (tests/_devtools, docs/testing.md).

- ``zlf_cli``: run ``python -m zlf ARGS`` as a fresh process (``zlf_cli.inprocess(...)`` calls
  ``zlf.cli.main`` in this one); returns a ``subprocess.CompletedProcess``.
- ``zlf_run_dir``: a run directory written the way ``zlf run`` writes one, from point times.
- ``zlf_op_file``: a Python file defining a small CPU op (``FILE::name`` runs it).
- ``zlf_fake_op``: a :class:`zlf.Op` made of torch calls, for engine-level tests.
- ``zlf_fake_backend``: a plugin declaring :class:`FakeBackend` (host clock, no device);
  :class:`FakeClock` gives a fake backend a clock of the test's own.
- ``zlf_core_only``: no installed extension is active for this test (``ZLF_DISABLE`` names them all).
- ``zlf_campaign``: factory of a ``zlf ab`` campaign directory (:func:`campaign_data`, no run
  started), for tests of what an extension adds to campaigns; with :class:`FakeHooks`,
  :func:`extension_hooks` and :class:`ExtensionInfo` for the hooks it asks.

The plugin declares no marker and skips no test: a project that marks its GPU tests calls
:func:`skip_without_gpu` from its own ``conftest.py``. docs/extensions.md, "Testing your
extension", shows them in use.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from . import hookimpl
from .procs import python_child_env

# ----------------------------------------------------------------------------- plain helpers


def installed_extensions() -> list:
    """Names of the installed extensions (entry points of group ``zlf``), sorted."""
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group="zlf")})


def core_only_env() -> dict:
    """Environment entries under which no installed extension is active, only core."""
    return {"ZLF_DISABLE": ",".join(installed_extensions()), "ZLF_EXTENSIONS": ""}


def pythonpath(*folders, env=None) -> dict:
    """``{"PYTHONPATH": ...}`` with ``folders`` first, then the ``PYTHONPATH`` of ``env`` (this
    process's environment by default): for a child that should import from ``folders`` (an
    extension installed into a folder, fake modules) and still import what this process's
    children import (a path of ``folders`` alone would drop the rest)."""
    rest = (os.environ if env is None else env).get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([*map(str, folders), *filter(None, [rest])])}


def clean_env(extra: Optional[dict] = None) -> dict:
    """This process's environment for a zlf child: no colour forcing, no progress bar."""
    env = {k: v for k, v in python_child_env(os.environ).items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    env["ZLF_NO_PROGRESS"] = "1"
    env.update(extra or {})
    return env


def run_zlf(*args, cwd, env: Optional[dict] = None, timeout: float = 600, check_rc: Optional[int] = None):
    """``python -m zlf ARGS`` in ``cwd`` as a fresh process (usable where fixtures are not,
    e.g. in module-scoped fixtures); returns the ``CompletedProcess``. With ``check_rc`` a
    different exit code fails the test with both output streams."""
    proc = subprocess.run([sys.executable, "-m", "zlf", *map(str, args)], cwd=cwd, env=clean_env(env),
                          capture_output=True, text=True, timeout=timeout)
    if check_rc is not None:
        assert proc.returncode == check_rc, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def run_dir_from(stdout: str, cwd=None) -> Path:
    """The path on the last ``run dir: <path>`` line of a command's output (joined to ``cwd``)."""
    lines = [line for line in stdout.splitlines() if line.startswith("run dir: ")]
    assert lines, f"no 'run dir:' line in:\n{stdout}"
    path = Path(lines[-1][len("run dir: "):])
    return path if path.is_absolute() or cwd is None else Path(cwd) / path


def read_records(run_dir) -> list:
    """The lines of ``run_dir/results.jsonl`` as dicts."""
    text = (Path(run_dir) / "results.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def skip_without_gpu(items, marker: str = "gpu") -> None:
    """Skip the ``items`` marked ``marker`` when no CUDA device is visible: for a project's own
    ``pytest_collection_modifyitems`` (the project registers the marker). torch is imported only
    when an item carries the marker."""
    marked = [item for item in items if item.get_closest_marker(marker) is not None]
    if not marked or gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in marked:
        item.add_marker(skip)


class CLI:
    """The ``zlf_cli`` fixture's value: call it for a subprocess, ``.inprocess`` for this one."""

    def __init__(self, cwd: Path):
        self.cwd = Path(cwd)

    def __call__(self, *args, env=None, cwd=None, timeout=600, check_rc=None):
        return run_zlf(*args, cwd=cwd or self.cwd, env=env, timeout=timeout, check_rc=check_rc)

    def inprocess(self, *args, check_rc=None):
        """``zlf.cli.main(ARGS)`` here, in ``cwd``, its output captured; a ``SystemExit``
        (argparse's ``--help`` or usage errors) becomes the exit code. The command gives back
        ``os.environ`` and its signal handlers when it ends (:func:`zlf.cli.main`)."""
        from . import cli

        out, err = io.StringIO(), io.StringIO()
        old = os.getcwd()
        os.chdir(self.cwd)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    rc = cli.main([str(a) for a in args])
                except SystemExit as exc:
                    rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        finally:
            os.chdir(old)
        proc = subprocess.CompletedProcess(["zlf", *map(str, args)], rc or 0, out.getvalue(), err.getvalue())
        if check_rc is not None:
            assert proc.returncode == check_rc, f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        return proc


# ----------------------------------------------------------------------------- fakes

OP_FILE = '''\
import torch
import zlf


def _make(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))


def _{name}(x, out):
    torch.neg(x, out=out)


{name} = zlf.Op(name="{name}", fn=_{name}, make_inputs=_make, shapes={shapes!r},
{pad}reference=lambda x, out: -x, outputs=(1,))
'''


def write_op_file(path, name: str = "neg", shapes=((256,),)) -> Path:
    """Write a Python file defining op ``name`` (``out = -x`` through torch, any device);
    run it as ``PATH::name`` or ``name:PATH`` in ``zlf ab``."""
    path = Path(path)
    pad = " " * (len(name) + 12)
    path.write_text(OP_FILE.format(name=name, shapes=[tuple(s) for s in shapes], pad=pad))
    return path


def fake_op(name: str = "neg", shapes=((256,),), fn=None, reference=None, **kw):
    """A :class:`zlf.Op` over torch (``out = -x`` unless ``fn`` / ``reference`` say otherwise)."""
    import torch

    from .ops import Op

    def make(shape, dtype, device):
        x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
        return (x, torch.empty_like(x))

    def neg(x, out):
        torch.neg(x, out=out)

    return Op(name=name, fn=fn or neg, make_inputs=kw.pop("make_inputs", make), shapes=[tuple(s) for s in shapes],
              reference=reference or (lambda x, out: -x), outputs=kw.pop("outputs", (1,)), **kw)


def write_run_dir(parent, points: dict, name: str = "run", timer: str = "host_wall", status: str = "ok",
                  meta: Optional[dict] = None, samples: int = 5) -> Path:
    """A run directory under ``parent`` as ``zlf run`` writes one: ``points`` maps point ids
    (``op/<shape>/<dtype>``) to median times in ms (None: no time); every record gets
    ``status`` and ``samples`` equal samples; meta.json holds a complete run's keys, updated
    with ``meta``."""
    from . import __version__
    from .records import STATUS_OK, PointRecord
    from .rundir import RunDir

    rd = RunDir.create(parent, name)
    ops = sorted({p.split("/")[0] for p in points})
    for point, ms in points.items():
        op, shape, dtype, *variant = point.split("/")
        dims = () if shape == "scalar" else tuple(int(d) for d in shape.split("x"))
        ok = status == STATUS_OK and ms is not None
        rd.append(PointRecord(point=point, op=op, shape=dims, dtype=dtype, status=status if ms is not None else "FAILED",
                              variant=variant[0] if variant else "", timer=timer if ok else None,
                              median_ms=ms if ok else None, samples=[ms] * samples if ok else (),
                              error=None if ok else "failed in a test"))
    counts: dict = {}
    for ms in points.values():
        key = status if ms is not None else "FAILED"
        counts[key] = counts.get(key, 0) + 1
    doc = {"zlf_version": __version__, "command": ["zlf", "run", *ops], "cwd": str(parent),
           "started": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:00:01+00:00", "status": "complete",
           "backend": "cpu", "timer_default": timer, "host_timing": True, "device_name": "test device",
           "extensions": [], "ops": ops, "points": len(points), "counts": counts, "environment": {},
           "options": {"command": "run"}, "warnings": []}
    doc.update(meta or {})
    rd.write_meta(doc)
    return rd.path


class FakeClock:
    """A host clock for tests of timing: it reads :attr:`now` (seconds), which only
    :meth:`advance` moves. Give it to a backend (``fake_backend_class(clock=clock)``) and let the
    timed function advance it (:meth:`taking`): every sample is then what the test says, however
    loaded the machine is."""

    def __init__(self, start: float = 1000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms / 1e3

    def taking(self, ms: float):
        """A function without arguments that takes ``ms`` of this clock per call; its ``calls``
        attribute counts the calls."""

        def fn():
            fn.calls += 1
            self.advance(ms)

        fn.calls = 0
        return fn


def fake_backend_class(name: str = "fake", clock=None):
    """A :class:`zlf.backends.Backend` subclass named ``name``: always available, runs torch
    on the CPU and times with the host clock, or with ``clock`` (a :class:`FakeClock`); a
    stand-in device for hook, engine and timing tests."""
    from .backends.base import Backend, HostEvent

    class FakeBackend(Backend):
        description = "a device for tests: torch on the host CPU, host clock"
        priority = -1  # never detected ahead of a real backend
        timer_name = "host_wall"
        host_timing = True
        ir_kinds = ()
        warmup_ms = 1.0
        rep_ms = 5.0
        flush_l2_default = False

        @classmethod
        def is_available(cls) -> bool:
            return True

        @property
        def device(self) -> str:
            return "cpu"

        def device_name(self) -> str:
            return f"{self.name} (test device)"

        if clock is not None:
            def event(self):
                return HostEvent(self.synchronize, clock)

    FakeBackend.name = name
    FakeBackend.__name__ = FakeBackend.__qualname__ = f"FakeBackend_{name}"
    return FakeBackend


FakeBackend = fake_backend_class()


class FakeBackendPlugin:
    """A plugin whose ``register_backends`` declares ``backends``; register it with
    ``build_plugin_manager(selection, extra_plugins=[("fakebackend", plugin)])``."""

    def __init__(self, *backends):
        self.backends = list(backends) or [FakeBackend]

    @hookimpl
    def register_backends(self):
        return list(self.backends)


class HeldDispatch:
    """An op environment like FlagGems' aten dispatch, for tests of ``Op.outside``: entered by
    the op's first call and held across calls; while held, aten's ``linalg_vector_norm`` on CPU
    refuses float64 (as FlagGems' kernel does), so zlf work done inside it fails loudly."""

    def __init__(self):
        self.lib = None
        self.entries = 0   # how often the op's call had to enter it

    def enter(self) -> None:
        import torch

        if self.lib is None:
            import warnings

            self.lib = torch.library.Library("aten", "IMPL")
            with warnings.catch_warnings():  # torch's "Overriding a previously registered kernel" (meant)
                warnings.filterwarnings("ignore", "Warning only once for all operators", UserWarning)
                self.lib.impl("linalg_vector_norm", _refusing_vector_norm, "CPU")
            self.entries += 1

    def exit(self) -> None:
        if self.lib is not None:
            self.lib._destroy()
            self.lib = None

    def outside(self):
        import contextlib

        self.exit()  # the op's next call enters again
        return contextlib.nullcontext()


def _refusing_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if x.dtype.is_floating_point and x.element_size() == 8:
        raise NotImplementedError("vector_norm not implemented for torch.float64")
    raise NotImplementedError("held dispatch: vector_norm called")


# ----------------------------------------------------------------------------- campaigns (zlf ab)
def campaign_data(tmp_path, ops=("add",), rounds_first=2, until=False, max_rounds=2, aa=False, **stat) -> dict:
    """campaign.json's fields of a small campaign (before its runs): sides A (``X=0``) and B
    (``X=1``), ``ops`` by name, ``rounds_first`` rounds (``until``: adaptive up to ``max_rounds``);
    ``stat``: more ``statistics`` fields. ``zlf.ab.Campaign.create(parent, label, data, hooks)``
    makes the directory."""
    from .ab import OpSpec, Side

    statistics = {"alpha": 0.05, "margin_pct": 2.0, "min_effect_pct": 1.0, "noise_from": None, "floors": {},
                  "until_confident": until, "first_look": rounds_first, "max_rounds": max_rounds}
    statistics.update(stat)
    return {"label": "t", "cwd": str(tmp_path), "aa": aa, "switch": None,
            "sides": [Side("A", {"X": "0"}).to_json(), Side("B", {"X": "1"}).to_json()],
            "ops": [OpSpec(o, o).to_json() for o in ops], "run_args": [], "extension_args": [],
            "replay": False, "backend": None, "device": 0, "require_idle": False, "idle_wait": 0,
            "fail_on_slower": True, "statistics": statistics, "guards": {"switch_source": []},
            "triton_cache": str(tmp_path / "cache")}


class ExtensionInfo:
    """An extension as ``hooks.infos`` lists it: its name and status (``active``, ``inactive``, ``disabled``)."""

    def __init__(self, name: str, status: str = "active"):
        self.name, self.status = name, status


class FakeHooks:
    """What ``zlf ab`` asks of the hooks facade, without a plugin manager: which extensions are
    on (``infos``: :class:`ExtensionInfo` or names), the run options ``declare(parser)`` adds (as
    the ``add_options`` of extension ``owner`` would), and campaign hooks that add nothing."""

    def __init__(self, infos=(), declare=None, owner: str = "fake"):
        import argparse

        self.infos = [i if hasattr(i, "status") else ExtensionInfo(i) for i in infos]
        self.declare, self.owner = declare, owner
        self.option_sets: tuple = ()
        self.add_options(argparse.ArgumentParser())

    def add_options(self, parser, command: str = "run") -> list:
        from .config import Declaring, merged_option_sets, option_sets_of

        if self.declare is None:
            return []
        view = Declaring(parser)
        self.declare(view)
        self.option_sets = merged_option_sets(self.option_sets, option_sets_of([(self.owner, view.added)]))
        return [action for action, _ in view.added]

    def campaign_setup(self, plan, options, session):
        pass

    def campaign_context(self, data):
        return []

    def campaign_run_needs(self, campaign, op, round, side):
        return []


def extension_hooks(*names):
    """The hooks (:class:`zlf.plugins.Hooks`) of these installed extensions only, their run
    options declared as a command line declares them; skips the test when one is not installed."""
    import argparse

    from .plugins import Hooks, Selection, build_plugin_manager

    missing = [n for n in names if n not in installed_extensions()]
    if missing:
        pytest.skip(f"extension(s) not installed: {', '.join(missing)}")
    pm, infos = build_plugin_manager(Selection(only=tuple(names)))
    hooks = Hooks(pm, infos)
    hooks.add_options(argparse.ArgumentParser(), "run")
    return hooks


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture
def zlf_cli(tmp_path) -> CLI:
    """Run zlf with ARGS in ``tmp_path``: ``zlf_cli("run", "add", check_rc=0)`` as a fresh
    process, ``zlf_cli.inprocess(...)`` in this one; both return a ``CompletedProcess``
    (``returncode``, ``stdout``, ``stderr``)."""
    return CLI(tmp_path)


@pytest.fixture
def zlf_run_dir(tmp_path):
    """Factory: ``zlf_run_dir({"add/1024/float32": 1.0}, name="a", timer=..., meta={...})``
    writes a run directory under ``tmp_path/runs`` and returns its path (see :func:`write_run_dir`)."""

    def make(points: dict, name: str = "run", **kw) -> Path:
        return write_run_dir(tmp_path / "runs", points, name=name, **kw)

    return make


@pytest.fixture
def zlf_op_file(tmp_path):
    """Factory: ``zlf_op_file("neg", shapes=[(256,)])`` writes ``tmp_path/<name>_ops.py`` with
    that op and returns the path (see :func:`write_op_file`)."""

    def make(name: str = "neg", shapes=((256,),), path=None) -> Path:
        return write_op_file(path or tmp_path / f"{name}_ops.py", name, shapes)

    return make


@pytest.fixture
def zlf_fake_op():
    """Factory for :func:`fake_op`: a torch ``zlf.Op`` for engine-level tests."""
    return fake_op


@pytest.fixture
def zlf_fake_backend():
    """A :class:`FakeBackendPlugin` declaring :data:`FakeBackend` (``--backend fake``)."""
    return FakeBackendPlugin()


@pytest.fixture
def zlf_campaign(tmp_path):
    """Factory: ``zlf_campaign(ops=("add",), hooks=None, rounds=0, **data)`` creates a campaign
    directory under ``tmp_path/campaigns`` from :func:`campaign_data` (``data`` replaces fields),
    adds ``rounds`` rounds, and returns the :class:`zlf.ab.Campaign` (no run is started)."""
    from .ab import Campaign

    def make(ops=("add",), hooks=None, rounds: int = 0, configs=None, **data):
        c = Campaign.create(tmp_path / "campaigns", "t", {**campaign_data(tmp_path, ops=ops), **data}, hooks, configs)
        for k in range(1, rounds + 1):
            c.add_round(k)
        return c

    return make


@pytest.fixture
def zlf_core_only(monkeypatch):
    """Only core is active in this test and the zlf processes it starts."""
    for key, value in core_only_env().items():
        monkeypatch.setenv(key, value)
