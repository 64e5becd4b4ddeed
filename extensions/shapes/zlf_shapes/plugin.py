"""Shape files in the FlagGems format override an op's built-in shapes::

    softmax:                  # the op name (or one of the op's aliases, e.g. a class name)
      shapes:
        - [1024, 1024]
        - [64, 512, 512]
      shape_desc: "M, N"      # optional
    common: &common_shapes    # anchors and aliases work; keys that name no op are ignored
      shapes: [[4096, 4096]]

Everything is checked before the run directory exists: a bad file leaves nothing behind.
"""
from __future__ import annotations

from zlf import UsageError, hookimpl, readers


def load_shape_file(path: str) -> dict:
    """The shape file ``path`` as a mapping, or a one-line UsageError naming the file and line:
    read by :func:`zlf.readers.read_yaml` (a regular file of at most 4 MiB, UTF-8, safe tags,
    aliases and merge keys bounded while the document is built, no key twice)."""
    try:
        doc = readers.read_yaml(path, what="shape file")
    except FileNotFoundError:
        raise UsageError(f"shape file {path!r} not found") from None
    if not isinstance(doc, dict):
        raise UsageError(f"shape file {path!r} must map op names to {{shapes: [...]}}, got {type(doc).__name__}")
    return doc


#: the most dimensions of a shape, and the bound of each (a tensor size is an int64)
MAX_RANK, MAX_DIM = 64, 2 ** 63


def parse_shapes(entry, path: str, key: str) -> list:
    if not isinstance(entry, dict) or "shapes" not in entry:
        raise UsageError(f"shape file {path!r}: entry {key!r} has no 'shapes' list")
    raw = entry["shapes"]
    if not isinstance(raw, list) or not raw:
        raise UsageError(f"shape file {path!r}: {key}.shapes must be a non-empty list")
    shapes = []
    for i, s in enumerate(raw):
        dims = [s] if isinstance(s, int) and not isinstance(s, bool) else s
        if (not isinstance(dims, list) or not dims or len(dims) > MAX_RANK
                or not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d < MAX_DIM for d in dims)):
            shown = repr(s) if len(repr(s)) <= 60 else repr(s)[:57] + "..."  # an entry can be a huge list
            raise UsageError(f"shape file {path!r}: {str(key)[:40]}.shapes[{i}] = {shown} is not a list of at most "
                             f"{MAX_RANK} positive integers below 2**63")
        shapes.append(tuple(dims))
    return shapes


@hookimpl
def add_options(parser, traits):
    if not traits.plans_shapes:  # a shape file applies where a command plans ops' shapes
        return
    g = parser.add_argument_group("shapes (extension)")
    g.add_argument("--shapes", metavar="FILE",
                   help="FlagGems-format yaml whose entries override the ops' built-in shapes")


@hookimpl
def configure(session):
    """A missing or unreadable --shapes file is refused before anything starts: ``zlf ab``
    creates no campaign and starts no run for it (its runs would each fail on it)."""
    path = getattr(session.options, "shapes", None)
    if path:
        load_shape_file(path)


@hookimpl
def op_shapes(op, shapes, session):
    path = session.config.options.get("shapes")
    if not path:
        return None
    doc = load_shape_file(path)
    key = next((k for k in (op.name, *op.aliases) if k in doc), None)
    if key is None:
        named = [o for o in session.config.ops if o not in ("builtin", "all")]
        if named:  # an op the user named must have an entry; the implicit suite's ops may not
            present = ", ".join(str(k) for k in doc) or "none"
            raise UsageError(f"shape file {path!r} has no entry for op {op.name!r} (keys: {present})")
        return None  # the implicit built-in suite: ops without an entry keep their shapes
    new = parse_shapes(doc[key], path, key)
    for s in new:
        why = op.check_shape(s)
        if why:
            raise UsageError(f"shape file {path!r}: {why}")
    return new
