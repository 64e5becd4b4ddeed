"""Run FlagGems benchmark ops with zlf in charge::

    zlf run --ext flaggems --flaggems-dir ~/FlagGems softmax mm:blas_perf
    FLAGGEMS_DIR=~/FlagGems zlf run --ext flaggems --ext cudagraph softmax

Each OP (``OP[:OP_FILE[::TEST_FUNCTION]]``) selects the FlagGems tests marked OP (as
``pytest -m OP`` would) in ``benchmark/test_<OP_FILE>.py``, or in any benchmark file when
OP_FILE is left out. Every Benchmark those tests build becomes one zlf Op (named by its
``op_name``): the FlagGems callable is the point under test, timed by zlf's ``time_fn``; the
torch callable is timed by the same ``time_fn`` after it and recorded in the point's ``extra``
(``torch_ms``, ``speedup``, ``torch_gbps``, ``size_detail``). ``flaggems_results.txt`` in the run
directory repeats the points in FlagGems' own table format.

Without ``--flaggems-dir`` / ``FLAGGEMS_DIR`` the extension passes every OP on (built-in ops
keep working); ``OP:OP_FILE`` without a checkout is an error.
"""
from __future__ import annotations

import os
import re
from typing import Optional

from zlf import UsageError, hookimpl
from zlf.options import SECONDS, Number

from . import checkout as _checkout
from . import harness as _harness
from .adapter import TOLERANCE, BenchmarkOp
from . import phases as _phases
from .phases import phase
from .table import render
from .twins import Twins

ENV_FLAGTUNE = "USE_FLAGTUNE"
#: ``zlf ab --library flaggems``: the benchmark ops of the checkout
LIBRARY = "flaggems"
LEVELS = ("core", "comprehensive")
MODES = ("kernel", "operator", "wrapper", "cudagraph")
RESULTS_FILE = "flaggems_results.txt"
#: a reference mismatch is named when this share of an op's points fail the check ...
MISMATCH_SHARE = 0.9
#: ... each by at least this many times the tolerance (and a relative error of at least MISMATCH_MIN)
MISMATCH_FACTOR = 100.0
MISMATCH_MIN = 0.01
_WRONG = re.compile(r"wrong result \(output \d+\): relative error ([0-9.eE+-]+) > ([0-9.eE+-]+)")


def reference_mismatch(records) -> Optional[str]:
    """``the benchmark's reference and the FlagGems op disagree (rel. error 1.19 on 15/15 points)``
    when (nearly) every point of one op fails the check by far more than the tolerance: the
    benchmark's torch op is not the same function as the FlagGems op (FlagGems' own harness never
    compares them). Points timed anyway under ``--check warn`` count (their ``unchecked`` text)."""
    records = list(records)
    errors = []
    for r in records:
        m = _WRONG.search(getattr(r, "unchecked", None) or r.error or "")
        if m is None:
            continue
        err, tol = float(m.group(1)), float(m.group(2))
        if err >= max(MISMATCH_FACTOR * tol, MISMATCH_MIN):
            errors.append(err)
    if not records or not errors or len(errors) < MISMATCH_SHARE * len(records):
        return None
    errors.sort()
    return (f"the benchmark's reference and the FlagGems op disagree (rel. error {errors[len(errors) // 2]:.3g} "
            f"on {len(errors)}/{len(records)} points)")


def _tolerances(values) -> dict:
    """``--flaggems-tolerance float32=1e-3`` (repeatable, or comma-separated) -> {dtype: float}."""
    from zlf.ops import DTYPES

    out = {}
    for item in (i.strip() for v in values for i in v.split(",") if i.strip()):
        dtype, _, value = item.partition("=")
        try:
            rel = float(value)
        except ValueError:
            rel = -1.0
        if dtype not in DTYPES or not rel >= 0:
            raise UsageError(f"--flaggems-tolerance {item!r}: expected DTYPE=REL with a dtype of "
                             f"{', '.join(DTYPES)} and REL >= 0")
        out[dtype] = rel
    return out


#: --flaggems-max-shapes (and zlf sweep's): shapes per op
MAX_SHAPES = Number(int, 1, 10**6, unit="shapes")
#: --flaggems-compile-time-limit (and zlf sweep's)
COMPILE_SECONDS = Number(float, 0, SECONDS, unit="seconds")


# The run options that zlf sweep also takes and passes on to each op's zlf run: declared here only.
def add_dir_argument(parser, help: str) -> None:
    parser.add_argument("--flaggems-dir", metavar="DIR", help=help)


def add_max_shapes_argument(parser, help: str, **kwargs) -> None:
    parser.add_argument("--flaggems-max-shapes", type=MAX_SHAPES, metavar="N", help=help, **kwargs)


def add_compile_time_limit_argument(parser, help: str, **kwargs) -> None:
    parser.add_argument("--flaggems-compile-time-limit", type=COMPILE_SECONDS, default=0.0, metavar="SEC",
                        help=help, **kwargs)


class FlagGems:
    """The ``flaggems`` extension (entry point ``zlf_flaggems.plugin:FlagGems``)."""

    def __init__(self):
        self.checkout: Optional[_checkout.Checkout] = None
        self.settings: Optional[_harness.Settings] = None
        self.harness = None
        self.ops: dict = {}         # op name -> BenchmarkOp, or Twins (several tests, one name)
        self.flagtune: Optional[str] = None
        self.tolerance: dict = {}
        self.points_begun = 0
        self.max_shapes: Optional[int] = None
        self.compile_allowance = 0.0
        self._ticking = None  # the compile-progress listener of a sweep's op process

    # ------------------------------------------------------------------ command line
    @hookimpl
    def add_commands(self, subparsers):
        from zlf.commands import add_module_command

        from . import sweep

        add_module_command(subparsers, "sweep", sweep, "run every benchmark op of a FlagGems checkout, each in its "
                           "own zlf run, into one table (resumable)", epilog=sweep.EPILOG)

    @hookimpl
    def add_options(self, parser, traits):
        if not traits.plans_shapes:  # FlagGems' ops and shapes apply where a command plans them
            return
        g = parser.add_argument_group("flaggems (extension)")
        add_dir_argument(g, f"FlagGems source checkout whose benchmark/ is run (also {_checkout.ENV_DIR}); "
                            "OPs are then OP[:OP_FILE[::TEST]]: tests marked OP in benchmark/test_<OP_FILE>.py")
        g.add_argument("--flaggems-level", choices=LEVELS, default="core",
                       help="FlagGems --level: comprehensive adds set_more_shapes() and extra input variants (default core)")
        g.add_argument("--flaggems-mode", choices=MODES, default="kernel",
                       help="FlagGems --mode: kernel (zlf's timer) or cudagraph (needs --ext cudagraph); "
                            "operator/wrapper are FlagGems' host timers and are refused: zlf's time_fn times every point")
        g.add_argument("--flaggems-tolerance", action="append", metavar="DTYPE=REL",
                       help="relative L2 error allowed against the torch reference, e.g. float32=1e-3 for TF32 "
                            "kernels (repeatable; defaults: " +
                            ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items()) + ", others exact)")
        add_max_shapes_argument(g, "run each op's N smallest built-in shapes only (a quick pass over many ops; "
                                   "default all)")
        add_compile_time_limit_argument(g, "seconds a point's first FlagGems call (Triton compiling, FlagGems "
                                           "tuning) gets beyond --time-limit: a slow compile is not a hang (default 0)")
        g.add_argument("--flaggems-flagtune", choices=("0", "1"),
                       help=f"set {ENV_FLAGTUNE} before flag_gems is imported (default: the environment's)")

    @hookimpl
    def add_campaign_options(self, parser):
        from zlf.ab.cli import add_example

        add_example(parser, "zlf ab --switch X --library flaggems --flaggems-dir ~/FlagGems --sample 40   every "
                            "benchmark op of a FlagGems checkout (docs/flaggems.md, \"A/B a whole release\")")

    @hookimpl
    def campaign_setup(self, plan, options, session):
        """``zlf ab --library flaggems``: every benchmark op of the checkout, as ``zlf sweep`` lists
        them (``MARK:FILE``); the runs get the checkout's resolved path."""
        if getattr(options, "library", None) != LIBRARY:
            return
        from . import sweep

        co = _checkout.checkout_from_options({"flaggems_dir": getattr(options, "flaggems_dir", None)})
        if co is None:
            raise UsageError(f"--library {LIBRARY}: no FlagGems checkout given: use --flaggems-dir DIR or "
                             f"{_checkout.ENV_DIR}=DIR")
        ops = sweep.list_ops(co)
        if not ops:
            raise UsageError(f"--library {LIBRARY}: no benchmark op (pytest mark) in {co.bench_dir}/test_*.py")
        plan.library, plan.library_source = ops, f"{LIBRARY} {co.root}"
        plan.options["flaggems_dir"] = str(co.root)

    @hookimpl
    def env_prefixes(self):
        # FLAGGEMS_DIR (the checkout), GEMS_* (FlagGems' vendor and settings), USE_FLAGTUNE
        return ("FLAGGEMS", "GEMS_", ENV_FLAGTUNE)

    @hookimpl
    def configure(self, session):
        opts = session.config.options
        if session.config.command not in ("run", "ops"):
            return
        self.checkout = _checkout.checkout_from_options(opts)
        if self.checkout is None:
            return
        mode = opts.flaggems_mode
        if mode in ("operator", "wrapper"):
            raise UsageError(f"--flaggems-mode {mode}: FlagGems' host-side timer; zlf times every point with its "
                             "time_fn (use kernel, or cudagraph with --ext cudagraph)")
        if mode == "cudagraph" and not any(i.name == "cudagraph" and i.status == "active" for i in session.hooks.infos):
            raise UsageError("--flaggems-mode cudagraph: add --ext cudagraph (zlf's graph timer, with per-point fallback markers)")
        # FlagGems' --dtypes is zlf's --dtype (which also answers to --dtypes)
        dtypes = tuple(session.config.dtypes or ())
        if opts.flaggems_flagtune is not None:
            os.environ[ENV_FLAGTUNE] = opts.flaggems_flagtune  # flag_gems reads it at import
        self.flagtune = os.environ.get(ENV_FLAGTUNE)
        self.settings = _harness.Settings(level=opts.flaggems_level, mode=mode, dtypes=dtypes)
        self.tolerance = _tolerances(opts.flaggems_tolerance or ())
        self.max_shapes = opts.get("flaggems_max_shapes")
        self.compile_allowance = opts.get("flaggems_compile_time_limit") or 0.0  # in range: its Number

    # ------------------------------------------------------------------ ops
    @hookimpl
    def resolve_ops(self, spec, session):
        head = spec.split("::")[0]
        if head.endswith(".py") and ":" not in head:
            return None  # FILE.py[::NAME]: a user's op file, core's
        if self.checkout is None:
            if ":" in spec:
                raise UsageError(f"FlagGems op {spec!r}: no FlagGems checkout given: use --flaggems-dir DIR "
                                 f"or {_checkout.ENV_DIR}=DIR")
            return None
        op, op_file, test = _checkout.parse_spec(spec)
        paths = _checkout.op_file_candidates(self.checkout, op, op_file)
        if self._ticking is None and _phases.active():
            # from planning on (input functions may run FlagGems kernels), every kernel Triton
            # compiles in this process is progress the sweep can see: slow compiling is then not
            # called hung. Triton's own listener, whatever the backend (the CPU backend's hooks
            # are inert: its interpreter never compiles, but a FlagGems op may compile for a GPU)
            from zlf import compiler_hooks

            self._ticking = compiler_hooks.install(_phases.compiled, None)
        if self.harness is None:
            self.harness = _harness.load(self.checkout, self.settings)
        found, errors = [], []
        for path in paths:
            try:
                module = _harness.import_test_module(self.harness, path)
            except Exception as exc:
                errors.append(f"{path.name}: {type(exc).__name__}: {exc}")
                if op_file or len(paths) == 1:
                    raise UsageError(f"FlagGems op file {path} failed to import: {type(exc).__name__}: {exc}") from exc
                continue
            found.extend(c for c in _harness.cases_of(module) if _harness.matches(c, op, test))
        if not found:
            if op_file:
                where = str(paths[0])
            elif paths:
                names = ", ".join(p.name for p in paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
                where = f"{self.checkout.bench_dir}: {names}"
            else:
                where = f"{self.checkout.bench_dir}/test_*.py (none mentions it; test_*_parallel.py not searched)"
            what = f"test function {test!r} marked {op!r}" if test else f"a test marked {op!r} (or test_{op})"
            note = f"; files that failed to import: {'; '.join(errors)}" if errors else ""
            raise UsageError(f"unknown FlagGems op {op!r}: looked for {what} in {where}{note}")
        runnable = [c for c in found if not c.skip_reason()]
        if not runnable:
            reasons = "; ".join(f"{c.node_id}: {c.skip_reason()}" for c in found)
            raise UsageError(f"FlagGems skips every test of op {op!r} here: {reasons}")
        built: dict = {}  # op name -> [BenchmarkOp], in the order the tests build them
        others = []  # (Benchmark, case) of tests whose dtypes --dtype leaves out
        for case in runnable:
            phase("plan", f"building the Benchmark of {case.node_id}")
            benches = _harness.capture(self.harness, case)
            if not benches:
                raise UsageError(f"FlagGems test {case.node_id} built no Benchmark (it never called run())")
            for bench in benches:
                if len(runnable) > 1 and not self._takes_dtypes(bench):
                    # one dtype parameter of several (test_searchsorted[dtype0]) and --dtype another
                    others.append((bench, case))
                    continue
                built.setdefault(bench.op_name, []).append(self._adapter(bench, case))
        for bench, case in others:  # no test of this op name takes --dtype: FlagGems' own error
            if bench.op_name not in built:
                built[bench.op_name] = [self._adapter(bench, case)]
        ops = []
        for name, members in built.items():
            # several tests building one op name (a dtype parameter, an _out twin): one op, the
            # tests told apart by dtype or by a variant label (twins.py)
            self.ops[name] = members[0] if len(members) == 1 else Twins(members)
            ops.append(self.ops[name].to_op())
        return ops

    def _adapter(self, bench, case) -> BenchmarkOp:
        adapter = BenchmarkOp(self.harness, bench, case, self.tolerance)
        if self.max_shapes:
            adapter.keep_smallest(self.max_shapes)
        return adapter

    def _takes_dtypes(self, bench) -> bool:
        """Whether the benchmark's declared dtypes hold any of --dtype's (or none was given)."""
        wanted = set(self.settings.dtypes)
        declared = {str(d).split(".")[-1] for d in (getattr(bench, "dtypes", None) or ())}
        return not wanted or not declared or bool(wanted & declared)

    # ------------------------------------------------------------------ run lifecycle
    @hookimpl
    def before_run(self, run):
        if not self.ops:
            return
        fg = self.harness.flag_gems
        run.meta["flaggems"] = {
            "dir": str(self.checkout.root), "layout": self.checkout.layout,
            "harness": f"benchmark/{self.checkout.harness_module}.py",
            "flag_gems_version": getattr(fg, "__version__", None),
            "flag_gems_path": os.path.dirname(getattr(fg, "__file__", "") or ""),
            "level": self.settings.level, "mode": self.settings.mode,
            "dtypes": list(self.settings.dtypes) or None,
            ENV_FLAGTUNE: self.flagtune,
            "compile_time_limit_s": self.compile_allowance,  # beyond time_limit_s, per point's first call
            "ops": {name: a.describe() for name, a in self.ops.items()},
        }
        for name, a in ((name, m) for name, op in self.ops.items() for m in op.all()):
            if a.empty:
                run.log.info(f"flaggems: {name} ({a.class_name}) yields no input for {', '.join(a.empty)}: "
                             "no point (FlagGems skips them too)")
            if a.dropped:
                run.log.info(f"flaggems: {name} ({a.class_name}): built-in shape entries that are not int "
                             f"lists were left out: {', '.join(a.dropped)}")

    @hookimpl
    def before_point(self, run, point):
        adapter = self.ops.get(point.op)
        if adapter is None:
            return
        adapter = adapter.for_point(point)
        adapter.allow_compile = lambda: run.watch.extend(self.compile_allowance)
        self.points_begun += 1
        adapter.label = f"point {self.points_begun}/{len(run.plan)} {point.id}"
        phase("inputs", f"{adapter.label}: inputs and torch reference")

    @hookimpl(tryfirst=True)
    def after_point(self, run, point, record):
        adapter = self.ops.get(point.op)
        if adapter is None:
            return
        adapter = adapter.for_point(point)
        adapter.exit_gems()  # the torch side, and every other extension's after_point, run plain torch
        call = adapter.current.pop("call", None)
        run.annotate("flaggems", {"test": adapter.case.node_id, "class": adapter.class_name, "kind": adapter.kind})
        if call is None:
            return
        run.annotate("size_detail", call.detail)
        if call.note:
            run.annotate("check", call.note)
        if record.status != "ok":
            return
        phase("measure", f"{adapter.label}: timing the torch op")
        try:
            timing = run.hooks.time_fn(call.torch, point, run.backend, run.config.timing,
                                       op=run.current_op, inputs=run.current_inputs)
        except Exception as exc:  # the FlagGems point stands; only its torch column is missing
            run.annotate("torch_error", f"{type(exc).__name__}: {exc}"[:300])
            return
        if timing is None:
            return
        run.annotate("torch_ms", timing.value_ms)
        run.annotate("torch_timer", timing.timer)
        if timing.fallback_reason:
            run.annotate("torch_fallback_reason", timing.fallback_reason)
        if record.median_ms:
            run.annotate("speedup", timing.value_ms / record.median_ms)
        amount = adapter.current.get("bytes")
        if amount and timing.value_ms:
            run.annotate("torch_gbps", amount / (timing.value_ms * 1e-3) / 1e9)

    @hookimpl
    def after_run(self, run, results):
        if not self.ops:
            return
        phase("done", f"run {run.status}")
        logged: dict = {}
        for adapter in (m for op in self.ops.values() for m in op.all()):
            adapter.exit_gems()
            adapter.case.finish()  # the pytest fixtures its test was given (monkeypatch.setenv ...)
            for message, times in adapter.registration_log.items():
                logged[message] = logged.get(message, 0) + times
        for message, times in logged.items():  # kept off the terminal, once each here
            run.log.info(f"flaggems: use_gems() logged while registering its kernels ({times}x): {message}")
        for name in self.ops:
            finding = reference_mismatch(r for r in results if r.op == name)
            if finding:
                from zlf.console import warn

                run.meta["flaggems"]["ops"][name]["reference_mismatch"] = finding
                run.log.warning(f"flaggems: {name}: {finding}")
                hint = "" if getattr(run.config, "check_mode", "fail") == "warn" else "; --check warn times them anyway, marked UNCHECKED"
                warn(f"{name}: {finding}{hint}")
        text = render(results, self.settings.mode, self.settings.level)
        if text:
            (run.dir / RESULTS_FILE).write_text(text)
            run.log.info(f"flaggems: FlagGems-format table in {RESULTS_FILE}")
