"""The two sides of a campaign and what every run is given: the environment, interpreter and
arguments that tell A from B, and each side's run configuration (:class:`zlf.config.RunConfig`:
the run options given to ``zlf ab``, the extensions every run selects, what extensions set)."""
from __future__ import annotations

import argparse
import os
from typing import Optional

from ..config import RunConfig, owned_options
from ..console import warn
from ..errors import UsageError
from ..options import env_name
from ..redact import credential_in
from .campaign import Side


def _parse_env(items, flag) -> dict:
    env = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r}: expected K=V")
        try:
            env_name(key)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"{flag} {exc}") from None
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


#: run settings of the ``zlf ab`` command line that are the campaign's, never its runs'.
CAMPAIGN_OWN = {"ops": (), "out": "runs", "name": None, "summary_format": "table", "gpus": None, "executor": None,
                "ray_address": None, "retries": None}


def side_configs(args, hooks, plan, sides, config: Optional[RunConfig] = None) -> dict:
    """``{side name: RunConfig}``: what every run of each side is given (``zlf run --config``).

    The run options given to ``zlf ab`` (core's and the extensions', typed as declared), the
    extensions every run selects, and the plan's option values (:class:`CampaignPlan.options`);
    a run option the campaign sets itself (``plan.own_options``) is refused when given here.
    ``config``: the run settings the command line gave, built once (``session.config``); read
    from ``args`` only when not given.
    """
    sets = hooks.option_sets
    for dest in plan.own_options:
        option = next((o for s in sets for o in s.options if o.dest == dest), None)
        if option is not None and getattr(args, dest, None) not in (None, option.default):
            raise UsageError(f"{option.flag} is set by zlf ab itself (an extension gives it to the runs)")
    commands = sorted({o.command for o in plan.ops})
    if len(commands) > 1:
        raise UsageError(f"the ops of one campaign run one command, not {' and '.join(commands)}")
    config = (config if config is not None else RunConfig.from_args(args, sets)).with_changes(
        command=commands[0] if commands else "run", **CAMPAIGN_OWN, **selection(hooks, plan.extensions))
    config = config.with_options(owned_options(plan.options, sets, "a campaign's option"))
    config.check()  # with the extensions' option values of the plan
    return {side.name: config for side in sides}


def selection(hooks, extra=()) -> dict:
    """``ext`` / ``no_ext`` of every run: exactly the extensions active here (install order
    never decides), and the ``extra`` ones a campaign's runs need (:attr:`CampaignPlan.extensions`)."""
    active = [i.name for i in hooks.infos if i.status == "active"]
    active += [name for name in extra if name not in active]
    if active:
        return {"ext": tuple(active), "no_ext": None}
    return {"ext": None, "no_ext": tuple(i.name for i in hooks.infos)}
