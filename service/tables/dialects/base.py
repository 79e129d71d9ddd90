"""The interface every table dialect implements.

A dialect owns the text format (names, key packing as text, comments) and the
replay for it; the generator and validator stay format-agnostic. Phase facts
(variant -> config, M policy, key packing) come from the dialect's codec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from service.tables.codecs import PhaseCodec
from service.tables.model import FallbackRule, HeaderInfo, PointKey, TableChoice
from service.tables.policy import Fallback

RuleMap = Mapping[tuple[int, int, str], Sequence[FallbackRule]]
# What a lookup answered at a point: the config tuple, or None for "no answer".
ReplayAnswers = dict[PointKey, tuple[int, ...] | None]


class TableDialect(Protocol):
    """Renders one (phase, engine) table format and knows how to replay it."""

    name: str
    phase: str
    codec: PhaseCodec
    compiled: bool  # True: C++ that must compile; the replay is a compiled program

    def parse_variant(self, variant: str) -> tuple[int, ...]:
        """Canonical variant name -> the config fields the table stores."""
        ...

    def render(
        self, choices: Sequence[TableChoice], fallback: Fallback | RuleMap, header_info: HeaderInfo
    ) -> str:
        """The complete table text (a bare RuleMap is a segments-only fallback)."""
        ...

    def replay_program(self, header_name: str, queries: Sequence[PointKey]) -> str:
        """C++ source that includes `header_name` and prints one answer per query."""
        ...

    def parse_replay_output(self, stdout: str) -> ReplayAnswers:
        """Read the replay program's output back into answers."""
        ...

    def replay_text(self, text: str, queries: Sequence[PointKey], workdir: Path) -> ReplayAnswers:
        """Non-compiled dialects: answer the queries by reading the text independently."""
        ...

    def emitted_keys(self, text: str) -> dict[int, list[int]]:
        """Exact-table keys per codebook id, in emitted order, parsed from text."""
        ...

    def emitted_codebooks(self, text: str) -> set[int]:
        """Every codebook id the text dispatches on (exact and fallback)."""
        ...
