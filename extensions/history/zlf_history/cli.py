"""Record results over time and ask what changed: zlf history add|ls|show|export|changes|html.

Every subcommand reads or writes one database: ``--db PATH`` (an SQLite file; default
``$ZLF_HISTORY_DB``, else ``~/.local/share/zlf/history.sqlite``) or ``--db postgresql://…`` (a
shared PostgreSQL server; needs ``pip install zlf-history[postgres]``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from zlf import output
from zlf.console import clean, csv_text
from zlf.errors import UsageError
from zlf.options import Number

from . import changes as changes_mod
from . import ingest
from .store import Store, default_db, shown

EPILOG = """\
examples:
  zlf run matmul --label compiler=$(git -C triton rev-parse --short HEAD)   # nothing recorded yet
  zlf history add runs/matmul_20261201-0100 --label compiler=abc123 --label gems=v5.3.4
  zlf run matmul --history --label compiler=def456     # run and record in one step
  zlf history ls --label gems=v5.3.4
  zlf history changes                     # confirmed level shifts and points that stopped reporting
  zlf history show matmul/4096x4096x4096/bfloat16
  zlf history export --format csv > history.csv
  zlf history html site/ && python -m http.server -d site   # a static dashboard, works offline

A run is recorded once (the same run added again, from any path, is skipped). A campaign
directory records its verdicts and each of its runs (labels side=A|B, round=K, campaign=LABEL).
Series are per point, environment (backend, device, driver, torch, triton) and side; changes are
found by PELT and confirmed by Welch's t-test (docs/history.md)."""


def add_db_argument(parser) -> None:
    parser.add_argument("--db", metavar="PATH|URL", default=None,
                        help="history database: an SQLite file or postgresql://user@host/db "
                             "(default: $ZLF_HISTORY_DB, else ~/.local/share/zlf/history.sqlite)")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    sub = parser.add_subparsers(dest="history_command", metavar="SUBCOMMAND", required=True)

    p = sub.add_parser("add", help="record run or campaign directories", allow_abbrev=False,
                       description="Record run directories (or campaign directories: their runs and verdicts).")
    p.add_argument("dirs", nargs="+", metavar="DIR", help="run directory or campaign directory")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="label every run added (repeatable), e.g. compiler=<sha> gems=<sha>")
    add_db_argument(p)

    p = sub.add_parser("ls", help="list recorded runs", allow_abbrev=False,
                       description="List recorded runs, oldest first.")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="only runs with this label")
    p.add_argument("--op", metavar="OP", help="only runs that ran this op")
    p.add_argument("--last", type=Number(int, 1, 10**9), metavar="N", help="only the N newest")
    output.add_format_argument(p, json_alias=False)
    add_db_argument(p)

    p = sub.add_parser("show", help="one point's series, run by run", allow_abbrev=False,
                       description="Every recorded result of POINT, oldest first, with its changes marked.")
    p.add_argument("point", metavar="POINT", help="a point id, e.g. add/5000/float32")
    output.add_format_argument(p, json_alias=False)
    add_db_argument(p)

    p = sub.add_parser("export", help="every recorded result as CSV or JSON", allow_abbrev=False,
                       description="Write every recorded result (one row per run and point) to stdout.")
    p.add_argument("--format", choices=("csv", "json"), default="csv", help="csv (default) or json")
    p.add_argument("--op", metavar="OP", help="only this op")
    add_db_argument(p)

    p = sub.add_parser("changes", help="confirmed level shifts, and points that stopped reporting",
                       allow_abbrev=False,
                       description="Per point, environment and side: level shifts found by PELT and confirmed by "
                                   "Welch's t-test, with magnitude, interval, the first run after the change and the "
                                   "labels that changed there; then the points that stopped reporting.")
    _change_options(p)
    output.add_format_argument(p, json_alias=False)
    add_db_argument(p)

    p = sub.add_parser("html", help="write a static dashboard (no server needed)", allow_abbrev=False,
                       description="Write a static site: an index of the latest changes and missing points, a page "
                                   "per point with its series, change points, the runs behind each, and a repro "
                                   "command per side. Everything is bundled: the pages work offline.")
    p.add_argument("out", metavar="OUT_DIR", help="a new or empty folder, or one zlf wrote before")
    _change_options(p)
    add_db_argument(p)


def _change_options(p) -> None:
    p.add_argument("--alpha", type=Number(float, 0, 0.5, low_open=True, high_open=True), default=changes_mod.ALPHA,
                   metavar="A",
                   help=f"confirmation test level per change (default {changes_mod.ALPHA})")
    p.add_argument("--min-effect", type=Number(float, 0, 1000, unit="percent"), default=changes_mod.MIN_EFFECT_PCT,
                   metavar="PCT",
                   help=f"smallest change reported, in percent (default {changes_mod.MIN_EFFECT_PCT})")
    p.add_argument("--op", metavar="OP", help="only this op")



def main(args, session) -> int:
    handler = {"add": cmd_add, "ls": cmd_ls, "show": cmd_show, "export": cmd_export, "changes": cmd_changes,
               "html": cmd_html}[args.history_command]
    with Store(args.db or default_db()) as store:
        return handler(args, store)


# ----------------------------------------------------------------------------- add
def record(store: Store, path, run_labels: dict) -> list:
    """Record a run or campaign directory; the lines to print."""
    path = Path(path)
    if ingest.is_campaign(path):
        row, verdict_rows, run_dirs, note = ingest.campaign_rows(path)
        lines = []
        new = store.add_campaign(row, verdict_rows)
        added = 0
        for d, side, rnd in run_dirs:
            labels = dict(run_labels, campaign=row["label"] or path.name)
            if side:
                labels["side"] = side
            if rnd is not None:
                labels["round"] = str(rnd)
            rr, rows, _ = ingest.run_rows(d, campaign_uid=row["uid"], side=side, round_=rnd)
            if store.add_run(rr, labels, rows) is not None:
                added += 1
        what = "recorded" if new else "already recorded"
        lines.append(f"{what}: campaign {clean(path)} ({len(verdict_rows)} verdicts, {added} new run(s))")
        if note:
            lines.append(f"note: {note}")
        return lines
    if not ingest.is_run(path):
        raise UsageError(f"{str(path)!r} is neither a zlf run directory nor a campaign directory")
    if not (path / "meta.json").is_file():  # without it nothing says the run ended: it may still grow
        return [f"not recorded: {clean(path)} has no meta.json (a run still starting, or not written by zlf run)"]
    row, rows, note = ingest.run_rows(path)
    if row["status"] == "running":
        return [f"not recorded: {clean(path)} is still running (or was killed without a word); record it when it ends"]
    run_id = store.add_run(row, run_labels, rows)
    lines = [f"recorded: {clean(path)} ({len(rows)} points)" if run_id is not None
             else f"already recorded: {clean(path)}"]
    if note:
        lines.append(f"note: {note}")
    return lines


def cmd_add(args, store) -> int:
    run_labels = ingest.parse_labels(args.label)
    for d in args.dirs:
        for line in record(store, d, run_labels):
            print(line)
    print(f"history: {shown(store.db)}")
    return 0


# ----------------------------------------------------------------------------- ls / show / export
def cmd_ls(args, store) -> int:
    rows = store.runs(where_labels=ingest.parse_labels(args.label), op=args.op, limit=args.last)
    fields = ["id", "started", "status", "points", "backend", "device", "torch", "triton", "labels", "path"]
    table = [[r["id"], r["started"], r["status"], r["points"], r["backend"], r["device"], r["torch"], r["triton"],
              " ".join(f"{k}={v}" for k, v in sorted(r["labels"].items())), r["path"]] for r in rows]
    print(output.render(fields, table, args.format))
    return 0


def cmd_show(args, store) -> int:
    found = changes_mod.analyse(store, point=args.point)
    if not found["series"]:
        raise UsageError(f"no recorded result of {args.point!r} (zlf history ls lists the runs)")
    fields = ["series", "run", "started", "median_ms", "change_pct", "labels", "path"]
    table = []
    for s in found["series"]:
        at = {c["change"].index: c["change"] for c in s["changes"]}
        name = f"{s['env_key']}{'/' + s['side'] if s['side'] else ''}"
        for i, (res, run) in enumerate(zip(s["results"], s["runs"])):
            c = at.get(i)
            table.append([name, run["id"], run["started"], res["median_ms"], round(c.pct, 2) if c else None,
                          " ".join(f"{k}={v}" for k, v in sorted(run["labels"].items())), run["path"]])
    print(output.render(fields, table, args.format))
    return 0


def cmd_export(args, store) -> int:
    runs_by_id = {r["id"]: r for r in store.runs()}
    fields = ["run", "started", "point", "op", "dtype", "status", "timer", "median_ms", "samples", "backend",
              "device", "driver", "torch", "triton", "side", "labels", "path"]
    rows = []
    for r in store.results(op=args.op):
        run = runs_by_id[r["run_id"]]
        rows.append([r["run_id"], run["started"], r["point"], r["op"], r["dtype"], r["status"], r["timer"],
                     r["median_ms"], r["samples"], run["backend"], run["device"], run["driver"], run["torch"],
                     run["triton"], run["side"] or "", json.dumps(run["labels"], sort_keys=True), run["path"]])
    if args.format == "json":
        json.dump([dict(zip(fields, row)) for row in rows], sys.stdout, indent=1)
        print()
    else:
        sys.stdout.write(csv_text(fields, rows))  # a cell never starts a spreadsheet formula
    return 0


# ----------------------------------------------------------------------------- changes / html
def change_rows(found: dict) -> tuple:
    fields = ["point", "env", "side", "change_pct", "lo_pct", "hi_pct", "p_value", "first_run_after", "started",
              "labels_changed"]
    rows = []
    for s in found["series"]:
        for c in s["changes"]:
            ch = c["change"]
            rows.append([s["point"], s["env_key"], s["side"], round(ch.pct, 2), round((ch.lo - 1) * 100, 2),
                         round((ch.hi - 1) * 100, 2), float(f"{ch.p_value:.3g}"), c["after"]["id"],
                         c["after"]["started"],
                         " ".join(f"{k}:{a}->{b}" for k, (a, b) in c["labels"].items())])
    return fields, rows


def missing_rows(found: dict) -> tuple:
    fields = ["point", "env", "side", "last_ok_run", "last_ok_started", "latest_run", "now", "runs_since"]
    rows = [[m["point"], m["env_key"], m["side"], m["last_ok"]["id"], m["last_ok"]["started"], m["latest"]["id"],
             m["now"], m["runs_since"]] for m in found["missing"]]
    return fields, rows


def cmd_changes(args, store) -> int:
    found = changes_mod.analyse(store, alpha=args.alpha, min_effect_pct=args.min_effect, op=args.op)
    fields, rows = change_rows(found)
    mfields, mrows = missing_rows(found)
    if args.format == "json":
        print(json.dumps({"changes": [dict(zip(fields, r)) for r in rows],
                          "missing": [dict(zip(mfields, r)) for r in mrows],
                          "series": len(found["series"])}, indent=2, default=str))
        return 0
    n = len(found["series"])
    print(f"{len(rows)} confirmed change(s) in {n} series (PELT candidates, Welch's t-test at alpha {args.alpha}, "
          f"at least {args.min_effect:g} %)")
    if rows:
        print(output.render(fields, rows, args.format))
    if mrows:
        print(f"\n{len(mrows)} point(s) stopped reporting (their op ran later without them, or they failed):")
        print(output.render(mfields, mrows, args.format))
    return 0


def cmd_html(args, store) -> int:
    from . import dashboard

    found = changes_mod.analyse(store, alpha=args.alpha, min_effect_pct=args.min_effect, op=args.op)
    out = dashboard.write(Path(args.out), found, store.campaigns())
    print(f"dashboard: {clean(out / 'index.html')} ({len(found['series'])} series); "
          f"serve it with: python -m http.server -d {clean(out)}")
    return 0
