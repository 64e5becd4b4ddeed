"""What extensions hand to a campaign through the ``campaigns`` hooks (see :mod:`zlf.hookspecs`).

:class:`CampaignPlan` is what ``campaign_setup`` may change while a new campaign is built;
:class:`RunNeed` is what ``campaign_run_needs`` returns for one run. Both change the runs'
configuration files (``zlf run --config``), never their command lines' run options.
:class:`CampaignOptions` is the ``zlf ab`` command line as ``campaign_setup`` and
``after_campaign`` read it.
"""
from __future__ import annotations

from typing import Optional

import attrs

from ..config import ExtensionOptions, OptionAttributes, RunConfig

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


def _given(values) -> tuple:
    return tuple(values or ())


@attrs.frozen
class CampaignOptions(OptionAttributes):
    """The ``zlf ab`` command line as the campaign hooks read it (``campaign_setup``,
    ``after_campaign``), typed.

    :ivar ops: the OP arguments as given (``()``: none; the campaign's ops are the plan's).
    :ivar aa: ``--aa``.
    :ivar switch: ``--switch``.
    :ivar a_env: ``--a-env K=V`` items as given; ``b_env`` likewise.
    :ivar a_python: ``--a-python`` as given; ``b_python`` likewise.
    :ivar resume: ``--resume DIR`` (None: a new campaign).
    :ivar library: ``--library SOURCE`` (None: no library): the op source an extension may know
        (it sets :attr:`CampaignPlan.library`); ``sample`` and ``sample_seed``: ``--sample``,
        ``--sample-seed``.
    :ivar run: the run settings given to ``zlf ab`` (:class:`zlf.config.RunConfig`: core's run
        options and the extensions' ``add_options``, typed as declared).
    :ivar campaign: the values of the options extensions added through ``add_campaign_options``,
        by owner, typed as declared (:class:`zlf.config.ExtensionOptions`).

    An extension's option, a campaign option or a run option, is read with :meth:`get` or as
    an attribute (``options.triage_calls``), as :class:`~zlf.config.ExtensionOptions` reads one.
    """

    run: RunConfig = attrs.field(factory=RunConfig)
    campaign: ExtensionOptions = attrs.field(factory=ExtensionOptions)
    ops: tuple = attrs.field(default=(), converter=_given)
    aa: bool = attrs.field(default=False, converter=bool)
    switch: Optional[str] = None
    a_env: tuple = attrs.field(default=(), converter=_given)
    b_env: tuple = attrs.field(default=(), converter=_given)
    a_python: Optional[str] = None
    b_python: Optional[str] = None
    resume: Optional[str] = None
    library: Optional[str] = None
    sample: Optional[int] = None
    sample_seed: int = 0

    @classmethod
    def from_args(cls, args, hooks, run: Optional[RunConfig] = None) -> "CampaignOptions":
        """Of the parsed ``zlf ab`` command line: the one place the hooks' view of it is read.
        ``hooks``: the :class:`zlf.plugins.Hooks` that declared the extensions' options; ``run``:
        the invocation's run settings as the command line built them once (``session.config``),
        read from ``args`` only when not given."""
        given = vars(args)
        sets = getattr(hooks, "campaign_option_sets", ())
        campaign = ExtensionOptions({s.owner: {o.dest: given.get(o.dest, o.default) for o in s.options}
                                     for s in sets}).bound(sets)
        own = {f: given.get(f) for f in ("ops", "aa", "switch", "a_env", "b_env", "a_python", "b_python", "resume",
                                         "library", "sample")}
        own["sample_seed"] = given.get("sample_seed") or 0
        if run is None:
            run = RunConfig.from_args(args, getattr(hooks, "option_sets", ()))
        return cls(run=run, campaign=campaign, **own)

    def get(self, name: str, default=None):
        """An extension's option value: a campaign option's, else a run option's; ``default``
        when no active extension declared ``name``."""
        marker = object()
        value = self.campaign.get(name, marker)
        return self.run.options.get(name, default) if value is marker else value

