"""The two-stage rule of a library campaign: screen every point, confirm only the rest.

Pure numbers in, numbers out (the library driver reads the runs and stores :class:`State`;
docs/ab.md, "A library campaign: screen, then confirm"). Thousands of points make Holm's
family-wise rule of a small campaign too strict to be useful (its first step tests at
``alpha / m``), and give every point the same rounds although most of a release is unchanged.

The rule is a group-sequential design per point with stopping for equivalence at its first look,
the library's points one family:

* **Screen** (the first look, after ``screen_rounds`` rounds of every point): the campaign's
  verdict rule (controls' normalisation, then :func:`zlf.stats.analyse`). A point whose interval
  lies wholly inside ``±δ`` at its own level ``alpha`` (an equivalence test per point, TOST) is
  **cleared**: SAME, final, no more rounds. Every other point is **selected**. Nothing gets a
  direction at the screen.
* **Confirm**: only the selected points' ops get further rounds, one look after each round up to
  ``max_rounds``, on all of a point's rounds (the screen's included). Each look's levels come from
  Lan–DeMets O'Brien–Fleming spending over the looks after rounds ``screen_rounds..max_rounds``
  (:class:`zlf.stats.SpendingPlan`); a verdict decided at a look is kept (and, with controls, only
  when the values as measured agree, as ``--until-confident`` freezes); at ``max_rounds`` the
  last look's verdicts stand and the rest are UNSURE. Stopping a point for SAME can only remove
  directions, so the screen costs the directions' error rate nothing.
* **Error rate over the library** (``method``): ``bh`` (default) -- the directions (SLOWER,
  FASTER) by the Benjamini–Hochberg step-up over all the library's ``m`` points (the cleared
  ones count as decided without a direction), so the expected share of wrong directions among
  the library's directions (the false discovery rate) is at most ``alpha``; ``by`` --
  Benjamini–Yekutieli, the same under any dependence between points; ``holm`` -- Holm's
  step-down over all ``m`` points (the cleared ones last, never a step taken), the chance of
  any wrong direction at most ``alpha`` (family-wise). Under every method the screen's SAME is
  an equivalence test at the point's own level, not a family-wise one (Holm's over thousands
  of points would clear nothing): a point truly changed by δ or more is cleared at the screen
  with probability at most ``alpha``, and called SAME at a later look with at most ``alpha``
  more (spent over the looks; with ``holm`` a later SAME meets Holm's level, stricter still).

The unit of replication stays the process round (one value per point, round and side) and the
controls' process factors are taken out before each look, as in every ``zlf ab`` campaign.
"""
from __future__ import annotations

from typing import Callable, Optional

import attrs

from .. import controls as ctl
from .. import stats

SCREEN, CONFIRM = "screen", "confirm"
#: defaults: the screen of a small campaign (3 rounds) and ``--max-rounds``' 12 in all.
SCREEN_ROUNDS, MAX_ROUNDS = 3, 12


@attrs.frozen
class Plan:
    """The two-stage rule's settings (campaign.json keeps :meth:`to_json` under ``screening``)."""

    screen_rounds: int = SCREEN_ROUNDS
    #: rounds a selected point gets at most, screen included.
    max_rounds: int = MAX_ROUNDS
    #: :data:`zlf.stats.METHODS`: bh (false discovery rate, default), by, or holm (family-wise).
    method: str = stats.BH

    @property
    def confirm_rounds(self) -> int:
        """Confirmation rounds at most (after the screen's)."""
        return self.max_rounds - self.screen_rounds

    def check(self) -> None:
        """Raise ValueError (one line, for ``zlf: error:``) when the plan cannot decide."""
        if self.screen_rounds < stats.MIN_ROUNDS:
            raise ValueError(f"the screen needs at least {stats.MIN_ROUNDS} rounds (got {self.screen_rounds})")
        if self.confirm_rounds < 1:
            raise ValueError(f"--max-rounds must leave confirmation rounds after the {self.screen_rounds} of the "
                             f"screen (got {self.max_rounds})")
        if self.method not in stats.METHODS:
            raise ValueError(f"unknown error control {self.method!r} (choose from {', '.join(stats.METHODS)})")

    def spending(self, alpha: float) -> stats.SpendingPlan:
        """The looks' levels: one look per round from the screen's to ``max_rounds``."""
        return stats.SpendingPlan(self.screen_rounds, self.max_rounds, alpha)

    def to_json(self) -> dict:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "Plan":
        return cls(**{k: doc[k] for k in ("screen_rounds", "max_rounds", "method") if k in doc})


@attrs.frozen
class State:
    """What a library campaign keeps between looks (campaign.json, :meth:`to_json`)."""

    #: whether the screen has been decided (its rounds all done).
    screened: bool = False
    #: points the screen cleared (SAME, final).
    cleared: tuple = ()
    #: points sent to confirmation.
    selected: tuple = ()
    #: ``{point: (verdict, rounds)}`` decided at a confirmation look.
    frozen: dict = attrs.field(factory=dict)

    def to_json(self) -> dict:
        return {"screened": self.screened, "cleared": list(self.cleared), "selected": list(self.selected),
                "frozen": {p: list(v) for p, v in self.frozen.items()}}

    @classmethod
    def from_json(cls, doc: Optional[dict]) -> "State":
        doc = doc or {}
        return cls(bool(doc.get("screened")), tuple(doc.get("cleared") or ()), tuple(doc.get("selected") or ()),
                   {p: tuple(v) for p, v in (doc.get("frozen") or {}).items()})


@attrs.frozen
class Step:
    """One look of a library campaign.

    ``results``: one :class:`zlf.stats.PointStats` per point under test, in the order of the
    values: a cleared point's screen row (SAME, ``decided_at`` the screen's rounds), a selected
    point's row of the last look (all its rounds; UNSURE while open). ``stage``: ``{point: "screen" | "confirm"}``, where its verdict comes from.
    ``rounds``: ``{point: rounds it ran}`` (screen plus confirmation). ``extend``: the groups
    (ops) that need another round (empty: the campaign is done). ``state``: to store.
    ``screen``: the screen's :class:`zlf.ab.analysis.Decided` (None before it is decided).
    """

    results: list
    stage: dict
    rounds: dict
    extend: list
    state: State
    screen: object = None

    @property
    def done(self) -> bool:
        return not self.extend

    def counts(self) -> dict:
        """``{verdict: points}``, with ``"cleared"`` (SAME at the screen) and ``"open"`` (UNSURE
        with rounds still to come) besides."""
        out = stats.counts(self.results)
        out["cleared"] = len(self.state.cleared)
        out["open"] = 0 if self.done else sum(1 for r in self.results if r.verdict == stats.UNSURE)
        return out


def split(values: dict, screen_rounds: int) -> tuple:
    """``(screen values, confirmation values)`` of ``{point: (A, B)}``: the first
    ``screen_rounds`` rounds, and the rounds after them (points with none left out)."""
    first = {p: (list(a[:screen_rounds]), list(b[:screen_rounds])) for p, (a, b) in values.items()}
    later = {p: (list(a[screen_rounds:]), list(b[screen_rounds:])) for p, (a, b) in values.items()
             if len(a) > screen_rounds}
    return first, later


def _split_processes(processes: Optional[dict], screen_rounds: int, later: bool) -> Optional[dict]:
    if processes is None:
        return None
    cut = slice(screen_rounds, None) if later else slice(0, screen_rounds)
    return {p: (list(a[cut]), list(b[cut])) for p, (a, b) in processes.items()}


def screen(values: dict, settings: stats.Settings, plan: Plan, noise=None, notes=None, mode: str = ctl.NONE,
           controls=(), canaries=(), processes=None, why: str = "", kinds=None):
    """The screen over its rounds: ``(Decided, cleared points, selected points)``.

    ``values`` hold at least the screen's rounds of every point (later rounds are ignored).
    Cleared: the points whose verdict at their own level ``alpha`` is SAME (``method`` bh makes
    every SAME a per-point equivalence test). Canaries are neither.
    """
    from .analysis import decide  # analysis imports the ab package's readers: imported when used

    first, _ = split(values, plan.screen_rounds)
    decided = decide(first, attrs.evolve(settings, method=stats.BH), noise, notes, None, None, mode, controls,
                     canaries, _split_processes(processes, plan.screen_rounds, False), why, False, kinds)
    cleared = tuple(r.point for r in decided.results if r.verdict == stats.SAME)
    gone = set(cleared)
    selected = tuple(r.point for r in decided.results if r.point not in gone)
    return decided, cleared, selected


def step(values: dict, settings: stats.Settings, plan: Plan, state: State, group_of: Callable[[str], str],
         noise=None, notes=None, mode: str = ctl.NONE, controls=(), canaries=(), processes=None, why: str = "",
         kinds=None, screen_rows: bool = True) -> Step:
    """One look of a library campaign, after the rounds in ``values``: the screen once its rounds
    are done, then a confirmation look after every round.

    :param values: ``{point: (A values per round, B values per round)}`` of every point done so
        far (canaries included), all rounds from the first: what ``zlf.ab.analysis.collect`` gives.
        Points of an op that got no more rounds simply have fewer; a point that is missing (its op
        failed) is left out of everything.
    :param settings: the campaign's verdict rule (alpha, ``--min-effect`` δ, pairing, trim);
        its ``method`` is replaced by ``plan.method``.
    :param plan: :class:`Plan`.
    :param state: what the last look returned (``State()`` at first).
    :param group_of: ``point -> op``: the unit that gets another round.
    :param noise, notes, mode, controls, canaries, processes, why, kinds: as
        :func:`zlf.ab.analysis.decide` takes them (A/A entries, points that must not get a
        direction, the controls, ``{point: (A process ids, B process ids)}`` per round).
    :param screen_rows: with False, a look after the screen's leaves the cleared points' rows
        out of ``results`` (they do not change; recomputing them costs a screen's analysis).
    :return: :class:`Step`.
    """
    settings = attrs.evolve(settings, method=plan.method)
    canaries = tuple(canaries)
    under_test = [p for p in values if p not in canaries]
    decided = None
    if not state.screened:
        short = [p for p in under_test if len(values[p][0]) < plan.screen_rounds]
        if short or not under_test:
            results = [attrs.evolve(r, verdict=stats.UNSURE, decided_at=None)
                       for r in stats.analyse({p: values[p] for p in under_test}, settings, notes=notes)]
            return Step(results, {p: SCREEN for p in under_test}, {p: len(values[p][0]) for p in under_test},
                        list(dict.fromkeys(group_of(p) for p in short)), state)
        decided, cleared, selected = screen(values, settings, plan, noise, notes, mode, controls, canaries, processes,
                                            why, kinds)
        state = State(True, cleared, selected, {})
    elif screen_rows:
        decided, _, _ = screen(values, settings, plan, noise, notes, mode, controls, canaries, processes, why, kinds)
    screened_rows = {r.point: r for r in decided.results} if decided is not None else {}
    present = [p for p in state.selected if p in values]
    confirmation: dict = {}
    extend: list = []
    if present and max(len(values[p][0]) for p in present) > plan.screen_rounds:
        keep = set(present) | set(canaries) | set(controls)
        look_values = {p: v for p, v in values.items() if p in keep}
        used = [c for c in controls if c in look_values]
        family = attrs.evolve(settings, family=len(under_test))  # the cleared points stay in the family
        look_results, frozen, extend = _look(look_values, family, plan, dict(state.frozen), group_of, noise, notes,
                                             mode if used else ctl.NONE, used,
                                             [c for c in canaries if c in look_values], processes, why, kinds)
        confirmation = {r.point: r for r in look_results}
        state = attrs.evolve(state, frozen=frozen)
    elif present:  # the screen's look: every selected op gets a round
        extend = list(dict.fromkeys(group_of(p) for p in present))
    results, stage, rounds = [], {}, {}
    chosen = set(present)
    for p in under_test:
        if p in chosen:
            row = confirmation.get(p) or screened_rows.get(p)
            stage[p] = CONFIRM
            if row is not None:
                if p in state.frozen:
                    verdict, at = state.frozen[p]
                elif not extend and p in confirmation:  # the last look: its verdicts stand
                    verdict, at = row.verdict, (row.rounds if row.verdict != stats.UNSURE else None)
                else:
                    verdict, at = stats.UNSURE, None
                results.append(attrs.evolve(row, verdict=verdict, decided_at=at))
        else:
            stage[p] = SCREEN
            if p in screened_rows:
                results.append(attrs.evolve(screened_rows[p], verdict=stats.SAME, decided_at=plan.screen_rounds))
        rounds[p] = len(values[p][0])
    return Step(results, stage, rounds, extend, state, decided)


def _look(values, settings, plan: Plan, frozen: dict, group_of, noise, notes, mode, controls, canaries, processes,
          why, kinds) -> tuple:
    """One look after the screen: ``(results, frozen, groups to extend)``.

    Levels from :meth:`Plan.spending` at each point's rounds; a verdict decided at a look is
    frozen. A SAME is frozen on the normalised values, as the screen clears; a direction only when
    the values as measured give it too (as ``--until-confident`` freezes: a direction is a claim
    the controls' factors must not make alone). Nothing is frozen while the controls cannot tell
    who moved. Groups with a point still open get another round until ``plan.max_rounds``.
    """
    from .analysis import decide

    spend = plan.spending(settings.alpha)
    decided = decide(values, settings, noise, notes, spend, frozen, mode, controls, canaries, processes, why, False,
                     kinds)
    results = decided.results
    norm = decided.normalisation
    before, after = frozen, stats.newly_frozen(results, frozen)
    if norm.undecided or (norm.disagree and not norm.active):
        after = dict(before)
    elif norm.active:
        new = {p: v for p, v in after.items() if p not in before and v[0] in (stats.FASTER, stats.SLOWER)}
        measured = {p: norm.raw[p] for p in new}
        same = {r.point: r.verdict for r in stats.look(measured, settings, spend, {}, notes=notes)} if measured else {}
        after = {p: v for p, v in after.items() if p not in new or same.get(p) == v[0]}
    n = max((len(a) for a, _ in values.values()), default=0)
    open_ = [r.point for r in results if r.point not in after]
    extend = list(dict.fromkeys(group_of(p) for p in open_)) if n < plan.max_rounds else []
    return results, after, extend


def statement(plan: Plan, settings: stats.Settings, step_: Optional[Step] = None) -> str:
    """One line stating the library-wide error rate the verdicts carry (printed under the table)."""
    a = f"{settings.alpha:g}"
    d = f"{settings.min_effect_pct:g} %"
    directions = {
        stats.BH: f"false discovery rate of SLOWER/FASTER over the library <= {a} (Benjamini-Hochberg)",
        stats.BY: f"false discovery rate of SLOWER/FASTER over the library <= {a} under any dependence "
                  "(Benjamini-Yekutieli)",
        stats.HOLM: f"chance of any wrong SLOWER/FASTER over the library <= {a} (Holm, family-wise)",
    }[plan.method]
    same = (f"; SAME per point: a point changed by {d} or more is cleared as SAME at the screen with probability "
            f"<= {a} and called SAME at a later look with <= {a} more")
    cost = ""
    if step_ is not None and step_.rounds:
        mean = sum(step_.rounds.values()) / len(step_.rounds)
        cost = (f"; screen {plan.screen_rounds} rounds cleared {len(step_.state.cleared)} of {len(step_.rounds)} points, "
                f"{mean:.2g} rounds per point")
    return f"library rule: screen then confirm (delta {d}): {directions}{same}{cost}"
