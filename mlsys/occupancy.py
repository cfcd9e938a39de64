"""Occupancy: how many blocks (CTAs) of a kernel fit on one streaming multiprocessor at once.

An SM holds a block only when it has room for all of it: its warps, its registers and its
shared memory. Each resource gives a ceiling on resident blocks; the smallest one wins:

    blocks/SM = min(B_max, floor(W_max / w), B_regs, B_smem)          w = ceil(threads / 32)

    B_regs = floor(R_sm / P / r_warp) * P // w     r_warp = roundup(regs_per_thread * 32, 256)
    B_smem = floor(S_sm / roundup(smem_block + S_reserved, 128 B))

where ``P`` is the number of SM sub-partitions (4: registers are split between the four warp
schedulers, so a warp's registers must fit in one quarter of the file). Occupancy is resident
warps divided by ``W_max``. The rules follow NVIDIA's ``cuda_occupancy.h`` (shipped with the
CUDA toolkit) and the per-compute-capability limits of the CUDA C++ Programming Guide, "Compute
Capabilities", Table "Technical Specifications per Compute Capability"
(https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications,
accessed 2026-11). The shared-memory carve-out is assumed to be the largest one (all of
``shared_memory_per_sm``), as when a kernel asks for its maximum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pint

from .hardware import Accelerator, get
from .units import Q_, positive, require_count

__all__ = ["SMLimits", "Occupancy", "ARCH_LIMITS", "sm_limits", "occupancy"]

REGISTER_BYTES = 4  # one 32-bit register


@dataclass(frozen=True)
class SMLimits:
    """Per-SM resource limits of one compute capability (counts are plain ints)."""

    compute_capability: str
    warp_size: int
    max_threads_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    max_threads_per_block: int
    registers_per_sm: int  # 32-bit registers
    max_registers_per_block: int
    max_registers_per_thread: int
    register_allocation_unit: int  # registers, allocated per warp
    sub_partitions: int
    shared_memory_per_sm: pint.Quantity  # byte, largest carve-out
    max_shared_memory_per_block: pint.Quantity  # byte, opt-in maximum
    reserved_shared_memory_per_block: pint.Quantity  # byte, taken by the driver per block
    shared_memory_allocation_unit: pint.Quantity  # byte


#: Thread, warp and block limits per architecture, from the CUDA C++ Programming Guide's
#: compute-capability table (Hopper = 9.0, Ampere A100 = 8.0). Register and shared-memory
#: sizes come from the accelerator's data entry instead (see :func:`sm_limits`).
ARCH_LIMITS: dict[str, dict[str, Any]] = {
    "Hopper": {"compute_capability": "9.0", "max_threads_per_sm": 2048, "max_warps_per_sm": 64,
               "max_blocks_per_sm": 32, "max_shared_memory_per_block_kib": 227},
    "Ampere": {"compute_capability": "8.0", "max_threads_per_sm": 2048, "max_warps_per_sm": 64,
               "max_blocks_per_sm": 32, "max_shared_memory_per_block_kib": 163},
    "Ada Lovelace": {"compute_capability": "8.9", "max_threads_per_sm": 1536, "max_warps_per_sm": 48,
                     "max_blocks_per_sm": 24, "max_shared_memory_per_block_kib": 99},
    "Turing": {"compute_capability": "7.5", "max_threads_per_sm": 1024, "max_warps_per_sm": 32,
               "max_blocks_per_sm": 16, "max_shared_memory_per_block_kib": 64},
    "Volta": {"compute_capability": "7.0", "max_threads_per_sm": 2048, "max_warps_per_sm": 64,
              "max_blocks_per_sm": 32, "max_shared_memory_per_block_kib": 96},
}


def sm_limits(accel: Accelerator | str = "H100") -> SMLimits:
    """SM limits of an NVIDIA accelerator of a known architecture (``ARCH_LIMITS``).

    Registers per SM = ``register_file_per_sm / 4 byte``; shared memory per SM is the data
    entry's ``shared_memory_per_sm``. Raises ``KeyError`` for an architecture not in the table.
    """
    acc = get(accel) if isinstance(accel, str) else accel
    if not isinstance(acc, Accelerator):
        raise TypeError(f"sm_limits expects an Accelerator or a name, got {type(accel).__name__}")
    if acc.architecture not in ARCH_LIMITS:
        raise KeyError(f"no SM limits for architecture {acc.architecture!r} ({acc.name}); "
                       f"known: {sorted(ARCH_LIMITS)}")
    if acc.register_file_per_sm is None or acc.shared_memory_per_sm is None:
        raise ValueError(f"{acc.name} has no register_file_per_sm / shared_memory_per_sm figures")
    arch = ARCH_LIMITS[acc.architecture]
    regs = round(acc.register_file_per_sm.to("byte").m / REGISTER_BYTES)
    return SMLimits(
        compute_capability=arch["compute_capability"],
        warp_size=32,
        max_threads_per_sm=arch["max_threads_per_sm"],
        max_warps_per_sm=arch["max_warps_per_sm"],
        max_blocks_per_sm=arch["max_blocks_per_sm"],
        max_threads_per_block=1024,
        registers_per_sm=regs,
        max_registers_per_block=65536,
        max_registers_per_thread=255,
        register_allocation_unit=256,
        sub_partitions=4,
        shared_memory_per_sm=acc.shared_memory_per_sm.to("byte"),
        max_shared_memory_per_block=Q_(arch["max_shared_memory_per_block_kib"], "KiB").to("byte"),
        reserved_shared_memory_per_block=Q_(1, "KiB").to("byte"),
        shared_memory_allocation_unit=Q_(128, "byte"),
    )


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM, what limits them, and the resulting occupancy."""

    blocks_per_sm: int
    warps_per_block: int
    warps_per_sm: int
    threads_per_sm: int
    occupancy: float  # warps_per_sm / max_warps_per_sm
    limiter: str  # "blocks", "warps", "registers" or "shared memory"
    block_limits: dict[str, int]  # the ceiling each resource sets on blocks per SM
    registers_per_warp: int  # after rounding up to the allocation unit
    shared_memory_per_block: pint.Quantity  # byte, after reserve and rounding


def _roundup(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(
    threads_per_block: int,
    registers_per_thread: int = 32,
    shared_memory_per_block: Any = 0,
    limits: SMLimits | Accelerator | str = "H100",
) -> Occupancy:
    """Blocks per SM and occupancy of a kernel, by the rules in the module docstring.

    ``shared_memory_per_block`` is a data quantity (or a plain number of bytes): static plus
    dynamic shared memory. Raises ``ValueError`` for a launch that cannot run at all (too many
    threads, registers or shared memory for one block).
    """
    lim = limits if isinstance(limits, SMLimits) else sm_limits(limits)
    require_count(threads_per_block, "threads_per_block")
    require_count(registers_per_thread, "registers_per_thread")
    if threads_per_block > lim.max_threads_per_block:
        raise ValueError(f"threads_per_block={threads_per_block} exceeds the limit of "
                         f"{lim.max_threads_per_block} threads per block")
    if registers_per_thread > lim.max_registers_per_thread:
        raise ValueError(f"registers_per_thread={registers_per_thread} exceeds the limit of "
                         f"{lim.max_registers_per_thread}")
    smem = positive(shared_memory_per_block, "byte", "shared_memory_per_block", allow_zero=True).to("byte")
    if smem > lim.max_shared_memory_per_block:
        raise ValueError(f"shared_memory_per_block={smem.m:,.0f} B exceeds the per-block "
                         f"maximum of {lim.max_shared_memory_per_block.m:,.0f} B "
                         f"({lim.max_shared_memory_per_block.to('KiB'):~P}) "
                         f"(compute capability {lim.compute_capability})")

    warps = math.ceil(threads_per_block / lim.warp_size)
    by_blocks = lim.max_blocks_per_sm
    by_warps = lim.max_warps_per_sm // warps

    reg_warp = _roundup(registers_per_thread * lim.warp_size, lim.register_allocation_unit)
    regs_checked = reg_warp * _roundup(warps, lim.sub_partitions)
    if regs_checked > lim.max_registers_per_block:
        raise ValueError(f"{threads_per_block} threads x {registers_per_thread} registers need "
                         f"{regs_checked} registers per block; the limit is "
                         f"{lim.max_registers_per_block}")
    warps_per_partition = (lim.registers_per_sm // lim.sub_partitions) // reg_warp
    by_regs = (warps_per_partition * lim.sub_partitions) // warps

    unit = round(lim.shared_memory_allocation_unit.m)
    reserve = round(lim.reserved_shared_memory_per_block.m)
    smem_alloc = _roundup(math.ceil(smem.m) + reserve, unit)
    by_smem = round(lim.shared_memory_per_sm.m) // smem_alloc

    limits_by = {"blocks": by_blocks, "warps": by_warps, "registers": by_regs,
                 "shared memory": by_smem}
    blocks = min(limits_by.values())
    limiter = min(limits_by, key=lambda k: limits_by[k])  # first of ties, in the order above
    return Occupancy(
        blocks_per_sm=blocks,
        warps_per_block=warps,
        warps_per_sm=blocks * warps,
        threads_per_sm=blocks * threads_per_block,
        occupancy=blocks * warps / lim.max_warps_per_sm,
        limiter=limiter,
        block_limits=limits_by,
        registers_per_warp=reg_warp,
        shared_memory_per_block=Q_(smem_alloc, "byte"),
    )
