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


def test_meta_and_report_name_the_seed(zlf_cli, tmp_path):
    proc = zlf_cli("run", "add", "--ext", "seed", "--rep-ms", "2", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    assert [e["name"] for e in meta["extensions"]] == ["seed"] and meta["seed"]["base"] == 0
    zlf_cli("report", run, check_rc=0)
    assert "seed 0.1.0" in (run / "report.md").read_text()


def test_bool_and_complex_inputs_are_fingerprinted(zlf_cli, tmp_path):
    (tmp_path / "odd.py").write_text('''
import torch, zlf

def mk(shape, dtype, device):
    x = torch.randn(shape, device=device)
    return (x, torch.empty(shape, dtype=torch.bool, device=device), torch.randn(shape, dtype=torch.complex128))

def gt(x, out, c):
    torch.gt(x, 0, out=out)

gt_op = zlf.Op(name="gt", fn=gt, make_inputs=mk, shapes=[(64,)], reference=lambda x, out, c: x > 0, outputs=(1,))
''')
    proc = zlf_cli("run", "odd.py", "--ext", "seed", "--rep-ms", "2", check_rc=0)
    [record] = read_records(run_dir_from(proc.stdout, tmp_path))
    assert record["status"] == "ok" and record["extra"]["inputs_fingerprint"]
