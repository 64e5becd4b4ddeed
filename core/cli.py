"""The ``zlf`` command line.

Parsing happens in two steps, as in pytest: ``--ext`` / ``--no-ext`` are read first so that
disabled extensions are blocked before import; then the selected extensions add their options
and sub-commands, and the full command line is parsed.

Exit codes: 0 success, 1 a point failed (or a gate tripped), 2 bad input, 124 a point hung past
``--time-limit`` where it could not be interrupted, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""
from __future__ import annotations

import argparse
import collections
import importlib
import json
import sys

from tabulate import tabulate

from . import __version__
from .console import Progress, clean, paint, status_colour
from .errors import UsageError

EPILOG_RUN = """\
examples:
  zlf run                                  the built-in suite (add, softmax, matmul)
  zlf run softmax --dtype float16          one op, one dtype
  zlf run my_ops.py::relu                  an op from your own file (see docs/ops.md)
  zlf run --ext cudagraph --ext ir_dump    exactly these extensions (plus core)
  zlf run --no-ext seed                    every installed extension but one
  zlf run --gpus 0,1,2,3                   one worker per GPU, one op per unit, one merged run dir
environment: ZLF_EXTENSIONS=a,b  ZLF_DISABLE=a,b  ZLF_BACKEND=cpu|cuda|...  NO_COLOR=1
exit codes: 0 all points ok, 1 a point FAILED, 2 bad input, 124 a point hung past --time-limit
            where it could not be interrupted (run stopped), 130 interrupted, 143 terminated (SIGTERM)
"""

#: sub-commands implemented in core modules: name -> (module, one-line help). Each module has
#: ``configure_parser(parser)`` and ``main(args, session) -> int``; imported only when present.
CORE_COMMANDS = {
    "compare": ("zlf.compare", "pair two run directories point by point"),
    "report": ("zlf.report", "render a markdown report (with a plot) of one run or a pair"),
    "calibrate": ("zlf.calibrate", "measure this device's bandwidth and TFLOP/s ceilings"),
    "ab": ("zlf.ab", "multi-round A/B campaign in independent processes, with verdicts"),
}


class ArgumentParser(argparse.ArgumentParser):
    """argparse that says where an unknown option may have gone: a disabled extension."""

    #: names of installed extensions that are not active in this invocation.
    not_active: tuple = ()

    def error(self, message):
        if "unrecognized arguments" in message and self.not_active:
            message += (f" (options of extensions that are not active here are unavailable: "
                        f"{', '.join(self.not_active)})")
        super().error(message)


def _selection_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("extension selection")
    g.add_argument("--ext", action="append", metavar="NAME",
                   help="use exactly these extensions (repeatable; also ZLF_EXTENSIONS=a,b)")
    g.add_argument("--no-ext", action="append", metavar="NAME",
                   help="disable an extension before it is imported (repeatable; also ZLF_DISABLE=a,b); always wins")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``zlf run`` that core owns (``zlf ab`` passes them through)."""
    parser.add_argument("ops", nargs="*", metavar="OP",
                        help="built-in op (add, softmax, matmul), FILE.py[::NAME], or a name an extension knows; default: the built-in suite")
    parser.add_argument("--dtype", action="append", metavar="D",
                        help="dtype(s) to run instead of each op's defaults (repeatable or comma-separated)")
    parser.add_argument("--out", default="runs", metavar="PARENT", help="parent of the run directory (default: runs/)")
    parser.add_argument("--name", metavar="LABEL", help="run directory label (default: the op, or 'suite')")
    parser.add_argument("--backend", metavar="NAME", help="cpu, cuda, or an extension's backend (default: detected)")
    parser.add_argument("--device", type=int, default=0, metavar="N", help="device index (default 0)")
    t = parser.add_argument_group("timing (core's direct timer)")
    t.add_argument("--timer", metavar="EXT", help="which timer to use: an extension's time_fn (cudagraph), a kernel-activity timer (cupti), "
                        "or core (core's event timer)")
    t.add_argument("--warmup-ms", type=float, metavar="MS", help="warm-up budget per point (default: backend's, 25 on GPU)")
    t.add_argument("--rep-ms", type=float, metavar="MS", help="measurement budget per point (default: backend's, 100 on GPU)")
    l2 = t.add_mutually_exclusive_group()
    l2.add_argument("--flush-l2", dest="flush_l2", action="store_true", default=None,
                    help="flush L2 before every sample (direct timer's default on GPUs)")
    l2.add_argument("--no-flush-l2", dest="flush_l2", action="store_false", help="keep L2 warm between samples")
    parser.add_argument("--time-limit", type=float, metavar="SEC",
                        help="per-point limit (inputs, check and timing); past it the point is FAILED (time limit) "
                             "and the run goes on; 0: none (default: 600 on GPU backends, 1800 on cpu)")
    parser.add_argument("--json", action="store_true", help="print the records as JSON instead of the table")


def build_parser(hooks=None) -> argparse.ArgumentParser:
    # A class per invocation: sub-command parsers are made from the parent's class.
    not_active = tuple(i.name for i in hooks.infos if i.status != "active") if hooks is not None else ()
    parser_class = type("ArgumentParser", (ArgumentParser,), {"not_active": not_active})
    parser = parser_class(
        prog="zlf",
        description="Did my compiler change make these GPU kernels faster or slower? "
        "Benchmark, compare and A/B Triton kernels across compiler builds.",
    )
    parser.add_argument("--version", action="version", version=f"zlf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="benchmark ops into a new run directory", epilog=EPILOG_RUN,
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         description="Check every point against its reference, time it, and write a run directory.")
    add_run_arguments(run)
    run.add_argument("--config", metavar="FILE",
                     help="run the settings of a RunConfig JSON file (zlf.config; written by RunConfig.write); "
                          "no other run option may be given with it but --out, --name and --json, which "
                          "override the file's (where the run goes and how it prints)")
    from .executors import add_scale_arguments

    add_scale_arguments(run)
    _selection_args(run)
    if hooks is not None:
        hooks.add_options(run)
    run.set_defaults(handler=cmd_run)

    plugins = sub.add_parser("plugins", help="list installed extensions (active, disabled, broken)")
    plugins.add_argument("--json", action="store_true", help="machine-readable list")
    _selection_args(plugins)
    plugins.set_defaults(handler=cmd_plugins)

    for name, (module, help_text) in CORE_COMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        p = sub.add_parser(name, help=help_text, description=(mod.__doc__ or help_text).strip().splitlines()[0],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.configure_parser(p)
        if name == "ab" and hooks is not None:
            hooks.add_options(p)  # campaign runs accept every run option of the active extensions
            hooks.add_campaign_options(p)  # the campaign's own options, never passed to its runs
        _selection_args(p)
        p.set_defaults(handler=mod.main)
    if hooks is not None:
        hooks.add_commands(sub)
        for p in dict.fromkeys(sub.choices.values()):  # an alias maps to the same parser
            if p.get_default("run_options"):
                hooks.add_options(p)  # an extension's command that starts runs takes the run options too
    return parser


def _preparse(argv) -> argparse.Namespace:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--ext", action="append")
    pre.add_argument("--no-ext", action="append")
    pre.add_argument("--timer")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.config and argv and argv[0] == "run":  # the file selects the extensions
        from .config import RunConfig

        return RunConfig.read(known.config)
    return known


def check_run_options(args) -> None:
    """One-line refusals of run options that argparse accepts but no run can use (``zlf run``,
    ``zlf ab`` and ``zlf task`` call it before they create anything)."""
    from .config import RunConfig

    RunConfig.from_args(args).check()


def run_config(args, parser, hooks):
    """The run's :class:`~zlf.config.RunConfig`: from ``--config FILE`` (then no other run option
    may differ from its default) or from the command line."""
    from .config import ARGS, RunConfig

    if not getattr(args, "config", None):
        return RunConfig.from_args(args, hooks.option_sets)
    sub = parser._subparsers._group_actions[0].choices[args.command]
    beside = {"out": args.out, "name": args.name, "json": args.json}  # where it goes, how it prints
    dests = (set(ARGS) | {o.dest for s in hooks.option_sets for o in s.options}) - set(beside)
    defaults = {}
    for a in sub._actions:  # as argparse fills them in: the first action of a dest gives its default
        defaults.setdefault(a.dest, a.default)
    given = [a for a in sub._actions if a.dest in dests and a.option_strings
             and getattr(args, a.dest, None) != defaults[a.dest]]
    given += [] if not getattr(args, "ops", None) else [argparse.Action(["OP"], "ops")]
    if given:
        flags = ", ".join(dict.fromkeys(max(a.option_strings, key=len) for a in given))
        raise UsageError(f"--config {args.config}: also given on the command line: {flags}; "
                         "put run settings in the file, or drop --config")
    config = RunConfig.read(args.config).bound(hooks.option_sets)
    if config.command != args.command:
        raise UsageError(f"--config {args.config}: a configuration of zlf {config.command}, not of zlf {args.command}")
    given = {k: v for k, v in beside.items() if v != defaults[k]}
    return config.with_changes(**given) if given else config


# ----------------------------------------------------------------------------- commands
def cmd_plugins(args, session) -> int:
    infos = session.hooks.infos
    if args.json:
        print(json.dumps([i.to_json() for i in infos], indent=2))
        return 0
    if not infos:
        print("no extensions installed (entry-point group 'zlf')")
        return 0
    rows = []
    for i in infos:
        status = paint(i.status, {"active": "green", "broken": "red"}.get(i.status, "dim"))
        detail = i.error if i.error else (", ".join(i.hooks) if i.hooks else "")
        rows.append([i.name, f"{i.distribution} {i.version}", status, detail])
    print(tabulate(rows, headers=["extension", "distribution", "status", "hooks / error"]))
    return 0


def _fmt(value, digits=4):
    return "" if value is None else f"{value:.{digits}g}"


def results_table(records, colour=True) -> str:
    rows = []
    for r in records:
        status = paint(r.status, status_colour(r.status)) if colour else r.status
        note = r.error or ("; ".join(m.split(" ")[0] for m in r.markers) if r.markers else "")
        # FORMATS §7: a point that did not fit reads OOM where its numbers would be.
        numbers = ["OOM"] * 3 if r.status == "OOM" else [_fmt(r.median_ms), _fmt(r.gbps), _fmt(r.tflops)]
        rows.append([clean(r.point), status, clean(r.timer or ""), *numbers, clean(note[:80])])
    return tabulate(rows, headers=["point", "status", "timer", "median ms", "GB/s", "TFLOP/s", "note"])


def cmd_run(args, session) -> int:
    from .procs import stop_code, stop_word
    from .records import STATUS_FAILED
    from .run import Run, execute
    from .rundir import RunDir, disk_full
    from .session import shapes_by_op

    config = session.config
    config.check()
    if config.gpus or config.executor:
        from .sharded_run import main as run_sharded  # the driver never sets up a device

        return run_sharded(args, session)
    if config.time_limit_s is not None and not config.time_limit_s >= 0:
        raise UsageError(f"--time-limit {config.time_limit_s:g}: expected seconds >= 0 (0: no limit)")
    session.hooks.check_exclusive()
    backend = session.choose_backend(config.backend, config.device)
    ops = session.resolve_ops(config.ops)
    plan = session.plan(ops, config.dtypes)
    if not plan:
        raise UsageError("nothing to run: no shapes or dtypes left for the selected ops")
    implicit = not config.ops or list(config.ops) in (["builtin"], ["all"])
    label = config.name or (ops[0].name if len(ops) == 1 else ("builtin" if implicit else "suite"))
    rundir = RunDir.create(config.out, label)
    rundir.reserve()
    run = None
    try:
        rundir.write_shapes(shapes_by_op(plan))
        run = Run(session, rundir, plan, argv=["zlf", *sys.argv[1:]])
        # which argument gave which ops and how many points: zlf ab splits a run of several ops by it
        per_op = collections.Counter(p.op.name for p in plan)
        run.meta["op_args"] = [{"spec": spec, "ops": names, "points": sum(per_op[n] for n in names)}
                               for spec, names in session.op_args]
        if backend.host_timing:
            run.log.info(f"backend {backend.name}: times are host wall-clock of interpreted kernels, not GPU kernel times")
        progress = Progress(len(plan)) if not config.json else None
        records = execute(run, progress)
    except KeyboardInterrupt as exc:
        print(f"\n{stop_word(exc)}; {len(run.records) if run else 0} finished points kept\nrun dir: {rundir.path}",
              file=sys.stderr)
        return stop_code(exc)
    except OSError as exc:
        if not disk_full(exc):
            raise
        raise UsageError(f"{exc.strerror or exc} writing {exc.filename or rundir.path}: "
                         f"{len(run.records) if run else 0} finished point(s) kept in {rundir.path}") from exc
    finally:
        rundir.release()
    failed = sum(1 for r in records if r.status == STATUS_FAILED)
    if config.json:
        print(json.dumps({"run_dir": str(rundir.path), "records": [r.to_json() for r in records]}, indent=2))
        return 1 if failed else 0
    print(results_table(records))
    if backend.host_timing:
        print(paint("note: cpu backend: times are host wall-clock of interpreted kernels, not GPU kernel times", "dim"))
    if failed:
        print(paint(f"{failed} of {len(records)} points FAILED", "red"))
    print(f"run dir: {rundir.path}")
    return 1 if failed else 0


def main(argv=None, extra_plugins=()) -> int:
    """Entry point of the ``zlf`` console script; returns the exit code."""
    import signal

    from .procs import handle_sigterm

    argv = list(sys.argv[1:] if argv is None else argv)
    previous = handle_sigterm()  # SIGTERM stops like Ctrl-C: what is finished is kept and marked, exit 143
    try:
        return _main(argv, extra_plugins)
    finally:
        if previous is not None:  # an in-process caller (a test) gets its own handler back
            signal.signal(signal.SIGTERM, previous)


def _main(argv, extra_plugins) -> int:
    from .procs import stop_code, stop_word
    from .session import Session

    tolerant = bool(argv) and argv[0] == "plugins"
    try:
        pre = _preparse(argv)
        session = Session.create(pre, extra_plugins=extra_plugins, tolerant=tolerant)
        parser = build_parser(session.hooks)
        args = parser.parse_args(argv)
        if not getattr(args, "handler", None):
            parser.print_help()
            return 2
        config = run_config(args, parser, session.hooks)
        if getattr(args, "config", None):
            args = config.namespace(args)
        session.options = args
        session.config = config
        session.hooks.configure(session)
        return int(args.handler(args, session) or 0)
    except UsageError as exc:
        print(f"zlf: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"\nzlf: {stop_word(exc)}", file=sys.stderr)
        return stop_code(exc)
    except BrokenPipeError:
        # The reader went away (`zlf compare A B | head`): stop quietly, as cat(1) does.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        from .rundir import disk_full

        if not disk_full(exc):
            raise
        # A full disk (or a file-size limit) is the place given, not a bug: what was written stays.
        print(f"zlf: error: {exc.strerror or exc}" + (f" writing {exc.filename}" if exc.filename else ""),
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
