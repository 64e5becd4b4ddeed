"""What extensions hand to a campaign through the ``campaigns`` hooks (see :mod:`zlf.hookspecs`).

:class:`CampaignPlan` is what ``campaign_setup`` may change while a new campaign is built;
:class:`RunNeed` is what ``campaign_run_needs`` returns for one run. Both change the runs'
configuration files (``zlf run --config``), never their command lines' run options.
"""
from __future__ import annotations

from typing import Optional

import attrs

#: stands for the source run's directory (as the run sees it) in :attr:`RunNeed.options` values.
SOURCE = "{source}"


def _placed(value, source: str):
    if isinstance(value, str):
        return value.replace(SOURCE, source)
    if isinstance(value, (list, tuple)):
        return [_placed(v, source) for v in value]
    return value


@attrs.frozen
class RunNeed:
    """Something one campaign run needs: run option values, extensions, maybe an earlier run.

    ``options`` (``{dest: value}``, options an active extension declared through ``add_options``)
    and ``extensions`` (names the run must select) change the run's configuration
    (:class:`zlf.config.RunConfig`): they never become command-line flags. Without ``round``
    they always apply. With ``round`` and ``side``: the run depends on that earlier run of the
    same op (``r<round>_<side>``); it is scheduled after it, the path ``path`` inside its
    directory travels with the run to wherever it executes, and the changes (with
    :data:`SOURCE` in a value replaced by that directory) apply only when ``path`` exists as the
    run starts (an earlier run may have had nothing to write).
    """

    options: dict = attrs.field(factory=dict, converter=dict)
    extensions: tuple = attrs.field(default=(), converter=tuple)
    round: Optional[int] = None
    side: str = ""
    path: str = ""

    def values(self, source: str = "") -> dict:
        """``options`` with :data:`SOURCE` replaced by ``source``."""
        return {k: _placed(v, source) for k, v in self.options.items()}


@attrs.define
class CampaignPlan:
    """A new campaign while it is built; ``campaign_setup`` implementations may change it.

    :ivar ops: the :class:`~zlf.ab.campaign.OpSpec` list (from the OP arguments; an extension
        may replace it, e.g. with task packages).
    :ivar side_args: ``{"A": [...], "B": [...]}``: extra arguments of each side's runs (recorded
        with the side; they tell the sides apart like ``--a-env`` does).
    :ivar options: ``{dest: value}``: extension run options every run's configuration gets
        (:class:`zlf.config.RunConfig`, written to ``config/A.json`` / ``config/B.json``).
    :ivar run_args: arguments of the ops' own command that are no run setting (``zlf task``'s
        ``--cases``), spelt by the extension; recorded and signed in campaign.json.
    :ivar extensions: extensions every run must select besides the active ones.
    :ivar own_options: ``dest`` names of run options the campaign sets itself (through
        :class:`RunNeed`): an error on the ``zlf ab`` command line.
    :ivar not_switches: side variables that are no compiler switch (the switch guard skips them).
    :ivar per_op: run every op in its own process.
    :ivar label: the default campaign label (None: the switch, ``aa`` or ``ab``).
    :ivar data: campaign.json fields being written; an extension may add its own.
    :ivar library: ``zlf ab --library SOURCE`` names an op source (``options.library``): the
        extension that knows SOURCE sets this to the library's op specs (every op, in its order;
        the campaign samples or filters them) and :attr:`library_source` to how it describes
        the source. None: no extension knows it (a file of ops is then read).
    """

    ops: list = attrs.field(factory=list)
    side_args: dict = attrs.field(factory=lambda: {"A": [], "B": []})
    options: dict = attrs.field(factory=dict)
    run_args: list = attrs.field(factory=list)
    extensions: list = attrs.field(factory=list)
    own_options: list = attrs.field(factory=list)
    not_switches: list = attrs.field(factory=list)
    per_op: bool = False
    label: Optional[str] = None
    data: dict = attrs.field(factory=dict)
    library: Optional[list] = None
    library_source: str = ""
