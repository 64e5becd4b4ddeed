"""The shapes extension: FlagGems shape files (docs/formats.md, "Shape files")."""
import yaml

from zlf.testing import read_records, run_dir_from

SHAPES_WITH_ANCHORS = """
common: &common_shapes
  shapes: [[96, 128]]
softmax:
  shapes:
    - [32, 64]
    - [2, 16, 48]
  shape_desc: "M, N"
MySoftmaxBenchmark: *common_shapes
add:
  shapes: [[300], 700]
"""



def test_shape_file_with_anchors_overrides_and_is_copied(zlf_cli, tmp_path):
    (tmp_path / "s.yaml").write_text(SHAPES_WITH_ANCHORS)
    proc = zlf_cli("run", "softmax", "add", "--ext", "shapes", "--shapes", "s.yaml", "--rep-ms", "2", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    points = [r["point"] for r in read_records(run)]
    assert points == ["softmax/32x64/float32", "softmax/2x16x48/float32", "add/300/float32", "add/700/float32"]
    used = yaml.safe_load((run / "shapes.yaml").read_text())
    assert used == {"softmax": {"shapes": [[32, 64], [2, 16, 48]]}, "add": {"shapes": [[300], [700]]}}


def test_implicit_suite_keeps_shapes_of_ops_without_an_entry(zlf_cli, tmp_path):
    (tmp_path / "s.yaml").write_text("softmax:\n  shapes: [[8, 32]]\n")
    proc = zlf_cli("run", "--ext", "shapes", "--shapes", "s.yaml", "--rep-ms", "2", check_rc=0)
    ops = {r["op"]: r["shape"] for r in read_records(run_dir_from(proc.stdout, tmp_path))}
    assert ops["softmax"] == [8, 32] and ops["add"] == [5000]


def test_bad_shape_files_fail_cleanly_before_the_run_directory(zlf_cli, tmp_path):
    cases = {
        "broken.yaml": ("softmax:\n  shapes: [[1, 2]\n", "broken.yaml:3: not valid YAML"),
        "nokey.yaml": ("add:\n  shapes: [[8]]\n", "no entry for op 'softmax'"),
        "badshape.yaml": ("softmax:\n  shapes: [[8, -2]]\n", "softmax.shapes[0] = [8, -2]"),
        "words.yaml": ("softmax:\n  shapes: [['a', 2]]\n", "positive integers below 2**63"),
        "noshapes.yaml": ("softmax:\n  shape_desc: M\n", "has no 'shapes' list"),
        "list.yaml": ("- [1, 2]\n", "must map op names"),
    }
    for name, (text, needle) in cases.items():
        (tmp_path / name).write_text(text)
        proc = zlf_cli.inprocess("run", "softmax", "--ext", "shapes", "--shapes", name)
        assert proc.returncode == 2, (name, proc.stderr)
        assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (name, proc.stderr)
    rank = tmp_path / "rank.yaml"
    rank.write_text("matmul:\n  shapes: [[64, 64]]\n")
    proc = zlf_cli.inprocess("run", "matmul", "--ext", "shapes", "--shapes", rank)
    assert proc.returncode == 2 and "3 dimensions (M, N, K)" in proc.stderr
    missing = zlf_cli.inprocess("run", "softmax", "--ext", "shapes", "--shapes", "nope.yaml")
    assert missing.returncode == 2 and "not found" in missing.stderr
    assert not (tmp_path / "runs").exists()


def test_shapes_option_needs_the_extension(zlf_cli, tmp_path):
    (tmp_path / "s.yaml").write_text("softmax:\n  shapes: [[8, 32]]\n")
    proc = zlf_cli.inprocess("run", "softmax", "--no-ext", "shapes", "--shapes", "s.yaml")
    assert proc.returncode == 2 and "--shapes" in proc.stderr
    assert "not active here are unavailable: " in proc.stderr and "shapes" in proc.stderr.splitlines()[-1]
