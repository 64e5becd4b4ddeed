"""Core's built-in commands, registered as plugin ``core.commands`` through ``add_commands``:
the same hook extensions add theirs with (as pytest and llm register their own plugins).

A command says what it does in its parser defaults (``traits``, a :class:`zlf.options.CommandTraits`);
the command line builder adds what applies to it: core's run options, every active extension's
``add_options``, ``--config FILE``, every ``add_campaign_options``.
"""
from __future__ import annotations

import argparse
import collections
import importlib
import json
import sys

from . import hookimpl
from .options import RUN_TRAITS, CommandTraits, add_run_arguments, split_dtypes
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
            where it could not be interrupted (run stopped), 130 interrupted, 143 terminated (SIGTERM,
            SIGHUP)
an op that kills its process (os._exit, abort, a segfault, a signal) is its point's FAILED record
("worker died: SIGSEGV (signal 11)"); the run goes on in a fresh worker process
"""

EPILOG_OPS = """\
examples:
  zlf ops                                  the built-in suite on this machine's backend
  zlf ops my_ops.py --dtype float16        the ops of a file, in float16
  zlf ops OP --ext NAME                    the ops an extension resolves (a benchmark suite's)
"""

#: commands implemented in a module of their own: name -> (module, one-line help, parser
#: defaults). Each module has ``configure_parser(parser)`` and ``main(args, session) -> int``,
#: and ``TRAITS`` (:class:`zlf.options.CommandTraits`) when the command runs points.
MODULE_COMMANDS = {
    "compare": ("zlf.compare", "pair two run directories point by point", {}),
    "report": ("zlf.report", "render a markdown report (with a plot) of one run or a pair", {}),
    "calibrate": ("zlf.calibrate", "measure this device's bandwidth and TFLOP/s ceilings", {}),
    # campaign runs accept every run option of the active extensions; the campaign's own
    # options (add_campaign_options) are never passed to its runs
    "ab": ("zlf.ab", "multi-round A/B campaign in independent processes, with verdicts", {}),
}


@hookimpl(tryfirst=True)
def add_commands(subparsers):
    run = subparsers.add_parser("run", help="benchmark ops into a new run directory", epilog=EPILOG_RUN,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Check every point against its reference, time it, and write a run directory.")
    add_run_arguments(run)
    add_format_argument(run)
    from .executors import add_scale_arguments

    add_scale_arguments(run)
    run.set_defaults(handler=cmd_run, traits=RUN_TRAITS)

    plugins = subparsers.add_parser("plugins", help="list installed extensions (active, disabled, broken)")
    add_format_argument(plugins)
    plugins.set_defaults(handler=cmd_plugins)

    ops = subparsers.add_parser("ops", help="list what a run would take (op, shapes, dtypes, source); runs nothing",
                                description="List the points a zlf run of the same OPs would take: op, shapes, "
                                            "dtypes and where each op comes from. No kernel runs.",
                                epilog=EPILOG_OPS, formatter_class=argparse.RawDescriptionHelpFormatter)
    ops.add_argument("ops", nargs="*", metavar="OP", help="as for zlf run (default: the built-in suite)")
    add_format_argument(ops)
    # it plans what a run would: the run options (and the extensions' options) that choose ops and shapes
    ops.set_defaults(handler=cmd_ops, traits=CommandTraits(plans_shapes=True))

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
    session)`` runs it (``--ext`` / ``--no-ext`` are accepted, as by every command); ``defaults`` go to ``set_defaults``
    (``traits=CommandTraits(...)`` and the like). For an extension's ``add_commands`` as for core's own."""
    p = subparsers.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip().splitlines()[0],
                              epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    module.configure_parser(p)
    if getattr(module, "TRAITS", None) is not None:  # what the command does, where its module says it
        defaults.setdefault("traits", module.TRAITS)
    p.set_defaults(handler=module.main, **defaults)
    return p


# ----------------------------------------------------------------------------- zlf plugins
def cmd_plugins(args, session) -> int:
    from tabulate import tabulate

    from .console import paint

    from .output import render

    infos = session.hooks.infos
    if args.format == "json":
        print(json.dumps([i.to_json() for i in infos], indent=2))
        return 0
    if not infos:
        print("no extensions installed (entry-point group 'zlf')")
        return 0
    rows = []
    for i in infos:
        status = paint(i.status, {"active": "green", "broken": "red"}.get(i.status, "dim")) if args.format == "table" \
            else i.status
        detail = i.error if i.error else (", ".join(i.hooks) if i.hooks else "")
        rows.append([i.name, i.value, f"{i.distribution} {i.version}", status, detail])
    headers = ["extension (--ext NAME)", "entry point", "distribution (pip)", "status", "hooks / error"]
    print(tabulate(rows, headers=headers) if args.format == "table" else render(headers, rows, args.format))
    return 0


# ----------------------------------------------------------------------------- zlf run
def cmd_run(args, session) -> int:
    config = session.config  # checked by the command line (RunConfig.check)
    if config.gpus or config.executor:
        from .sharded_run import main as run_sharded  # the driver never sets up a device

        return run_sharded(args, session)
    from .supervise import Supervisor, fork_safe

    if getattr(session, "supervise", False) and fork_safe():
        from .cli import guarded  # the worker says what went wrong as zlf itself would

        return Supervisor(lambda link, resume: guarded(lambda: run_points(args, session, link, resume))).run()
    return run_points(args, session)


def run_points(args, session, link=None, resume=None) -> int:
    """``zlf run`` on one device, in this process: plan, run directory, points, table. With a
    supervising parent (:mod:`zlf.supervise`), ``link`` tells it what happens, and ``resume``
    (``{"dir", "start"}``) makes this a fresh worker going on with a run from point ``start``."""
    from .console import Progress
    from .streams import last_word
    from .errors import UsageError
    from .output import print_run_summary
    from .procs import stop_code, stop_word
    from .records import STATUS_FAILED
    from .run import Run, TimeSplit, execute, lossy_streams
    from .rundir import RunDir, disk_full
    from .session import shapes_by_op
    from .supervise import point_fields
    from pathlib import Path

    import time

    from . import cli

    config = session.config  # checked by the command line (RunConfig.check)
    session.hooks.check_exclusive()
    backend = session.choose_backend(config.backend, config.device)
    if link is not None:  # an op module whose import hangs is bounded as a point is
        from .supervise import load_limit

        limit = load_limit(backend.point_time_limit_s if config.time_limit_s is None else config.time_limit_s,
                           len(config.ops or ()))
        if limit is not None:
            link.send("loading", limit=limit)
    t1 = time.time()
    ops = session.resolve_ops(config.ops)
    plan = session.plan(ops, config.dtypes)
    t2 = time.time()
    if not plan:
        raise UsageError("nothing to run: no shapes or dtypes left for the selected ops")
    if resume is None:
        implicit = not config.ops or list(config.ops) in (["builtin"], ["all"])
        label = config.name or run_label(ops, session.op_args, implicit)
        rundir = RunDir.create(config.out, label)
    else:
        rundir = RunDir(resume["dir"])
        rundir.shown = Path(resume["shown"])
    start = resume["start"] if resume else 0
    rundir.reserve()
    run = None
    try:
        if resume is None:
            rundir.write_shapes(shapes_by_op(plan))
        if link is not None:
            link.send("dir", dir=str(rundir.path), shown=str(rundir.shown), points=[point_fields(p.point) for p in plan])
        run = Run(session, rundir, plan, argv=["zlf", *sys.argv[1:]])
        run.link = link
        if resume is not None:  # the earlier workers' records and what meta.json says of them
            run.records = list(rundir.records()[0])
            before = rundir.meta()
            run.meta.update({k: before[k] for k in ("started", "worker_deaths") if k in before})
            run.split = TimeSplit(before.get("time_split"))
            run.log.info(f"a fresh worker goes on with point {start + 1} of {len(plan)}")
        if resume is None:  # the process's own start and setup; a fresh worker's are its parent's, counted
            run.split.add("start", cli.STARTUP_S)
            run.split.add("imports", t1 - cli.ENTERED if cli.ENTERED else None)
            run.split.add("planning", t2 - t1)
        for note in dict.fromkeys(session.plan_notes if resume is None else ()):  # a fresh worker said them already
            run.log.warning(note)
        # which argument gave which ops and how many points: zlf ab splits a run of several ops by it
        per_op = collections.Counter(p.op.name for p in plan)
        run.meta["op_args"] = [{"spec": spec, "ops": names, "points": sum(per_op[n] for n in names)}
                               for spec, names in session.op_args]
        if backend.host_timing and resume is None:
            run.log.info(f"backend {backend.name}: times are host wall-clock of interpreted kernels, not GPU kernel times")
        with lossy_streams():  # a full or closed stdout or stderr costs what it shows, not the run
            progress = Progress(len(plan)) if args.format != "json" else None
            if progress is not None:
                progress.done = start
            records = execute(run, progress, start=start)
    except KeyboardInterrupt as exc:
        last_word(f"\n{stop_word(exc)}; {len(run.records) if run else 0} finished points kept\nrun dir: {rundir.shown}")
        return stop_code(exc)
    except OSError as exc:
        if not disk_full(exc):
            raise
        raise UsageError(f"{exc.strerror or exc} writing {exc.filename or rundir.path}: "
                         f"{len(run.records) if run else 0} finished point(s) kept in {rundir.shown}") from exc
    finally:
        rundir.release()
    print_run_summary(records, args.format, rundir.shown, host_timing=backend.host_timing)
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
    planned_only = _plan_backend(session, args.backend, args.device)
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
        if planned_only:
            print(f"note: {planned_only}")
    return 0


def _plan_backend(session, name, device) -> str:
    """Set up the backend ``zlf ops`` plans for. A backend named (``--backend``/``ZLF_BACKEND``)
    that this machine lacks still plans: its class stands in, never set up, so shapes, dtypes
    and points are listed and nothing touches a device (planning a GPU campaign on a laptop).
    Returns '' or the note that says so."""
    import os

    from .errors import UsageError
    from .session import select_backend

    try:
        session.choose_backend(name, device)
        return ""
    except UsageError as exc:
        if not (name or os.environ.get("ZLF_BACKEND")):
            raise
        cls = select_backend(session.backends(), name, check=False)  # an unknown name is refused here
        session.backend = object.__new__(cls)  # the class's attributes (name, host_timing) only: no device
        session.backend.device_index = device
        return f"planned for backend {cls.name} without its device ({exc}); nothing was allocated"
