"""attack46: a third-party extension with one command per combination of traits; each prints
the run settings it was handed (read from the typed config) as JSON."""
from __future__ import annotations

import json

from zlf import CommandTraits, hookimpl

TRAITS = {
    "mk": CommandTraits(makes_inputs=True),
    "plan": CommandTraits(plans_shapes=True),
    "mkplan": CommandTraits(makes_inputs=True, plans_shapes=True),
    "timeonly": CommandTraits(times_points=True),
    "timecfg": CommandTraits(times_points=True, makes_inputs=True, plans_shapes=True, config_file=True),
    "fwd": CommandTraits(times_points=True, forwards_run_options=True),
    "plain": CommandTraits(),
}


def _settings(args, session) -> int:
    config = session.config
    print(json.dumps({"command": args.command, "timer": config.timing.timer, "time_limit_s": config.time_limit_s,
                      "device": config.device, "options": config.options.flat()}, sort_keys=True, default=list))
    return 0


class TraitsExtension:
    @hookimpl
    def add_commands(self, subparsers):
        for name, traits in TRAITS.items():
            p = subparsers.add_parser(f"atk-{name}", help=f"attack46 command ({name})")
            p.set_defaults(handler=_settings, traits=traits)
