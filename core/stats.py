"""The statistics of an A/B campaign: per-point deltas, intervals, noise and verdicts.

Pure numbers in, numbers out: no files, no processes (``zlf ab`` reads the run directories and
calls :func:`analyse`). docs/ab.md states every rule below in prose; keep the two in step.

Conventions: side B is the change, side A the baseline. A point's per-round value is the median
time of its run; everything is computed on ``log`` times. Percentages are ``100 * (B / A - 1)``:
positive = B slower. ``delta`` (δ, ``--min-effect``, default 1 %) is the one effect threshold.

The verdict rule, per point (m points analysed together, level alpha for this look):

* estimate: the difference of the trimmed means of ``log B`` and ``log A`` (unpaired, Yuen–Welch)
  or the trimmed mean of the per-round ``log(B_k / A_k)`` (paired), trimming 0 or 10 %; which
  one is chosen per campaign from the variances (:func:`choose_estimate`): pairing pays only when
  A and B of a round share noise, trimming only under heavy tails. With an A/A campaign (``--noise-from``) its per-point variance and
  degrees of freedom are pooled into the standard error (never a floor);
* the point's decision p-value is the smallest level a at which its t-interval of confidence
  ``1 - 2a`` (each tail a, as the two one-sided tests of equivalence use) lies wholly above ``+δ``
  (SLOWER), wholly below ``-δ`` (FASTER) or wholly inside ``±δ`` (SAME);
* Holm's step-down over the m points: sorted by that p-value, the j-th (from 0) is decided while
  ``p <= alpha / (m - j)``; the first that fails and every later one are UNSURE. The interval shown
  is at the confidence the point was judged at. A library campaign (``Settings.method`` bh/by,
  zlf.ab.screening) instead judges each SAME at ``alpha`` and the directions by the
  Benjamini–Hochberg (or –Yekutieli) step-up (:func:`_multiple`);
* fewer than 3 rounds, or a point that must not get a direction (mixed timers): at most SAME.

Sign flips (rounds whose delta has the minority sign) are reported, never a gate.
Adaptive campaigns (``--until-confident``) use :class:`SpendingPlan` (Lan–DeMets O'Brien–Fleming
spending) for the level of each look, and a point decided at a look keeps that verdict.
"""
from __future__ import annotations

import functools
import math
from typing import Optional, Sequence

import attrs
import numpy as np

FASTER = "FASTER"
SLOWER = "SLOWER"
SAME = "SAME"
UNSURE = "UNSURE"
VERDICTS = (FASTER, SLOWER, SAME, UNSURE)
PAIRED, UNPAIRED, AUTO = "paired", "unpaired", "auto"
PAIRINGS = (AUTO, PAIRED, UNPAIRED)
#: how verdicts are controlled over the points analysed together: Holm's step-down (family-wise
#: error, every verdict), or Benjamini–Hochberg / Benjamini–Yekutieli step-up over the directions
#: (false discovery rate) with each SAME judged at the point's own level (docs/ab.md).
HOLM, BH, BY = "holm", "bh", "by"
METHODS = (HOLM, BH, BY)

#: 1.4826 * MAD estimates the standard deviation of normal data; robust to one odd round.
MAD_TO_SD = 1.4826
#: fewer rounds than this give no verdict but UNSURE/SAME: a t quantile at df 1 is 12.7.
MIN_ROUNDS = 3
#: "rounds needed" is searched up to this many rounds.
MAX_PLAN_ROUNDS = 200


@attrs.frozen
class Settings:
    """The knobs of the verdict rule (command-line options of ``zlf ab``)."""

    alpha: float = 0.05
    #: the one effect threshold δ, percent: directions need the interval beyond ±δ, SAME inside.
    min_effect_pct: float = 1.0
    #: power at which the smallest detectable effect is stated.
    power: float = 0.8
    #: share trimmed from each end of a side's rounds (0: plain means, Welch / paired t); None:
    #: chosen per campaign from :data:`AUTO_TRIMS` (benchmarks/verdict_sim.py, docs/ab.md).
    trim: Optional[float] = None
    #: auto (chosen from the data), paired or unpaired.
    pairing: str = AUTO
    #: :data:`METHODS`: holm (family-wise error over every verdict, ``zlf ab``'s rule) or bh / by
    #: (false discovery rate over the directions, SAME per point: a library's confirmation stage).
    method: str = HOLM
    #: the number of points the correction covers (None: the points analysed). A library
    #: campaign's later looks analyse only its open points, but its family is the whole library:
    #: the points outside ``values`` count as decided without a direction (cleared as SAME).
    family: Optional[int] = None


@attrs.frozen
class Noise:
    """Variance of one run's log time (unpaired) and of one round's log delta (paired) of a
    point, each with its degrees of freedom: an A/A campaign's contribution to ``--noise-from``."""

    var_unpaired: float
    df_unpaired: float
    var_paired: float
    df_paired: float

    @property
    def pct(self) -> float:
        """Run-to-run spread of one process's time, percent (a standard deviation)."""
        return 100.0 * math.sqrt(max(self.var_unpaired, 0.0))

    def to_json(self) -> dict:
        return attrs.asdict(self)


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
    min_effect_pct: float
    mde_pct: Optional[float]
    p_value: Optional[float]
    confidence: float
    note: str = ""
    deltas_pct: tuple = ()
    #: the estimate (trimmed) the interval is centred on, percent.
    delta_pct: Optional[float] = None
    pairing: str = PAIRED
    trim: float = 0.0
    df: Optional[float] = None
    #: run-to-run spread of one process's time, percent (pooled with the A/A when given).
    noise_pct: Optional[float] = None
    noise: Optional[Noise] = None
    rounds_needed: Optional[int] = None
    #: rounds after which the verdict was decided (adaptive campaigns freeze it there).
    decided_at: Optional[int] = None
    a_ms: tuple = ()
    b_ms: tuple = ()
    #: geometric means of A's and B's values over the rounds the estimate keeps (after its trim):
    #: ``b_mean_ms / a_mean_ms - 1`` is ``delta_pct`` exactly, so the table shows what it divides.
    a_mean_ms: Optional[float] = None
    b_mean_ms: Optional[float] = None
    #: each side's standard deviation of one process's log time, percent, as the estimate uses it
    #: (winsorized and scaled with the trim): ``noise_pct`` pools these two (and the A/A's).
    sd_a_pct: Optional[float] = None
    sd_b_pct: Optional[float] = None
    #: whether ``a_ms``/``b_ms`` are normalised by the campaign's process factors (controls);
    #: ``raw_a_ms``/``raw_b_ms`` then hold the values as measured.
    normalised: bool = False
    raw_a_ms: tuple = ()
    raw_b_ms: tuple = ()

    def to_json(self) -> dict:
        d = attrs.asdict(self, recurse=False)
        d["deltas_pct"] = list(self.deltas_pct)
        d["a_ms"], d["b_ms"] = list(self.a_ms), list(self.b_ms)
        d["raw_a_ms"], d["raw_b_ms"] = list(self.raw_a_ms or self.a_ms), list(self.raw_b_ms or self.b_ms)
        d["noise"] = self.noise.to_json() if self.noise else None
        return d


# ----------------------------------------------------------------------------- building blocks
def _t_quantile(df: float, q: float) -> float:
    from scipy.special import stdtrit  # imported here: every zlf command builds the ab parser

    return float(stdtrit(df, q))


def _t_sf(df: float, x: float) -> float:
    from scipy.special import stdtr

    return float(stdtr(df, -x))


def pct(log_ratio: float) -> float:
    """``log(B/A)`` → percent change of B against A (infinite beyond what a float holds: an
    early look's level can be so small that its interval has no finite upper end)."""
    return 100.0 * math.expm1(log_ratio) if log_ratio < 700.0 else math.inf


def log_deltas(a_ms: Sequence[float], b_ms: Sequence[float]) -> np.ndarray:
    """Per-round paired deltas ``log(B_k / A_k)``."""
    a, b = np.asarray(a_ms, dtype=float), np.asarray(b_ms, dtype=float)
    if a.shape != b.shape:
        raise ValueError("A and B need one value per round each")
    return np.log(b / a)


def _median(values) -> float:
    """The median of a few numbers (a campaign's rounds): sorted in Python, which for tens of
    values is many times faster than ``np.median``'s machinery (the simulation calls it often)."""
    s = sorted(float(x) for x in values)
    n = len(s)
    if not n:
        return math.nan
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def spread_pct(values_ms: Sequence[float]) -> Optional[float]:
    """Within-side noise: robust standard deviation of one side's per-round medians, in percent
    of their level (1.4826 · MAD of the log values). None with fewer than two rounds."""
    v = [math.log(x) for x in values_ms]
    if len(v) < 2:
        return None
    mid = _median(v)
    return 100.0 * MAD_TO_SD * _median(abs(x - mid) for x in v)


def sign_flips(deltas: Sequence[float]) -> int:
    """Rounds whose delta has the minority sign (0: every round points the same way)."""
    d = np.asarray(deltas, dtype=float)
    return int(min(np.sum(d > 0), np.sum(d < 0)))


@attrs.frozen
class Trimmed:
    """A trimmed mean with Tukey–McLaughlin's variance: ``var`` is the winsorized variance scaled
    to one observation, so the mean's variance is ``var / h`` with ``df = h - 1``."""

    mean: float
    var: float
    h: int

    @property
    def df(self) -> int:
        return self.h - 1


def kept_rounds(n: int, trim: float) -> int:
    """Values a trimmed mean of ``n`` keeps: ``floor(trim · n)`` are cut from each end."""
    return n - 2 * int(math.floor(trim * n))


def trimmed(x: Sequence[float], trim: float) -> Trimmed:
    """Trimmed mean of ``x`` (``floor(trim · n)`` values cut from each end) and its variance.
    Plain Python floats: a campaign's tens of rounds sort faster so than through numpy."""
    v = sorted(x.tolist() if isinstance(x, np.ndarray) else map(float, x))
    n = len(v)
    h = kept_rounds(n, trim)
    g = (n - h) // 2
    mean = sum(v[g:n - g]) / h
    if n < 2 or h < 2:
        return Trimmed(mean, 0.0, h)
    w = [v[g]] * g + v[g:n - g] + [v[n - 1 - g]] * g  # winsorized: the cut values take the nearest kept one
    centre = sum(w) / n
    s2 = sum((t - centre) ** 2 for t in w) / (n - 1)
    return Trimmed(mean, (n - 1) * s2 / (h - 1), h)


def point_noise(a_ms: Sequence[float], b_ms: Sequence[float], trim: float) -> Noise:
    """A point's :class:`Noise` from its own rounds (both sides pooled for the unpaired one)."""
    la, lb = np.log(np.asarray(a_ms, float)), np.log(np.asarray(b_ms, float))
    return _noise(trimmed(la, trim), trimmed(lb, trim), trimmed(lb - la, trim))


def _noise(ta: Trimmed, tb: Trimmed, td: Trimmed) -> Noise:
    dfu = ta.df + tb.df
    varu = (ta.df * ta.var + tb.df * tb.var) / dfu if dfu > 0 else 0.0
    return Noise(varu, float(dfu), td.var, float(td.df))


def noise_from_deltas(deltas_pct: Sequence[float], trim: float) -> Optional[Noise]:
    """An older A/A summary keeps only per-round deltas: the paired variance from them, the
    unpaired one as half of it (an A/A's delta is the difference of two independent runs)."""
    d = np.log1p(np.asarray(deltas_pct, float) / 100.0)
    if d.size < 2:
        return None
    t = trimmed(d, trim)
    return Noise(t.var / 2.0, float(t.df), t.var, float(t.df))


def _pool(pairs) -> tuple:
    """``(variance, df)`` pooled from ``(variance, df)`` pairs, weighted by df."""
    df = sum(d for _, d in pairs)
    if df <= 0:
        return 0.0, 0.0
    return sum(v * d for v, d in pairs) / df, df


@attrs.frozen
class Estimate:
    """Centre, standard error and degrees of freedom of a point's log delta."""

    mean: float
    se: float
    df: float
    noise: Noise

    def interval(self, level: float) -> tuple:
        """The interval with ``level`` in each tail (confidence ``1 - 2 · level``)."""
        half = _t_quantile(self.df, 1.0 - level) * self.se
        return self.mean - half, self.mean + half


def estimate(a_ms, b_ms, pairing: str, trim: float, aa: Optional[Noise] = None) -> Optional[Estimate]:
    """The log delta of one point, paired or unpaired, with the A/A's variance pooled in."""
    n = len(a_ms)
    if n < 2:
        return None
    la, lb = np.log(np.asarray(a_ms, float)), np.log(np.asarray(b_ms, float))
    ta, tb, td = trimmed(la, trim), trimmed(lb, trim), trimmed(lb - la, trim)
    own = _noise(ta, tb, td)
    if pairing == PAIRED:
        var, df = _pool([(td.var, td.df)] + ([(aa.var_paired, aa.df_paired)] if aa else []))
        return Estimate(float(np.subtract(*kept_log_means(a_ms, b_ms, PAIRED, trim)[::-1])), math.sqrt(var / td.h), df, own)
    mean = tb.mean - ta.mean
    if aa is not None:  # one pooled variance: same machine, same run-to-run noise on both sides
        var, df = _pool([(ta.var, ta.df), (tb.var, tb.df), (aa.var_unpaired, aa.df_unpaired)])
        return Estimate(mean, math.sqrt(var * (1.0 / ta.h + 1.0 / tb.h)), df, own)
    qa, qb = ta.var / ta.h, tb.var / tb.h  # Yuen–Welch: each side its own variance
    se2 = qa + qb
    if se2 <= 0:
        return Estimate(mean, 0.0, float(ta.df + tb.df), own)
    df = se2 ** 2 / ((qa ** 2 / ta.df if qa else 0.0) + (qb ** 2 / tb.df if qb else 0.0))
    return Estimate(mean, math.sqrt(se2), df, own)


def kept_log_means(a_ms, b_ms, pairing: str, trim: float) -> tuple:
    """``(mean log A, mean log B)`` over the rounds the estimate keeps, so that their difference
    is the estimate: unpaired, each side's trimmed mean; paired, both sides over the rounds whose
    delta survives the trim (the trimmed mean of the deltas is the difference of these two)."""
    la, lb = np.log(np.asarray(a_ms, float)), np.log(np.asarray(b_ms, float))
    if pairing != PAIRED:
        return trimmed(la, trim).mean, trimmed(lb, trim).mean
    n = la.size
    g = (n - kept_rounds(n, trim)) // 2
    keep = np.argsort(lb - la, kind="stable")[g:n - g]
    return float(la[keep].mean()), float(lb[keep].mean())


def thresholds(min_effect_pct: float) -> tuple:
    """``(down, up)``: δ as log ratios (−δ % and +δ %)."""
    return math.log1p(-min_effect_pct / 100.0), math.log1p(min_effect_pct / 100.0)


def decision(est: Estimate, min_effect_pct: float) -> tuple:
    """``(verdict, p)``: the verdict the interval can reach and the smallest one-sided level at
    which it does (SLOWER: ``lo > +δ``, FASTER: ``hi < −δ``, SAME: inside ``±δ``; the interval of
    level a has confidence ``1 - 2a``)."""
    down, up = thresholds(min_effect_pct)
    if est.se == 0.0:  # identical rounds: the estimate is the truth as far as the data can say
        if est.mean > up:
            return SLOWER, 0.0
        if est.mean < down:
            return FASTER, 0.0
        return (SAME, 0.0) if down < est.mean < up else (UNSURE, 1.0)
    sf = functools.partial(_t_sf, est.df)
    options = [
        (SLOWER, sf((est.mean - up) / est.se)),
        (FASTER, sf((down - est.mean) / est.se)),
        (SAME, max(sf((up - est.mean) / est.se), sf((est.mean - down) / est.se))),
    ]
    return min(options, key=lambda o: o[1])


@functools.lru_cache(maxsize=4096)
def _ncp(df: float, level: float, power: float) -> float:
    """Noncentrality at which a one-sided t-test at ``level`` rejects with ``power``: the inverse
    of the noncentral t's distribution function in its noncentrality (scipy.stats.nct's own
    routine, called through scipy.special so that no scipy.stats import is paid)."""
    from scipy.special import nctdtrinc

    crit = _t_quantile(df, 1.0 - level)
    if not math.isfinite(crit) or crit > 1e4:  # nctdtrinc never returns for such (df 1.2 at 6e-8: 4e5)
        return math.inf
    c = float(nctdtrinc(df, 1.0 - power, crit))
    return c if math.isfinite(c) else math.inf


def min_detectable_pct(est: Estimate, level: float, power: float, min_effect_pct: float) -> Optional[float]:
    """Smallest true delta (percent, B slower) the rule calls SLOWER with probability ``power``
    at (one-sided) level ``level``: ``log(1+δ) + ncp · se`` with ``ncp`` from the noncentral t
    and ``se`` made median-unbiased (:func:`_median_unbiased`)."""
    if est is None or not est.df or est.df < 1:
        return None
    _, up = thresholds(min_effect_pct)
    df = round(float(est.df), 1)
    c = _ncp(df, float(f"{level:.3g}"), power)
    se = est.se * _median_unbiased(df)
    return pct(up + c * se) if math.isfinite(c) and c * se < 5.0 else None


@functools.lru_cache(maxsize=4096)
def _median_unbiased(df: float) -> float:
    """Factor that makes a standard error of ``df`` degrees of freedom median-unbiased:
    ``sqrt(df / median(chi2_df))``. The noncentral t gives the power for the true standard error;
    the point's own estimate falls below it more often than not (with 2 degrees of freedom its
    median is 0.83 of the truth), so an MDE from it promised power it did not have at 3 rounds
    (docs/measurements.md, "Verdict error rates under clock modes")."""
    from scipy.special import chdtri

    return math.sqrt(df / float(chdtri(df, 0.5)))


def mde_level(alpha: float, m: int, power: float) -> float:
    """The level the MDE is computed at: Holm's level for the last point decided when a share
    ``power`` of the ``m`` points carries an effect that large, with one binomial standard
    deviation of margin, ``alpha / ((1−p)·m + √(p·(1−p)·m))`` (α/10.5 for 40 points at p = 0.8;
    α for one point). The level a point faced in this campaign is no guide: in an A/A campaign
    almost nothing is decided, and Holm's first step (α/m) made the MDE too large wherever many
    points carry the effect (docs/measurements.md, "Verdict error rates under clock modes")."""
    return alpha / mde_steps(m, power)


def mde_steps(m: int, power: float) -> float:
    """Holm's divisor ``(1−p)·m + √(p·(1−p)·m)`` (at least 1) that :func:`mde_level` uses."""
    q = 1.0 - power
    return max(1.0, q * m + math.sqrt(power * q * m))


def pooled_excess_kurtosis(values: dict) -> float:
    """The campaign's excess kurtosis of the per-round log deltas: the bias-corrected sample
    excess kurtosis (G2) of each point with 4 or more rounds, averaged, never below 0."""
    from scipy.stats import kurtosis  # imported here, as the other scipy functions are
    by_rounds = {}  # points of one round count go to scipy together: one call, not one per point
    for a_ms, b_ms in values.values():
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.log(np.asarray(b_ms, float)) - np.log(np.asarray(a_ms, float))
        # a missing or zero time says nothing of the tails, nor does a point without spread
        if d.size < 4 or not np.all(np.isfinite(d)) or np.ptp(d) == 0.0:
            continue
        by_rounds.setdefault(d.size, []).append(d)
    g2s = [kurtosis(np.stack(rows), axis=1, fisher=True, bias=False) for rows in by_rounds.values()]  # G2, bias-corrected
    return max(0.0, float(np.mean(np.concatenate(g2s)))) if g2s else 0.0


def tail_adjusted(est: "Estimate", rounds: int, kurtosis: float) -> "Estimate":
    """``est`` with its degrees of freedom cut for heavy tails: a variance estimated from ``n``
    rounds varies as ``2/(n−1) + κ/n`` (κ the excess kurtosis) instead of ``2/(n−1)``, so it is
    worth the degrees of freedom of a normal sample that varies as much. The noncentral t then
    asks heavy-tailed noise for the larger effect it really needs."""
    if est is None or kurtosis <= 0.0 or rounds < 2:
        return est
    shrink = (2.0 / (rounds - 1)) / (2.0 / (rounds - 1) + kurtosis / rounds)
    return attrs.evolve(est, df=max(1.0, est.df * shrink))


def rounds_needed(noise: Noise, pairing: str, level: float, power: float, min_effect_pct: float, trim: float,
                  aa_df: float = 0.0) -> Optional[int]:
    """Fewest rounds at which a true zero delta is called SAME (and, symmetrically, a true ``2δ``
    delta gets its direction) with probability ``power``, given the per-run variance of ``noise``;
    None beyond :data:`MAX_PLAN_ROUNDS`."""
    var = noise.var_paired if pairing == PAIRED else noise.var_unpaired
    if var <= 0:
        return MIN_ROUNDS
    _, up = thresholds(min_effect_pct)
    target = math.log1p(2.0 * min_effect_pct / 100.0) - up
    level = float(f"{level:.3g}")  # rounded as the cache of _ncp keys it
    rounds, h, ncp = _plan_table(pairing, level, power, trim, aa_df)
    se = np.sqrt(var / h) if pairing == PAIRED else np.sqrt(2.0 * var / h)
    enough = ncp * se <= target
    return int(rounds[enough.argmax()]) if enough.any() else None


@functools.lru_cache(maxsize=256)
def _plan_table(pairing: str, level: float, power: float, trim: float, aa_df: float) -> tuple:
    """For :func:`rounds_needed`, each round count from :data:`MIN_ROUNDS` to
    :data:`MAX_PLAN_ROUNDS`: the rounds its trimmed means keep, and the noncentrality its degrees
    of freedom need (a campaign plans many points with one table)."""
    rounds = np.arange(MIN_ROUNDS, MAX_PLAN_ROUNDS + 1)
    h = np.array([kept_rounds(n, trim) for n in range(MIN_ROUNDS, MAX_PLAN_ROUNDS + 1)])
    df = h - 1 + aa_df if pairing == PAIRED else 2 * (h - 1) + aa_df
    ncp = np.array([_ncp(round(float(d), 1), level, power) for d in df])
    return rounds, h, ncp


#: trims the automatic choice picks from: plain means (best under normal noise) or 10 %
#: (one odd round in ten no longer dominates under heavy tails); benchmarks/verdict_sim.py.
AUTO_TRIMS = (0.0, 0.1)


def _point_noises(values: dict, trim: float, aa: dict) -> list:
    """For each point of two rounds or more: the rounds its trimmed means keep, its own
    :class:`Noise` and the A/A's (None without one); both pairings read the same."""
    out = []
    for point, (a_ms, b_ms) in values.items():
        n = len(a_ms)
        if n >= 2:
            out.append((kept_rounds(n, trim), point_noise(a_ms, b_ms, trim), aa_noise_at(aa, point, trim)))
    return out


def _width(noises: list, pairing: str, level: float) -> float:
    """Typical interval half-width of the campaign's points for one estimate: the t quantile at
    the pooled degrees of freedom times the pooled standard error (variances only; ``noises``
    from :func:`_point_noises`)."""
    pool, h = [], []
    for kept, nz, extra in noises:
        pool.append((nz.var_paired, nz.df_paired) if pairing == PAIRED else (nz.var_unpaired, nz.df_unpaired))
        if extra is not None:
            pool.append((extra.var_paired, extra.df_paired) if pairing == PAIRED else (extra.var_unpaired, extra.df_unpaired))
        h.append(kept)
    hh = float(np.median(h)) if h else 0.0
    if hh < 2:
        return math.inf
    var, _ = _pool(pool)
    if pairing == PAIRED:
        return _t_quantile(hh - 1, 1 - level) * math.sqrt(var / hh)
    return _t_quantile(2 * (hh - 1), 1 - level) * math.sqrt(2 * var / hh)


def choose_estimate(values: dict, settings: Settings, aa: Optional[dict] = None) -> tuple:
    """``(pairing, trim)`` for the whole campaign: the estimate whose typical interval is narrowest.

    Pairing removes noise A and B of a round share (a drifting clock) but halves the degrees of
    freedom; trimming 10 % resists heavy tails but costs a little under normal noise. The pooled
    variances of the campaign's points (and of the A/A's, when given) say which wins. Only
    variances enter, never the deltas, so the choice does not favour a verdict.
    """
    pairings = (PAIRED, UNPAIRED) if settings.pairing == AUTO else (settings.pairing,)
    trims = AUTO_TRIMS if settings.trim is None else (settings.trim,)
    if len(pairings) * len(trims) == 1:
        return pairings[0], trims[0]
    level = settings.alpha / max(1, len(values))
    noises = {t: _point_noises(values, t, aa or {}) for t in trims}
    best = min(((_width(noises[t], p, level), i, p, t) for i, (p, t) in
                enumerate((p, t) for p in pairings for t in trims)))
    return (best[2], best[3]) if math.isfinite(best[0]) else (pairings[0], trims[-1])


def choose_pairing(values: dict, settings: Settings, aa: Optional[dict] = None) -> str:
    """The pairing half of :func:`choose_estimate`."""
    return choose_estimate(values, settings, aa)[0]


def aa_noise_at(aa: dict, point: str, trim: float) -> Optional[Noise]:
    """The A/A's :class:`Noise` of ``point`` at ``trim``: ``aa`` maps points to a Noise (used as
    is) or to a summary.json entry (``a_ms``/``b_ms``, or an older one's ``deltas_pct``)."""
    entry = aa.get(point) if aa else None
    if entry is None or isinstance(entry, Noise):
        return entry
    a, b = entry.get("a_ms"), entry.get("b_ms")
    if a and b and len(a) == len(b) and len(a) >= 2:
        like = aa_trim(len(a), trim)
        return None if like is None else point_noise(a, b, like)
    if entry.get("deltas_pct"):
        like = aa_trim(len(entry["deltas_pct"]), trim)
        return None if like is None else noise_from_deltas(entry["deltas_pct"], like)
    return None


def aa_trim(n: int, trim: float) -> Optional[float]:
    """The trim of an A/A of ``n`` rounds that is like the campaign's ``trim``: as a share of its
    own rounds, ``round(trim · n)`` and at least one from each end (``floor(0.1 · 6)`` would cut
    none, and an untrimmed variance pooled into a trimmed one brings back the tails the trim
    removed). None when ``n`` is too short to trim so (nothing like it to pool)."""
    if trim <= 0.0:
        return 0.0
    g = max(1, int(round(trim * n)))
    if n - 2 * g < 2:
        return None
    return (g + 0.5) / n


# ----------------------------------------------------------------------------- alpha spending
def obf_spent(t: float, alpha: float) -> float:
    """Lan–DeMets O'Brien–Fleming spending: alpha spent by information fraction ``t``."""
    from scipy.special import ndtr, ndtri

    if t <= 0:
        return 0.0
    return float(min(alpha, 2.0 * ndtr(ndtri(alpha / 2.0) / math.sqrt(min(t, 1.0)))))


@functools.lru_cache(maxsize=4096)
def obf_levels(first: int, max_rounds: int, alpha: float) -> tuple:
    """Nominal two-sided level of each look ``first..max_rounds`` (one look per round) such that
    the chance of any look's statistic crossing its bound, under the looks' correlation
    ``sqrt(n_i / n_j)``, spends ``obf_spent``: the group-sequential boundaries, found by
    integrating the density of the not-yet-stopped statistic on a grid."""
    from scipy.optimize import brentq
    from scipy.special import ndtr, ndtri

    def pdf(x, scale):
        return np.exp(-0.5 * (x / scale) ** 2) / (scale * math.sqrt(2.0 * math.pi))

    looks = list(range(first, max_rounds + 1))
    grid = np.linspace(-12.0, 12.0, 4801)  # in units of the final look's standard deviation
    step = grid[1] - grid[0]
    dens = None
    prev_n, prev_spent = 0, 0.0
    levels = []
    for n in looks:
        t = n / max_rounds
        target = obf_spent(t, alpha) - prev_spent
        sd = math.sqrt(t)
        if dens is None:
            c = float(-ndtri(max(target, 1e-300) / 2.0))
            new = pdf(grid, sd)
        else:
            inc = math.sqrt((n - prev_n) / max_rounds)
            kernel_x = np.arange(-int(6 * inc / step) - 1, int(6 * inc / step) + 2) * step
            kernel = pdf(kernel_x, inc) * step
            new = np.convolve(dens, kernel, mode="same")

            def crossing(c, new=new, sd=sd):
                return float(new[np.abs(grid) > c * sd].sum() * step) - target

            c = float(brentq(crossing, 0.0, 12.0)) if target > 0 and crossing(0.0) > 0 else 12.0
        dens = np.where(np.abs(grid) > c * sd, 0.0, new)
        levels.append(float(2.0 * ndtr(-c)))
        prev_n, prev_spent = n, prev_spent + max(target, 0.0)
    return tuple(levels)


@attrs.frozen
class SpendingPlan:
    """Levels of an adaptive campaign's looks: one look per round from ``first`` to ``max_rounds``."""

    first: int
    max_rounds: int
    alpha: float

    def level(self, rounds: int) -> float:
        """The one-sided level of the look after ``rounds`` rounds (a two-sided O'Brien–Fleming
        design of total ``2 · alpha``, halved: the fixed design's level is ``alpha`` per tail too)."""
        if rounds < self.first:
            return 0.0
        levels = obf_levels(self.first, self.max_rounds, 2.0 * self.alpha)
        return levels[min(rounds, self.max_rounds) - self.first] / 2.0


def look(values: dict, settings: Settings, plan: SpendingPlan, frozen: dict, noise: Optional[dict] = None,
         notes: Optional[dict] = None, raw: Optional[dict] = None) -> list:
    """One look of an adaptive campaign: each point at the level of its own number of rounds,
    points decided at an earlier look keep their verdict (``frozen``: ``{point: (verdict, rounds)}``)."""
    return analyse(values, settings, noise=noise, notes=notes, frozen=frozen, plan=plan, raw=raw)


def newly_frozen(results: Sequence[PointStats], frozen: dict) -> dict:
    """``frozen`` plus the points this look decided."""
    out = dict(frozen)
    for r in results:
        if r.verdict != UNSURE and r.point not in out:
            out[r.point] = (r.verdict, r.decided_at or r.rounds)
    return out


def groups_to_extend(results: Sequence[PointStats], group_of) -> list:
    """The groups (ops) with an undecided point, in first-seen order: only they get another round."""
    return list(dict.fromkeys(group_of(r.point) for r in results if r.verdict == UNSURE))


def adaptive_step(values: dict, settings: Settings, plan: SpendingPlan, frozen: dict, group_of,
                  noise: Optional[dict] = None, notes: Optional[dict] = None) -> tuple:
    """One look of ``--until-confident``, free of processes (``zlf ab`` and the simulation
    harness both call it): ``(results, frozen, groups to extend)``; no group once every point
    is decided or the largest round count reached ``plan.max_rounds``."""
    results = look(values, settings, plan, frozen, noise, notes)
    frozen = newly_frozen(results, frozen)
    n = max((len(a) for a, _ in values.values()), default=0)
    extend = groups_to_extend(results, group_of) if n < plan.max_rounds else []
    return results, frozen, extend


def _multiple(dec: dict, frozen: dict, values: dict, level, method: str, m: int) -> tuple:
    """The verdicts that survive the correction over the ``m`` points: ``(verdicts, judged, stop)``
    with ``judged`` the level each decided point met and ``stop`` the divisor of ``alpha`` whose
    level the undecided points' intervals are shown at (``level(point, divisor)`` is the level of
    ``alpha / divisor`` at that point's look).

    holm: Holm's step-down over every verdict; frozen points count as decided steps (they met
    Holm's levels at an earlier look). Points of the family outside ``values`` (a library's
    cleared points, each cleared at its own level, not at a Holm step) do not: they stand last,
    as never rejected, so the family-wise rate of the directions is Holm's over all ``m``.
    bh / by: each SAME at the point's own level (divisor 1: an equivalence test per point, the
    rate of losing a changed point); the directions by the Benjamini–Hochberg step-up, the
    ``r``-th smallest (frozen directions counted first, ``f`` of them) judged at divisor
    ``m · c / (f + r)`` (``c = 1``, or ``sum 1/i`` for Benjamini–Yekutieli, valid under any
    dependence), and every direction up to the largest ``r`` that passes is decided. At a fixed
    look (no plan, nothing frozen) this is ``scipy.stats.false_discovery_control``'s adjusted
    p-value against alpha.
    """
    verdicts, judged = {}, {}
    order = sorted(dec, key=lambda q: dec[q][1] / max(level(q, 1), 1e-300))
    if method == HOLM:  # frozen points first (decided at an earlier look), then by p relative to the level
        j = len([q for q in frozen if q in values])
        for point in order:
            v, p = dec[point]
            lvl = level(point, m - j)
            if v != UNSURE and p <= lvl:
                verdicts[point], judged[point] = v, lvl
                j += 1
            else:
                break
        return verdicts, judged, max(1, m - j)
    for point in order:
        v, p = dec[point]
        if v == SAME and p <= level(point, 1):
            verdicts[point], judged[point] = v, level(point, 1)
    c = sum(1.0 / i for i in range(1, m + 1)) if method == BY else 1.0
    f = len([q for q, (v, _) in frozen.items() if q in values and v in (FASTER, SLOWER)])
    directions = [q for q in order if dec[q][0] in (FASTER, SLOWER)]
    passed = 0
    for r, point in enumerate(directions, 1):
        p = dec[point][1]
        # no rank's level exceeds the point's own (divisor 1): only such p-values need theirs, which
        # under a spending plan costs a group-sequential boundary per rank
        if p <= level(point, 1) and p <= level(point, m * c / (f + r)):
            passed = r
    for point in directions[:passed]:
        verdicts[point], judged[point] = dec[point][0], level(point, m * c / (f + passed))
    return verdicts, judged, m * c / (f + passed + 1)


# ----------------------------------------------------------------------------- one campaign
def analyse(values: dict, settings: Settings = Settings(), alpha: Optional[float] = None,
            noise: Optional[dict] = None, notes: Optional[dict] = None, frozen: Optional[dict] = None,
            plan: Optional[SpendingPlan] = None, pairing: Optional[str] = None, raw: Optional[dict] = None) -> list:
    """Statistics and verdicts for every point of a campaign.

    :param values: ``{point: (a_ms per round, b_ms per round)}`` in round order; the points
        analysed together form the family the correction covers (Holm's, or BH/BY's with
        ``settings.method``; ``settings.family`` when it counts points decided elsewhere).
    :param settings: the rule's knobs.
    :param alpha: the level of this look (default ``settings.alpha``).
    :param noise: ``{point: Noise or A/A summary.json entry}`` (``--noise-from``), pooled in.
    :param notes: ``{point: reason}`` for points that must not get a direction (mixed timers
        ...): their verdict is at most SAME.
    :param frozen: ``{point: (verdict, rounds)}`` decided at an earlier look (adaptive): kept, and
        counted as decided in Holm's steps.
    :param plan: an adaptive campaign's spending plan: Holm's ``j``-th step judges a point at the
        level of the plan built for ``alpha / (m − j)`` at the point's own number of rounds (the
        O'Brien–Fleming level of ``alpha / k`` is not the level of ``alpha`` divided by ``k``).
    :param pairing: paired or unpaired; default chosen by :func:`choose_estimate` (with the trim).
    :param raw: ``{point: (a_ms, b_ms)}`` as measured, when ``values`` are normalised (controls).
    :return: a list of :class:`PointStats` in the order of ``values``.
    """
    alpha = settings.alpha if alpha is None else alpha
    noise, notes, frozen, raw = noise or {}, notes or {}, frozen or {}, raw or {}

    def level(point, steps):  # one-sided level of Holm's step with ``steps`` points left
        if plan is None:
            return alpha / steps
        return SpendingPlan(plan.first, plan.max_rounds, plan.alpha / steps).level(len(values[point][0]))

    kurtosis = pooled_excess_kurtosis(values)
    chosen, trim = choose_estimate(values, settings, noise)
    pairing = pairing or chosen
    noise = {p: nz for p in values if (nz := aa_noise_at(noise, p, trim)) is not None}
    m = max(1, len(values), settings.family or 0)
    est, dec = {}, {}
    for point, (a_ms, b_ms) in values.items():
        e = estimate(a_ms, b_ms, pairing, trim, noise.get(point))
        est[point] = e
        if point in frozen:
            continue
        if e is None or len(a_ms) < MIN_ROUNDS:
            dec[point] = (UNSURE, 1.0)
            continue
        v, p = decision(e, settings.min_effect_pct)
        if notes.get(point) and v in (FASTER, SLOWER):
            v, p = UNSURE, 1.0
        dec[point] = (v, p)
    verdicts, judged, stop = _multiple(dec, frozen, values, level, settings.method, m)
    out = []
    for point, (a_ms, b_ms) in values.items():
        n = len(a_ms)
        e = est[point]
        if point in frozen:
            v, decided_at = frozen[point]
        elif point in verdicts:
            v, decided_at = verdicts[point], n
        else:
            v, decided_at = UNSURE, None
        lvl = judged.get(point) or level(point, stop)
        ci = e.interval(lvl) if e is not None and n >= 2 else None
        ci_pct = (pct(ci[0]), pct(ci[1])) if ci else None
        d = log_deltas(a_ms, b_ms)
        note = notes.get(point, "")
        if n < MIN_ROUNDS:
            note = note or ("one round: no interval" if n < 2 else f"fewer than {MIN_ROUNDS} rounds: no verdict")
        enough = e is not None and n >= MIN_ROUNDS
        bonf = level(point, m)
        aa = noise.get(point)
        pooled = e.noise if e is not None else None
        if pooled is not None and aa is not None:
            pooled = Noise(*_pool([(pooled.var_unpaired, pooled.df_unpaired), (aa.var_unpaired, aa.df_unpaired)]),
                           *_pool([(pooled.var_paired, pooled.df_paired), (aa.var_paired, aa.df_paired)]))
        means = kept_log_means(a_ms, b_ms, pairing, trim) if n else (math.nan, math.nan)
        sd_a, sd_b = ((100.0 * math.sqrt(trimmed(np.log(np.asarray(x, float)), trim).var) for x in (a_ms, b_ms))
                      if n >= 2 else (None, None))
        raw_a, raw_b = raw.get(point, ((), ()))
        out.append(PointStats(
            point=point, rounds=n,
            a_median_ms=_median(a_ms), b_median_ms=_median(b_ms),
            delta_median_pct=pct(_median(d)),
            delta_lo_pct=ci_pct[0] if ci_pct else None, delta_hi_pct=ci_pct[1] if ci_pct else None,
            noise_a_pct=spread_pct(a_ms), noise_b_pct=spread_pct(b_ms), flips=sign_flips(d), verdict=v,
            min_effect_pct=settings.min_effect_pct,
            mde_pct=(min_detectable_pct(tail_adjusted(e, n, kurtosis), level(point, mde_steps(m, settings.power)),
                                        settings.power, settings.min_effect_pct) if enough else None),
            p_value=dec.get(point, (None, None))[1] if enough else None, confidence=1.0 - 2.0 * lvl, note=note,
            deltas_pct=tuple(pct(x) for x in d),
            delta_pct=pct(e.mean) if e is not None else pct(float(d.mean())) if d.size else None,
            pairing=pairing, trim=trim, df=e.df if e is not None else None,
            noise_pct=pooled.pct if pooled is not None else None, noise=e.noise if e is not None else None,
            rounds_needed=(rounds_needed(pooled, pairing, bonf, settings.power, settings.min_effect_pct,
                                         trim, (aa.df_paired if pairing == PAIRED else aa.df_unpaired) if aa else 0.0)
                           if enough else None),
            decided_at=decided_at, a_ms=tuple(float(x) for x in a_ms), b_ms=tuple(float(x) for x in b_ms),
            a_mean_ms=math.exp(means[0]) if n else None, b_mean_ms=math.exp(means[1]) if n else None,
            sd_a_pct=sd_a, sd_b_pct=sd_b, normalised=point in raw,
            raw_a_ms=tuple(float(x) for x in raw_a), raw_b_ms=tuple(float(x) for x in raw_b),
        ))
    return out


def counts(results: Sequence[PointStats]) -> dict:
    """``{verdict: how many points}`` over all four verdicts."""
    return {v: sum(1 for r in results if r.verdict == v) for v in VERDICTS}


def aa_entries(summary_points: Sequence[dict]) -> dict:
    """``{point: entry}`` of an A/A campaign's summary.json point entries that can give a
    variance (per-side times, or an older summary's per-round deltas): what ``--noise-from`` keeps."""
    out = {}
    for p in summary_points:
        entry = {k: p[k] for k in ("a_ms", "b_ms", "deltas_pct", "raw_a_ms", "raw_b_ms", "normalised") if p.get(k)}
        if aa_noise_at({p["point"]: entry}, p["point"], 0.0) is not None:
            out[p["point"]] = entry
    return out


def aa_like(entries: dict, normalised: bool) -> dict:
    """The A/A's entries like this campaign's values: normalised by process factors (controls)
    when they are, as measured when they are not. An A/A that was not normalised has nothing
    like a normalised campaign's values: its points are left out then."""
    out = {}
    for point, entry in entries.items():
        if isinstance(entry, Noise):
            out[point] = entry
        elif normalised:
            if entry.get("normalised"):
                out[point] = {"a_ms": entry["a_ms"], "b_ms": entry["b_ms"]}
        elif entry.get("raw_a_ms") and entry.get("raw_b_ms"):
            out[point] = {"a_ms": entry["raw_a_ms"], "b_ms": entry["raw_b_ms"]}
        else:
            out[point] = {k: entry[k] for k in ("a_ms", "b_ms", "deltas_pct") if entry.get(k)}
    return out


def aa_noise(summary_points: Sequence[dict], trim: float = 0.0) -> dict:
    """``{point: Noise}`` at ``trim`` from an A/A campaign's summary.json point entries."""
    entries = aa_entries(summary_points)
    return {p: aa_noise_at(entries, p, trim) for p in entries}


def json_safe(obj):
    """``obj`` with every NaN / ±Infinity float replaced by None: JSON has no such numbers, and
    ``json.dumps`` would write tokens other readers refuse."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
