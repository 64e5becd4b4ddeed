"""In-campaign controls: a factor per process, estimated from what did not change, taken out.

Pure numbers in, numbers out (``zlf ab`` chooses the controls and reads the runs; docs/ab.md,
"Controls"). A power-capped GPU runs a whole process in one clock mode: every point of the
process is slower by the same factor, which per-point noise models cannot tell from an effect.
Points known to be the same on both sides -- canary kernels the compiler under test does not
build, points whose launched kernels are byte-identical on both sides -- measure that factor.

Formulation: a **linear mixed model** on log time, fitted on the controls,

    log y[c, j] = mu[c] + u[j] + e[c, j],    u[j] ~ N(0, s_u^2),  e[c, j] ~ N(0, s_e^2)

with ``c`` a control, ``j`` a process (one round of one side), ``mu[c]`` a fixed control
effect shared by both sides, ``u[j]`` the random process effect. ``mu`` and the raw process
means come from least squares (alternating means, exact for complete data); the variance
components from the method of moments (the ANOVA estimator: ``s_e^2`` from the residuals,
``s_u^2`` from the spread of the process means less the share ``s_e^2 / n_j`` their own
controls' noise explains, never below 0); each process's factor is the BLUP
``u_hat[j] = lambda[j] · u_raw[j]``, ``lambda[j] = s_u^2 / (s_u^2 + s_e^2 / n_j)``, whose
prediction error variance is ``lambda[j] · s_e^2 / n_j``. Shrinking is what keeps controls from
adding noise where processes do not differ (then ``lambda`` is about 0).

Every point of a process is then divided by ``exp(u_hat[j])``. A control is normalised by the
factors fitted without it (leave one out), so its own noise does not cancel itself. The
factor's error is part of each normalised value, so the between-round variance the intervals
are computed from contains it: the intervals are not narrowed by pretending the factor exact.

A control that moved between the sides is a finding, and must not steer the factors: each
control's normalised B-against-A difference is tested (Welch's t, two-sided at ``alpha`` over the
controls, Bonferroni); the most significant moved control is dropped and the model refitted
until none is left.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import attrs
import numpy as np

#: the choices of ``zlf ab --controls``.
AUTO, CANARY, UNCHANGED, NONE = "auto", "canary", "unchanged", "none"
MODES = (AUTO, CANARY, UNCHANGED, NONE)
#: the built-in canary ops (zlf.ops.builtin) a campaign adds when its controls include canaries.
CANARY_OPS = ("canary_matmul", "canary_add")
#: alternating least squares sweeps (complete data converges in one; missing cells need a few).
SWEEPS = 25


@attrs.frozen
class Factor:
    """One process's factor: ``log`` its BLUP (``pct`` in percent), ``se`` the square root of
    its prediction error variance (log), ``controls`` how many controls it rests on."""

    process: str
    log: float
    se: float
    controls: int

    @property
    def pct(self) -> float:
        return 100.0 * math.expm1(self.log)

    def to_json(self) -> dict:
        return {"process": self.process, "pct": self.pct, "se_pct": 100.0 * self.se, "controls": self.controls}


@attrs.frozen
class Moved:
    """A control whose normalised B-against-A difference is not zero."""

    point: str
    delta_pct: float
    lo_pct: float
    hi_pct: float

    def to_json(self) -> dict:
        return attrs.asdict(self)


@attrs.frozen
class Normalisation:
    """What the controls found and did: ``values`` and ``raw`` as ``{point: (A, B)}``."""

    values: dict
    raw: dict
    factors: dict = attrs.field(factory=dict)
    used: tuple = ()
    moved: tuple = ()
    #: points whose processes have no factor (left as measured); why, per point
    unnormalised: dict = attrs.field(factory=dict)
    sd_process_pct: float = 0.0
    sd_control_pct: float = 0.0
    #: pooled within-side variance of the non-control points' log values, before and after
    var_before: float = 0.0
    var_after: float = 0.0
    #: mean factor of B's processes minus A's, percent (controls say the sides' processes differ)
    side_shift_pct: Optional[float] = None
    note: str = ""

    @property
    def active(self) -> bool:
        return bool(self.factors)

    @property
    def removed_pct(self) -> Optional[float]:
        """Share of the points' variance the normalisation removed (negative: it added)."""
        if self.var_before <= 0.0:
            return None
        return 100.0 * (1.0 - self.var_after / self.var_before)

    def to_json(self) -> dict:
        return {"active": self.active, "formulation": "linear mixed model, random process effect on log time "
                                                      "(method-of-moments variance components, BLUP factors)",
                "used": list(self.used), "moved": [m.to_json() for m in self.moved],
                "factors": [f.to_json() for f in self.factors.values()],
                "unnormalised": dict(self.unnormalised), "sd_process_pct": self.sd_process_pct,
                "sd_control_pct": self.sd_control_pct, "variance_removed_pct": self.removed_pct,
                "side_shift_pct": self.side_shift_pct, "note": self.note}


def default_processes(values: dict) -> dict:
    """One process per round and side for every point: ``r<k>_A`` / ``r<k>_B``."""
    return {p: ([f"r{k}_A" for k in range(1, len(a) + 1)], [f"r{k}_B" for k in range(1, len(b) + 1)])
            for p, (a, b) in values.items()}


@attrs.frozen
class _Fit:
    u: np.ndarray  # BLUP per process (log)
    pev: np.ndarray  # prediction error variance per process
    n: np.ndarray  # controls per process
    s_u2: float
    s_e2: float


def _fit(y: np.ndarray, components: Optional[tuple] = None) -> Optional[_Fit]:
    """The mixed model on ``y[c, j]`` (log times, NaN where control ``c`` was not in process ``j``);
    ``components``: ``(s_u^2, s_e^2)`` to use instead of estimating them (a leave-one-out fit
    keeps the full fit's, which one control alone could not estimate)."""
    present = np.isfinite(y)
    n = present.sum(axis=0)
    c_rows, j_cols = y.shape
    if c_rows < 1 or j_cols < 2 or not n.all():
        return None
    u = np.zeros(j_cols)
    mu = np.zeros(c_rows)
    if present.all():  # complete data: least squares in one step
        mu = y.mean(axis=1)
        u = y.mean(axis=0) - y.mean()
    for _ in range(0 if present.all() else SWEEPS):
        mu = np.nanmean(y - u[None, :], axis=1)
        new = np.nanmean(y - mu[:, None], axis=0)
        new -= new.mean()
        if np.allclose(new, u, atol=1e-12, rtol=0):
            u = new
            break
        u = new
    if components is not None:
        s_u2, s_e2 = components
    else:
        resid = np.where(present, y - mu[:, None] - u[None, :], 0.0)
        df_e = int(present.sum()) - c_rows - j_cols + 1
        if df_e <= 0:
            return None
        s_e2 = float((resid ** 2).sum()) / df_e
        s_u2 = max(0.0, float(np.var(u, ddof=1)) - float(np.mean(s_e2 / n)))
    lam = s_u2 / (s_u2 + s_e2 / n) if s_u2 > 0 else np.zeros(j_cols)
    return _Fit(lam * u, lam * s_e2 / n, n, s_u2, s_e2)


def _welch(x: np.ndarray, y: np.ndarray, level: float) -> Optional[tuple]:
    """``(difference of means y - x, lo, hi)`` at two-sided ``level`` (Welch)."""
    from scipy.special import stdtrit

    if x.size < 2 or y.size < 2:
        return None
    qa, qb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    diff = float(y.mean() - x.mean())
    se2 = qa + qb
    if se2 <= 0:
        return diff, diff, diff
    df = se2 ** 2 / (qa ** 2 / (x.size - 1) + qb ** 2 / (y.size - 1))
    half = float(stdtrit(df, 1.0 - level / 2.0)) * math.sqrt(se2)
    return diff, diff - half, diff + half


def _within_var(log_pairs: Sequence) -> float:
    """Pooled within-side variance of ``[(log A array, log B array)]`` (df-weighted)."""
    ss = df = 0.0
    for la, lb in log_pairs:
        for x in (la, lb):
            if x.size >= 2:
                ss += float(((x - x.mean()) ** 2).sum())
                df += x.size - 1
    return ss / df if df else 0.0


def normalise(values: dict, controls: Sequence[str], processes: Optional[dict] = None, alpha: float = 0.05) -> Normalisation:
    """Estimate every process's factor from ``controls`` and divide it out of ``values``.

    :param values: ``{point: (A values per round, B values per round)}``, controls included.
    :param controls: the points known to be the same on both sides.
    :param processes: ``{point: (A process ids per round, B process ids per round)}``; default
        one process per round and side shared by every point (:func:`default_processes`).
    :param alpha: family level of the moved-control tests (Bonferroni over the controls).
    :return: a :class:`Normalisation`; with fewer than one usable control, nothing normalised.
    """
    processes = processes or default_processes(values)
    raw = {p: (tuple(map(float, a)), tuple(map(float, b))) for p, (a, b) in values.items()}
    logs = {p: (np.log(np.asarray(a, float)), np.log(np.asarray(b, float))) for p, (a, b) in values.items()}
    usable = [c for c in dict.fromkeys(controls) if c in values and len(values[c][0]) >= 2
              and all(np.all(np.isfinite(x)) for x in logs[c])]
    if not usable:
        return Normalisation(dict(values), raw, note="no controls: every point as measured")
    # the processes a control ran in (an op re-run alone has processes without any)
    procs = sorted({j for c in usable for side in processes[c] for j in side})
    col = {j: i for i, j in enumerate(procs)}
    side_of = {j: s for p in values for s, side in zip("AB", processes[p]) for j in side}

    def matrix(points):
        y = np.full((len(points), len(procs)), np.nan)
        for r, c in enumerate(points):
            for side_logs, side_procs in zip(logs[c], processes[c]):
                for v, j in zip(side_logs, side_procs):
                    y[r, col[j]] = v
        return y

    def normalised_control(c, kept, full):
        others = [x for x in kept if x != c]
        fit = _fit(matrix(others), (full.s_u2, full.s_e2)) if others and full is not None else None
        if fit is None:
            return None
        la, lb = logs[c]
        pa, pb = processes[c]
        return la - fit.u[[col[j] for j in pa]], lb - fit.u[[col[j] for j in pb]]

    kept, moved = list(usable), []
    while len(kept) >= 2:
        level = alpha / len(kept)
        worst = None
        full = _fit(matrix(kept))
        for c in kept:
            z = normalised_control(c, kept, full)
            test = _welch(*z, level) if z is not None else None
            if test is None or test[1] <= 0.0 <= test[2]:
                continue
            score = min(abs(test[1]), abs(test[2]))
            if worst is None or score > worst[0]:
                worst = (score, c, test)
        if worst is None:
            break
        _, c, (d, lo, hi) = worst
        moved.append(Moved(c, 100.0 * math.expm1(d), 100.0 * math.expm1(lo), 100.0 * math.expm1(hi)))
        kept.remove(c)
    fit = _fit(matrix(kept))
    if fit is None:
        why = "the controls span too few processes to estimate a factor"
        return Normalisation(dict(values), raw, used=tuple(kept), moved=tuple(moved), note=why)
    factors = {j: Factor(j, float(fit.u[col[j]]), math.sqrt(float(fit.pev[col[j]])), int(fit.n[col[j]])) for j in procs}
    out, unnormalised = {}, {}
    for p, (la, lb) in logs.items():
        if p in kept:
            z = normalised_control(p, kept, fit) if len(kept) > 1 else None
            if z is None:
                out[p] = values[p]
                unnormalised[p] = "the only control: nothing to normalise it by"
                continue
        else:
            pa, pb = processes[p]
            bare = [j for j in (*pa, *pb) if j not in col]
            if bare:
                out[p] = values[p]
                unnormalised[p] = f"process {bare[0]} ran no control (left as measured)"
                continue
            z = la - fit.u[[col[j] for j in pa]], lb - fit.u[[col[j] for j in pb]]
        out[p] = (tuple(float(x) for x in np.exp(z[0])), tuple(float(x) for x in np.exp(z[1])))
    targets = [p for p in values if p not in usable]
    before = _within_var([logs[p] for p in targets])
    after = _within_var([tuple(np.log(np.asarray(x)) for x in out[p]) for p in targets])
    a_u = [fit.u[col[j]] for j in procs if side_of[j] == "A"]
    b_u = [fit.u[col[j]] for j in procs if side_of[j] == "B"]
    shift = 100.0 * math.expm1(float(np.mean(b_u) - np.mean(a_u))) if a_u and b_u else None
    return Normalisation(out, raw, factors=factors, used=tuple(kept), moved=tuple(moved), unnormalised=unnormalised,
                         sd_process_pct=100.0 * math.sqrt(fit.s_u2), sd_control_pct=100.0 * math.sqrt(fit.s_e2),
                         var_before=before, var_after=after, side_shift_pct=shift)


def summary_lines(norm: Normalisation, mode: str) -> list:
    """The report's lines about the controls (docs/ab.md, "Controls")."""
    if mode == NONE:
        return ["controls: off (--controls none): every point as measured, no process factor taken out"]
    if not norm.active:
        return [f"controls ({mode}): none usable -- {norm.note or 'no control point'}; every point as measured, "
                "as without controls"]
    removed = norm.removed_pct
    lines = [f"controls ({mode}): {len(norm.used)} point(s) [{', '.join(norm.used[:6])}{' ...' if len(norm.used) > 6 else ''}]"
             f"; process factors (linear mixed model, random process effect, BLUP): sd {norm.sd_process_pct:.2f}% between "
             f"processes, control noise {norm.sd_control_pct:.2f}%; variance of the other points "
             + (f"{'removed' if removed >= 0 else 'ADDED'} {abs(removed):.0f}%" if removed is not None else "-")]
    facs = sorted(norm.factors.values(), key=lambda f: f.process)
    lines.append("  factors: " + ", ".join(f"{f.process} {f.pct:+.2f}±{100 * f.se:.2f}%" for f in facs))
    if norm.side_shift_pct is not None:
        lines.append(f"  B's processes against A's, by the controls: {norm.side_shift_pct:+.2f}% (taken out; expected about 0)")
    for m in norm.moved:
        lines.append(f"!!! control {m.point} MOVED between the sides: {m.delta_pct:+.2f}% [{m.lo_pct:+.2f}, {m.hi_pct:+.2f}]% "
                     "after normalisation; left out of the factors (a finding: it is not the same on both sides)")
    for p, why in sorted(norm.unnormalised.items()):
        lines.append(f"  not normalised {p}: {why}")
    return lines
