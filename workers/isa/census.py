"""Instruction census of a kernel and of its hottest loop (the innermost backward-branch range).

Counts the instructions a kernel engineer looks at first: packed dot products and MFMAs (is the math
what we expect?), LDS and global traffic, barriers and waits (latency exposure), branches, calls, and
scratch traffic (spills).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from workers.isa.disasm import Function, Instruction

BRANCH_PREFIXES = ("s_branch", "s_cbranch")


def is_scratch(ins: Instruction, uses_scratch: bool) -> bool:
    """scratch_* always; buffer_* without an address VGPR (``off``) when the kernel has a private segment.

    HIP code reaches global memory through global_* on gfx9, so in a kernel with private segment
    size > 0 such buffer ops are the scratch (spill/stack) accesses.
    """
    if ins.mnemonic.startswith("scratch_"):
        return True
    if uses_scratch and ins.mnemonic.startswith(("buffer_load", "buffer_store")):
        return bool(re.search(r"(^|,\s*)off,", ins.operands)) or " offen" in ins.operands
    return False


CATEGORIES: dict[str, Callable[[Instruction], bool]] = {
    "v_dot4": lambda i: i.mnemonic.startswith("v_dot4"),
    "v_dot2": lambda i: i.mnemonic.startswith("v_dot2"),
    "v_mfma": lambda i: i.mnemonic.startswith(("v_mfma", "v_smfmac")),
    "ds_read": lambda i: i.mnemonic.startswith(("ds_read", "ds_load")),
    "ds_write": lambda i: i.mnemonic.startswith(("ds_write", "ds_store")),
    "buffer_load": lambda i: i.mnemonic.startswith("buffer_load"),
    "global_load": lambda i: i.mnemonic.startswith("global_load"),
    "global_store": lambda i: i.mnemonic.startswith("global_store"),
    "buffer_store": lambda i: i.mnemonic.startswith("buffer_store"),
    "s_barrier": lambda i: i.mnemonic.startswith("s_barrier"),
    "s_waitcnt": lambda i: i.mnemonic.startswith("s_waitcnt"),
    "s_nop": lambda i: i.mnemonic == "s_nop",
    "s_cbranch": lambda i: i.mnemonic.startswith("s_cbranch"),
    "s_swappc": lambda i: i.mnemonic.startswith(("s_swappc", "s_setpc")),
    "sgpr_spill_lanes": lambda i: i.mnemonic.startswith(("v_writelane", "v_readlane")),
    "accvgpr_moves": lambda i: i.mnemonic.startswith(("v_accvgpr_write", "v_accvgpr_read")),
}


def count(instructions: Iterable[Instruction], uses_scratch: bool = False) -> dict[str, int]:
    """Per-category counts plus ``total`` and ``scratch`` (spill/stack memory ops)."""
    rows = list(instructions)
    result = {name: sum(1 for ins in rows if test(ins)) for name, test in CATEGORIES.items()}
    result["scratch"] = sum(1 for ins in rows if is_scratch(ins, uses_scratch))
    result["total"] = len(rows)
    return result


def branch_target(ins: Instruction) -> int | None:
    """Target address of s_branch/s_cbranch_*: PC + 4 + 4 * simm16 (the immediate printed as u16)."""
    if not ins.mnemonic.startswith(BRANCH_PREFIXES) or ins.mnemonic.endswith(("_fork", "_join")):
        return None
    match = re.match(r"\s*(0x[0-9a-fA-F]+|-?\d+)", ins.operands)
    if not match:
        return None
    imm = int(match.group(1), 0)
    if imm > 0x7FFF:
        imm -= 0x10000
    return ins.address + 4 + 4 * imm


@dataclass(frozen=True)
class Loop:
    start: int  # address of the branch target (loop head)
    end: int  # address of the backward branch (inclusive)
    depth: int  # how many loops enclose it, itself included


def loops(function: Function) -> list[Loop]:
    """Backward-branch ranges of a function with their nesting depth."""
    ranges = []
    for ins in function.instructions:
        target = branch_target(ins)
        if target is not None and target <= ins.address:
            ranges.append((target, ins.address))
    result = []
    for start, end in ranges:
        depth = sum(1 for s, e in ranges if s <= start and end <= e)
        result.append(Loop(start, end, depth))
    return result


MATH_PREFIXES = ("v_mfma", "v_smfmac", "v_wmma", "v_swmmac", "v_dot")


def hottest_loop(function: Function) -> Loop | None:
    """The innermost loop doing math: among loops holding MFMA/WMMA/dot instructions (all loops when none
    do), the deepest nesting, ties broken toward the larger body (more work per trip). A small inner loop
    without math (an epilogue's reduction, a guard) no longer hides the K loop that encloses it."""
    found = loops(function)
    if not found:
        return None
    math = [ins.address for ins in function.instructions if ins.mnemonic.startswith(MATH_PREFIXES)]

    def key(lp: Loop) -> tuple[bool, int, int, int]:
        has_math = any(lp.start <= a <= lp.end for a in math)
        return (has_math, lp.depth, lp.end - lp.start, -lp.start)

    return max(found, key=key)


def census(function: Function, uses_scratch: bool = False) -> dict[str, object]:
    """Counts for the whole kernel and for its hottest loop (``None`` when it has no loop)."""
    loop = hottest_loop(function)
    loop_part: dict[str, object] | None = None
    if loop is not None:
        body = [ins for ins in function.instructions if loop.start <= ins.address <= loop.end]
        loop_part = {
            "start": f"0x{loop.start:x}",
            "end": f"0x{loop.end:x}",
            "depth": loop.depth,
            "counts": count(body, uses_scratch),
        }
    return {"kernel": count(function.instructions, uses_scratch), "hottest_loop": loop_part}
