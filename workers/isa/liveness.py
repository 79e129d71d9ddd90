"""Register liveness on the disassembly: high-water, where it peaks, and what the live registers are for.

Backward dataflow over the kernel's control-flow graph (basic blocks split at branch targets and after
branches; ``s_cbranch_*`` falls through, ``s_branch`` does not, ``s_endpgm`` / ``s_setpc`` end the path)
on physical registers, one bit each, with the def/use sets of ``workers/isa/operands.py``. Alongside the
live set it carries, per purpose, the registers whose value will serve that purpose (the roles of
operands.py propagated backwards through the instructions that compute them), so at any point the live
registers split into accumulators, A/B fragments, scales, LDS staging, addresses, loop control, output
and other.

Pressure after an instruction is the registers holding a value there: those live after it plus what it
writes (a result nobody reads still occupies its register). The high-water is the largest such count;
arch VGPRs, AGPRs and SGPRs are counted separately.

Limits, stated because they bias the numbers low: a VALU write under a partial EXEC mask keeps the other
lanes' old values, but it is treated as a full redefinition (as LLVM's register allocator does on the
structurised CFG); calls (``s_swappc``) are treated as ordinary instructions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.isa.census import branch_target, hottest_loop, is_scratch, loops
from workers.isa.disasm import Function, Instruction
from workers.isa.operands import (
    A_BASE,
    AGPR_MASK,
    ROLES,
    S_BASE,
    SGPR_MASK,
    VGPR_MASK,
    Access,
    instruction_access,
)

TERMINATORS = ("s_endpgm", "s_setpc", "s_trap_halt")
KINDS = {"vgpr": (VGPR_MASK, 0), "agpr": (AGPR_MASK, A_BASE), "sgpr": (SGPR_MASK, S_BASE)}
State = tuple[int, ...]  # (live, role_0, ..., role_n)


@dataclass
class Flow:
    """Per instruction: what it reads/writes and the live/role sets just before and after it."""

    instructions: list[Instruction]
    accesses: list[Access]
    live_in: list[int]
    live_out: list[int]
    roles_in: list[tuple[int, ...]]
    roles_out: list[tuple[int, ...]]

    def after(self, index: int) -> int:
        """Registers holding a value right after instruction ``index`` (live-out plus what it wrote)."""
        return self.live_out[index] | self.accesses[index].defs


def _blocks(instructions: list[Instruction]) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """Basic blocks as [start, end) instruction indices and their successor blocks."""
    count = len(instructions)
    index_of = {ins.address: i for i, ins in enumerate(instructions)}
    leaders = {0}
    for i, ins in enumerate(instructions):
        target = branch_target(ins)
        if target is not None and target in index_of:
            leaders.add(index_of[target])
        if (target is not None or ins.mnemonic.startswith(TERMINATORS)) and i + 1 < count:
            leaders.add(i + 1)
    starts = sorted(leaders)
    spans = [(s, starts[k + 1] if k + 1 < len(starts) else count) for k, s in enumerate(starts)]
    block_of = {start: k for k, (start, _) in enumerate(spans)}
    successors: list[list[int]] = []
    for _start, end in spans:
        last = instructions[end - 1]
        succ: list[int] = []
        target = branch_target(last)
        if target is not None and target in index_of:
            succ.append(block_of[index_of[target]])
        falls_through = not last.mnemonic.startswith(TERMINATORS) and last.mnemonic != "s_branch"
        if falls_through and end < count:
            succ.append(block_of[end])
        successors.append(succ)
    return spans, successors


def _step(state: State, access: Access) -> State:
    """The state before an instruction from the state after it."""
    defs = access.defs
    live = (state[0] & ~defs) | access.uses
    roles = []
    for k, role_set in enumerate(state[1:]):
        before = (role_set & ~defs) | access.roles[k]
        if role_set & defs:  # what it writes serves role k: so does what flows into it
            before |= access.flow
        roles.append(before)
    return (live, *roles)


def _join(states: list[State], width: int) -> State:
    merged = [0] * width
    for state in states:
        for k, bits in enumerate(state):
            merged[k] |= bits
    return tuple(merged)


def _spill(access: Access) -> Access:
    """A spill store: its data is kept only to be reloaded, so the read serves no purpose of its own."""
    return Access(access.defs, access.uses, (0,) * len(ROLES), 0)


def analyse(function: Function, uses_scratch: bool = False) -> Flow:
    """Fixed point of the backward dataflow, then one pass recording every instruction's sets.

    With ``uses_scratch`` (private segment > 0) the stores that census counts as scratch traffic are
    spills: the values they save get no purpose from that store (gfx906 spills through buffer_store).
    """
    instructions = function.instructions
    accesses = [
        _spill(access) if uses_scratch and "store" in ins.mnemonic and is_scratch(ins, True) else access
        for ins, access in ((ins, instruction_access(ins)) for ins in instructions)
    ]
    width = 1 + len(ROLES)
    empty: State = (0,) * width
    if not instructions:
        return Flow([], [], [], [], [], [])
    spans, successors = _blocks(instructions)
    block_in: list[State] = [empty] * len(spans)
    changed = True
    while changed:
        changed = False
        for b in range(len(spans) - 1, -1, -1):
            state = _join([block_in[s] for s in successors[b]], width)
            start, end = spans[b]
            for i in range(end - 1, start - 1, -1):
                state = _step(state, accesses[i])
            if state != block_in[b]:
                block_in[b] = state
                changed = True
    count = len(instructions)
    live_in, live_out = [0] * count, [0] * count
    roles_in: list[tuple[int, ...]] = [()] * count
    roles_out: list[tuple[int, ...]] = [()] * count
    for b, (start, end) in enumerate(spans):
        state = _join([block_in[s] for s in successors[b]], width)
        for i in range(end - 1, start - 1, -1):
            live_out[i], roles_out[i] = state[0], state[1:]
            state = _step(state, accesses[i])
            live_in[i], roles_in[i] = state[0], state[1:]
    return Flow(instructions, accesses, live_in, live_out, roles_in, roles_out)


def _popcount(bits: int) -> int:
    return bin(bits).count("1")


def breakdown(registers: int, roles: tuple[int, ...]) -> dict[str, int]:
    """Registers by purpose; a register serving several purposes counts once, under the first in ROLES."""
    result: dict[str, int] = {}
    remaining = registers
    for name, role_set in zip(ROLES, roles, strict=True):
        count = _popcount(remaining & role_set)
        if count:
            result[name] = count
        remaining &= ~role_set
    if remaining:
        result["other"] = _popcount(remaining)
    return result


def _hex(address: int) -> str:
    return f"0x{address:x}"


def _loop_label(function: Function, address: int) -> str | None:
    """'0xstart-0xend' of the innermost loop holding ``address`` (None outside every loop)."""
    holding = [lp for lp in loops(function) if lp.start <= address <= lp.end]
    if not holding:
        return None
    inner = max(holding, key=lambda lp: (lp.depth, -(lp.end - lp.start)))
    return f"{_hex(inner.start)}-{_hex(inner.end)}"


def _peak(
    function: Function, flow: Flow, kind: str, indices: range, with_breakdown: bool = True
) -> dict[str, Any]:
    """High-water of one register kind over ``indices``, the first run of instructions at it, and why."""
    mask, _base = KINDS[kind]
    counts = [_popcount(flow.after(i) & mask) for i in indices]
    if not counts or max(counts) == 0:
        return {"high_water": 0}
    high = max(counts)
    at = [indices[k] for k, c in enumerate(counts) if c == high]
    runs: list[list[int]] = [[at[0], at[0]]]
    for i in at[1:]:
        if i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    first, last = runs[0]
    address = flow.instructions[first].address
    result: dict[str, Any] = {
        "high_water": high,
        "at": _hex(address),
        "at_instruction": flow.instructions[first].text,
        "region": {
            "start": _hex(address),
            "end": _hex(flow.instructions[last].address),
            "instructions": last - first + 1,
        },
        "peaks": len(runs),
        "loop": _loop_label(function, address),
    }
    if with_breakdown:
        result["breakdown"] = breakdown(flow.after(first) & mask, flow.roles_out[first])
    return result


def liveness(
    function: Function,
    flow: Flow | None = None,
    arch_vgpr_limit: int | None = None,
    agpr_limit: int | None = None,
) -> dict[str, Any]:
    """The liveness record of one kernel (see the module docstring for what is counted).

    With the limits from the metadata note it also says whether the high-waters stay within them
    (``within_note``): a disassembly the analysis misread would show more live registers than exist.
    """
    flow = flow or analyse(function)
    everything = range(len(flow.instructions))
    record: dict[str, Any] = {
        "vgpr": _peak(function, flow, "vgpr", everything),
        "agpr": _peak(function, flow, "agpr", everything),
        "sgpr": _peak(function, flow, "sgpr", everything, with_breakdown=False),
        "hot_loop": None,
    }
    loop = hottest_loop(function)
    if loop is not None:
        inside = [i for i, ins in enumerate(flow.instructions) if loop.start <= ins.address <= loop.end]
        if inside:
            body = range(inside[0], inside[-1] + 1)
            head = inside[0]
            carried = flow.live_in[head]
            record["hot_loop"] = {
                "start": _hex(loop.start),
                "end": _hex(loop.end),
                "vgpr": _peak(function, flow, "vgpr", body),
                "agpr": _peak(function, flow, "agpr", body),
                "live_at_head": {
                    "vgpr": _popcount(carried & VGPR_MASK),
                    "agpr": _popcount(carried & AGPR_MASK),
                    "breakdown": breakdown(carried & VGPR_MASK, flow.roles_in[head]),
                },
            }
    if arch_vgpr_limit is not None:
        record["arch_vgpr_limit"] = arch_vgpr_limit
        record["agpr_limit"] = agpr_limit
        record["within_note"] = record["vgpr"]["high_water"] <= arch_vgpr_limit and (
            agpr_limit is None or record["agpr"]["high_water"] <= agpr_limit
        )
    return record
