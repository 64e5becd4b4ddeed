"""The options core gives commands: extension selection on every command, and the options of
a command that starts runs (``zlf run``; ``zlf ab`` and ``zlf task`` check theirs the same way)."""
from __future__ import annotations

import argparse


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


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``zlf run`` that core owns (``zlf ab`` passes them through)."""
    parser.add_argument("ops", nargs="*", metavar="OP",
                        help="built-in op (add, softmax, matmul), FILE.py[::NAME], or a name an extension knows; default: the built-in suite")
    add_dtype_argument(parser)
    parser.add_argument("--out", default="runs", metavar="PARENT", help="parent of the run directory (default: runs/)")
    parser.add_argument("--name", metavar="LABEL",
                        help="run directory label (default: the op, the op file's name, or 'suite')")
    parser.add_argument("--backend", metavar="NAME", help="cpu, cuda, or an extension's backend (default: detected)")
    parser.add_argument("--device", type=int, default=0, metavar="N", help="device index (default 0)")
    add_timing_arguments(parser.add_argument_group("timing (core's direct timer)"))
    parser.add_argument("--time-limit", type=float, metavar="SEC",
                        help="per-point limit (inputs, check and timing); past it the point is FAILED (time limit) "
                             "and the run goes on; 0: none (default: 600 on GPU backends, 1800 on cpu)")
    parser.add_argument("--check", choices=CHECK_MODES, default="fail",
                        help="a point whose result fails the reference check: fail (FAILED, not timed; default) or "
                             "warn (timed anyway, its record marked UNCHECKED with the check's error)")
    from .output import add_format_argument

    add_format_argument(parser)


#: the help of each timing option, as ``zlf run --help`` gives it.
TIMING_HELP = {
    "timer": "which timer to use: an extension's time_fn (cudagraph), a kernel-activity timer (cupti), "
             "or core (core's event timer)",
    "warmup_ms": "warm-up budget per point (default: backend's, 25 on GPU)",
    "rep_ms": "measurement budget per point (default: backend's, 100 on GPU)",
    "flush_l2": "flush L2 before every sample (direct timer's default on GPUs)",
    "no_flush_l2": "keep L2 warm between samples",
    "input_copies": "with L2 flushed, core's timers cycle each point's calls through N sets of its inputs (the "
                    "inputs and copies elsewhere in device memory, 1 GiB of copies at most): a short kernel's "
                    "time depends on where its inputs live, and one allocation is one draw per process; "
                    "1: the inputs alone (default 32)",
}


def add_timing_arguments(group, helps=None, copies: bool = True) -> None:
    """``--timer``, ``--warmup-ms``, ``--rep-ms``, ``--flush-l2`` / ``--no-flush-l2`` and
    ``--input-copies``: how every point is timed (:class:`zlf.config.TimingBudget`), on every
    command that starts runs.

    :param group: the parser or argument group to add them to.
    :param helps: ``{name: text}`` replacing a :data:`TIMING_HELP` text where a command says it
        its own way (names as in :data:`TIMING_HELP`).
    :param copies: offer ``--input-copies`` (False where no point's call can be made on other
        inputs, as with a task's candidates).
    """
    text = {**TIMING_HELP, **(helps or {})}
    group.add_argument("--timer", metavar="EXT", help=text["timer"])
    group.add_argument("--warmup-ms", type=float, metavar="MS", help=text["warmup_ms"])
    group.add_argument("--rep-ms", type=float, metavar="MS", help=text["rep_ms"])
    l2 = group.add_mutually_exclusive_group()
    l2.add_argument("--flush-l2", dest="flush_l2", action="store_true", default=None, help=text["flush_l2"])
    l2.add_argument("--no-flush-l2", dest="flush_l2", action="store_false", help=text["no_flush_l2"])
    if copies:
        group.add_argument("--input-copies", type=int, metavar="N", help=text["input_copies"])


def add_dtype_argument(parser, help_text: str = "dtype(s) to run instead of each op's defaults "
                                                "(repeatable or comma-separated)") -> None:
    """``--dtype D`` (``--dtypes``, FlagGems' spelling, is a hidden alias kept for a release)."""
    parser.add_argument("--dtype", action="append", metavar="D", help=help_text)
    parser.add_argument("--dtypes", dest="dtype", action="append", help=argparse.SUPPRESS)


def split_dtypes(values) -> list:
    """``--dtype`` values (repeatable, comma-separated) as one list of names."""
    return [d.strip() for v in values or () for d in v.split(",") if d.strip()]


def check_run_options(args) -> None:
    """One-line refusals of run options that argparse accepts but no run can use (``zlf run``,
    ``zlf ab`` and ``zlf task`` call it before they create anything)."""
    from .config import RunConfig

    RunConfig.from_args(args).check()
