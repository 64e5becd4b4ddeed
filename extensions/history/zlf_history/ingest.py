"""What a run directory or a campaign directory contributes to the history: rows, read as data.

Nothing read here is executed or trusted: files are read through zlf's run-directory readers, every
text is redacted before it is stored, and a folder that is neither a run nor a campaign is one line.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from pathlib import Path

from zlf import readers
from zlf.errors import UsageError
from zlf.redact import redact, redact_argv, redact_value
from zlf.rundir import META, RESULTS, RunDir

CAMPAIGN = "campaign.json"
SUMMARY = "summary.json"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_LABEL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def parse_labels(items) -> dict:
    """``["compiler=abc", "gems=v5"]`` as a dict; a malformed label is one line. A value holding
    a credential (by its key's name or its own form, :func:`zlf.redact.redact`) is kept masked:
    labels are stored and exported."""
    found = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not _LABEL_KEY.match(key):
            raise UsageError(f"--label {redact_value(item)!r}: expected KEY=VALUE with KEY of letters, digits, _ . - (at most 64)")
        if len(value) > 512 or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise UsageError(f"--label {key}: the value must be at most 512 printable characters")
        if key in found and found[key] != value:
            raise UsageError(f"--label {key} given twice with different values")
        found[key] = value
    return redact(found)


def env_identity(meta: dict) -> dict:
    """What makes two runs' numbers comparable: backend, device, driver, torch, triton."""
    fp = meta.get("fingerprint") if isinstance(meta.get("fingerprint"), dict) else {}

    def text(*values) -> str:
        for v in values:
            if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v):
                return str(v)[:200]
        return ""
    ident = {
        "backend": text(meta.get("backend"), fp.get("backend")),
        "device": text(meta.get("device_name"), fp.get("device_name")),
        "driver": text(fp.get("driver"), fp.get("driver_version")),
        "torch": text(fp.get("torch")),
        "triton": text(fp.get("triton")),
    }
    ident["env_key"] = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    return ident


def _text(value, default: str = "") -> str:
    return value if isinstance(value, str) else default


def run_rows(path, campaign_uid=None, side=None, round_=None) -> tuple:
    """``(run row, result rows, note)`` for a run directory."""
    rd = RunDir.open(path)
    records, skipped = rd.records()
    return rows_of(path, rd.meta(), records, skipped, campaign_uid, side, round_)


def rows_of(path, meta: dict, records, skipped: int = 0, campaign_uid=None, side=None, round_=None) -> tuple:
    """``(run row, result rows, note)`` of a run's meta.json and records."""
    try:
        results_bytes = (Path(path) / RESULTS).read_bytes()
    except FileNotFoundError:
        results_bytes = b""
    command = meta.get("command") if isinstance(meta.get("command"), list) else []
    identity = json.dumps([meta.get("started"), command, meta.get("cwd")], sort_keys=True, default=str)
    uid = hashlib.sha256(identity.encode() + b"\0" + results_bytes).hexdigest()
    ident = env_identity(meta)
    row = {
        "uid": uid, "path": str(Path(path).resolve()), "started": _text(meta.get("started"), now())[:40],
        "added": now(), "status": _text(meta.get("status"), "unknown")[:32],
        "command": json.dumps(redact_argv([str(a) for a in command])),
        "env_key": ident["env_key"], "backend": ident["backend"], "device": ident["device"],
        "driver": ident["driver"], "torch": ident["torch"], "triton": ident["triton"],
        "zlf_version": _text(meta.get("zlf_version"))[:32],
        "campaign_uid": campaign_uid, "side": side, "round": round_,
    }
    seen, twice, rows = set(), set(), []
    for r in records:
        if r.point in seen:  # a point twice is not one point's value: keep neither
            twice.add(r.point)
            continue
        seen.add(r.point)
        rows.append({"point": r.point, "op": str(r.op), "dtype": str(r.dtype), "status": str(r.status),
                     "timer": r.timer if isinstance(r.timer, str) else None,
                     "median_ms": r.median_ms if r.status == "ok" else None,
                     "samples": len(r.samples or ())})
    rows = [r for r in rows if r["point"] not in twice]
    notes = []
    if skipped:
        notes.append(f"{skipped} unreadable line(s) of {RESULTS} skipped")
    if twice:
        notes.append(f"{len(twice)} point id(s) appear twice and are left out: {', '.join(sorted(twice)[:3])}")
    return row, rows, "; ".join(notes)


def is_campaign(path) -> bool:
    return (Path(path) / CAMPAIGN).is_file()


def is_run(path) -> bool:
    p = Path(path)
    return (p / META).is_file() or (p / RESULTS).is_file()


def _read_json(path: Path) -> dict:
    """A campaign's JSON file, bounded and strict (``zlf.readers``: a regular file, finite numbers,
    bounded depth); each field this module uses is checked where it is used, so a campaign of an
    older zlf, or one with fields this module does not read, is still recorded."""
    doc = readers.read_json(path)
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: not a JSON object")
    return doc


def campaign_rows(path) -> tuple:
    """``(campaign row, verdict rows, [(run dir, side, round)], note)`` for a campaign directory."""
    path = Path(path)
    data = _read_json(path / CAMPAIGN)
    summary = _read_json(path / SUMMARY) if (path / SUMMARY).is_file() else {}
    sides = {}
    for s in data.get("sides") or []:
        if isinstance(s, dict) and s.get("name") in ("A", "B"):
            env = s.get("env") if isinstance(s.get("env"), dict) else {}
            # a name becomes part of a shell line on the dashboard: variable names only
            sides[s["name"]] = {"env": {str(k): redact_value(str(v)) for k, v in env.items() if _ENV_NAME.match(str(k))},
                                "python": redact_value(str(s.get("python") or ""))}
    uid = hashlib.sha256(json.dumps([data.get("started"), data.get("command"), data.get("cwd"), data.get("label")],
                                    sort_keys=True, default=str).encode()).hexdigest()
    row = {"uid": uid, "path": str(path.resolve()), "label": _text(data.get("label"))[:200],
           "started": _text(data.get("started"), now())[:40], "added": now(),
           "status": _text(data.get("status"), "unknown")[:32], "aa": bool(data.get("aa")),
           "sides": json.dumps(sides, sort_keys=True)}
    verdict_rows = []

    def num(v):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e300 else None
    for p in summary.get("points") or []:
        if isinstance(p, dict) and isinstance(p.get("point"), str) and isinstance(p.get("verdict"), str):
            verdict_rows.append({"point": p["point"], "verdict": p["verdict"][:16], "delta_pct": num(p.get("delta_pct")),
                                 "delta_lo_pct": num(p.get("delta_lo_pct")), "delta_hi_pct": num(p.get("delta_hi_pct")),
                                 "rounds": int(p["rounds"]) if isinstance(p.get("rounds"), int) else 0})
    run_dirs = []
    for r in data.get("runs") or []:
        if not isinstance(r, dict) or r.get("status") != "ok" or not isinstance(r.get("dir"), str):
            continue
        d = (path / r["dir"]).resolve()
        if path.resolve() not in d.parents or not is_run(d):  # a path from a record stays inside
            continue
        run_dirs.append((d, r.get("side") if r.get("side") in ("A", "B") else None,
                         r.get("round") if isinstance(r.get("round"), int) else None))
    note = "" if summary else f"no {SUMMARY} (the campaign did not finish): its runs are recorded, no verdicts"
    return row, verdict_rows, run_dirs, note
