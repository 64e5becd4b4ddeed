"""The ``zlf`` command line.

Parsing happens in two steps, as in pytest: ``--ext`` / ``--no-ext`` are read first so that
disabled extensions are blocked before import; then the selected extensions add their options
and sub-commands, and the full command line is parsed.

Exit codes: 0 success, 1 a point failed (or a gate tripped), 2 bad input, 124 a point hung past
``--time-limit`` where it could not be interrupted, 130 interrupted (Ctrl-C), 143 terminated
(SIGTERM; SIGHUP of a supervised ``zlf run``).
"""
from __future__ import annotations

import argparse
import sys
import time

from . import __version__
from .errors import UsageError
from .options import CommandTraits, add_config_argument, add_run_options, add_selection_arguments


class ArgumentParser(argparse.ArgumentParser):
    """argparse that says where an unknown option may have gone: another command, or a disabled
    extension, and that never expands a prefix of a flag (``--warmup`` is not ``--warmup-ms``).

    ``allow_abbrev`` is off on every parser, sub-command parsers included: argparse builds those
    from this class without passing the parent's setting on, so the default is set here.
    """

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    #: names of installed extensions that are not active in this invocation.
    not_active: tuple = ()
    #: the command line being parsed (which command refused an option).
    argv: tuple = ()
    #: ``{command: its parser}``, once built.
    commands: dict = {}

    def _print_message(self, message, file=None):
        """As argparse's, without dropping a failed write: ``zlf --help | head -c0`` is a reader
        gone (141) as every other command's output is; stderr drops what it cannot write itself."""
        if message:
            (file or sys.stderr).write(message)

    def error(self, message):
        """One line, exit 2: ``zlf: error: ...`` (no usage block above it)."""
        import re

        # a flag's type refused its value (zlf.options.Number): "--rep-ms -1: expected ..."
        message = re.sub(r"^argument (-[^:/ ]+)(?:/\S+)?: (.*: expected )", r"\1 \2", message)
        elsewhere = self._elsewhere(message)
        if elsewhere:  # an option this command does not take: one line that says where it belongs
            self.exit(2, f"zlf: error: {elsewhere}\n")
        if "unrecognized arguments" in message and self.not_active:
            message += (f" (options of extensions that are not active here are unavailable: "
                        f"{', '.join(self.not_active)})")
        self.exit(2, f"zlf: error: {message} (see {self._help_of()} --help)\n")

    def _help_of(self) -> str:
        """The prog of the (sub)command the command line names: the top parser reports the
        arguments no subcommand took, and ``zlf --help`` does not list a command's flags."""
        parser = self
        for arg in self.argv:
            if arg.startswith("-"):
                continue
            sub = next((a.choices[arg] for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction) and arg in a.choices), None)
            if sub is None:
                break
            parser = sub
        return parser.prog

    def _elsewhere(self, message: str) -> str:
        if not message.startswith("unrecognized arguments: "):
            return ""
        offered = _offered(self.commands)
        command = next((a for a in self.argv if a in self.commands), None)
        flags = [a.split("=")[0] for a in message.split(": ", 1)[1].split() if a.startswith("--")]
        parts = [f"{f}: an option of {', '.join(f'zlf {c}' for c in offered[f])}"
                 for f in flags if command and offered.get(f) and command not in offered[f]]
        return f"{'; '.join(parts)}, not with zlf {command}" if parts else ""


def _offered(commands: dict) -> dict:
    """``{flag: [commands]}`` over every command's parser (the long flags its usage shows)."""
    import re

    offered: dict = {}
    for name, p in commands.items():
        for flag in dict.fromkeys(re.findall(r"(?<![\w-])(--[A-Za-z0-9][\w-]*)", p.format_usage())):
            offered.setdefault(flag, []).append(name)
    return offered


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def version_text(hooks=None) -> str:
    """What ``zlf --version`` prints: what a measurement was made with, one item a line."""
    import platform

    lines = [f"zlf {__version__}", f"Python {platform.python_version()}",
             f"torch {_dist_version('torch')}", f"triton {_dist_version('triton')}"]
    active = [i for i in (hooks.infos if hooks is not None else ()) if i.status == "active"]
    if active:
        width = max(len(i.name) for i in active)
        lines.append("extensions (active):")
        lines += [f"  {i.name:<{width}}  {i.distribution} {i.version}" for i in active]
    return "\n".join(lines)


class _Version(argparse.Action):
    def __init__(self, option_strings, hooks=None, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)
        self.hooks = hooks

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text(self.hooks))
        parser.exit()


def build_parser(hooks) -> argparse.ArgumentParser:
    """The full command line: every command comes from an ``add_commands`` implementation (core's
    own in :mod:`zlf.commands`); a command's parser defaults say which options it also takes."""
    # A class per invocation: sub-command parsers are made from the parent's class.
    not_active = tuple(i.name for i in hooks.infos if i.status != "active")
    parser_class = type("ArgumentParser", (ArgumentParser,), {"not_active": not_active})
    parser = parser_class(
        prog="zlf",
        description="Did my compiler change make these GPU kernels faster or slower? "
        "Benchmark, compare and A/B Triton kernels across compiler builds.",
    )
    parser.add_argument("--version", action=_Version, hooks=hooks,
                        help="show zlf's, Python's, torch's, triton's and each active extension's version, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    hooks.add_commands(subparsers=sub)
    for p in dict.fromkeys(sub.choices.values()):  # an alias maps to the same parser
        name = p.prog.split()[-1]
        traits = p.get_default("traits") or CommandTraits()
        add_selection_arguments(p)  # every command, core's and the extensions': chosen before parsing
        add_run_options(p, traits)  # core's run options, each declared once
        if traits.forwards_run_options:
            _folded_options(p, hooks, name, traits)  # a campaign passes every run option on to its runs
        elif traits.run_options:
            hooks.add_options(parser=p, command=name, traits=traits)  # the extensions' options that apply
        if traits.config_file:
            add_config_argument(p)  # ... or all of its run settings from a file
        if traits.runs_campaigns:
            hooks.add_campaign_options(parser=p)
    parser_class.commands = dict(sub.choices)
    return parser


def _folded_options(parser, hooks, command: str, traits) -> None:
    """The extensions' run options on ``zlf ab``: accepted and passed on to every run, named in
    one paragraph of the help (``zlf run --help`` explains each) instead of a group apiece."""
    import textwrap

    added = [a for a in hooks.add_options(parser=parser, command=command, traits=traits) if a.option_strings]
    for a in added:
        a.help = argparse.SUPPRESS
    if added:
        flags = ", ".join(max(a.option_strings, key=len) for a in added)
        text = (f"run options of the active extensions, passed on to every run (zlf run --help explains them): "
                f"{flags}")
        parser.epilog = (parser.epilog or "").rstrip("\n") + "\n" + textwrap.fill(text, 100, break_on_hyphens=False) + "\n"


def _preparse(argv):
    """What selects the extensions, read before any is imported: ``--ext`` / ``--no-ext``, or
    the :class:`~zlf.config.RunConfig` file of ``--config FILE`` (returned whole, read once)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--ext", action="append")
    pre.add_argument("--no-ext", action="append")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.config and argv:  # the file of a command's run configuration selects the extensions
        from .config import RunConfig

        config = RunConfig.read(known.config)
        if config.command == argv[0]:
            return config
    return known


def run_config(args, parser, hooks, read=None):
    """The run's :class:`~zlf.config.RunConfig`: from ``--config FILE`` (then no other run option
    may differ from its default but OPs, ``--out``, ``--name`` and ``--format``) or from the
    command line.

    :param read: the file's config when the pre-parse read it already (it is read once).
    """
    from .config import ARGS, RunConfig

    if not getattr(args, "config", None):
        return RunConfig.from_args(args, hooks.option_sets)
    sub = type(parser).commands[args.command]
    # where it goes, how it prints: zlf run's own flags, which another command need not have
    beside = {k: getattr(args, k) for k in ("out", "name", "format") if hasattr(args, k)}
    given = _settings_given(args, hooks.option_sets, set(beside) | {"ops", "command"})
    if given:
        flags = ", ".join(given)
        raise UsageError(f"--config {args.config}: also given on the command line: {flags}; "
                         "put run settings in the file, or drop --config")
    config = (read if isinstance(read, RunConfig) else RunConfig.read(args.config)).bound(hooks.option_sets)
    if config.command != args.command:
        raise UsageError(f"--config {args.config}: a configuration of zlf {config.command}, not of zlf {args.command}")
    given = {ARGS[k]: v for k, v in beside.items() if v != sub.get_default(k)}
    if getattr(args, "ops", None):  # what it runs (a campaign's run: the ops of its process)
        given["ops"] = tuple(args.ops)
    return config.with_changes(**given) if given else config


def _settings_given(args, option_sets, beside) -> list:
    """The flags of the run settings on the command line that are not at their defaults (core's
    options spell their ``dest``; an extension's, its declared flag)."""
    from .config import ARGS, RunConfig

    config, plain = RunConfig.from_args(args, option_sets), RunConfig().bound(option_sets)

    def value(c, dest):
        section, _, name = ARGS[dest].rpartition(".")
        return getattr(c.timing if section else c, name)

    flags = [f"--{dest.replace('_', '-')}" for dest in sorted(set(ARGS) - set(beside)) if value(config, dest) != value(plain, dest)]
    ours, theirs = config.options.flat(), plain.options.flat()
    return flags + [o.flag for s in option_sets for o in s.options if ours.get(o.dest) != theirs.get(o.dest)]


#: when this process entered zlf's main (unix time): the end of its start, for a run's time split
#: (:class:`zlf.run.TimeSplit`)
ENTERED = None
#: how long this process took to get there (interpreter start, zlf's first imports), None if unknown
STARTUP_S = None


def main(argv=None, extra_plugins=(), supervise=None) -> int:
    """Entry point of the ``zlf`` console script; returns the exit code.

    :param supervise: run ``zlf run``'s points in a worker process under a supervising parent
        (:mod:`zlf.supervise`); default: when ``argv`` is None, i.e. this process is zlf. A caller
        that passes ``argv`` runs them in its own process, as a library call would expect, and
        gets back what the command changed for itself: its standard streams and descriptors
        (:func:`zlf.streams.held`), signal handlers, environment and random generators.
    """
    import os
    import signal

    from . import streams
    from .procs import handle_stops, process_age
    from .seeding import global_states, restore_global_states

    global ENTERED, STARTUP_S
    if ENTERED is None:
        ENTERED, STARTUP_S = time.time(), process_age()
    own_process = argv is None  # the console script: this process is zlf's own
    supervise = own_process if supervise is None else supervise
    argv = list(sys.argv[1:] if argv is None else argv)
    with streams.held(own_process):
        previous = handle_stops()  # SIGTERM and SIGHUP stop like Ctrl-C: what is finished is kept and marked, exit 143
        environ = dict(os.environ)
        generators = global_states()
        try:
            return guarded(lambda: _main(argv, extra_plugins, supervise), own_process=own_process)
        finally:
            for signum, handler in previous.items():  # an in-process caller (a test) gets its own handlers back
                if handler is not None:
                    signal.signal(signum, handler)
            # ... and its own environment: what the command set for itself (the cpu backend's
            # TRITON_INTERPRET, needed while its kernels are decorated) would reach the caller's next
            # commands and every process it starts
            if dict(os.environ) != environ:
                os.environ.clear()
                os.environ.update(environ)
            # ... and its random generators as they were (a run seeds them for its points' inputs)
            restore_global_states(generators)


def _complete(parser) -> None:
    """Shell completion (argcomplete): answers and exits when the shell asks, else does nothing.
    Activate once per shell: ``eval "$(register-python-argcomplete zlf)"``."""
    try:
        import argcomplete
    except ImportError:  # an install without it has no completion, nothing else is missing
        return
    argcomplete.autocomplete(parser)


def guarded(call, own_process: bool = True) -> int:
    """``call()``'s exit code, with what the command line makes of errors: a UsageError is one
    line and 2, Ctrl-C 130, SIGTERM or SIGHUP 143, stdout's reader gone (a pipe, a socket, a
    terminal) 141 and nothing said, a stdout not open for writing or a full disk one line and 2,
    another pipe that broke one line and 1. The lines go to a stderr that may be gone too
    (:func:`zlf.streams.last_word`); the code stays what it says.

    :param own_process: this process is zlf's own (the console script, a worker): with stdout's
        reader gone, descriptor 1 is pointed at /dev/null for the interpreter's last flush; an
        in-process caller's descriptors are left as they are.
    """
    from . import streams
    from .console import clean
    from .procs import stop_code, stop_word
    from .rundir import disk_full

    try:
        return call()
    except UsageError as exc:
        streams.last_word(f"zlf: error: {exc}")
        return 2
    except KeyboardInterrupt as exc:
        streams.last_word(f"\nzlf: {stop_word(exc)}")
        return stop_code(exc)
    except OSError as exc:
        if streams.reader_gone(exc):  # `zlf compare A B | head`, a terminal window closed: as cat(1) does
            if own_process:
                streams.quiet_stdout()
            return 141
        if streams.stdout_unwritable(exc):
            streams.last_word("zlf: error: stdout is not open for writing")
            return 2
        if disk_full(exc):
            # A full disk (or a file-size limit) is the place given, not a bug: what was written stays.
            streams.last_word(f"zlf: error: {exc.strerror or exc}" + (f" writing {exc.filename}" if exc.filename else ""))
            return 2
        if isinstance(exc, BrokenPipeError):  # another pipe or socket (a plugin's own): an error
            streams.last_word(f"zlf: error: {clean(str(exc))}")
            return 1
        raise


def _main(argv, extra_plugins, supervise: bool = False) -> int:
    from .session import Session

    tolerant = bool(argv) and argv[0] == "plugins"
    pre = _preparse(argv)
    session = Session.create(pre, extra_plugins=extra_plugins, tolerant=tolerant)
    parser = build_parser(session.hooks)
    type(parser).argv = tuple(argv)
    _complete(parser)
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    config = run_config(args, parser, session.hooks, read=pre)
    if getattr(args, "config", None):
        args = config.namespace(args)
    session.options = args
    session.config = config
    session.supervise = supervise
    session.argv = tuple(argv)
    if session.traits.run_options:
        config.check()  # every run setting refused here, once, before any command creates anything
    session.hooks.configure(session)
    return int(args.handler(args, session) or 0)


if __name__ == "__main__":
    sys.exit(main())
