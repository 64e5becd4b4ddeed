"""campaign.json read through typed views (``zlf.ab.Statistics``, ``Driving``, ``Look``)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zlf import ab, stats
from zlf.ab import CAMPAIGN, Campaign, Driving, Look
from zlf.testing import campaign_data

#: campaign.json of an adaptive campaign (2 rounds, then up to 3; --fail-if-slower 5;
#: --controls none), written by the zlf before the typed views
OLD = Path(__file__).resolve().parent / "data" / "ab_campaign_before_typed" / CAMPAIGN


def _copy(tmp_path) -> Path:
    where = tmp_path / "ab_old"
    where.mkdir()
    shutil.copy(OLD, where / CAMPAIGN)
    return where


def test_a_campaign_written_before_the_typed_views_opens_and_reads_the_same(tmp_path):
    where = _copy(tmp_path)
    raw = json.loads(OLD.read_text())
    c = Campaign.open(where)
    s, d = c.statistics, raw["statistics"]
    assert s.settings == stats.Settings(alpha=d["alpha"], min_effect_pct=d["min_effect_pct"], trim=d["trim"],
                                        pairing=d["pairing"])
    assert ab.settings_of(c) == s.settings
    assert (s.controls, s.until_confident, s.first_look, s.max_rounds) == ("none", True, 2, 3)
    assert s.plan == stats.SpendingPlan(2, 3, d["alpha"])
    assert ab.look_level(c, 2) == s.plan.level(2)
    assert s.canary_ops == tuple(d["canary_ops"]) and s.controls_note == d["controls_note"]
    assert s.to_json() == d  # what a new campaign writes is what the old zlf wrote
    assert [x.rounds for x in c.looks] == [x["rounds"] for x in raw["looks"]] and c.looks
    assert c.looks[0].to_json() == raw["looks"][0]
    assert c.driving == Driving(backend=raw["backend"], device=raw["device"], require_idle=False,
                                idle_wait=raw["idle_wait"], scale=None)
    assert c.fail_if_slower == 5.0 and c.metric == "time" and not c.aa and c.status == raw["status"]
    assert c.frozen == {p: tuple(v) for p, v in raw["frozen"].items()}
    c.save()  # the typed views change nothing on disk
    assert json.loads((where / CAMPAIGN).read_text()) == raw


def test_an_older_campaigns_statistics_read_with_the_defaults_it_was_decided_by(tmp_path):
    """Before controls, canaries and the one threshold: no controls, pairing auto, no canary."""
    data = campaign_data(tmp_path)
    del data["statistics"]["min_effect_pct"]
    c = Campaign.create(tmp_path, "t", data)
    s = c.statistics
    assert (s.controls, s.pairing, s.canary_ops, s.controls_note, s.plan) == ("none", "auto", (), "", None)
    assert s.settings == stats.Settings(alpha=0.05, min_effect_pct=stats.Settings().min_effect_pct)
    assert "margin_pct" in c.data["statistics"]  # a field this zlf no longer reads stays in the file
    c.set_statistics(controls="canary")
    assert c.statistics.controls == "canary" and c.data["statistics"]["controls"] == "canary"
    with pytest.raises(TypeError):
        c.set_statistics(no_such_field=1)
    assert c.fail_if_slower == 0.0  # campaign_data: --fail-on-slower, no percentage


def test_a_look_is_stored_as_it_was():
    look = Look(rounds=3, alpha=0.01, points=4, decided=3, undecided=1, ops_extended=["add"], at="t")
    assert look.to_json() == {"rounds": 3, "alpha": 0.01, "points": 4, "decided": 3, "undecided": 1,
                              "ops_extended": ["add"], "at": "t"}
    assert Look.from_json(look.to_json()) == look

