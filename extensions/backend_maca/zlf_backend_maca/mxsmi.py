"""Reading ``mx-smi``'s default table (header, one two-line block per GPU, a process table).

Written from published samples of mx-smi 2.2 output, not from a real device: what this parser
does not find is simply absent from the state.
"""
from __future__ import annotations

import re

_HEADER = {
    "mx_smi_version": re.compile(r"MX-SMI\s+([\d.]+)"),
    "driver_version": re.compile(r"Kernel Mode Driver Version:\s*([\w.]+)"),
    "maca_version": re.compile(r"MACA Version:\s*([\w.]+)"),
    "bios_version": re.compile(r"BIOS Version:\s*([\w.]+)"),
}
_GPU_ROW = re.compile(r"^\|\s*(\d+)\s+(.+?)\s+(On|Off)\s*\|\s*(\S+)\s*\|\s*(\S+)\s+(\S+)\s*\|$")
_STATE_ROW = re.compile(r"^\|\s*(\S+)\s+(\S+)\s*/\s*(\S+)\s+(\S+)\s*\|\s*(\d+)\s*/\s*(\d+)\s*MiB\s*\|\s*(.+?)\s*\|$")
_PROCESS_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+(.+?)\s+(\d+)\s*\|$")


def parse_table(text: str) -> dict:
    """``{"header": {...}, "gpus": {index: {...}}, "processes": [{"gpu", "pid", "name", "memory_mib"}]}``."""
    header = {key: m.group(1) for key, rx in _HEADER.items() if (m := rx.search(text))}
    gpus, processes = {}, []
    last = None
    in_processes = False
    for line in (l.strip() for l in text.splitlines()):
        if "Process:" in line:
            in_processes = True
            continue
        if in_processes:
            m = _PROCESS_ROW.match(line)
            if m:
                processes.append({"gpu": int(m.group(1)), "pid": int(m.group(2)), "name": m.group(3),
                                  "memory_mib": int(m.group(4))})
            continue
        m = _GPU_ROW.match(line)
        if m:
            last = int(m.group(1))
            gpus[last] = {"name": m.group(2), "persistence": m.group(3), "pci.bus_id": m.group(4),
                          "utilization.gpu": m.group(5), "sgpu_mode": m.group(6)}
            continue
        m = _STATE_ROW.match(line)
        if m and last is not None and "temperature.gpu" not in gpus[last]:
            gpus[last].update({"temperature.gpu": m.group(1), "power.draw": m.group(2), "power.limit": m.group(3),
                               "perf_state": m.group(4), "memory.used_mib": int(m.group(5)),
                               "memory.total_mib": int(m.group(6)), "state": m.group(7)})
    return {"header": header, "gpus": gpus, "processes": processes}


def device_state(text: str, smi_index: str, own_pid: int) -> dict:
    parsed = parse_table(text)
    state = dict(parsed["header"])
    idx = int(smi_index) if smi_index.isdigit() else None
    state.update(parsed["gpus"].get(idx, {}))
    state["other_processes"] = [
        f"{p['pid']}, {p['name']}, {p['memory_mib']} MiB"
        for p in parsed["processes"] if p["gpu"] == idx and p["pid"] != own_pid
    ]
    return state
