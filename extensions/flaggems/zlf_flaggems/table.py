"""The run's points in FlagGems' own table format (``flaggems_results.txt`` in the run directory),
so a FlagGems user reads what pytest used to print::

    Operator: softmax  Performance Test (dtype=torch.float16, mode=kernel,level=core)
    Status       Torch Latency (ms)    Gems Latency (ms)    Gems Speedup   ...   Size Detail
    SUCCESS                0.012345             0.010000           1.235          [torch.Size([64, 64]), 1]

Latencies here are zlf's (``time_fn``: the timer column of zlf's table says which timer).
"""
from __future__ import annotations

from zlf.records import STATUS_OK


def _num(value, digits: int) -> str:
    return "N/A" if value is None else f"{value:.{digits}f}"


def render(records, mode: str, level: str) -> str:
    groups: dict = {}
    for r in records:
        if "flaggems" not in r.extra:
            continue
        groups.setdefault((r.op, r.dtype), []).append(r)
    blocks = []
    for (op, dtype), rows in groups.items():
        timers = sorted({r.timer for r in rows if r.timer})
        with_tflops = any(r.tflops for r in rows)
        with_gbps = any(r.gbps is not None for r in rows)
        head = [f"{'Status':<10}", f"{'Torch Latency (ms)':>20}", f"{'Gems Latency (ms)':>20}", f"{'Gems Speedup':>20}"]
        if with_tflops:
            head.append(f"{'TFLOPS':>20}")
        if with_gbps:
            head += [f"{'Torch GBPS ':>20}", f"{'Gems GBPS ':>20}"]
        head.append(f"{'Size Detail':>20}")
        header = " ".join(head)
        lines = [f"Operator: {op}  Performance Test (dtype=torch.{dtype}, mode={mode},level={level})"
                 f"  [zlf timer: {', '.join(timers) or 'none'}]", header, "-" * len(header)]
        for r in rows:
            x = r.extra
            status = "SUCCESS" if r.status == STATUS_OK else "FAILED"
            line = (f"{status:<10}{_num(x.get('torch_ms'), 6):>20}{_num(r.median_ms, 6):>20}"
                    f"{_num(x.get('speedup'), 3):>20}")
            if with_tflops:
                line += f"{_num(r.tflops, 3):>20}"
            if with_gbps:
                line += f"{_num(x.get('torch_gbps'), 3):>20}{_num(r.gbps, 3):>20}"
            line += " " * 10 + str(x.get("size_detail", "N/A"))
            if r.variant:
                line += f"  ({r.variant})"
            if r.status != STATUS_OK and r.error:
                line += f"  error: {r.error}"
            lines.append(line)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + ("\n" if blocks else "")
