"""Reading ``mthreads-gmi -q -i N``: indented ``Key : Value`` lines, as ``nvidia-smi -q`` prints.

Written from the vendor's build scripts (which read ``Product Name`` the same way), not from a
real device: keys this parser does not find are simply absent from the state.
"""
from __future__ import annotations

#: flat keys (``Section.Key``) of the query that go into ``device_state()`` under short names.
STATE_KEYS = {
    "Product Name": "name",
    "Driver Version": "driver_version",
    "MTBios Version": "mtbios_version",
    "Bus Id": "pci.bus_id",
    "GPU UUID": "uuid",
    "Utilization.Gpu": "utilization.gpu",
    "Temperature.Gpu": "temperature.gpu",
    "Power Readings.Power Draw": "power.draw",
    "Clocks.Graphics": "clocks.graphics",
    "Clocks.Memory": "clocks.memory",
    "Max Clocks.Graphics": "clocks.max.graphics",
}
#: throttle values that mean "not throttled".
NOT_THROTTLED = ("", "not active", "n/a", "none", "0x0000000000000000", "0x0000000000000001")


def parse_query(text: str) -> dict:
    """``{"fields": {"Section.Key": value}, "processes": [{"pid": ..., "name": ..., "memory": ...}]}``."""
    fields, processes = {}, []
    stack = []  # (indent, section name)
    for raw in text.splitlines():
        if not raw.strip() or set(raw.strip()) <= set("=-"):
            continue
        indent = len(raw) - len(raw.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        line = raw.strip()
        if " : " not in line and not line.endswith(":"):
            stack.append((indent, line))
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not value:
            stack.append((indent, key))
            continue
        sections = [name for _, name in stack if not name.startswith("GPU ")]
        if key in ("Process ID", "PID"):
            processes.append({"pid": value})
        elif processes and sections and sections[-1].startswith("Process") and key in ("Process Name", "Name"):
            processes[-1]["name"] = value
        elif processes and sections and sections[-1].startswith("Process") and key.startswith("Used"):
            processes[-1]["memory"] = value
        fields.setdefault(".".join([*sections[-1:], key]) if sections else key, value)
        fields.setdefault(key, value)
    return {"fields": fields, "processes": processes}


def device_state(text: str, own_pid: int) -> dict:
    parsed = parse_query(text)
    fields = parsed["fields"]
    state = {short: fields[key] for key, short in STATE_KEYS.items() if key in fields}
    throttles = {k: v for k, v in fields.items() if "throttle" in k.lower() and v.strip().lower() not in NOT_THROTTLED}
    if throttles:
        state["throttle"] = "; ".join(f"{k}={v}" for k, v in sorted(throttles.items()))
    state["other_processes"] = [
        ", ".join(str(p.get(k, "?")) for k in ("pid", "name", "memory"))
        for p in parsed["processes"]
        if p["pid"].isdigit() and int(p["pid"]) != own_pid
    ]
    return state
