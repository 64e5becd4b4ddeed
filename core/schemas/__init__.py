"""JSON Schemas of the files zlf writes (docs/formats.md), shipped with the package.

``load(name)`` gives a schema as a dict; ``validate(name, doc)`` checks one document against it
and raises :class:`jsonschema.ValidationError` naming the first problem. ``check_run_dir`` and
``check_campaign_dir`` validate every record file of a folder, so an extension's tests (or a tool
that reads zlf's files) can hold written files to the format::

    from zlf import schemas
    schemas.validate("result", json.loads(line))
    schemas.check_run_dir("runs/add_20261202-003618")

Names: ``result`` (a results.jsonl line), ``meta`` (meta.json), ``campaign`` (campaign.json),
``summary`` (summary.json). An extension ships the format of what it writes (ir_dump: the rows of
ir/index.tsv, ``zlf_ir_dump.schema``); :func:`zlf.readers.read_tsv` reads such a table.
"""
from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

NAMES = ("result", "meta", "campaign", "summary")


@functools.lru_cache(maxsize=None)
def _text(name: str) -> str:
    if name not in NAMES:
        raise KeyError(f"no schema {name!r}; known: {', '.join(NAMES)}")
    return resources.files(__name__).joinpath(f"{name}.schema.json").read_text()


def load(name: str) -> dict:
    """The JSON Schema ``name`` (one of :data:`NAMES`) as a fresh dict."""
    return json.loads(_text(name))


@functools.lru_cache(maxsize=None)
def _validator(name: str):
    import jsonschema  # only readers that validate need it

    schema = load(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def validate(name: str, doc):
    """Return ``doc`` when it matches schema ``name``, else raise ``jsonschema.ValidationError``."""
    _validator(name).validate(doc)
    return doc


def _strict_json(text: str):
    """JSON without ``NaN`` / ``Infinity`` (not JSON, and no other language reads them)."""
    def refuse(token):
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def check_run_dir(path) -> int:
    """Validate meta.json and every results.jsonl line (those present) of the run directory
    ``path``; returns how many documents were checked."""
    path = Path(path)
    checked = 0
    if (path / "meta.json").is_file():
        validate("meta", _strict_json((path / "meta.json").read_text()))
        checked += 1
    if (path / "results.jsonl").is_file():
        for line in (path / "results.jsonl").read_text().splitlines():
            if line.strip():
                validate("result", _strict_json(line))
                checked += 1
    return checked


def check_campaign_dir(path) -> int:
    """Validate campaign.json, summary.json (when written) and every run directory the
    campaign lists; returns how many documents were checked."""
    path = Path(path)
    campaign = validate("campaign", _strict_json((path / "campaign.json").read_text()))
    checked = 1
    if (path / "summary.json").is_file():
        validate("summary", _strict_json((path / "summary.json").read_text()))
        checked += 1
    for run in campaign["runs"]:
        if (path / run["dir"]).is_dir():
            checked += check_run_dir(path / run["dir"])
    return checked
