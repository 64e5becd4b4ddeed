"""Import a FlagGems benchmark harness and collect the Benchmark objects its tests build.

FlagGems' benchmarks are pytest functions that build a ``Benchmark`` and call ``run()``. zlf
does not let ``run()`` time anything: each selected test function is called once with its
parametrize values while ``Benchmark.run`` only hands the object back. zlf then drives the
object's own pieces (shapes, ``get_input_iter``, ``unpack_to_args_kwargs``, the torch and
FlagGems callables) point by point.

FlagGems' ``Config`` is what pytest's ``--mode/--level/--dtypes/--shape_file`` fill; here zlf
fills it before the harness module is imported (the later layout binds ``Config`` at import).
"""
from __future__ import annotations

import importlib
import inspect
import itertools
import os
import sys
from pathlib import Path
from typing import Optional

import attrs

from zlf import UsageError

from .checkout import Checkout
from .phases import phase

#: pytest's own marks: never an op name.
BUILTIN_MARKS = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings",
                 "timeout", "tryfirst", "trylast"}
PACKAGE = "benchmark"


@attrs.frozen
class Settings:
    level: str = "core"            # FlagGems --level
    mode: str = "kernel"           # FlagGems --mode
    dtypes: tuple = ()             # FlagGems --dtypes (names); empty: each op's own


@attrs.define
class Harness:
    checkout: Checkout
    config: object                 # FlagGems' Config object
    harness: object                # performance_utils / base module
    consts: object                 # attri_util / consts module
    flag_gems: object

    @property
    def benchmark_class(self):
        return self.harness.Benchmark

    def bench_level(self) -> str:
        return self.config.bench_level.value


@attrs.define
class Case:
    """One pytest item: a test function and one parametrize combination."""

    module: object
    function: object
    kwargs: dict
    marks: list
    ident: str
    fixup: str = ""                # why zlf built this test's Benchmark itself (:data:`FIXUPS`)
    cleanup: list = attrs.Factory(list)  # undoes the pytest fixtures given to it, after the run

    def finish(self) -> None:
        """Undo the fixtures the test was given (``monkeypatch``'s environment, ``tmp_path``)."""
        while self.cleanup:
            self.cleanup.pop()()

    @property
    def mark_names(self) -> list:
        return [m.name for m in self.marks if m.name not in BUILTIN_MARKS]

    def skip_reason(self) -> Optional[str]:
        for m in self.marks:
            if m.name == "skip":
                return m.kwargs.get("reason") or (m.args[0] if m.args else "skip")
            if m.name == "skipif" and m.args and all(bool(a) for a in m.args if not isinstance(a, str)):
                return m.kwargs.get("reason", "skipif")
        return None

    @property
    def node_id(self) -> str:
        base = f"{os.path.basename(self.module.__file__)}::{self.function.__name__}"
        return f"{base}[{self.ident}]" if self.ident else base


def _purge_foreign(root: Path) -> None:
    """Another checkout's ``benchmark`` package imported earlier would shadow this one."""
    mod = sys.modules.get(PACKAGE)
    if mod is None:
        return
    paths = [Path(p).resolve() for p in getattr(mod, "__path__", [])]
    if (root / PACKAGE).resolve() in paths:
        return
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line (flag_gems' device error spans three)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _flag_gems_hint() -> str:
    if os.environ.get("TRITON_INTERPRET") == "1":
        # Verified with 5.0.2 and 2026 HEAD: libentry walks ``fn.fn`` until it meets a JITFunction,
        # and the interpreter's kernels are InterpretedFunctions.
        return (" (zlf's cpu backend runs Triton's interpreter, which flag_gems cannot use: it needs a "
                "GPU to import, and its libentry needs compiled JITFunction kernels; run on a GPU)")
    return ""


def _import_flag_gems(checkout: Checkout):
    """The installed flag_gems, else the checkout's ``src/flag_gems``."""
    src = checkout.root / "src"
    where = "installed"
    try:
        return importlib.import_module("flag_gems")
    except ModuleNotFoundError as exc:
        if exc.name != "flag_gems":
            raise UsageError(f"importing flag_gems ({where}) failed: {one_line(exc)}") from exc
    except Exception as exc:
        raise UsageError(f"importing flag_gems ({where}) failed: {one_line(exc)}{_flag_gems_hint()}") from exc
    if not (src / "flag_gems" / "__init__.py").is_file():
        raise UsageError(f"flag_gems is not installed and {src / 'flag_gems'} does not exist: "
                         "install flag-gems (pip install --no-deps flag-gems==<version>) or use a full checkout")
    sys.path.insert(0, str(src))
    try:
        return importlib.import_module("flag_gems")
    except Exception as exc:
        missing = " (flag_gems' runtime deps: packaging, PyYAML, sqlalchemy)" if isinstance(exc, ModuleNotFoundError) else ""
        raise UsageError(f"importing flag_gems from {src / 'flag_gems'} failed: {one_line(exc)}{missing}"
                         f"{_flag_gems_hint()}") from exc


def load(checkout: Checkout, settings: Settings) -> Harness:
    """Import flag_gems and the harness with FlagGems' Config filled from ``settings``."""
    root = str(checkout.root)
    if root not in sys.path:
        sys.path.insert(0, root)
    _purge_foreign(checkout.root)
    phase("import", "importing flag_gems")
    flag_gems = _import_flag_gems(checkout)
    phase("import", "importing the benchmark harness")
    try:
        consts = importlib.import_module(f"{PACKAGE}.{checkout.consts_module}")
        conftest = importlib.import_module(f"{PACKAGE}.conftest")
    except Exception as exc:
        raise UsageError(f"importing the FlagGems harness from {checkout.describe()} failed: "
                         f"{one_line(exc)}") from exc
    config = getattr(conftest, "Config", None)
    if config is None:  # the later layout creates it in pytest_configure
        config = conftest.BenchConfig()
        conftest.Config = config
    _fill_config(config, consts, checkout, settings)
    try:
        harness = importlib.import_module(f"{PACKAGE}.{checkout.harness_module}")
    except Exception as exc:
        raise UsageError(f"importing benchmark/{checkout.harness_module}.py from {checkout.root} failed: "
                         f"{one_line(exc)}") from exc
    return Harness(checkout=checkout, config=config, harness=harness, consts=consts, flag_gems=flag_gems)


def mode_choices(consts) -> list:
    return [m.value for m in consts.BenchMode]


def _fill_config(config, consts, checkout: Checkout, settings: Settings) -> None:
    import torch

    modes = mode_choices(consts)
    if settings.mode not in modes:
        raise UsageError(f"--flaggems-mode {settings.mode}: this checkout's harness knows {', '.join(modes)}")
    config.mode = consts.BenchMode(settings.mode)
    config.bench_level = consts.BenchLevel(settings.level)
    config.query = False
    config.record_log = False
    if hasattr(config, "record_json"):
        config.record_json = False
    config.user_desired_metrics = None
    config.user_desired_dtypes = [getattr(torch, d) for d in settings.dtypes] or None
    config.shape_file = str(checkout.default_shape_file)


# ----------------------------------------------------------------------------- test selection
def _parametrize_cases(marks: list) -> list:
    """[(kwargs, extra marks, id)] for the cartesian product of every parametrize mark."""
    axes = []
    for m in marks:
        if m.name != "parametrize":
            continue
        names = m.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        ids = m.kwargs.get("ids")
        axis = []
        for i, value in enumerate(m.args[1]):
            values, pmarks, pid = value, [], None
            if type(value).__name__ == "ParameterSet":
                values, pmarks, pid = value.values, list(value.marks), value.id
            elif len(names) == 1:
                values = (value,)
            if isinstance(ids, (list, tuple)) and i < len(ids):
                pid = pid or ids[i]
            pid = pid or "-".join(str(v) if isinstance(v, (str, int, float, bool)) else f"{n}{i}"
                                  for n, v in zip(names, values))
            axis.append((dict(zip(names, values)), pmarks, str(pid)))
        axes.append(axis)
    if not axes:
        return [({}, [], "")]
    out = []
    for combo in itertools.product(*axes):
        kwargs, pmarks, ids = {}, [], []
        for kw, pm, pid in combo:
            kwargs.update(kw)
            pmarks.extend(pm)
            ids.append(pid)
        out.append((kwargs, pmarks, "-".join(ids)))
    return out


def cases_of(module) -> list:
    cases = []
    for name, fn in vars(module).items():
        if not (name.startswith("test") and inspect.isfunction(fn)):
            continue
        marks = list(getattr(fn, "pytestmark", []))
        own = [m for m in marks if m.name != "parametrize"]
        for kwargs, pmarks, ident in _parametrize_cases(marks):
            cases.append(Case(module=module, function=fn, kwargs=kwargs, marks=own + pmarks, ident=ident))
    return cases


def matches(case: Case, op: str, test: Optional[str]) -> bool:
    if test and case.function.__name__ != test:
        return False
    if op in case.mark_names:
        return True
    return case.function.__name__ in (f"test_{op}", f"test_perf_{op}", f"test_{op}_perf", f"test_{op}_benchmark")


def import_test_module(harness: Harness, path: Path):
    phase("import", f"importing benchmark/{path.name}")
    return importlib.import_module(f"{PACKAGE}.{path.stem}")


@attrs.frozen
class Fixup:
    """A test function a FlagGems checkout ships broken, and how zlf builds its Benchmarks."""

    raises: type                   # only this failure of the original test is worked around
    why: str
    build: object                  # (module, parametrize kwargs) -> list of Benchmark objects


def _v5_blas_benchmark(module, kwargs) -> list:
    grouped = kwargs["op_name"] == "grouped_mm"
    bench = kwargs["bench_cls"](input_fn=kwargs["input_fn"], op_name=kwargs["op_name"],
                                torch_op=kwargs["torch_op"],
                                dtypes=[module.torch.bfloat16] if grouped else module.FLOAT_DTYPES)
    if grouped:
        bench.set_gems(module.flag_gems.group_mm)
    return [bench]


#: (file name, function name) -> Fixup; tried only when the original raises ``Fixup.raises``, so
#: a checkout where FlagGems fixed the test runs its own code.
FIXUPS = {
    ("test_blas_perf.py", "test_blas_benchmark"): Fixup(
        UnboundLocalError,
        "v5.0.2 assigns FLOAT_DTYPES inside test_blas_benchmark (for grouped_mm), so addmm, bmm, mm and "
        "baddbmm raise UnboundLocalError (FlagGems' pytest too); zlf builds the Benchmark as the test means to",
        _v5_blas_benchmark),
}


def _monkeypatch(case: Case):
    import pytest

    patch = pytest.MonkeyPatch()
    case.cleanup.append(patch.undo)
    return patch


def _tmp_path(case: Case):
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="zlf-flaggems-"))
    case.cleanup.append(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


#: pytest fixtures zlf gives FlagGems test functions (v5.3.4's take ``monkeypatch`` only: 20 tests,
#: ``monkeypatch.setenv`` before building the Benchmark); held until the run ends, then undone.
FIXTURES = {"monkeypatch": _monkeypatch, "tmp_path": _tmp_path}


def _arguments(case: Case) -> dict:
    """The test function's arguments: its parametrize values, the fixtures of :data:`FIXTURES`,
    its own defaults; any other parameter is a pytest fixture zlf does not have: refused."""
    out = {}
    for name, param in inspect.signature(case.function).parameters.items():
        if name in case.kwargs:
            out[name] = case.kwargs[name]
        elif name in FIXTURES:
            out[name] = FIXTURES[name](case)
        elif param.default is inspect.Parameter.empty:
            case.finish()
            raise UsageError(f"FlagGems test {case.node_id} takes the pytest fixture {name!r}, which zlf does not "
                             f"provide (it gives {', '.join(FIXTURES)})")
    return out


def capture(harness: Harness, case: Case) -> list:
    """Call the test function once; every ``Benchmark.run()`` it reaches returns its object."""
    import pytest

    captured = []

    def hand_back(self, *args, **kwargs):
        captured.append(self)

    patched = []
    todo = [harness.benchmark_class]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if "run" in vars(cls):
            patched.append((cls, vars(cls)["run"]))
            cls.run = hand_back
    kwargs = _arguments(case)
    try:
        case.function(**kwargs)
    except pytest.skip.Exception as exc:
        raise UsageError(f"FlagGems skips {case.node_id} here: {' '.join(str(exc).split())}") from exc
    except Exception as exc:
        fixup = FIXUPS.get((os.path.basename(case.module.__file__), case.function.__name__))
        if fixup is None or not isinstance(exc, fixup.raises):
            case.finish()
            raise UsageError(f"FlagGems test {case.node_id} failed before measuring: {one_line(exc)}") from exc
        captured[:] = fixup.build(case.module, case.kwargs)
        case.fixup = fixup.why
    finally:
        for cls, original in patched:
            cls.run = original
    return captured
