"""What one iteration of the hottest loop does: waits, MFMA density, instruction mix, padding, LDS addressing.

The numbers a GEMM author reads first when a kernel is slower than its math says:

- every ``s_waitcnt`` with its counter values: a wait for ``vmcnt(0)`` drains all global loads in flight,
  so a prefetch pipeline collapses; one that names both ``vmcnt`` and ``lgkmcnt`` stalls on the slower;
- MFMAs per iteration (static count of the loop body) and their share of the instructions;
- the VMEM / LDS / MFMA / VALU / SALU / SMEM mix, and ``s_nop`` wait states (hazard padding);
- LDS addressing: how many ``ds_read``/``ds_write`` fold their offset into the instruction's immediate and
  how many distinct address VGPRs they use, plus the VALU instructions that only compute addresses;
- loads by purpose, from the liveness roles of what they write (scale loads, fragment loads, LDS staging).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from workers.isa.census import Loop, hottest_loop
from workers.isa.disasm import Function, Instruction
from workers.isa.liveness import Flow
from workers.isa.operands import ROLES, VGPR_MASK, register_mask, split_operands

MAX_LISTED_WAITS = 64
_COUNTER = re.compile(r"(\w+cnt)\((\d+)\)")
GFX9_MAX = {"vmcnt": 63, "expcnt": 7, "lgkmcnt": 15}
MIX_ORDER = (
    "mfma", "vmem_load", "vmem_store", "lds_read", "lds_write", "lds_other", "smem", "valu", "salu", "branch",
    "sync", "nop", "other",
)  # fmt: skip


def waitcnt_counters(ins: Instruction) -> dict[str, int] | None:
    """Counter → value an ``s_waitcnt``-family instruction waits for (None for other instructions).

    ``s_waitcnt vmcnt(2) lgkmcnt(0)``, the split forms ``s_waitcnt_vscnt null, 0x0`` (gfx10+) and
    ``s_wait_loadcnt 0x0`` (gfx12), and a bare gfx9 immediate (``s_waitcnt 0``: every counter zero).
    """
    m = ins.mnemonic
    if m == "s_waitcnt":
        named = {name: int(value) for name, value in _COUNTER.findall(ins.operands)}
        if named:
            return named
        try:
            imm = int(ins.operands.split()[0], 0)
        except (IndexError, ValueError):
            return {}
        decoded = {
            "vmcnt": (imm & 0xF) | (((imm >> 14) & 0x3) << 4),
            "expcnt": (imm >> 4) & 0x7,
            "lgkmcnt": (imm >> 8) & 0xF,
        }
        return {k: v for k, v in decoded.items() if v < GFX9_MAX[k]}
    split = re.match(r"s_waitcnt_(\w+cnt)$", m) or re.match(r"s_wait_(\w+cnt)$", m)
    if split:
        parts = split_operands(ins.operands)
        try:
            return {split.group(1): int(parts[-1], 0)} if parts else {}
        except ValueError:
            return {}
    return None


def category(m: str) -> str:
    if m.startswith(("v_mfma", "v_smfmac", "v_wmma", "v_swmmac")):
        return "mfma"
    if m.startswith(("global_load", "buffer_load", "flat_load", "scratch_load")):
        return "vmem_load"
    if m.startswith(("global_", "buffer_", "flat_", "scratch_")):
        return "vmem_store"  # stores and atomics
    if m.startswith(("ds_read", "ds_load")):
        return "lds_read"
    if m.startswith(("ds_write", "ds_store")):
        return "lds_write"
    if m.startswith("ds_"):
        return "lds_other"
    if m.startswith(("s_load", "s_buffer_load", "s_store", "s_buffer_store", "s_dcache", "s_scratch")):
        return "smem"
    if m.startswith(("s_branch", "s_cbranch", "s_setpc", "s_swappc")):
        return "branch"
    if m.startswith(("s_waitcnt", "s_wait_", "s_barrier")):
        return "sync"
    if m in ("s_nop", "v_nop"):
        return "nop"
    if m.startswith("v_"):
        return "valu"
    if m.startswith("s_"):
        return "salu"
    return "other"


def _offset(operands: str) -> tuple[int, ...]:
    """The immediate offsets of a DS instruction (offset:N, or offset0:/offset1: of the *2 forms)."""
    found = re.findall(r"\boffset(?:[01])?:(\d+|0x[0-9a-fA-F]+)", operands)
    return tuple(int(v, 0) for v in found)


def _lds_addressing(body: list[Instruction], prefix: tuple[str, ...], address_operand: int) -> dict[str, Any]:
    """Offsets folded into the immediate vs not, and how many VGPRs the addresses occupy."""
    rows = [ins for ins in body if ins.mnemonic.startswith(prefix)]
    bases = 0
    offsets: set[tuple[int, ...]] = set()
    folded = 0
    for ins in rows:
        parts = split_operands(ins.operands)
        if len(parts) > address_operand:
            bases |= register_mask(parts[address_operand]) & VGPR_MASK
        found = _offset(ins.operands)
        offsets.add(found)
        if any(found):
            folded += 1
    return {
        "count": len(rows),
        "with_offset": folded,
        "zero_offset": len(rows) - folded,
        "base_vgprs": bin(bases).count("1"),
        "distinct_offsets": len(offsets),
    }


def _load_kind(mnemonic: str, kind: str) -> str | None:
    if kind == "lds_read":
        return "ds_read"
    if kind == "vmem_load":
        return mnemonic.split("_", 1)[0] + "_load"
    if kind == "smem" and "load" in mnemonic:
        return "s_load"
    return None


def _purpose(written: int, roles: tuple[int, ...]) -> str:
    """The first purpose in ROLES that the loaded value serves ('unused' when nothing reads it)."""
    for name, role_set in zip(ROLES, roles, strict=True):
        if role_set & written:
            return name
    return "other" if written else "unused"


def loop_census(function: Function, flow: Flow, loop: Loop | None = None) -> dict[str, Any] | None:
    """The census of the hottest loop (or ``loop``); None when the kernel has no loop."""
    loop = loop or hottest_loop(function)
    if loop is None:
        return None
    indices = [i for i, ins in enumerate(flow.instructions) if loop.start <= ins.address <= loop.end]
    if not indices:
        return None
    first = indices[0]
    body = [flow.instructions[i] for i in indices]
    total = len(body)

    waits: list[dict[str, Any]] = []
    for ins in body:
        counters = waitcnt_counters(ins)
        if counters is not None:
            waits.append({"at": f"0x{ins.address:x}", **counters})
    drains_vm = sum(1 for w in waits if w.get("vmcnt") == 0)
    drains_lgkm = sum(1 for w in waits if w.get("lgkmcnt") == 0)
    both = [w for w in waits if "vmcnt" in w and "lgkmcnt" in w]

    mix = Counter(category(ins.mnemonic) for ins in body)
    mfma_kinds = Counter(ins.mnemonic for ins in body if category(ins.mnemonic) == "mfma")
    nops = [ins for ins in body if ins.mnemonic == "s_nop"]
    nop_states = 0
    for ins in nops:
        try:
            nop_states += int(ins.operands.split()[0], 0) + 1
        except (IndexError, ValueError):
            nop_states += 1

    loads: dict[str, Counter[str]] = {}
    address_valu = 0
    for k, ins in enumerate(body):
        i = first + k
        access = flow.accesses[i]
        written = access.defs & flow.live_out[i]
        kind_of = category(ins.mnemonic)
        kind = _load_kind(ins.mnemonic, kind_of)
        if kind is not None:
            purpose = "to_lds" if access.defs == 0 else _purpose(written, flow.roles_out[i])
            loads.setdefault(kind, Counter())[purpose] += 1
        if kind_of == "valu" and written & VGPR_MASK:
            purposes = {name for name, bits in zip(ROLES, flow.roles_out[i], strict=True) if bits & written}
            if purposes == {"addresses"}:
                address_valu += 1

    return {
        "start": f"0x{loop.start:x}",
        "end": f"0x{loop.end:x}",
        "depth": loop.depth,
        "instructions": total,
        "waitcnt": {
            "count": len(waits),
            "drain_vmcnt": drains_vm,
            "drain_lgkmcnt": drains_lgkm,
            "combined": len(both),
            "full_drain": sum(1 for w in both if w["vmcnt"] == 0 and w["lgkmcnt"] == 0),
            "waits": waits[:MAX_LISTED_WAITS],
        },
        "mfma": {
            "per_iteration": sum(mfma_kinds.values()),
            "density": round(sum(mfma_kinds.values()) / total, 4) if total else 0.0,
            "kinds": dict(mfma_kinds),
        },
        "mix": {name: mix.get(name, 0) for name in MIX_ORDER},
        "padding": {
            "s_nop": len(nops),
            "s_nop_wait_states": nop_states,
            "v_nop": sum(1 for ins in body if ins.mnemonic == "v_nop"),
        },
        "ds_read": _lds_addressing(body, ("ds_read", "ds_load"), 1),
        "ds_write": _lds_addressing(body, ("ds_write", "ds_store"), 0),
        "address_valu": address_valu,
        "loads_by_purpose": {kind: dict(counts) for kind, counts in sorted(loads.items())},
    }
