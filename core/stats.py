"""The statistics of an A/B campaign: per-point deltas, intervals, noise and verdicts.

Pure numbers in, numbers out: no files, no processes (``zlf ab`` reads the run directories and
calls :func:`analyse`). docs/ab.md states every rule below in prose; keep the two in step.

Conventions: side B is the change, side A the baseline. A point's per-round value is the median
time of its run; a round's delta is ``log(B / A)`` of the same round (paired: both runs share the
round's machine state). Percentages are ``100 * (B / A - 1)``: positive = B slower.

The verdict rule, per point (m points analysed together, level alpha for this look):

* the delta interval is the two-sided t-interval of the mean log delta over the n rounds at
  confidence ``1 - alpha / m`` (Bonferroni: all m intervals hold at once with probability
  ``>= 1 - alpha``, which bounds every kind of wrong verdict in the campaign together);
* SLOWER / FASTER: the interval excludes 0, the median delta is beyond the noise floor, and
  no round's delta has the other sign;
* SAME: the interval lies inside ``±margin`` (the floor never widens it: a noisy point is UNSURE);
* otherwise UNSURE.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import attrs
import numpy as np

FASTER = "FASTER"
SLOWER = "SLOWER"
SAME = "SAME"
UNSURE = "UNSURE"
VERDICTS = (FASTER, SLOWER, SAME, UNSURE)

#: 1.4826 * MAD estimates the standard deviation of normal data; robust to one odd round.
MAD_TO_SD = 1.4826


@attrs.frozen
class Settings:
    """The knobs of the verdict rule (command-line options of ``zlf ab``)."""

    alpha: float = 0.05
    #: equivalence margin for SAME, percent.
    margin_pct: float = 2.0
    #: noise floor used when no A/A calibration covers a point, percent.
    min_effect_pct: float = 1.0
    #: power at which the smallest detectable effect is stated.
    power: float = 0.8


@attrs.frozen
class PointStats:
    """Everything the summary table shows for one point."""

    point: str
    rounds: int
    a_median_ms: float
    b_median_ms: float
    delta_median_pct: float
    delta_lo_pct: Optional[float]
    delta_hi_pct: Optional[float]
    noise_a_pct: Optional[float]
    noise_b_pct: Optional[float]
    flips: int
    verdict: str
    floor_pct: float
    margin_pct: float
    mde_pct: Optional[float]
    p_value: Optional[float]
    confidence: float
    note: str = ""
    deltas_pct: tuple = ()

    @property
    def aa_floor_pct(self) -> Optional[float]:
        """As an A/A result: the largest delta this point's interval could not rule out."""
        if self.delta_lo_pct is None:
            return None
        return max(abs(self.delta_lo_pct), abs(self.delta_hi_pct))

    def to_json(self) -> dict:
        d = attrs.asdict(self)
        d["deltas_pct"] = list(self.deltas_pct)
        d["aa_floor_pct"] = self.aa_floor_pct
        return d


# ----------------------------------------------------------------------------- building blocks
def _t_quantile(df: int, q: float) -> float:
    from scipy.special import stdtrit  # imported here: every zlf command builds the ab parser

    return float(stdtrit(df, q))


def _t_cdf(df: int, x: float) -> float:
    from scipy.special import stdtr

    return float(stdtr(df, x))


def pct(log_ratio: float) -> float:
    """``log(B/A)`` → percent change of B against A."""
    return 100.0 * math.expm1(log_ratio)


def log_deltas(a_ms: Sequence[float], b_ms: Sequence[float]) -> np.ndarray:
    """Per-round paired deltas ``log(B_k / A_k)``."""
    a, b = np.asarray(a_ms, dtype=float), np.asarray(b_ms, dtype=float)
    if a.shape != b.shape:
        raise ValueError("A and B need one value per round each")
    return np.log(b / a)


def spread_pct(values_ms: Sequence[float]) -> Optional[float]:
    """Within-side noise: robust standard deviation of one side's per-round medians, in percent
    of their level (1.4826 · MAD of the log values). None with fewer than two rounds."""
    v = np.log(np.asarray(values_ms, dtype=float))
    if v.size < 2:
        return None
    mad = float(np.median(np.abs(v - np.median(v))))
    return 100.0 * MAD_TO_SD * mad


def sign_flips(deltas: Sequence[float]) -> int:
    """Rounds whose delta has the minority sign (0: every round points the same way)."""
    d = np.asarray(deltas, dtype=float)
    return int(min(np.sum(d > 0), np.sum(d < 0)))


def t_interval(deltas: Sequence[float], confidence: float) -> Optional[tuple]:
    """Two-sided t-interval ``(lo, hi)`` of the mean of ``deltas``; None with fewer than 2."""
    d = np.asarray(deltas, dtype=float)
    n = d.size
    if n < 2:
        return None
    mean = float(d.mean())
    half = _t_quantile(n - 1, 0.5 + confidence / 2.0) * float(d.std(ddof=1)) / math.sqrt(n)
    return mean - half, mean + half


def p_value(deltas: Sequence[float]) -> Optional[float]:
    """Two-sided one-sample t-test of mean delta = 0 (None when undefined)."""
    d = np.asarray(deltas, dtype=float)
    if d.size < 2:
        return None
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return 0.0 if float(d.mean()) != 0.0 else 1.0
    t = float(d.mean()) / (sd / math.sqrt(d.size))
    return 2.0 * _t_cdf(d.size - 1, -abs(t))  # = scipy.stats.ttest_1samp(d, 0).pvalue


def min_detectable_pct(deltas: Sequence[float], point_alpha: float, power: float) -> Optional[float]:
    """Smallest true delta (percent) the paired test would detect with probability ``power`` at
    level ``point_alpha``, given the observed round-to-round spread: ``(t_{1-a/2} + t_{power}) · s/√n``."""
    d = np.asarray(deltas, dtype=float)
    n = d.size
    if n < 2:
        return None
    k = _t_quantile(n - 1, 1 - point_alpha / 2) + _t_quantile(n - 1, power)
    return pct(k * float(d.std(ddof=1)) / math.sqrt(n))


def look_alpha(rounds: int, previous_rounds: int, max_rounds: int, alpha: float) -> float:
    """Alpha spent at a look after ``rounds`` rounds, the previous look having been after
    ``previous_rounds`` (0 for the first look): linear spending ``alpha · n / max_rounds``.

    The looks' alphas sum to at most ``alpha``, so by the union bound the chance that any
    interval at any look misses its true delta stays ``<= alpha`` however the looks are used
    to decide when to stop (valid for any correlation between looks, hence conservative).
    """
    if max_rounds <= 0:
        return alpha
    n, prev = min(rounds, max_rounds), min(previous_rounds, max_rounds)
    return alpha * max(0, n - prev) / max_rounds


def verdict(interval_pct: Optional[tuple], delta_median_pct: float, flips: int,
            floor_pct: float, margin_pct: float) -> str:
    """The rule in the module docstring, on percent values."""
    if interval_pct is None:
        return UNSURE
    lo, hi = interval_pct
    if lo > 0 and delta_median_pct > floor_pct and flips == 0:
        return SLOWER
    if hi < 0 and delta_median_pct < -floor_pct and flips == 0:
        return FASTER
    if -margin_pct <= lo and hi <= margin_pct:
        return SAME
    return UNSURE


# ----------------------------------------------------------------------------- one campaign
def analyse(values: dict, settings: Settings = Settings(), alpha: Optional[float] = None,
            floors: Optional[dict] = None, notes: Optional[dict] = None) -> list:
    """Statistics and verdicts for every point of a campaign.

    :param values: ``{point: (a_ms per round, b_ms per round)}`` in round order; the points
        analysed together form the family the correction covers.
    :param settings: the rule's knobs.
    :param alpha: the level of this look (default ``settings.alpha``; adaptive campaigns pass
        :func:`look_alpha`).
    :param floors: ``{point: noise floor percent}`` from an A/A calibration; others use
        ``settings.min_effect_pct``.
    :param notes: ``{point: reason}`` for points that must not get a direction (mixed timers
        ...): their verdict is at most SAME.
    :return: a list of :class:`PointStats` in the order of ``values``.
    """
    alpha = settings.alpha if alpha is None else alpha
    floors, notes = floors or {}, notes or {}
    m = max(1, len(values))
    point_alpha = alpha / m
    confidence = 1.0 - point_alpha
    out = []
    for point, (a_ms, b_ms) in values.items():
        d = log_deltas(a_ms, b_ms)
        floor = float(floors.get(point, settings.min_effect_pct))
        margin = settings.margin_pct
        ci = t_interval(d, confidence)
        ci_pct = (pct(ci[0]), pct(ci[1])) if ci else None
        median_pct = pct(float(np.median(d)))
        flips = sign_flips(d)
        v = verdict(ci_pct, median_pct, flips, floor, margin)
        note = notes.get(point, "")
        if note and v in (FASTER, SLOWER):
            v = UNSURE
        if d.size < 2:
            note = note or "one round: no interval"
        out.append(PointStats(
            point=point, rounds=int(d.size),
            a_median_ms=float(np.median(a_ms)), b_median_ms=float(np.median(b_ms)),
            delta_median_pct=median_pct,
            delta_lo_pct=ci_pct[0] if ci_pct else None, delta_hi_pct=ci_pct[1] if ci_pct else None,
            noise_a_pct=spread_pct(a_ms), noise_b_pct=spread_pct(b_ms), flips=flips, verdict=v,
            floor_pct=floor, margin_pct=margin,
            mde_pct=_max_or_none(min_detectable_pct(d, point_alpha, settings.power), floor),
            p_value=p_value(d), confidence=confidence, note=note,
            deltas_pct=tuple(pct(x) for x in d),
        ))
    return out


def _max_or_none(value: Optional[float], floor: float) -> Optional[float]:
    return None if value is None else max(value, floor)


def counts(results: Sequence[PointStats]) -> dict:
    """``{verdict: how many points}`` over all four verdicts."""
    return {v: sum(1 for r in results if r.verdict == v) for v in VERDICTS}


def aa_floors(summary_points: Sequence[dict]) -> dict:
    """``{point: floor percent}`` from an A/A campaign's summary.json point entries."""
    return {p["point"]: p["aa_floor_pct"] for p in summary_points if p.get("aa_floor_pct") is not None}
