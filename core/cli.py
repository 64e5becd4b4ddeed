"""The ``zlf`` command line.

Parsing happens in two steps, as in pytest: ``--ext`` / ``--no-ext`` are read first so that
disabled extensions are blocked before import; then the selected extensions add their options
and sub-commands, and the full command line is parsed.

Exit codes: 0 success, 1 a point failed (or a gate tripped), 2 bad input, 124 a point hung past
``--time-limit`` where it could not be interrupted, 130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""
from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import UsageError
from .options import check_run_options  # noqa: F401  (zlf ab imports it from here)


class ArgumentParser(argparse.ArgumentParser):
    """argparse that says where an unknown option may have gone: a disabled extension."""

    #: names of installed extensions that are not active in this invocation.
    not_active: tuple = ()

    def error(self, message):
        if "unrecognized arguments" in message and self.not_active:
            message += (f" (options of extensions that are not active here are unavailable: "
                        f"{', '.join(self.not_active)})")
        super().error(message)


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
    parser.add_argument("--version", action="version", version=f"zlf {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    hooks.add_commands(subparsers=sub)
    for p in dict.fromkeys(sub.choices.values()):  # an alias maps to the same parser
        if p.get_default("run_options"):
            hooks.add_options(parser=p)  # a command that starts runs takes every run option
        if p.get_default("campaign_options"):
            hooks.add_campaign_options(parser=p)
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
