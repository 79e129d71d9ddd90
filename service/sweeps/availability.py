"""Which arches a live worker serves right now, so a sweep never waits silently (DESIGN §7).

Plain data and the warning text; how the workers are asked lives above the workers layer
(service/api/presence.py: embedded threads, or a Celery broadcast).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Presence:
    """Workers online per arch, and how the answer was obtained (named in warnings)."""

    online: Mapping[str, int]
    source: str  # "embedded", "broker", or "none" (no broker and no embedded worker)
    error: str = ""  # the broker could not be asked (the count is then unknown, not zero)

    def count(self, arch: str) -> int:
        return int(self.online.get(arch, 0))


def embedded_presence(arches: Iterable[str]) -> Presence:
    arch_list = list(arches)
    return Presence(dict(Counter(arch_list)), "embedded" if arch_list else "none")


def waiting_warnings(arch: str, tasks: Mapping[str, int], presence: Presence) -> list[str]:
    """Why queued tasks of this arch will not start: no live worker serves it (with the count)."""
    if not tasks.get("queued") or presence.count(arch):
        return []
    if presence.error:
        return [
            f"cannot tell whether a worker serves {arch}: the broker did not answer ({presence.error});"
            f" {tasks['queued']} task(s) wait in queue arch.{arch}"
        ]
    served = ", ".join(f"{a} ({n})" for a, n in sorted(presence.online.items())) or "none"
    if presence.source == "none":
        how = "no broker is configured and the embedded worker is off (TUNEBASE_EMBEDDED_WORKER=false)"
    elif presence.source == "embedded":
        how = f"this server's embedded worker serves {served}; set TUNEBASE_BROKER_URL and run a worker"
    else:
        how = f"workers online by arch: {served}; start one"
    return [
        f"no live worker serves {arch} (0 online): {tasks['queued']} task(s) wait until one starts; "
        f"{how} (`tunebase worker --arch {arch}`)"
    ]
