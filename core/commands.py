"""Core's built-in commands, registered as plugin ``core.commands`` through ``add_commands``:
the same hook extensions add theirs with (as pytest and llm register their own plugins).

A command's parser defaults declare what the command line builder adds to it: ``run_options``
(the command starts runs: every active extension's ``add_options``) and ``campaign_options``
(the command runs campaigns: every ``add_campaign_options``).
"""
from __future__ import annotations

import argparse
import collections
import importlib
import json
import sys

from . import hookimpl
from .options import add_dtype_argument, add_run_arguments, add_selection_arguments, split_dtypes
from .output import add_format_argument

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

EPILOG_OPS = """\
examples:
  zlf ops                                  the built-in suite on this machine's backend
  zlf ops my_ops.py --dtype float16        the ops of a file, in float16
  zlf ops OP --ext NAME                    the ops an extension resolves (a benchmark suite's)
"""

#: commands implemented in a module of their own: name -> (module, one-line help, parser
#: defaults). Each module has ``configure_parser(parser)`` and ``main(args, session) -> int``.
MODULE_COMMANDS = {
    "compare": ("zlf.compare", "pair two run directories point by point", {}),
    "report": ("zlf.report", "render a markdown report (with a plot) of one run or a pair", {}),
    "calibrate": ("zlf.calibrate", "measure this device's bandwidth and TFLOP/s ceilings", {}),
    # campaign runs accept every run option of the active extensions; the campaign's own
    # options (add_campaign_options) are never passed to its runs
    "ab": ("zlf.ab", "multi-round A/B campaign in independent processes, with verdicts",
           {"run_options": True, "campaign_options": True}),
}


@hookimpl(tryfirst=True)
def add_commands(subparsers):
    run = subparsers.add_parser("run", help="benchmark ops into a new run directory", epilog=EPILOG_RUN,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Check every point against its reference, time it, and write a run directory.")
    add_run_arguments(run)
    from .executors import add_scale_arguments

    add_scale_arguments(run)
    add_selection_arguments(run)
    run.set_defaults(handler=cmd_run, run_options=True, measures_points=True, config_file=True)

    plugins = subparsers.add_parser("plugins", help="list installed extensions (active, disabled, broken)")
    plugins.add_argument("--json", action="store_true", help="machine-readable list")
    add_selection_arguments(plugins)
    plugins.set_defaults(handler=cmd_plugins)

    ops = subparsers.add_parser("ops", help="list what a run would take (op, shapes, dtypes, source); runs nothing",
                                description="List the points a zlf run of the same OPs would take: op, shapes, "
                                            "dtypes and where each op comes from. No kernel runs.",
                                epilog=EPILOG_OPS, formatter_class=argparse.RawDescriptionHelpFormatter)
    ops.add_argument("ops", nargs="*", metavar="OP", help="as for zlf run (default: the built-in suite)")
    add_dtype_argument(ops, "dtype(s) instead of each op's defaults, as for zlf run")
    ops.add_argument("--backend", metavar="NAME", help="whose default shapes and dtypes (default: detected)")
    ops.add_argument("--device", type=int, default=0, metavar="N", help="device index (default 0)")
    add_format_argument(ops)
    add_selection_arguments(ops)
    ops.set_defaults(handler=cmd_ops, run_options=True)  # the extensions' options that choose ops and shapes

    for name, (module, help_text, defaults) in MODULE_COMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        add_module_command(subparsers, name, mod, help_text, **defaults)


def add_module_command(subparsers, name: str, module, help_text: str, epilog=None, **defaults):
    """Add the command ``name`` whose code is ``module``: its description is the first line of the
    module's docstring, ``module.configure_parser(parser)`` declares its options, ``module.main(args,
    session)`` runs it; ``--ext`` / ``--no-ext`` are accepted; ``defaults`` go to ``set_defaults``
    (``run_options=True`` and the like). For an extension's ``add_commands`` as for core's own."""
    p = subparsers.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip().splitlines()[0],
                              epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    module.configure_parser(p)
    add_selection_arguments(p)
    p.set_defaults(handler=module.main, **defaults)
    return p


# ----------------------------------------------------------------------------- zlf plugins
def cmd_plugins(args, session) -> int:
    from tabulate import tabulate

    from .console import paint

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
        rows.append([i.name, i.value, f"{i.distribution} {i.version}", status, detail])
    print(tabulate(rows, headers=["extension (--ext NAME)", "entry point", "distribution (pip)", "status",
                                  "hooks / error"]))
    return 0


# ----------------------------------------------------------------------------- zlf run
def cmd_run(args, session) -> int:
    from .console import Progress
    from .errors import UsageError
    from .output import print_run_summary
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
    label = config.name or run_label(ops, session.op_args, implicit)
    rundir = RunDir.create(config.out, label)
    rundir.reserve()
    run = None
    try:
        rundir.write_shapes(shapes_by_op(plan))
        run = Run(session, rundir, plan, argv=["zlf", *sys.argv[1:]])
        for note in dict.fromkeys(session.plan_notes):
            run.log.warning(note)
        # which argument gave which ops and how many points: zlf ab splits a run of several ops by it
        per_op = collections.Counter(p.op.name for p in plan)
        run.meta["op_args"] = [{"spec": spec, "ops": names, "points": sum(per_op[n] for n in names)}
                               for spec, names in session.op_args]
        if backend.host_timing:
            run.log.info(f"backend {backend.name}: times are host wall-clock of interpreted kernels, not GPU kernel times")
        progress = Progress(len(plan)) if args.format != "json" else None
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
    print_run_summary(records, args.format, rundir.path, host_timing=backend.host_timing)
    return 1 if any(r.status == STATUS_FAILED for r in records) else 0


def run_label(ops, op_args, implicit: bool) -> str:
    """The run directory's default label: the op when there is one, the op file's name when every
    op came from one file (``my_ops.py`` -> ``my_ops``), ``builtin`` for the built-in suite, else
    ``suite``."""
    from pathlib import Path

    if len(ops) == 1:
        return ops[0].name
    if implicit:
        return "builtin"
    if len(op_args) == 1:
        spec = op_args[0][0].split("::")[0]
        return Path(spec).stem if spec.endswith(".py") else spec
    return "suite"


# ----------------------------------------------------------------------------- zlf ops
OPS_FIELDS = ("op", "shapes", "dtypes", "points", "source")


def _op_source(op, spec: str) -> str:
    """Where an op comes from: ``built-in``, the OP argument that named it (a file), or what the
    extension that resolved it says (its description: FlagGems' test node id)."""
    if (getattr(op.fn, "__module__", "") or "").startswith("zlf.ops"):
        return "built-in"
    if spec.split("::")[0].endswith(".py"):
        return spec
    return f"{spec}: {op.description}" if op.description else spec


def cmd_ops(args, session) -> int:
    """What ``zlf run`` with the same arguments would take, without running a kernel."""
    from .output import render

    session.hooks.check_exclusive()
    session.choose_backend(args.backend, args.device)
    ops = session.resolve_ops(args.ops)
    plan = session.plan(ops, split_dtypes(args.dtype))
    spec_of = {name: spec for spec, names in session.op_args for name in names}
    rows = []
    for op in ops:
        points = [p.point for p in plan if p.op is op]
        shapes = list(dict.fromkeys("x".join(map(str, p.shape)) for p in points))
        dtypes = list(dict.fromkeys(p.dtype for p in points))
        rows.append([op.name, shapes, dtypes, len(points), _op_source(op, spec_of.get(op.name, ""))])
    if args.format == "csv":
        rows = [[r[0], " ".join(r[1]), " ".join(r[2]), *r[3:]] for r in rows]
    print(render(OPS_FIELDS, rows, args.format))
    if args.format in ("table", "markdown"):
        print(f"{len(plan)} point(s) on backend {session.backend.name}; nothing was run")
    return 0
