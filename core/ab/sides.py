"""The two sides of a campaign and what every run is given: the environment, interpreter and
arguments that tell A from B, the run options re-spelt for ``zlf run``, and the extensions every
run selects."""
from __future__ import annotations

import argparse
import os

from ..console import warn
from ..errors import UsageError
from ..redact import credential_in
from .campaign import Side


def run_pass_through(parser: argparse.ArgumentParser) -> None:
    """Core run options every run of the campaign gets (the same names as ``zlf run``)."""
    g = parser.add_argument_group("passed to every zlf run")
    g.add_argument("--dtype", action="append", metavar="D", help="dtype(s) instead of each op's defaults")
    g.add_argument("--dtypes", dest="dtype", action="append", help=argparse.SUPPRESS)  # FlagGems' spelling
    g.add_argument("--backend", metavar="NAME", help="cpu, cuda, or an extension's backend")
    g.add_argument("--device", type=int, default=0, metavar="N", help="device index (default 0)")
    g.add_argument("--timer", metavar="EXT", help="which extension's time_fn to use")
    g.add_argument("--warmup-ms", type=float, metavar="MS", help="warm-up budget per point")
    g.add_argument("--rep-ms", type=float, metavar="MS", help="measurement budget per point")
    l2 = g.add_mutually_exclusive_group()
    l2.add_argument("--flush-l2", dest="flush_l2", action="store_true", default=None, help="flush L2 before every sample")
    l2.add_argument("--no-flush-l2", dest="flush_l2", action="store_false", help="keep L2 warm between samples")


def _parse_env(items, flag) -> dict:
    env = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r}: expected K=V")
        why = credential_in(key, value)
        if why:  # campaign.json and the report are for sharing; runs inherit the environment anyway
            raise UsageError(f"{flag} {key}=...: {why}, and campaign.json would keep it: "
                             "export it instead (runs inherit the environment, which is never recorded whole)")
        env[key] = value
    return env


def build_sides(args, side_args=None) -> tuple:
    """``(A, B)`` from --switch / --a-env / --b-env / --a-python / --b-python / --aa, and the
    side arguments extensions set (``side_args``: ``{"A": [...], "B": [...]}``, see
    :class:`~zlf.ab.extending.CampaignPlan`)."""
    a_env, b_env = {}, {}
    if args.switch:
        a_env[args.switch], b_env[args.switch] = "0", "1"
    for target, items, flag in ((a_env, args.a_env, "--a-env"), (b_env, args.b_env, "--b-env")):
        for k, v in _parse_env(items, flag).items():
            if args.switch and k == args.switch:
                raise UsageError(f"{flag} {k}=...: {k} is already the --switch")
            target[k] = v
    for flag in ("a_python", "b_python"):
        path = getattr(args, flag)
        if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UsageError(f"--{flag.replace('_', '-')} {path!r} is not an executable file")
    a_args, b_args = (list((side_args or {}).get(name) or ()) for name in ("A", "B"))
    a = Side("A", a_env, os.path.abspath(args.a_python) if args.a_python else "", a_args)
    if args.aa:
        if args.switch or args.b_env or args.b_python or b_args:
            raise UsageError("--aa makes B a copy of A: drop --switch, --b-env, --b-python and B's own arguments"
                             + (f" ({' '.join(b_args)})" if b_args else ""))
        return a, Side("B", dict(a.env), a.python, a.args)
    b = Side("B", b_env, os.path.abspath(args.b_python) if args.b_python else "", b_args)
    if not (args.switch or args.a_env or args.b_env or args.a_python or args.b_python or a_args or b_args):
        raise UsageError("say what differs between the sides: --switch NAME, --a-env/--b-env K=V, "
                         "--a-python/--b-python PATH, an extension's side options, or --aa for an A/A calibration")
    if (a.env, a.interpreter, a.args) == (b.env, b.interpreter, b.args):
        warn("sides A and B are defined identically: this is an A/A campaign (use --aa to say so)")
    return a, b


def pass_through_args(args, hooks, add_core=run_pass_through, own=(), skip=()) -> list:
    """The run options given to ``zlf ab`` (core's and the active extensions'), re-spelt for
    ``zlf run``: argparse actions know how each was written.

    :param add_core: adds the core options to pass on; ``own``: options that are an error here;
        ``skip``: destinations never passed on (a sharded ``zlf run`` sets its own ``--out``).
    """
    scratch = argparse.ArgumentParser(add_help=False)
    add_core(scratch)
    hooks.add_options(scratch, "ab")
    out, done = [], set()
    for action in scratch._actions:
        dest = action.dest
        if dest in done or dest in skip or not action.option_strings or not hasattr(args, dest):
            continue
        value = getattr(args, dest)
        if value is None or value == action.default:
            continue
        if dest in own:
            raise UsageError(f"{action.option_strings[0]} is set by zlf ab itself (an extension gives it to the runs)")
        flag = action.option_strings[0]
        if isinstance(action, (argparse._StoreConstAction, argparse._StoreTrueAction, argparse._StoreFalseAction)):
            if value != action.const:
                continue  # the other flag of a pair (--flush-l2 / --no-flush-l2) spells it
            out.append(flag)
        elif isinstance(action, argparse._CountAction):
            out.extend([flag] * int(value))
        elif isinstance(action, argparse._AppendAction):
            for item in value:
                out.extend([flag, *map(str, item)] if isinstance(item, (list, tuple)) else [flag, str(item)])
        elif isinstance(value, (list, tuple)):
            out.extend([flag, *map(str, value)])
        else:
            out.extend([flag, str(value)])
        done.add(dest)
    return out


def extension_args(hooks, extra=()) -> list:
    """Select in every run exactly the extensions active here (install order never decides),
    and the ``extra`` ones a campaign's runs need (:attr:`CampaignPlan.extensions`)."""
    active = [i.name for i in hooks.infos if i.status == "active"]
    active += [name for name in extra if name not in active]
    if active:
        return [a for name in active for a in ("--ext", name)]
    return [a for i in hooks.infos for a in ("--no-ext", i.name)]


def run_limit_args(args, ops) -> list:
    """``--time-limit``: each ``zlf run``'s per-point limit; ops of other commands (an
    extension's) get it from the extension, as that command spells it."""
    limit = getattr(args, "time_limit", None)
    if limit is None:
        return []
    if not limit >= 0:
        raise UsageError(f"--time-limit {limit:g}: expected seconds >= 0 (0: no limit)")
    return ["--time-limit", str(limit)] if all(o.command == "run" for o in ops) else []


