"""The format of ``ir/index.tsv`` (docs/formats.md), shipped with the extension that writes it:
a JSON Schema of one row read as ``{column: text}``.

    from zlf_ir_dump import schema
    schema.check_index("runs/add_20261202-003618")   # every row of its ir/index.tsv
"""
from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

from zlf.readers import read_tsv

from .irtree import INDEX, IR_DIR

NAME = "ir_index"


def load() -> dict:
    """The JSON Schema of a row, as a fresh dict."""
    return json.loads(resources.files(__package__).joinpath(f"{NAME}.schema.json").read_text())


@functools.lru_cache(maxsize=None)
def _validator():
    import jsonschema  # only readers that validate need it

    schema = load()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def validate_row(row: dict) -> dict:
    """``row`` when it matches the schema, else ``jsonschema.ValidationError`` naming the problem."""
    _validator().validate(row)
    return row


def check_index(run_dir) -> int:
    """Validate every row of ``run_dir``'s ir/index.tsv (none when it has none); how many were checked."""
    path = Path(run_dir) / IR_DIR / INDEX
    if not path.is_file():
        return 0
    rows = read_tsv(path, what=INDEX)  # bounded; a row of the wrong width is one line (BadFile)
    for row in rows:
        validate_row(row)
    return len(rows)
