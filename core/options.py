"""The options core gives commands: extension selection on every command, what a command does
(:class:`CommandTraits`), and core's run options, each declared once (:func:`add_run_options`)
on every command whose traits they apply to."""
from __future__ import annotations

import argparse

import attrs


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """``--ext`` / ``--no-ext``: read before parsing (``zlf.cli``), accepted by every command."""
    g = parser.add_argument_group("extension selection")
    g.add_argument("--ext", action="append", metavar="NAME",
                   help="use exactly these extensions (repeatable; also ZLF_EXTENSIONS=a,b)")
    g.add_argument("--no-ext", action="append", metavar="NAME",
                   help="disable an extension before it is imported (repeatable; also ZLF_DISABLE=a,b); always wins")


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    """``--config FILE``: every command that starts runs takes its run settings from a file
    (:class:`zlf.config.RunConfig`; ``zlf.cli.run_config`` reads it)."""
    parser.add_argument("--config", metavar="FILE",
                        help="run the settings of a RunConfig JSON file (zlf.config; written by RunConfig.write); "
                             "no other run option may be given with it but OPs, --out, --name and --format, which "
                             "override the file's (what runs, where it goes and how it prints)")


#: --check: what a failed reference check does to a point
CHECK_MODES = ("fail", "warn")


@attrs.frozen
class CommandTraits:
    """What a command does: what the command line builder and every ``add_options``
    implementation ask, never the command's name (a third party's command that times points
    gets the timing options as ``zlf run`` does).

    A command declares them where it is added: ``parser.set_defaults(handler=...,
    traits=CommandTraits(times_points=True, ...))``.
    """

    #: its points are timed, by it or by the runs it starts: timers' options apply
    times_points: bool = False
    #: it makes the inputs of its points: seeding applies
    makes_inputs: bool = False
    #: it resolves OPs and plans their shapes and dtypes: shape files, op sources apply
    plans_shapes: bool = False
    #: it starts ``zlf run`` processes and hands them its run options (``zlf ab``): it runs no point itself
    forwards_run_options: bool = False
    #: it takes its run settings from a :class:`zlf.config.RunConfig` file (``--config FILE``)
    config_file: bool = False
    #: it runs campaigns: ``add_campaign_options`` applies
    runs_campaigns: bool = False

    @property
    def run_options(self) -> bool:
        """Whether run options (core's and every ``add_options``) apply at all."""
        return self.times_points or self.makes_inputs or self.plans_shapes or self.forwards_run_options

    @property
    def runs_points_here(self) -> bool:
        """Whether this process times points (not only the runs it starts)."""
        return self.times_points and not self.forwards_run_options


#: what ``zlf run`` does: the traits an option set is declared for when no command is named
RUN_TRAITS = CommandTraits(times_points=True, makes_inputs=True, plans_shapes=True, config_file=True)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``zlf run`` that are its own (what runs, where it goes, how a failed check counts);
    the run options it shares with other commands come from :func:`add_run_options`."""
    parser.add_argument("ops", nargs="*", metavar="OP",
                        help="built-in op (add, softmax, matmul), FILE.py[::NAME], or a name an extension knows; default: the built-in suite")
    parser.add_argument("--out", default="runs", metavar="PARENT", help="parent of the run directory (default: runs/)")
    parser.add_argument("--name", metavar="LABEL",
                        help="run directory label (default: the op, the op file's name, or 'suite')")
    parser.add_argument("--check", choices=CHECK_MODES, default="fail",
                        help="a point whose result fails the reference check: fail (FAILED, not timed; default) or "
                             "warn (timed anyway, its record marked UNCHECKED with the check's error)")
    from .output import add_format_argument

    add_format_argument(parser)


#: the help of each timing option, as ``zlf run --help`` gives it.
TIMING_HELP = {
    "timer": "which timer to use: an extension's time_fn (cudagraph), a kernel-activity timer (cupti), "
             "or core (core's event timer)",
    "warmup_ms": "warm-up budget per point, in ms (default: backend's, 25 on GPU)",
    "rep_ms": "measurement budget per point, in ms (default: backend's, 100 on GPU)",
    "flush_l2": "flush L2 before every sample (direct timer's default on GPUs)",
    "no_flush_l2": "keep L2 warm between samples",
    "input_copies": "with L2 flushed, core's timers cycle each point's calls through N sets of its inputs (the "
                    "inputs and copies elsewhere in device memory, 1 GiB of copies at most): a short kernel's "
                    "time depends on where its inputs live, and one allocation is one draw per process; "
                    "1: the inputs alone (default 32)",
    "time_limit": "per-point limit in s (inputs, check and timing); past it the point is FAILED (time limit) and "
                  "the run goes on; 0: none (default: 600 on GPU backends, 1800 on cpu; zlf task: the package's "
                  "time_limit_s, else 60)",
}


def add_run_options(parser: argparse.ArgumentParser, traits: CommandTraits) -> None:
    """Core's run options, each declared here once, on every command whose ``traits`` they apply
    to (the builder calls this before the extensions' ``add_options``); their values are read
    from :class:`zlf.config.RunConfig` and checked by :meth:`~zlf.config.RunConfig.check`.

    ``--dtype`` where OPs are planned; ``--backend``/``--device`` wherever run options apply;
    the timing options and ``--time-limit`` where points are timed (``--input-copies`` where
    the points are ops' calls, which can be made on other inputs; a task's candidates cannot).
    """
    if not traits.run_options:
        return
    g = parser.add_argument_group("run options")
    if traits.plans_shapes:
        add_dtype_argument(g)
    g.add_argument("--backend", metavar="NAME", help="cpu, cuda, or an extension's backend (default: detected)")
    g.add_argument("--device", type=int, default=0, metavar="N", help="device index (default 0)")
    if not traits.times_points:
        return
    t = parser.add_argument_group("timing (core's direct timer unless --timer names another)")
    t.add_argument("--timer", metavar="EXT", help=TIMING_HELP["timer"])
    t.add_argument("--warmup-ms", type=float, metavar="MS", help=TIMING_HELP["warmup_ms"])
    t.add_argument("--rep-ms", type=float, metavar="MS", help=TIMING_HELP["rep_ms"])
    l2 = t.add_mutually_exclusive_group()
    l2.add_argument("--flush-l2", dest="flush_l2", action="store_true", default=None, help=TIMING_HELP["flush_l2"])
    l2.add_argument("--no-flush-l2", dest="flush_l2", action="store_false", help=TIMING_HELP["no_flush_l2"])
    if traits.plans_shapes:
        t.add_argument("--input-copies", type=int, metavar="N", help=TIMING_HELP["input_copies"])
    t.add_argument("--time-limit", type=float, metavar="SEC", help=TIMING_HELP["time_limit"])


def add_dtype_argument(parser, help_text: str = "dtype(s) to run instead of each op's defaults "
                                                "(repeatable or comma-separated)") -> None:
    """``--dtype D`` (``--dtypes``, FlagGems' spelling, is a hidden alias kept for a release)."""
    parser.add_argument("--dtype", action="append", metavar="D", help=help_text)
    parser.add_argument("--dtypes", dest="dtype", action="append", help=argparse.SUPPRESS)


def split_dtypes(values) -> list:
    """``--dtype`` values (repeatable, comma-separated) as one list of names."""
    return [d.strip() for v in values or () for d in v.split(",") if d.strip()]
