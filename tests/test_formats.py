"""docs/formats.md: the schemas shipped in zlf.schemas hold for what zlf writes today and what
it wrote before; the repository's text names no file outside the repository."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from zlf import schemas
from zlf.rundir import RunDir
from zlf.testing import read_records, run_dir_from

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parent.parent
OLD = ROOT / "tests" / "data" / "format_v0"


# ----------------------------------------------------------------------------- the schemas themselves
@pytest.mark.parametrize("name", schemas.NAMES)
def test_every_schema_is_a_valid_schema_with_a_title(name):
    schema = schemas.load(name)
    jsonschema.validators.validator_for(schema).check_schema(schema)
    assert schema["title"] and schema["type"] == "object"


def test_an_unknown_schema_name_is_refused():
    with pytest.raises(KeyError, match="no schema 'results'"):
        schemas.load("results")


def test_schemas_are_installed_with_the_package():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"zlf.schemas" = ["*.schema.json"]' in text and '"zlf.schemas"' in text.split("packages = ")[1].split("\n")[0]


def test_schemas_reject_what_readers_could_not_use():
    good = {"point": "add/1024/float32", "op": "add", "shape": [1024], "dtype": "float32", "status": "ok",
            "timer": "host_wall", "median_ms": 1.0}
    schemas.validate("result", good)
    for bad in ({**good, "median_ms": None},            # an ok point without a time
                {**good, "status": "fine"},              # a status no reader knows
                {**good, "shape": ["1024"]},             # a shape of text
                {k: v for k, v in good.items() if k != "point"},
                {**good, "status": "FAILED", "median_ms": 2.0}):  # a failed point with a time
        with pytest.raises(jsonschema.ValidationError):
            schemas.validate("result", bad)


# ----------------------------------------------------------------------------- files written today
FAILING_OP = '''
import torch
import zlf


def make(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))


def _wrong(x, out):
    out.copy_(x)


wrong = zlf.Op(name="wrong", fn=_wrong, make_inputs=make, shapes=[(64,)], reference=lambda x, out: -x, outputs=(1,))
'''


def test_a_run_directory_matches_its_schemas(zlf_cli, zlf_core_only, tmp_path):
    (tmp_path / "ops.py").write_text(FAILING_OP)
    proc = zlf_cli("run", "add", "ops.py::wrong", "--backend", "cpu", "--warmup-ms", "1", "--rep-ms", "2",
                   "--out", "runs")
    assert proc.returncode != 0, proc.stdout + proc.stderr  # a FAILED point fails the run
    run = run_dir_from(proc.stdout, tmp_path)
    statuses = sorted({r["status"] for r in read_records(run)})
    assert statuses == ["FAILED", "ok"]
    meta = json.loads((run / "meta.json").read_text())
    assert schemas.check_run_dir(run) == 1 + len(read_records(run)) and meta["status"] == "complete"
    # a report reads it and leaves every file valid
    zlf_cli("report", run, check_rc=0)
    assert (run / "report.md").is_file() and schemas.check_run_dir(run) == 1 + len(read_records(run))


@pytest.mark.slow
def test_an_ab_campaign_matches_its_schemas(zlf_cli, zlf_core_only, zlf_op_file, tmp_path):
    zlf_op_file("neg", shapes=[(64,), (128,)], path=tmp_path / "my_ops.py")
    proc = zlf_cli("ab", "neg:my_ops.py", "--switch", "ZLF_FORMATS_TEST", "--rounds", "2", "--backend", "cpu", "--controls", "none",
                   "--warmup-ms", "1", "--rep-ms", "2", "--out", "o", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (camp,) = (tmp_path / "o").glob("ab_*")
    campaign = json.loads((camp / "campaign.json").read_text())
    assert [r["status"] for r in campaign["runs"]] == ["ok"] * 4
    # campaign.json + summary.json + per run: meta.json and two points
    assert schemas.check_campaign_dir(camp) == 2 + 4 * 3
    summary = json.loads((camp / "summary.json").read_text())
    assert [p["point"] for p in summary["points"]] == ["neg/64/float32", "neg/128/float32"]


# ----------------------------------------------------------------------------- files written before
def test_an_old_run_directory_still_matches_and_reads(tmp_path, zlf_cli, zlf_core_only):
    assert schemas.check_run_dir(OLD / "run") == 3
    records, skipped = RunDir.open(OLD / "run").records()
    assert [r.point for r in records] == ["add/1024/float32", "add/65536/float32"] and skipped == 0
    old = shutil.copytree(OLD / "run", tmp_path / "old")
    zlf_cli("compare", old, old, check_rc=0)
    zlf_cli("report", old, check_rc=0)


def test_an_old_campaign_still_matches_its_schemas():
    assert schemas.check_campaign_dir(OLD / "campaign") == 2 + 4 * 3


# ----------------------------------------------------------------------------- self-contained
#: how notes kept outside the repository used to be cited: a note's name with .md or a section
#: sign, or a path into the folder beside the checkout (built from parts so this file cites nothing).
_NOTES = "|".join(("FORMATS", "FACTS", "DESIGN", "STYLE"))
_BESIDE = re.escape(".." + "/" + "shared/")
OUTSIDE = re.compile(rf"\b({_NOTES})(\.md\b|'| §)|{_BESIDE}|\bthe card\b")
TEXT = {".py", ".md", ".toml", ".sh", ".yaml", ".yml", ".cfg", ".txt", ".json"}


def _repository_files():
    """The repository's own files: what git tracks or would track (never a virtual environment,
    a build or anything else .gitignore leaves out); every file below ROOT outside a checkout."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode()
        return sorted(ROOT / name for name in out.split("\0") if name)
    except (OSError, subprocess.CalledProcessError):
        return sorted(ROOT.rglob("*"))


def _repository_text():
    for path in _repository_files():
        rel = path.relative_to(ROOT)
        if rel.parts[0].startswith(".") and rel.parts[0] != ".ci" or "__pycache__" in rel.parts or "data" in rel.parts[:2]:
            continue
        if path.is_file() and (path.suffix in TEXT or path.name in ("Makefile", "run")) and path != Path(__file__):
            yield rel, path.read_text(errors="replace")


def test_nothing_cites_a_file_outside_the_repository():
    hits = [f"{rel}:{n}: {line.strip()}" for rel, text in _repository_text()
            for n, line in enumerate(text.splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, "cite docs/ instead:\n" + "\n".join(hits)


def test_every_cited_doc_exists():
    cited = {(rel, m.group(0)) for rel, text in _repository_text() for m in re.finditer(r"\bdocs/[\w-]+\.md\b", text)}
    missing = sorted(f"{rel}: {doc}" for rel, doc in cited if not (ROOT / doc).is_file())
    assert not missing, "\n".join(missing)


def test_the_citation_pattern_finds_what_it_is_for():
    note, beside = "FACTS" + ".md", ".." + "/shared/x"
    assert OUTSIDE.search("see FORMATS §7") and OUTSIDE.search(f"{note} says") and OUTSIDE.search(beside)
    assert not OUTSIDE.search('FORMATS = ("table", "csv")') and not OUTSIDE.search("docs/formats.md")
