"""Backend-independent round-robin dispatch scheduler (DESIGN §5.2).

Every round runs each live variant once, so clock and thermal drift hit all
variants alike; the starting variant rotates each round so no variant always
runs first (right after the Python scheduling gap). Warm-up rounds run the same
way and are discarded. Each dispatch reads the next weight copy, so two
consecutive dispatches never hit the same buffer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from workers.backends.base import Dispatch, ProgressCallback, TaskSpec
from workers.harness.racing import RoundPolicy, policy_for, timed_rounds

# Runs one dispatch reading weight copy ``buffer_index``; returns the device time in ns
# (profiler or in-kernel clock). Wall time is taken around it by the scheduler.
DispatchFn = Callable[[int], int]


@dataclass
class InterleaveResult:
    """Per-variant dispatch rows, plus variants dropped because a dispatch raised."""

    dispatches: dict[str, list[Dispatch]]
    errors: dict[str, str] = field(default_factory=dict)


def interleave(
    dispatchers: Sequence[tuple[str, DispatchFn]],
    rounds: int,
    warmup: int = 0,
    buffers: int = 1,
    progress: ProgressCallback | None = None,
    policy: RoundPolicy | None = None,
) -> InterleaveResult:
    """Run ``warmup`` discarded rounds then ``rounds`` timed rounds, round-robin over variants.

    ``seq`` numbers timed dispatches globally (0, 1, ...) in execution order, so the
    interleaving is visible in stored data. ``progress(done, planned)`` counts timed
    dispatches and is called once before the first round and after every round.
    ``policy`` (e.g. workers.harness.racing.RacingPolicy), when given, is asked after every
    timed round which variants keep running; an empty answer ends the task early.
    """
    if rounds < 0 or warmup < 0 or buffers < 1:
        raise ValueError(f"bad schedule: rounds={rounds} warmup={warmup} buffers={buffers}")
    names = [name for name, _ in dispatchers]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate variant names in {names}")
    result = InterleaveResult({name: [] for name in names})
    live = list(dispatchers)
    planned = rounds * len(live)
    counter = 0  # every dispatch, warm-up included, advances the weight copy
    seq = 0
    done = 0
    if progress is not None:
        progress(0, planned)
    for r in range(warmup + rounds):
        timed = r >= warmup
        if live:
            start = r % len(live)
            order = live[start:] + live[:start]
        else:
            order = []
        for name, fn in order:
            buffer_index = counter % buffers
            counter += 1
            try:
                t0 = time.perf_counter_ns()
                device_ns = fn(buffer_index)
                wall_ns = time.perf_counter_ns() - t0
            except Exception as exc:  # one broken variant must not sink the task
                result.errors[name] = f"dispatch failed: {type(exc).__name__}: {exc}"
                live = [d for d in live if d[0] != name]
                planned -= (rounds - (r - warmup)) if timed else rounds
                continue
            if timed:
                result.dispatches[name].append(Dispatch(seq, int(device_ns), wall_ns, buffer_index))
                seq += 1
                done += 1
        if timed and policy is not None and live:
            keep = set(policy.after_round(r - warmup + 1, {n: result.dispatches[n] for n, _ in live}))
            live = [d for d in live if d[0] in keep]
            planned = done + (warmup + rounds - r - 1) * len(live)
        if timed and progress is not None:
            progress(done, planned)
        if policy is not None and not live:
            break
    return result


def interleave_task(
    spec: TaskSpec,
    dispatchers: Sequence[tuple[str, DispatchFn]],
    parity_passed: Collection[str],
    buffers: int,
    progress: ProgressCallback | None = None,
) -> InterleaveResult:
    """A task's timed dispatches: exhaustive rounds, or a race over the parity-passing variants."""
    return interleave(
        dispatchers,
        rounds=timed_rounds(spec),
        warmup=spec.warmup,
        buffers=buffers,
        progress=progress,
        policy=policy_for(spec, eligible=parity_passed),
    )
