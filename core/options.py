"""The options core gives commands: extension selection on every command, what a command does
(:class:`CommandTraits`), and core's run options, each declared once (:func:`add_run_options`)
on every command whose traits they apply to."""
from __future__ import annotations

import argparse
import math
import re
from typing import Optional

import attrs


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """``--ext`` / ``--no-ext``: read before parsing (``zlf.cli``), accepted by every command
    (``zlf.cli.build_parser`` adds them to each; a parser that has them already is left as is)."""
    if "--ext" in parser._option_string_actions:
        return
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


@attrs.frozen
class Number:
    """The ``type=`` of every numeric flag: a finite ``kind`` (int or float) from ``low`` to
    ``high``, else one line that names the flag, the value and what it takes (argparse's exit 2).
    ``nan``, ``inf``, ``1e300`` seconds and an int spelt ``1e26`` are refused at parse time, and
    :meth:`check` refuses the same values where they come from a file (a RunConfig, campaign.json).

    :param low_open: ``low`` itself is refused (a positive number when ``low`` is 0);
        ``high_open`` likewise.
    :param unit: what the number counts, for the message (``seconds``, ``ms``, ``percent``).
    :param note: appended to the message (``0: no limit``).
    """

    kind: type = float
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    unit: str = ""
    #: ``high`` itself is refused (a probability below 1)
    high_open: bool = False
    note: str = ""
    flag: str = ""

    def expected(self) -> str:
        def num(x) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        noun = "a whole number" if self.kind is int else "a number"
        if self.low == 0:
            noun = f"a {'positive' if self.low_open else 'non-negative'} {noun[2:]}"
        of = f" of {self.unit}" if self.unit else ""
        below = "below" if self.high_open else "up to"
        if self.low is not None and self.low != 0 and self.high is not None:
            bounds = f" {'above' if self.low_open else 'from'} {num(self.low)} {below} {num(self.high)}"
        elif self.low is not None and self.low != 0:
            bounds = f" {'above' if self.low_open else 'of at least'} {num(self.low)}"
        else:
            bounds = f" {below} {num(self.high)}" if self.high is not None else ""
        return f"{noun}{of}{bounds}" + (f" ({self.note})" if self.note else "")

    def why_not(self, value) -> str:
        """'' when ``value`` is one this flag takes, else what it takes."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (self.kind is int and not isinstance(value, int)):
            return self.expected()
        if not math.isfinite(value):
            return self.expected()
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return self.expected()
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return self.expected()
        return ""

    def check(self, value, flag: str = ""):
        """``value`` (None passes), or a one-line :class:`~zlf.errors.UsageError`."""
        from .errors import UsageError

        if value is None:
            return value
        why = self.why_not(value)
        if why:
            raise UsageError(f"{flag or self.flag} {value!r}: expected {why}")
        return value

    def __call__(self, text: str):
        try:
            value = self.kind(text.strip())
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{_shown(text)}: expected {self.expected()}") from None
        why = self.why_not(value)
        if why:
            raise argparse.ArgumentTypeError(f"{_shown(text)}: expected {why}")
        return value


#: the ranges of numbers many flags share
SECONDS = 7 * 24 * 3600  # a week: past it a limit is a typo, and timers overflow long before 1e300
MS = 3600 * 1000  # an hour of warm-up or measurement per point
#: a random seed: what numpy, random and torch all take
SEED = Number(int, 0, 2**32 - 1, flag="--seed")

#: every numeric run setting: ``{RunConfig field: (flag, its Number)}`` (``timing.X``: a
#: TimingBudget field). The flag's ``type=`` (:func:`add_run_options`) and
#: :meth:`zlf.config.RunConfig.check` (a config file's values) take the same range from here.
NUMBERS = {
    "device": ("--device", Number(int, 0, 4095)),
    "time_limit_s": ("--time-limit", Number(float, 0, SECONDS, unit="seconds", note="0: no limit")),
    "retries": ("--retries", Number(int, 0, 100)),
    "timing.warmup_ms": ("--warmup-ms", Number(float, 0, MS, unit="ms")),
    "timing.rep_ms": ("--rep-ms", Number(float, 0, MS, low_open=True, unit="ms")),
    "timing.warmup": ("--warmup-calls", Number(int, 0, 10**6, unit="calls")),
    "timing.iters": ("--iters", Number(int, 1, 10**6, unit="calls")),
    "timing.input_copies": ("--input-copies", Number(int, 1, 4096, note="1: no copies")),
    "timing.max_noise": ("--max-noise", Number(float, 0, 100, low_open=True, unit="percent")),
}


def number_type(flag: str) -> Number:
    """The ``type=`` of run setting ``flag`` (:data:`NUMBERS`)."""
    return next(attrs.evolve(n, flag=f) for f, n in NUMBERS.values() if f == flag)


def deprecated(container, old: str, new: str, **kwargs):
    """Accept ``old``, an older spelling of ``new``, for a release: hidden from ``--help``, and a
    one-line note on stderr each time it is used (``zlf: note: --json is deprecated: use
    --format json``). ``kwargs`` are ``add_argument``'s, as for ``new`` (``dest`` included)."""
    kind = kwargs.pop("action", "store")
    base = argparse._StoreAction if kind == "store" else parser_action(container, kind)

    class Deprecated(base):
        def __call__(self, parser, namespace, values, option_string=None):
            import sys

            print(f"zlf: note: {option_string} is deprecated: use {new}", file=sys.stderr)
            super().__call__(parser, namespace, values, option_string)

    return container.add_argument(old, action=Deprecated, help=argparse.SUPPRESS, **kwargs)


def parser_action(container, name: str):
    """The argparse Action class registered for ``action=name`` (``append``, ``store_const`` ...)."""
    return container._registry_get("action", name)


def _shown(text: str) -> str:
    """A value from the command line as a message shows it: control characters escaped, cut short."""
    from .console import clean as escaped

    text = escaped(text)
    return text if len(text) <= 40 else text[:37] + "..."


def env_name(text: str) -> str:
    """The ``type=`` of a flag that names an environment variable (``--switch``): letters, digits
    and ``_``, not starting with a digit."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text or ""):
        raise argparse.ArgumentTypeError(f"{_shown(text)}: expected an environment variable name "
                                         "(letters, digits and _, not starting with a digit)")
    return text


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
    add_check_argument(parser)


def add_check_argument(parser, help: str = "a point whose result fails the reference check: fail (FAILED, not "
                                           "timed; default) or warn (timed anyway, its record marked UNCHECKED "
                                           "with the check's error)") -> None:
    """``--check`` (declared here only: ``zlf run``'s, and a command's that passes it on to runs)."""
    parser.add_argument("--check", choices=CHECK_MODES, default="fail", help=help)


def add_backend_argument(parser, help: str = "cpu, cuda, or an extension's backend (default: detected)") -> None:
    """``--backend NAME`` (declared here only: the run options', and a command's that picks a device)."""
    parser.add_argument("--backend", metavar="NAME", help=help)


def add_device_argument(parser) -> None:
    """``--device N`` (declared here only)."""
    parser.add_argument("--device", type=number_type("--device"), default=0, metavar="N", help="device index (default 0)")


def add_time_limit_argument(parser, help: str = "", default=None) -> None:
    """``--time-limit SEC`` (declared here only: the run options', and a command's that passes it
    on to runs with a default of its own)."""
    parser.add_argument("--time-limit", type=number_type("--time-limit"), default=default, metavar="SEC",
                        help=help or TIMING_HELP["time_limit"])


#: the help of each timing option, as ``zlf run --help`` gives it.
TIMING_HELP = {
    "timer": "which timer to use: an extension's time_fn (cudagraph), a kernel-activity timer (cupti), "
             "or core (core's event timer)",
    "warmup_ms": "warm-up budget per point, in ms (default: backend's, 25 on GPU)",
    "rep_ms": "measurement budget per point, in ms (default: backend's, 100 on GPU)",
    "max_noise": "core's direct timer stops sampling a point once the 95 %% interval of its median, from its "
                 "samples' order statistics, is within PCT %% of the median (nvbench's --max-noise, on the "
                 "median's interval), and once the medians of the samples' first and second halves agree "
                 "within PCT %% too: at least a quarter of --rep-ms (nvbench's --min-time), 20 samples and "
                 "one cycle of the input copies, at most --rep-ms; records.extra.sampling says what stopped it (default: off, --rep-ms for every point)",
    "flush_l2": "flush L2 before every sample (direct timer's default on GPUs)",
    "no_flush_l2": "keep L2 warm between samples",
    "input_copies": "with L2 flushed, core's timers cycle each point's calls through N sets of its inputs (the "
                    "inputs and copies elsewhere in device memory, 1 GiB of copies at most): a short kernel's "
                    "time depends on where its inputs live, and one allocation is one draw per process; "
                    "1: the inputs alone (default 32)",
    "time_limit": "per-point limit in s (inputs, check and timing); past it the point is FAILED (time limit) and "
                  "the run goes on; 0: none (default: 600 on GPU backends, 1800 on cpu; zlf task: a case's limit, "
                  "above 0, default the package's time_limit_s, else 60)",
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
    add_backend_argument(g)
    add_device_argument(g)
    if not traits.times_points:
        return
    t = parser.add_argument_group("timing (core's direct timer unless --timer names another)")
    t.add_argument("--timer", metavar="EXT", help=TIMING_HELP["timer"])
    t.add_argument("--warmup-ms", type=number_type("--warmup-ms"), metavar="MS", help=TIMING_HELP["warmup_ms"])
    t.add_argument("--rep-ms", type=number_type("--rep-ms"), metavar="MS", help=TIMING_HELP["rep_ms"])
    t.add_argument("--max-noise", type=number_type("--max-noise"), metavar="PCT", help=TIMING_HELP["max_noise"])
    l2 = t.add_mutually_exclusive_group()
    l2.add_argument("--flush-l2", dest="flush_l2", action="store_true", default=None, help=TIMING_HELP["flush_l2"])
    l2.add_argument("--no-flush-l2", dest="flush_l2", action="store_false", help=TIMING_HELP["no_flush_l2"])
    if traits.plans_shapes:
        t.add_argument("--input-copies", type=number_type("--input-copies"), metavar="N", help=TIMING_HELP["input_copies"])
    add_time_limit_argument(t)


def add_dtype_argument(parser, help_text: str = "dtype(s) to run instead of each op's defaults "
                                                "(repeatable or comma-separated)") -> None:
    """``--dtype D`` (``--dtypes``, FlagGems' spelling, is a hidden alias kept for a release)."""
    parser.add_argument("--dtype", action="append", metavar="D", help=help_text)
    deprecated(parser, "--dtypes", "--dtype", dest="dtype", action="append")  # FlagGems' spelling


def split_dtypes(values) -> list:
    """``--dtype`` values (repeatable, comma-separated) as one list of names."""
    return [d.strip() for v in values or () for d in v.split(",") if d.strip()]
