"""attack46: a third-party extension that adds campaign options of several kinds (and one run
option with a string default, as argparse documents), and records what campaign_setup and
after_campaign receive (SEEN, in this process)."""
from __future__ import annotations

import argparse
from pathlib import Path

from zlf import hookimpl
from zlf.options import Number

#: what the campaign hooks were handed: [(hook, options)]
SEEN: list = []


class CampaignKinds:
    @hookimpl
    def add_campaign_options(self, parser):
        g = parser.add_argument_group("attack46 (third-party test extension)")
        g.add_argument("--atk-count", type=int, default=3, help="an int")
        g.add_argument("--atk-ratio", type=float, default=0.25, help="a float")
        g.add_argument("--atk-flag", action="store_true", help="a flag")
        g.add_argument("--atk-off", action="store_false", dest="atk_on", help="a flag that clears")
        g.add_argument("--atk-tag", action="append", default=None, help="repeatable")
        g.add_argument("--atk-mode", choices=("fast", "slow"), default="fast", help="a choice")
        g.add_argument("--atk-pair", nargs=2, type=int, metavar=("LO", "HI"), help="two ints")
        g.add_argument("--atk-verbose", "-V", action="count", default=0, help="counted")
        g.add_argument("--atk-path", type=Path, help="a path")
        g.add_argument("--atk-level", action="store_const", const=7, help="a constant")
        g.add_argument("--atk-half", type=float, default="0.5", help="a float whose default is a string")

    @hookimpl
    def campaign_setup(self, plan, options, session):
        SEEN.append(("campaign_setup", options))

    @hookimpl
    def after_campaign(self, campaign, results, options, session):
        SEEN.append(("after_campaign", options))


class RunKinds:
    """Run options (add_options) of kinds argparse documents: a float whose default is a string
    (argparse converts it), and a path."""

    @hookimpl
    def add_options(self, parser, traits):
        if not traits.times_points:
            return
        g = parser.add_argument_group("attack46 run options (third-party test extension)")
        # docs/extensions.md: a numeric option takes a zlf.options.Number; argparse converts a
        # string default through type= as it converts a given value
        g.add_argument("--atk-run-half", type=Number(float, 0, 1), default="0.5",
                       help="a float whose default is a string")
        g.add_argument("--atk-run-path", type=Path, help="a path")
