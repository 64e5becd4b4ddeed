"""A third-party extension core and the other extensions have never heard of: ``zlf bench``, a
command of its own that times points (and makes their inputs, and plans their shapes).

It says what it does (:class:`zlf.CommandTraits`), never which options it wants: seeding, the
timers' options and shape files come to it as they come to ``zlf run``
(tests/test_thirdparty_command.py).
"""
from __future__ import annotations

import json

from zlf import CommandTraits, hookimpl

#: bench times points, makes their inputs and plans their shapes, in this process
BENCH = CommandTraits(times_points=True, makes_inputs=True, plans_shapes=True)
#: probe times points it is handed (no inputs of its own, no shapes planned)
PROBE = CommandTraits(times_points=True)


def _settings(args, session) -> int:
    """Print the run settings the command was given, read from the typed config."""
    config = session.config
    print(json.dumps({"command": args.command, "timer": config.timing.timer, "time_limit_s": config.time_limit_s,
                      "options": config.options.flat()}, sort_keys=True, default=list))
    return 0


class BenchExtension:
    @hookimpl
    def add_commands(self, subparsers):
        for name, traits in (("bench", BENCH), ("probe", PROBE)):
            p = subparsers.add_parser(name, help=f"a third party's command ({name})")
            p.set_defaults(handler=_settings, traits=traits)
