"""campaign.json read through typed views (``zlf.ab.Statistics``, ``Driving``, ``Look``) and the
``zlf ab`` command line as the campaign hooks receive it (``zlf.ab.CampaignOptions``)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zlf import ab, stats
from zlf.ab import CAMPAIGN, Campaign, CampaignOptions, Driving, Look
from zlf.config import RunConfig
from zlf.testing import campaign_data
from zlf.testing import extension_hooks as real_hooks

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
    c.save()  # the typed views change nothing on disk (the signatures of its state and runs aside)
    saved = json.loads((where / CAMPAIGN).read_text())
    saved.pop("state_mac", None)
    saved.pop("record_mac", None)
    assert saved == raw


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


def test_the_campaign_hooks_receive_the_command_line_typed():
    """``campaign_setup`` / ``after_campaign`` get a CampaignOptions: the campaign options typed
    as their arguments declare them, the run settings a RunConfig."""
    from zlf.cli import build_parser

    hooks = real_hooks("profile", "history")
    parser = build_parser(hooks)
    args = parser.parse_args(["ab", "--switch", "X", "--triage-calls", "4", "--history-label", "k=v",
                              "--dtype", "float16", "--a-env", "Y=1", "add", "softmax"])
    options = CampaignOptions.from_args(args, hooks)
    assert options.campaign.get("triage_calls") == 4 and options.triage_calls == 4
    assert options.campaign.get("history_label") == ("k=v",) and options.get("triage") is False
    assert isinstance(options.run, RunConfig) and options.run.dtypes == ("float16",)
    assert (options.ops, options.switch, options.a_env, options.aa) == (("add", "softmax"), "X", ("Y=1",), False)
    with pytest.raises(AttributeError, match="no active extension declared option 'nope'"):
        options.nope


def test_a_campaign_option_of_the_wrong_type_is_one_line():
    from types import SimpleNamespace

    from zlf.config import ConfigError, Option, OptionSet

    hooks = SimpleNamespace(option_sets=(), campaign_option_sets=(OptionSet("x", (Option("calls", "--calls", "int", 3),)),))
    args = SimpleNamespace(calls="many", ops=[], aa=False, switch=None, a_env=[], b_env=[], a_python=None,
                           b_python=None, resume=None)
    with pytest.raises(ConfigError, match="option --calls of extension 'x': expected int"):
        CampaignOptions.from_args(args, hooks)


def test_status_says_when_the_verdicts_it_shows_do_not_verify(tmp_path, monkeypatch, capsys):
    """``zlf ab --status`` shows any campaign's table, --resume refuses an edited one: a table
    from a decision state zlf ab did not save (edited, another user's, an older zlf's) is marked."""
    from zlf.ab.cli import status

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    c = Campaign.create(tmp_path, "t", campaign_data(tmp_path))
    c.seal()
    c.save()
    assert status(str(c.path)) == 0
    assert "NOT VERIFIED" not in capsys.readouterr().err

    doc = json.loads((c.path / CAMPAIGN).read_text())
    doc["statistics"]["alpha"] = 0.5  # a looser level: more points called
    (c.path / CAMPAIGN).write_text(json.dumps(doc))
    before = (c.path / CAMPAIGN).read_bytes()
    assert status(str(c.path)) == 0
    err = capsys.readouterr().err
    assert "!!! NOT VERIFIED: campaign.json's screening, looks or statistics are not what zlf ab last saved" in err
    assert (c.path / CAMPAIGN).read_bytes() == before  # read, never written

    old = _copy(tmp_path)  # an older zlf's campaign: nothing signed
    assert status(str(old)) == 0
    assert "!!! NOT VERIFIED: campaign.json has no signed decision state" in capsys.readouterr().err
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "someone_else"))  # another user: no key here
    assert status(str(c.path)) == 0
    assert "!!! NOT VERIFIED: no campaign signing key of this user" in capsys.readouterr().err
