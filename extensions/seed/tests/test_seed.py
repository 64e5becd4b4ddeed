"""The seed extension: byte-identical inputs across processes."""
import json

from zlf.testing import read_records, run_dir_from


def fingerprints(proc, cwd):
    return {r["point"]: r["extra"]["inputs_fingerprint"] for r in read_records(run_dir_from(proc.stdout, cwd))}


def test_inputs_are_byte_identical_across_processes(zlf_cli, tmp_path):
    args = ("run", "add", "softmax", "--ext", "seed", "--rep-ms", "2")
    first = fingerprints(zlf_cli(*args, check_rc=0), tmp_path)
    second = fingerprints(zlf_cli(*args, check_rc=0), tmp_path)
    assert first == second and len(first) == 4
    # A point's inputs do not depend on which points ran before it.
    alone = fingerprints(zlf_cli("run", "softmax", "--ext", "seed", "--rep-ms", "2", check_rc=0), tmp_path)
    assert all(first[k] == v for k, v in alone.items())
    other = fingerprints(zlf_cli(*args, "--seed", "7", check_rc=0), tmp_path)
    assert all(other[k] != first[k] for k in first)


def test_no_ext_seed_runs_without_it(zlf_cli, tmp_path):
    proc = zlf_cli("run", "add", "--no-ext", "seed", "--rep-ms", "2", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    assert "seed" not in meta and "seed" not in [e["name"] for e in meta["extensions"]]
    assert all("inputs_fingerprint" not in r["extra"] for r in read_records(run))
