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
until none is left. Who moved is never guessed: when the moved controls are not a clear minority
(half of them or more), nothing is normalised.

One factor for every kernel is an assumption, tested where both canary kinds ran: the control-kind
x process interaction within sides (nested-model F, :func:`interaction`). When it fails, each
kind of point (its op's flops per byte) is normalised by its own kind's controls. B's process
factors are tested against A's (Welch): a shift tied to a side is an alarm, not a quiet line.
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
#: the kind of kernel each built-in canary op times (compute- or memory-bound), by op name.
CANARY_KINDS = {"canary_matmul": "compute", "canary_add": "memory"}
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
    #: Welch p-value of B's process factors against A's (an alarm below alpha: a shift tied to a side)
    side_shift_p: Optional[float] = None
    side_shift_alarm: bool = False
    #: the controls disagree about who moved (no clear minority moved): nothing normalised
    undecided: bool = False
    #: control x process interaction (kind of control x process, nested-model F test):
    #: ``{"F":, "df": [d1, d2], "p":, "kinds": {kind: [controls]}}``; None when not testable
    interaction: Optional[dict] = None
    note: str = ""

    @property
    def active(self) -> bool:
        return bool(self.factors)

    @property
    def disagree(self) -> bool:
        """The controls disagree within processes (the single-factor model does not hold)."""
        return bool(self.interaction and self.interaction["significant"])

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
                "side_shift_pct": self.side_shift_pct, "side_shift_p": self.side_shift_p,
                "side_shift_alarm": self.side_shift_alarm, "undecided": self.undecided,
                "interaction": self.interaction, "note": self.note}


def kind_of(point: str) -> Optional[str]:
    """``compute``/``memory`` for a built-in canary's point (its op is the id's first part), else None."""
    return CANARY_KINDS.get(point.split("/", 1)[0])


def interaction(y: np.ndarray, kinds: Sequence, sides: Sequence, alpha: float) -> Optional[dict]:
    """Do the controls of different kinds disagree within processes? The control-kind x process
    interaction within sides, as a nested-model F test (least squares on log time, processes
    every control ran in): ``mu[c] + u[j] + v[kind(c), side(j)]`` against one process effect per
    kind, ``mu[c] + u[kind(c), j]``. A kind x side difference alone (``v``: a kind of control
    moved between the sides, or a mode of one kind tied to a side) is not this interaction: it is
    the moved-control test's. None when not testable (one kind, or no residual df)."""
    from scipy.stats import f as f_dist

    keep = np.isfinite(y).all(axis=0)
    y, sides = y[:, keep], [s for s, k in zip(sides, keep) if k]
    c_rows, j_cols = y.shape
    labels = [k for k in dict.fromkeys(kinds) if k is not None]
    if len(labels) < 2 or None in kinds or j_cols < 3:
        return None
    kind_i = np.array([labels.index(k) for k in kinds])
    rows_c, rows_j = np.meshgrid(np.arange(c_rows), np.arange(j_cols), indexing="ij")
    rows_c, rows_j, obs = rows_c.ravel(), rows_j.ravel(), y.ravel()
    eye = lambda idx, n: np.eye(n)[idx]  # noqa: E731
    b_side = np.array([s == "B" for s in sides], float)[rows_j]
    kind_side = np.column_stack([(kind_i[rows_c] == g) * b_side for g in range(1, len(labels))])
    small = np.column_stack([eye(rows_c, c_rows), eye(rows_j, j_cols), kind_side])
    big = np.column_stack([eye(rows_c, c_rows), eye(kind_i[rows_c] * j_cols + rows_j, len(labels) * j_cols)])

    def rss(x):
        beta, *_ = np.linalg.lstsq(x, obs, rcond=None)
        return float(((obs - x @ beta) ** 2).sum()), int(np.linalg.matrix_rank(x))

    (rss0, r0), (rss1, r1) = rss(small), rss(big)
    df1, df2 = r1 - r0, obs.size - r1
    if df1 <= 0 or df2 <= 0 or rss1 <= 0:
        return None
    stat = max(0.0, (rss0 - rss1) / df1) / (rss1 / df2)
    p = float(f_dist.sf(stat, df1, df2))
    return {"test": "control kind x process interaction within sides, nested-model F (least squares on log time)",
            "F": stat, "df": [df1, df2], "p": p, "alpha": alpha, "significant": p < alpha}


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


def normalise(values: dict, controls: Sequence[str], processes: Optional[dict] = None, alpha: float = 0.05,
              kinds: Optional[dict] = None, point_kinds: Optional[dict] = None) -> Normalisation:
    """Estimate every process's factor from ``controls`` and divide it out of ``values``.

    :param values: ``{point: (A values per round, B values per round)}``, controls included.
    :param controls: the points known to be the same on both sides.
    :param processes: ``{point: (A process ids per round, B process ids per round)}``; default
        one process per round and side shared by every point (:func:`default_processes`).
    :param alpha: family level of the moved-control tests (Bonferroni over the controls), of the
        control-kind x process interaction test and of the side-shift alarm.
    :param kinds: ``{control: "compute" | "memory"}``; default :func:`kind_of` (the canaries).
    :param point_kinds: ``{point: "compute" | "memory"}`` of the points under test (their op's
        flops per byte); when the controls' kinds disagree within processes, each point known
        to be of a kind is normalised by that kind's controls alone, the others left as measured.
    :return: a :class:`Normalisation`; with fewer than one usable control, nothing normalised.
        Nothing is normalised either when the moved controls are not a clear minority (who moved
        cannot be told) or when controls of different kinds disagree within processes (one
        factor does not fit every kernel): values as measured, and the reason in ``note``.
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

    # one factor for every kernel? (a clock mode of one kind of kernel only)
    kinds = kinds or {c: kind_of(c) for c in usable}
    inter = interaction(matrix(usable), [kinds.get(c) for c in usable], [side_of[j] for j in procs], alpha) \
        if len(usable) > 2 else None
    if inter and inter["significant"] and point_kinds:
        # a kind that differs between the sides: moved canaries of that kind, or a mode of that
        # kind tied to a side -- nothing tells them apart, so no kind's factors are trusted
        y = matrix(usable)
        labels = [kinds[c] for c in usable]
        gap = np.nanmean(y[[i for i, k in enumerate(labels) if k == labels[0]]], axis=0) \
            - np.nanmean(y[[i for i, k in enumerate(labels) if k != labels[0]]], axis=0)
        by_side = [gap[[col[j] for j in procs if side_of[j] == s_]] for s_ in "AB"]
        kind_side = _welch(by_side[0], by_side[1], alpha)
        if kind_side is not None and not kind_side[1] <= 0.0 <= kind_side[2]:
            why = (f"controls disagree: the {labels[0]} canaries against the others differ between the sides by "
                   f"{100.0 * math.expm1(kind_side[0]):+.2f}% and within processes (kind x process interaction "
                   f"p={inter['p']:.2g}); could not tell which moved; values as measured")
            moved_kind = tuple(Moved(c, 100.0 * math.expm1(kind_side[0]), 100.0 * math.expm1(kind_side[1]),
                                     100.0 * math.expm1(kind_side[2])) for c in usable if kinds[c] == labels[0])
            return Normalisation(dict(values), raw, used=(), moved=moved_kind, undecided=True, interaction=inter,
                                 note=why)
        return _per_kind(values, raw, logs, usable, usable, (), kinds, point_kinds, processes, alpha, inter)
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
    if moved and 2 * len(moved) >= len(usable):
        why = (f"controls disagree: {len(moved)} of {len(usable)} moved against the others, could not tell which "
               "moved; values as measured")
        return Normalisation(dict(values), raw, used=(), moved=tuple(moved), undecided=True, note=why)
    if inter and inter["significant"]:
        why = (f"controls disagree within processes (kind x process interaction F={inter['F']:.2f}, "
               f"p={inter['p']:.2g}): one factor does not fit every kind of kernel; values as measured")
        return Normalisation(dict(values), raw, used=(), moved=tuple(moved), interaction=inter, note=why)
    fit = _fit(matrix(kept))
    if fit is None:
        why = "the controls span too few processes to estimate a factor"
        return Normalisation(dict(values), raw, used=tuple(kept), moved=tuple(moved), interaction=inter, note=why)
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
    shift_p = _side_p(np.asarray(a_u), np.asarray(b_u))
    return Normalisation(out, raw, factors=factors, used=tuple(kept), moved=tuple(moved), unnormalised=unnormalised,
                         sd_process_pct=100.0 * math.sqrt(fit.s_u2), sd_control_pct=100.0 * math.sqrt(fit.s_e2),
                         var_before=before, var_after=after, side_shift_pct=shift, side_shift_p=shift_p,
                         side_shift_alarm=shift_p is not None and shift_p < alpha, interaction=inter)


def _per_kind(values, raw, logs, kept, usable, moved, kinds, point_kinds, processes, alpha, inter) -> Normalisation:
    """Per-kind normalisation: each kind's points by that kind's controls (the interaction test
    found one factor does not fit every kind); points of no known kind left as measured."""
    out, factors, unnormalised, used, shifts, ps = {}, {}, {}, [], [], []
    for kind in dict.fromkeys(kinds[c] for c in kept):
        ctrl = [c for c in kept if kinds[c] == kind]
        members = [p for p in values if p in ctrl or (p not in usable and point_kinds.get(p) == kind)]
        sub = normalise({p: values[p] for p in members}, ctrl, {p: processes[p] for p in members}, alpha,
                        {c: kind for c in ctrl})
        if not sub.active:
            continue
        out.update(sub.values)
        unnormalised.update(sub.unnormalised)
        used += ctrl
        factors.update({(kind, j): attrs.evolve(f, process=f"{j} [{kind}]") for j, f in sub.factors.items()})
        if sub.side_shift_pct is not None:
            shifts.append(sub.side_shift_pct)
        if sub.side_shift_p is not None:
            ps.append(sub.side_shift_p)
    for p in values:
        if p not in out:
            out[p] = values[p]
            if p not in usable:
                unnormalised[p] = "kind of kernel unknown (no flops/bytes) and the controls' kinds disagree: as measured"
    targets = [p for p in values if p not in usable]
    before = _within_var([logs[p] for p in targets])
    after = _within_var([tuple(np.log(np.asarray(x)) for x in out[p]) for p in targets])
    shift = max(shifts, key=abs) if shifts else None
    p_min = min(1.0, min(ps) * len(ps)) if ps else None  # Bonferroni over the kinds
    note = (f"controls disagree within processes (kind x process interaction F={inter['F']:.2f}, p={inter['p']:.2g}): "
            "normalised per kind of kernel (compute-bound points by the compute canaries, memory-bound by the memory ones)")
    return Normalisation(out, raw, factors=factors, used=tuple(used), moved=tuple(moved), unnormalised=unnormalised,
                         var_before=before, var_after=after, side_shift_pct=shift, side_shift_p=p_min,
                         side_shift_alarm=p_min is not None and p_min < alpha, interaction=inter, note=note)


def _side_p(a_u: np.ndarray, b_u: np.ndarray) -> Optional[float]:
    """Two-sided Welch p-value of B's process factors against A's (None: not testable)."""
    from scipy.stats import ttest_ind

    if a_u.size < 2 or b_u.size < 2 or (np.ptp(np.concatenate([a_u, b_u])) == 0.0):
        return None
    p = float(ttest_ind(b_u, a_u, equal_var=False).pvalue)
    return p if math.isfinite(p) else None


def summary_lines(norm: Normalisation, mode: str) -> list:
    """The report's lines about the controls (docs/ab.md, "Controls")."""
    if mode == NONE:
        return ["controls: off (--controls none): every point as measured, no process factor taken out"]
    if norm.undecided:
        return [f"!!! controls ({mode}) disagree: could not tell which moved "
                f"({', '.join(m.point for m in norm.moved)} against the others); values as measured"]
    if norm.disagree and not norm.active:
        i = norm.interaction
        return [f"!!! controls ({mode}) disagree within processes: compute- against memory-bound canaries, "
                f"F({i['df'][0]}, {i['df'][1]}) = {i['F']:.2f}, p = {i['p']:.2g} (one factor does not fit every kind "
                "of kernel); values as measured"]
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
        if norm.side_shift_alarm:
            lines.insert(0, f"!!! B's processes differ from A's by the controls: {norm.side_shift_pct:+.2f}% "
                         f"(Welch p = {norm.side_shift_p:.2g}); a clock mode tied to a side, or a change that reached the "
                         "controls too: the verdicts as measured are shown beside the normalised ones")
        lines.append(f"  B's processes against A's, by the controls: {norm.side_shift_pct:+.2f}% (taken out; expected about 0)")
    if norm.disagree:
        i = norm.interaction
        lines.insert(0, f"!!! controls disagree within processes: compute- against memory-bound canaries, F({i['df'][0]}, "
                     f"{i['df'][1]}) = {i['F']:.2f}, p = {i['p']:.2g}; each kind of point normalised by its kind's controls")
    elif norm.interaction is not None:
        i = norm.interaction
        lines.append(f"  compute- against memory-bound controls within processes: F({i['df'][0]}, {i['df'][1]}) = "
                     f"{i['F']:.2f}, p = {i['p']:.2g} (they agree; one factor for every kernel)")
    for m in norm.moved:
        lines.append(f"!!! control {m.point} MOVED between the sides: {m.delta_pct:+.2f}% [{m.lo_pct:+.2f}, {m.hi_pct:+.2f}]% "
                     "after normalisation; left out of the factors (a finding: it is not the same on both sides)")
    for p, why in sorted(norm.unnormalised.items()):
        lines.append(f"  not normalised {p}: {why}")
    return lines
