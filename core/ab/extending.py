"""What extensions hand to a campaign through the ``campaigns`` hooks (see :mod:`zlf.hookspecs`).

:class:`CampaignPlan` is what ``campaign_setup`` may change while a new campaign is built;
:class:`RunNeed` is what ``campaign_run_needs`` returns for one run.
"""
from __future__ import annotations

from typing import Optional

import attrs

#: stands for the source run's directory (as the run sees it) in :attr:`RunNeed.args`.
SOURCE = "{source}"


@attrs.frozen
class RunNeed:
    """Something one campaign run needs: extra arguments, and maybe an earlier run of its op.

    Without ``round``: ``args`` are added to the run's command line. With ``round`` and
    ``side``: the run depends on that earlier run of the same op (``r<round>_<side>``); it is
    scheduled after it, the path ``path`` inside its directory travels with the run to wherever
    it executes, and ``args`` (with :data:`SOURCE` replaced by that directory) are added only
    when ``path`` exists as the run starts (an earlier run may have had nothing to write).
    """

    args: tuple = attrs.field(default=(), converter=tuple)
    round: Optional[int] = None
    side: str = ""
    path: str = ""

    def argv(self, source: str) -> list:
        return [a.replace(SOURCE, source) for a in self.args]


@attrs.define
class CampaignPlan:
    """A new campaign while it is built; ``campaign_setup`` implementations may change it.

    :ivar ops: the :class:`~zlf.ab.campaign.OpSpec` list (from the OP arguments; an extension
        may replace it, e.g. with task packages).
    :ivar side_args: ``{"A": [...], "B": [...]}``: extra arguments of each side's runs (recorded
        with the side; they tell the sides apart like ``--a-env`` does).
    :ivar run_args: arguments every run gets (recorded and signed in campaign.json).
    :ivar extensions: extensions every run must select besides the active ones.
    :ivar own_options: ``dest`` names of run options the campaign sets itself: an error on the
        ``zlf ab`` command line.
    :ivar not_switches: side variables that are no compiler switch (the switch guard skips them).
    :ivar per_op: run every op in its own process.
    :ivar label: the default campaign label (None: the switch, ``aa`` or ``ab``).
    :ivar data: campaign.json fields being written; an extension may add its own.
    """

    ops: list = attrs.field(factory=list)
    side_args: dict = attrs.field(factory=lambda: {"A": [], "B": []})
    run_args: list = attrs.field(factory=list)
    extensions: list = attrs.field(factory=list)
    own_options: list = attrs.field(factory=list)
    not_switches: list = attrs.field(factory=list)
    per_op: bool = False
    label: Optional[str] = None
    data: dict = attrs.field(factory=dict)
