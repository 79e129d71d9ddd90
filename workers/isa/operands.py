"""Which registers an AMDGPU instruction writes and reads, and what each read is for.

Liveness and the per-purpose register breakdown (``workers/isa/liveness.py``) need def/use sets from the
disassembly text. LLVM prints every register an instruction names explicitly, ranges included
(``v[4:7]``, ``a[0:15]``, ``s[0:1]``, ``vcc``); what it leaves implicit is added here: SCC for scalar
compares and branches, EXEC for ``s_cbranch_exec*`` / ``v_cmpx`` / ``s_*_saveexec``, VCC for
``s_cbranch_vcc*``, and the destination read by accumulate-in-place forms (``v_fmac``, ``v_dot4c``,
``*_d16_hi`` loads, ``v_writelane``). The VALU's implicit read of EXEC is left out on purpose: it would
make EXEC live everywhere and says nothing about what a register is for.

A read has a *role* when the instruction says what the value is for: an address operand of a memory
instruction, the A/B/C/scale operands of an MFMA or dot product (and of a float FMA that accumulates into
its own destination, as GEMV loops do), the data written to LDS or to memory, a branch condition. Any
other read *flows*: the value becomes part of what the instruction writes, and gets that value's roles
(an address computed by ``v_add`` from a thread id makes the thread id an address too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from workers.isa.disasm import Instruction

# register index space: one bit per 32-bit register
V_BASE = 0  # v0..v255 (arch VGPRs)
A_BASE = 256  # a0..a255 (AGPRs)
S_BASE = 512  # s0..s127
VCC_LO, VCC_HI, EXEC_LO, EXEC_HI, SCC, M0 = 640, 641, 642, 643, 644, 645
VGPR_MASK = (1 << 256) - 1
AGPR_MASK = VGPR_MASK << A_BASE
SGPR_MASK = ((1 << 128) - 1) << S_BASE

ROLES = ("accumulators", "fragments", "scales", "staging", "addresses", "loop_control", "output")
ACC, FRAG, SCALE, STAGE, ADDR, CTRL, OUT = range(len(ROLES))

_SPECIAL = {
    "vcc": (VCC_LO, VCC_HI),
    "vcc_lo": (VCC_LO,),
    "vcc_hi": (VCC_HI,),
    "exec": (EXEC_LO, EXEC_HI),
    "exec_lo": (EXEC_LO,),
    "exec_hi": (EXEC_HI,),
    "m0": (M0,),
    "scc": (SCC,),
}
_BASES = {"v": V_BASE, "a": A_BASE, "s": S_BASE}
_LIMITS = {"v": 256, "a": 256, "s": 128}
_REGISTER = re.compile(
    r"(?<![\w.])(?:(?P<kind>[vas])(?:(?P<n>\d+)|\[(?P<lo>\d+)(?::(?P<hi>\d+))?\])"
    r"|(?P<special>vcc_lo|vcc_hi|vcc|exec_lo|exec_hi|exec|m0|scc))(?!\w)"
)
EXEC = (1 << EXEC_LO) | (1 << EXEC_HI)
VCC = (1 << VCC_LO) | (1 << VCC_HI)
SCC_BIT = 1 << SCC


def register_mask(text: str) -> int:
    """Bits of every register named in ``text`` ('v[4:7], s0' → v4..v7 and s0)."""
    mask = 0
    for match in _REGISTER.finditer(text):
        special = match.group("special")
        if special:
            for index in _SPECIAL[special]:
                mask |= 1 << index
            continue
        kind = match.group("kind")
        if match.group("n") is not None:
            lo = hi = int(match.group("n"))
        else:
            lo = int(match.group("lo"))
            hi = int(match.group("hi")) if match.group("hi") is not None else lo
        if hi < lo or hi >= _LIMITS[kind]:
            continue  # not a register we model (e.g. ttmp-like encodings printed oddly)
        mask |= ((1 << (hi - lo + 1)) - 1) << (_BASES[kind] + lo)
    return mask


def split_operands(operands: str) -> list[str]:
    """Top-level comma split: 'v[0:3], v4, s[0:1] offset:16' → ['v[0:3]', 'v4', 's[0:1] offset:16']."""
    parts: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(operands):
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(operands[start:index].strip())
            start = index + 1
    tail = operands[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def _is_scalar(mask: int) -> bool:
    return mask != 0 and mask & (VGPR_MASK | AGPR_MASK) == 0


@dataclass(frozen=True)
class Access:
    """Def/use of one instruction: ``roles[k]`` are reads with role ``ROLES[k]``; ``flow`` passes through."""

    defs: int
    uses: int  # every register read (for liveness)
    roles: tuple[int, ...]  # per ROLES entry
    flow: int  # reads whose roles are those of what the instruction writes


def _access(defs: int, role_masks: dict[int, int] | None = None, flow: int = 0, other: int = 0) -> Access:
    roles = [0] * len(ROLES)
    for role, mask in (role_masks or {}).items():
        roles[role] |= mask
    uses = flow | other
    for mask in roles:
        uses |= mask
    return Access(defs, uses, tuple(roles), flow)


_NO_DEF_PREFIXES = (
    "s_branch", "s_endpgm", "s_nop", "s_waitcnt", "s_wait_", "s_barrier", "s_sleep", "s_setprio",
    "s_sendmsg", "s_trap", "s_dcache", "s_icache", "s_ttrace", "s_setreg", "s_set_gpr_idx", "s_denorm_mode",
    "s_round_mode", "s_inst_prefetch", "s_sethalt", "s_code_end", "s_incperflevel", "s_decperflevel",
    "s_setkill", "s_cmp", "s_bitcmp", "v_nop", "buffer_wbinvl1", "buffer_inv", "buffer_wbl2", "ds_gws",
    "ds_nop", "s_clause", "s_delay_alu", "s_singleuse_vdst", "s_version",
)  # fmt: skip
_SCC_WRITERS = (
    "s_add_", "s_sub_", "s_addc_", "s_subb_", "s_and_", "s_or_", "s_xor_", "s_andn2_", "s_orn2_", "s_nand_",
    "s_nor_", "s_xnor_", "s_lshl", "s_lshr_", "s_ashr_", "s_bfe_", "s_min_", "s_max_", "s_not_", "s_abs_",
    "s_absdiff_", "s_bcnt", "s_cmp", "s_bitcmp", "s_and_not1", "s_or_not1", "s_quadmask", "s_wqm_",
)  # fmt: skip
_SCC_READERS = ("s_cselect", "s_cmov", "s_addc_", "s_subb_", "s_cbranch_scc")
_ACCUMULATE_IN_PLACE = ("v_mac_", "v_fmac_", "v_pk_fmac_", "v_writelane", "v_fmamk_", "v_fmaak_")
_DS_NON_ATOMIC = (
    "ds_read", "ds_load", "ds_write", "ds_store", "ds_swizzle", "ds_permute", "ds_bpermute", "ds_nop",
    "ds_gws", "ds_append", "ds_consume", "ds_barrier", "ds_ordered", "ds_bvh",
)  # fmt: skip
_VMEM = ("global_", "buffer_", "flat_", "scratch_")
_FLOAT_FMA = re.compile(r"v_(pk_)?(fmac|mac|fma|mad)_(mix_|mixlo_|mixhi_)?(f16|bf16|f32|f64|legacy_f32)")


def _memory(m: str, ops: list[int], modifiers: str) -> Access | None:
    """Loads, stores and atomics; None when ``m`` is not a memory instruction."""
    is_ds = m.startswith("ds_")
    is_smem = m.startswith(("s_load", "s_buffer_load", "s_store", "s_buffer_store", "s_scratch_"))
    if not (is_ds or is_smem or m.startswith(_VMEM)):
        return None
    rest = ops[1:]
    if m.startswith(("ds_read", "ds_load")) or ("_load" in m and not is_ds):
        if "_lds" in m or re.search(r"(^|\s)lds(\s|$)", modifiers):  # to LDS directly: no VGPR written
            return _access(0, {ADDR: _or(ops)})
        if "d16" in m:  # a 16-bit load keeps the other half of the register: the old value flows on
            return _access(ops[0], {ADDR: _or(rest)}, flow=ops[0])
        return _access(ops[0], {ADDR: _or(rest)})
    if is_ds and m.startswith(("ds_swizzle", "ds_permute", "ds_bpermute", "ds_append", "ds_consume")):
        return _access(ops[0] if ops else 0, flow=_or(rest))
    if is_ds and m.startswith(("ds_gws", "ds_nop", "ds_barrier")):
        return _access(0, other=_or(ops))
    data_role = STAGE if is_ds else OUT
    if m.startswith("scratch_"):
        data_role = -1  # spill data: kept only to be reloaded, no purpose of its own
    atomic = "_atomic" in m or (is_ds and not m.startswith(_DS_NON_ATOMIC))
    returning = atomic and (
        "_rtn" in m or (bool(re.search(r"(^|\s)(glc|sc0)(\s|$)", modifiers)) and not is_ds)
    )
    defs = 0
    if returning and not m.startswith("buffer_"):
        defs, ops = ops[0], ops[1:]
    if m.startswith(("buffer_", "s_store", "s_buffer_store")):  # vdata first, then addresses
        data, addresses = ops[:1], ops[1:]
        if returning:
            defs = ops[0]
    else:  # global/flat/scratch/ds: address first, data after (saddr last for global/scratch)
        data, addresses = ops[1:2], ops[:1] + ops[2:]
        if is_ds:
            data, addresses = ops[1:], ops[:1]
    roles = {ADDR: _or(addresses)}
    if data_role >= 0:
        roles[data_role] = _or(data)
    return _access(defs, roles, other=_or(data) if data_role < 0 else 0)


def _or(masks: list[int]) -> int:
    result = 0
    for mask in masks:
        result |= mask
    return result


@lru_cache(maxsize=65536)
def access(mnemonic: str, operands: str) -> Access:
    """Def/use and read roles of one instruction (see the module docstring)."""
    m = mnemonic
    parts = split_operands(operands)
    ops = [register_mask(part) for part in parts]
    modifiers = parts[-1] if parts else ""
    if m.startswith("s_cbranch"):  # the condition is implicit; the operand is the branch offset
        implicit = {"s_cbranch_scc": SCC_BIT, "s_cbranch_vcc": VCC, "s_cbranch_exec": EXEC}
        condition = next((bits for prefix, bits in implicit.items() if m.startswith(prefix)), 0)
        return _access(0, {CTRL: condition | _or(ops)})
    if not ops:
        return _access(0)
    memory = _memory(m, ops, modifiers)
    if memory is not None:
        return memory
    rest = _or(ops[1:])
    if m.startswith("v_mfma_ld_scale"):  # gfx950: scales for the next MFMA, no destination
        return _access(0, {SCALE: _or(ops)})
    if m.startswith(("v_swap_", "v_swaprel", "v_permlane16_swap", "v_permlane32_swap")):
        return _access(_or(ops[:2]), flow=_or(ops[:2]))  # both operands are read and written
    if m.startswith(("v_mfma", "v_smfmac", "v_wmma", "v_swmmac")):
        roles = {FRAG: _or(ops[1:3]), ACC: ops[3] if len(ops) > 3 else 0, SCALE: _or(ops[4:6])}
        if m.startswith(("v_smfmac", "v_swmmac")):  # dst is also the accumulator; op 3 is the sparsity index
            roles = {FRAG: _or(ops[1:4]), ACC: ops[0]}
        return _access(ops[0], roles)
    if m.startswith("v_dot"):
        if re.match(r"v_dot\d+c_", m):  # v_dot4c_i32_i8 v0, v1, v2: v0 += dot(v1, v2)
            return _access(ops[0], {FRAG: _or(ops[1:3]), ACC: ops[0]})
        return _access(ops[0], {FRAG: _or(ops[1:3]), ACC: _or(ops[3:4])}, flow=_or(ops[4:]))
    if _FLOAT_FMA.match(m):  # float multiply-accumulate into its own destination: a GEMV/GEMM accumulator
        in_place = m.startswith(("v_fmac", "v_mac", "v_pk_fmac"))
        if in_place and len(ops) >= 3:
            return _access(ops[0], {ACC: ops[0], FRAG: _or(ops[1:3])})
        if len(ops) == 4 and ops[3] and ops[3] == ops[0]:
            return _access(ops[0], {ACC: ops[3], FRAG: _or(ops[1:3])})
    if m.startswith(("v_cmp", "v_cmpx")):
        writes_exec = EXEC if m.startswith("v_cmpx") else 0
        if _is_scalar(ops[0]) and len(ops) > 2:
            return _access(ops[0] | writes_exec, flow=rest)
        return _access(writes_exec, flow=_or(ops))
    if m.startswith("s_setpc"):
        return _access(0, other=_or(ops))
    if m.startswith("s_swappc"):
        return _access(ops[0], other=rest)
    if "_saveexec_" in m or m.startswith(("s_and_saveexec", "s_or_saveexec")):
        return _access(ops[0] | EXEC, flow=rest | EXEC)
    if m.startswith(_NO_DEF_PREFIXES):
        defs = SCC_BIT if m.startswith(("s_cmp", "s_bitcmp")) else 0
        if defs:
            return _access(defs, flow=_or(ops))
        return _access(0, other=_or(ops))
    defs = ops[0]
    flow = rest
    if (
        m.startswith("v_")
        and len(ops) > 2
        and _is_scalar(ops[1])
        and ("_co_" in m or m.startswith(("v_mad_u64_u32", "v_mad_i64_i32", "v_div_scale", "v_mad_co_")))
    ):
        defs |= ops[1]  # carry-out / second scalar result
        flow = _or(ops[2:])
    if m.startswith(_ACCUMULATE_IN_PLACE):
        flow |= ops[0]
    if m.startswith("s_"):
        if m.startswith(_SCC_READERS):
            flow |= SCC_BIT
        if m.startswith(_SCC_WRITERS):
            defs |= SCC_BIT
    return _access(defs, flow=flow)


def instruction_access(ins: Instruction) -> Access:
    return access(ins.mnemonic, ins.operands)
