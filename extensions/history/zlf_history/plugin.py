"""zlf extension ``history``: the ``history`` and ``bisect`` commands, and ``--history`` on runs and
campaigns (record what was measured as soon as it is on disk)."""
from __future__ import annotations

from zlf import hookimpl
from zlf.commands import add_module_command
from zlf.console import warn
from zlf.errors import UsageError

HISTORY_HELP = ("record run or campaign directories into a history database now (default database: "
                "$ZLF_HISTORY_DB, else ~/.local/share/zlf/history.sqlite; or name a file or postgresql:// URL)")
LABEL_HELP = "label the recorded runs (repeatable), e.g. compiler=<sha>; with --history"


def _history_arguments(group) -> None:
    group.add_argument("--history", nargs="?", const="", default=None, metavar="DB", help=HISTORY_HELP)
    group.add_argument("--history-label", action="append", default=[], metavar="KEY=VALUE", help=LABEL_HELP)


@hookimpl
def add_commands(subparsers):
    from . import bisect, cli

    add_module_command(subparsers, "history", cli, "record results over time; change points, export, dashboard")
    add_module_command(subparsers, "bisect", bisect, "find the commit that made a point slower (adaptive A/B per step)",
                       epilog=bisect.EPILOG)


@hookimpl
def add_options(parser, command, traits):
    # a command that times points in this process and writes a run directory (zlf run, zlf task);
    # campaigns get theirs from add_campaign_options, and their runs record nothing themselves
    if not traits.runs_points_here or traits.runs_campaigns:
        return
    _history_arguments(parser.add_argument_group("history (extension)"))


@hookimpl
def add_campaign_options(parser):
    _history_arguments(parser.add_argument_group("history (extension)"))


def _record(db, labels, path, what: str) -> None:
    from . import cli, ingest
    from .store import Store, default_db

    try:
        with Store(db or default_db()) as store:
            for line in cli.record(store, path, ingest.parse_labels(labels)):
                print(f"history: {line}")
    except UsageError as exc:  # the measurement is on disk whatever happens here
        warn(f"history: {what} not recorded ({exc}); record it later with: zlf history add {path}")


@hookimpl
def after_run(run, results):
    options = run.config.options
    db = getattr(options, "history", None)
    if db is None or run.status != "complete":
        return
    from . import ingest
    from .store import Store, default_db

    try:
        labels = ingest.parse_labels(getattr(options, "history_label", []))
        meta = dict(run.meta, status=run.status)
        row, rows, _ = ingest.rows_of(run.dir, meta, results)
        with Store(db or default_db()) as store:
            new = store.add_run(row, labels, rows)
        print(f"history: {'recorded' if new is not None else 'already recorded'}: {len(rows)} points")
    except UsageError as exc:
        warn(f"history: run not recorded ({exc}); record it later with: zlf history add {run.dir}")


@hookimpl
def after_campaign(campaign, results, options, session):
    db = options.campaign.get("history")  # zlf ab's own --history (add_campaign_options)
    if db is None:
        return
    _record(db, options.campaign.get("history_label", ()), campaign.path, "campaign")
