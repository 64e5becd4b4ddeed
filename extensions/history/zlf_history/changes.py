"""Change points in a point's series of results, each confirmed by a test, and points gone missing.

Formulation. A series is one point's ``median_ms`` over the runs of one environment (backend,
device, driver, torch, triton) and side, in the order the runs started; it is analysed as
log-times, so a change is a ratio. Two steps:

1. **Candidates** by PELT (Killick, Fearnhead & Eckley 2012, the ``ruptures`` implementation) with
   the l2 cost on the series divided by its noise: a robust estimate from successive differences
   (median absolute difference / (0.6745 * sqrt 2)), which a level shift barely moves. The penalty
   is ``PENALTY * log(n)`` per change (a BIC-like penalty, scaled for a false rate of about one in
   a thousand point-runs; ``benchmarks/changepoint_sim.py`` measures it).
2. **Confirmation** of each candidate by Welch's t-test (scipy) between the runs before it and the
   runs after it (up to ``window`` on each side, never across another change): a change is
   reported only when p < ``alpha`` and the ratio moved by at least ``min_effect_pct``. Its
   magnitude is the ratio of the geometric means, with Welch's interval at 1 - alpha.
"""
from __future__ import annotations

import math
from typing import Optional

import attrs
import numpy as np
from scipy import stats as _st

PENALTY = 6.0
MIN_SIZE = 3
ALPHA = 0.001
MIN_EFFECT_PCT = 1.0
WINDOW = 10
#: the noise estimate never goes below this (log units: 0.05 %), so a perfectly flat series does
#: not turn every rounding step into a change
NOISE_FLOOR = 5e-4


@attrs.frozen
class Change:
    index: int              # first run after the change, in the series
    ratio: float            # geometric mean after / before
    lo: float               # interval of the ratio at 1 - alpha
    hi: float
    p_value: float
    before: int             # runs in each window
    after: int

    @property
    def pct(self) -> float:
        return (self.ratio - 1.0) * 100.0


def noise(x: np.ndarray) -> float:
    """Robust per-run noise of log-times (median absolute successive difference)."""
    if len(x) < 3:
        return NOISE_FLOOR
    d = np.abs(np.diff(x))
    return max(float(np.median(d)) / (0.6745 * math.sqrt(2.0)), NOISE_FLOOR)


def candidates(x: np.ndarray, penalty: float = PENALTY, min_size: int = MIN_SIZE) -> list:
    """Indices where a new segment starts (PELT on the noise-scaled series)."""
    import ruptures

    n = len(x)
    if n < 2 * min_size:
        return []
    z = (x - np.median(x)) / noise(x)
    ends = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(z.reshape(-1, 1)).predict(pen=penalty * math.log(n))
    return [e for e in ends if e < n]


def confirm(x: np.ndarray, at: int, lo_bound: int, hi_bound: int, alpha: float = ALPHA,
            min_effect_pct: float = MIN_EFFECT_PCT, window: int = WINDOW) -> Optional[Change]:
    before = x[max(lo_bound, at - window):at]
    after = x[at:min(hi_bound, at + window)]
    if len(before) < 2 or len(after) < 2:
        return None
    va, vb = before.var(ddof=1) / len(before), after.var(ddof=1) / len(after)
    diff = after.mean() - before.mean()
    se = math.sqrt(va + vb)
    if se == 0.0:
        se = NOISE_FLOOR * math.sqrt(1.0 / len(before) + 1.0 / len(after))
        df = len(before) + len(after) - 2
    else:  # Welch–Satterthwaite
        df = (va + vb) ** 2 / ((va ** 2 / (len(before) - 1) if va else 0.0) + (vb ** 2 / (len(after) - 1) if vb else 0.0))
    t = diff / se
    p = float(2.0 * _st.t.sf(abs(t), df))
    half = float(_st.t.ppf(1.0 - alpha / 2.0, df)) * se
    ratio = math.exp(diff)
    if p >= alpha or abs(ratio - 1.0) * 100.0 < min_effect_pct:
        return None
    return Change(index=at, ratio=ratio, lo=math.exp(diff - half), hi=math.exp(diff + half), p_value=p,
                  before=len(before), after=len(after))


def detect(values, alpha: float = ALPHA, min_effect_pct: float = MIN_EFFECT_PCT, penalty: float = PENALTY,
           window: int = WINDOW) -> list:
    """Confirmed changes of a series of positive times, oldest first."""
    x = np.log(np.asarray([v for v in values], dtype=float))
    if len(x) == 0 or not np.all(np.isfinite(x)):
        raise ValueError("a series of positive, finite times is needed")
    found = []
    cps = candidates(x, penalty)
    bounds = [0] + cps + [len(x)]
    for i, at in enumerate(cps):
        c = confirm(x, at, bounds[i], bounds[i + 2], alpha, min_effect_pct, window)
        if c is not None:
            found.append(c)
    return found


def series(results: list) -> dict:
    """``{(point, env_key, side): [result, ...]}`` of ok results, oldest first."""
    out: dict = {}
    for r in results:
        if r["status"] == "ok" and r["median_ms"] is not None and r["median_ms"] > 0:
            out.setdefault((r["point"], r["env_key"], r["side"] or ""), []).append(r)
    return out


def missing(results: list, runs: list) -> list:
    """Points that stopped reporting: the point's op still ran in a later run of the same
    environment and side, but the point was absent or not ok there. One entry per point."""
    by_run = {r["id"]: r for r in runs}
    last_ok: dict = {}
    last_seen: dict = {}
    ops_of_run: dict = {}
    status_in: dict = {}
    for r in results:
        run = by_run.get(r["run_id"])
        if run is None:
            continue
        key = (r["point"], run["env_key"], run["side"] or "")
        ops_of_run.setdefault(r["run_id"], set()).add(r["op"])
        status_in[(r["run_id"], r["point"])] = r["status"]
        if r["status"] == "ok":
            last_ok[key] = run
        last_seen.setdefault(key, (r["op"], run))
    order = {r["id"]: i for i, r in enumerate(runs)}
    found = []
    for key, run in last_ok.items():
        point, env, side = key
        op = last_seen[key][0]
        later = [x for x in runs if order[x["id"]] > order[run["id"]] and x["env_key"] == env
                 and (x["side"] or "") == side and op in ops_of_run.get(x["id"], ())]
        if not later:
            continue
        now_run = later[-1]
        found.append({"point": point, "env_key": env, "side": side, "last_ok": run, "latest": now_run,
                      "now": status_in.get((now_run["id"], point), "absent"), "runs_since": len(later)})
    return found


def changed_labels(before: dict, after: dict) -> dict:
    """``{key: (before, after)}`` of labels that differ between two runs."""
    keys = sorted(set(before) | set(after))
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}


def analyse(store, alpha: float = ALPHA, min_effect_pct: float = MIN_EFFECT_PCT, point: Optional[str] = None,
            op: Optional[str] = None) -> dict:
    """Every series with its confirmed changes, and the points gone missing."""
    all_runs = store.runs()
    by_id = {r["id"]: r for r in all_runs}
    rows = store.results(point=point, op=op)
    out = []
    for (pt, env, side), rs in sorted(series(rows).items()):
        changes = []
        for c in detect([r["median_ms"] for r in rs], alpha=alpha, min_effect_pct=min_effect_pct):
            before, after = by_id[rs[c.index - 1]["run_id"]], by_id[rs[c.index]["run_id"]]
            changes.append({"change": c, "before": before, "after": after,
                            "labels": changed_labels(before["labels"], after["labels"])})
        out.append({"point": pt, "env_key": env, "side": side, "results": rs,
                    "runs": [by_id[r["run_id"]] for r in rs], "changes": changes})
    return {"series": out, "missing": missing(rows, all_runs) if not point else []}
