# Sourced by the GPU scripts: `source "$(dirname "$0")/out_dir.sh" "$@"` parses `--out DIR`,
# creates DIR and sets OUT to its absolute path; anything else is a usage error (exit 2).
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="${2:-}"; shift 2 || shift ;;
    *) echo "usage: $0 --out DIR" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || { echo "usage: $0 --out DIR" >&2; exit 2; }
mkdir -p "$OUT" || exit 2
OUT="$(cd "$OUT" && pwd)"
