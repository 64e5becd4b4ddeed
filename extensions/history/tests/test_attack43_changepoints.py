"""ATTACK (atk43): the change-point claim under noise models docs/history.md does not state.

Claim (docs/history.md, issue 43): at most 1 false change per 1,000 point-runs, and at least 90 %
detection of a 3 % step within 5 runs when the noise is 0.5 %. The project's own generator
(benchmarks/changepoint_sim.py) only draws i.i.d. log-normal (or its own tails) noise. This file has
an independent generator with: heavy tails (Student t, 2 d.o.f.), occasional 10x outliers, a slow
linear drift, bimodal process modes (+4 % with p = 0.3), AR(1) noise (rho = 0.5), short series
(6-10 runs), steps near the start or the end, two steps, and missing runs.

Everything goes through ``zlf_history.changes.detect``. The tests are small and seeded; the full
figures come from ``python test_attack43_changepoints.py --full`` (see the report).
"""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from zlf_history import changes

SIGMA = 0.005   # 0.5 % per-run noise, the regime the targets are stated for
STEP = 0.03     # a 3 % step


# ----------------------------------------------------------------------------- the generator
def noise(rng, model: str, n: int, sigma: float = SIGMA) -> np.ndarray:
    """Log-noise of ``n`` runs under ``model`` (standard deviation about ``sigma`` where it exists)."""
    if model in ("gauss", "short", "missing", "near_start", "near_end", "two_steps"):
        return rng.normal(0.0, sigma, n)
    if model == "t2":  # Student t with 2 d.o.f., scaled so its interquartile range matches N(0, sigma)
        return rng.standard_t(2, n) * sigma * (1.349 / 1.633)
    if model == "outliers":  # a run lands at 10x the level with p = 0.02 (a hiccup, a throttled clock)
        e = rng.normal(0.0, sigma, n)
        e[rng.random(n) < 0.02] += math.log(10.0)
        return e
    if model == "bimodal":  # a run lands in a +4 % process mode with p = 0.3
        return rng.normal(0.0, sigma, n) + np.where(rng.random(n) < 0.3, math.log(1.04), 0.0)
    if model == "ar1":  # AR(1), rho = 0.5, marginal s.d. sigma
        rho = 0.5
        e = np.empty(n)
        e[0] = rng.normal(0.0, sigma)
        for i in range(1, n):
            e[i] = rho * e[i - 1] + rng.normal(0.0, sigma * math.sqrt(1 - rho * rho))
        return e
    if model == "drift":  # +0.1 % per run, a slow drift (4 % over 40 runs), no step
        return rng.normal(0.0, sigma, n) + np.arange(n) * math.log(1.001)
    raise ValueError(model)


def series(rng, model: str, n: int, steps=()) -> np.ndarray:
    """Times (level 1 ms) with noise ``model`` and a +STEP step at each index of ``steps``."""
    x = noise(rng, model, n)
    for at in steps:
        x[at:] += math.log(1.0 + STEP)
    return np.exp(x)


def false_changes(found, true_steps, tol=2) -> int:
    return sum(1 for c in found if not any(abs(c.index - s) <= tol for s in true_steps))


def null_rate(model: str, n_series: int, seed: int, n_runs=40, short=False) -> tuple:
    """(false changes, point-runs) over ``n_series`` series without a step."""
    rng = np.random.default_rng(seed)
    fp = runs = 0
    for _ in range(n_series):
        n = int(rng.integers(6, 11)) if short else n_runs
        x = series(rng, model, n)
        if model == "missing":  # a fifth of the runs did not report; the series closes up
            x = x[rng.random(n) >= 0.2]
        fp += len(changes.detect(x))
        runs += len(x)
    return fp, runs


def step_at(rng, model: str, n: int) -> int:
    if model == "near_start":
        return int(rng.integers(3, 6))
    if model == "near_end":
        return n - 5  # exactly 5 runs after it exist at the end of the series
    if model == "short":
        return n // 2
    return int(rng.integers(n // 4, 3 * n // 4))


def detection(model: str, n_series: int, seed: int, n_runs=40, within=5) -> tuple:
    """(found within ``within`` runs, series, false changes elsewhere, point-runs) for series with a
    3 % step (two for ``two_steps``, the second at least 10 runs after the first)."""
    rng = np.random.default_rng(seed)
    found = fp = runs = 0
    for _ in range(n_series):
        n = int(rng.integers(6, 11)) if model == "short" else n_runs
        at = step_at(rng, model, n)
        steps = [at]
        if model == "two_steps":
            at = int(rng.integers(8, 16))
            steps = [at, at + int(rng.integers(10, 16))]
        x = series(rng, model, n, steps)
        keep = np.ones(n, bool)
        if model == "missing":
            keep = rng.random(n) >= 0.2
            keep[steps[0]] = True
        idx = np.cumsum(keep) - 1  # index in the kept series of each original run
        y = x[keep]
        s0 = int(idx[steps[0]])
        cut = y[:min(len(y), s0 + within)]
        ok = any(abs(c.index - s0) <= 2 for c in changes.detect(cut))
        if model == "two_steps":  # the second step, within 5 runs of it, on the series up to there
            s1 = int(idx[steps[1]])
            ok = ok and any(abs(c.index - s1) <= 2 for c in changes.detect(y[:s1 + within]))
        found += ok
        full = changes.detect(y)
        fp += false_changes(full, [int(idx[s]) for s in steps])
        runs += len(y)
    return found, n_series, fp, runs


def wilson(k: int, n: int, z: float = 1.959964) -> tuple:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


# ----------------------------------------------------------------------------- the tests
# The stated model (i.i.d. log-normal 0.5 %): the claims must hold there.
def test_stated_model_false_rate_is_at_most_one_per_thousand_point_runs():
    fp, runs = null_rate("gauss", 150, seed=4301)
    assert fp / runs * 1000 <= 1.0, (fp, runs)


def test_stated_model_detects_a_3pct_step_within_5_runs():
    found, n, _, _ = detection("gauss", 60, seed=4302)
    assert found / n >= 0.9, (found, n)


# Models the docs do not state. Each asserts the stated targets; the ones that fail are marked.
NULL_CASES = [
    pytest.param("ar1", marks=pytest.mark.xfail(strict=True, reason="ATTACK: AR(1) rho=0.5 noise at 0.5 % gives "
                 "~2 false changes per 1000 point-runs (noise() from successive differences underestimates s.d.)")),
    pytest.param("bimodal", marks=pytest.mark.xfail(strict=True, reason="ATTACK: bimodal process modes (+4 % at "
                 "p=0.3) give far more than 1 false change per 1000 point-runs")),
    pytest.param("drift", marks=pytest.mark.xfail(strict=True, reason="ATTACK: a slow 0.1 %/run drift is reported "
                 "as level shifts (several per series), not as drift")),
    "t2",
    "outliers",
    "missing",
]


@pytest.mark.parametrize("model", NULL_CASES)
def test_false_changes_per_thousand_point_runs_under_unstated_noise(model):
    fp, runs = null_rate(model, 120, seed=4310)
    assert fp / runs * 1000 <= 1.0, (model, fp, runs)


def test_short_series_have_no_false_changes():
    fp, runs = null_rate("gauss", 300, seed=4311, short=True)
    assert fp / runs * 1000 <= 1.0, (fp, runs)


DETECT_CASES = [
    pytest.param("near_start", marks=pytest.mark.xfail(strict=True, reason="ATTACK: a 3 % step 3-5 runs after the "
                 "start is found within 5 runs in ~81-85 % of series (too few runs before it), not >= 90 %")),
    pytest.param("bimodal", marks=pytest.mark.xfail(strict=True, reason="ATTACK: with +4 % process modes (p=0.3) a "
                 "3 % step is found within 5 runs in ~5-10 % of series")),
    "near_end",
    "two_steps",
    "missing",
    "ar1",
    pytest.param("t2", marks=pytest.mark.xfail(strict=True, reason="ATTACK: with t2 tails (same IQR as 0.5 % "
                 "noise) a 3 % step is found within 5 runs in ~70 % of series, not >= 90 %")),
    pytest.param("outliers", marks=pytest.mark.xfail(strict=True, reason="ATTACK: 2 % of runs at 10x (one hiccup "
                 "in the window) drops detection of a 3 % step within 5 runs to ~80 %")),
    pytest.param("short", marks=pytest.mark.xfail(strict=True, reason="ATTACK: in 6-10 run series a 3 % step at the "
                 "middle is confirmed in ~60 % (PELT min_size 3 / Welch on few runs)")),
]


@pytest.mark.parametrize("model", DETECT_CASES)
def test_detection_of_a_3pct_step_within_5_runs_under_unstated_models(model):
    found, n, _, _ = detection(model, 100, seed=4320)
    assert found / n >= 0.9, (model, found, n)


def test_a_perfectly_flat_series_then_one_run_off_is_not_a_change():
    # 30 identical runs then one 2 % run: the noise floor (0.05 %) must not make a lone run a change
    x = [1.0] * 30 + [1.02] + [1.0] * 9
    assert changes.detect(x) == []


def test_one_10x_outlier_in_a_quiet_series_is_not_a_change():
    rng = np.random.default_rng(4330)
    x = np.exp(rng.normal(0, SIGMA, 40))
    x[20] *= 10
    assert changes.detect(x) == []


# ----------------------------------------------------------------------------- the full figures
def full() -> None:
    print("null (no step), 40 runs/series unless noted; false changes per 1000 point-runs [95 % Wilson]")
    for model, kw in [("gauss", {}), ("t2", {}), ("outliers", {}), ("bimodal", {}), ("ar1", {}), ("drift", {}),
                      ("missing", {}), ("gauss", {"short": True})]:
        fp, runs = null_rate(model, 600, seed=99, **kw)
        lo, hi = wilson(fp, runs)
        print(f"  {model + (' short 6-10' if kw else ''):18s} {fp:5d} / {runs:6d}  = {fp / runs * 1000:7.2f}  "
              f"[{lo * 1000:.2f}, {hi * 1000:.2f}]")
    print("3 % step, 0.5 % noise: detected within 5 runs [95 % Wilson]; false changes elsewhere per 1000")
    for model in ["gauss", "near_start", "near_end", "two_steps", "missing", "t2", "outliers", "bimodal", "ar1",
                  "short"]:
        found, n, fp, runs = detection(model, 300, seed=98)
        lo, hi = wilson(found, n)
        print(f"  {model:18s} {found:4d} / {n:4d} = {found / n * 100:5.1f} %  [{lo * 100:.1f}, {hi * 100:.1f}]  "
              f"false elsewhere {fp}/{runs} = {fp / runs * 1000:.2f}")


if __name__ == "__main__" and "--full" in sys.argv:
    full()
