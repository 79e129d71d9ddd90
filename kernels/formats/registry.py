"""GGUF quant formats and the runtime codebook ids they map to (DESIGN §3).

Several formats share one codebook id because the inference engine decodes them
through the same path; tables collapse them into one choice per codebook, so the
mapping has to live in exactly one place. Block geometry comes from gguf itself
(``GGML_QUANT_SIZES``) so it can never drift from llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType


@dataclass(frozen=True)
class QuantFormat:
    """One GGUF block format: its name, runtime codebook id and block geometry."""

    name: str
    codebook: int
    ggml_type: GGMLQuantizationType
    block_weights: int
    block_bytes: int

    @property
    def bits_per_weight(self) -> float:
        """Storage cost including scales; useful for bandwidth-bound roofline figures."""
        return self.block_bytes * 8 / self.block_weights

    def row_bytes(self, k: int) -> int:
        """Bytes of one K-long row; K must be a whole number of blocks."""
        if k <= 0 or k % self.block_weights:
            raise ValueError(f"{self.name}: K={k} is not a positive multiple of {self.block_weights}")
        return k // self.block_weights * self.block_bytes


# (format name, codebook id) in DESIGN §3 order; ids follow Llaminar NativeVNNI numbering.
_CODEBOOK_IDS: tuple[tuple[str, int], ...] = (
    ("Q4_0", 0),
    ("IQ4_NL", 4),
    ("IQ4_XS", 4),
    ("Q4_1", 5),
    ("Q4_K", 5),
    ("Q5_0", 6),
    ("Q5_1", 7),
    ("Q5_K", 7),
    ("Q6_K", 8),
    ("Q3_K", 9),
    ("Q2_K", 10),
    ("IQ3_S", 11),
    ("IQ3_XXS", 12),
    ("IQ2_S", 13),
    ("IQ2_XS", 14),
    ("IQ2_XXS", 15),
    ("IQ1_S", 16),
    ("IQ1_M", 17),
    ("Q8_0", 19),
    # Microscaling FP4 (issue 17): not in the Llaminar numbering, so new ids from 32 up (DESIGN §3).
    ("MXFP4", 32),
    ("NVFP4", 33),
)


def _make(name: str, codebook: int) -> QuantFormat:
    qtype = GGMLQuantizationType[name]
    block_weights, block_bytes = GGML_QUANT_SIZES[qtype]
    return QuantFormat(name, codebook, qtype, block_weights, block_bytes)


FORMATS: dict[str, QuantFormat] = {name: _make(name, cb) for name, cb in _CODEBOOK_IDS}

KNOWN_CODEBOOKS: frozenset[int] = frozenset(f.codebook for f in FORMATS.values())


def get_format(name: str) -> QuantFormat:
    """Look a format up by its GGUF name; the error lists what is known."""
    try:
        return FORMATS[name]
    except KeyError:
        raise KeyError(f"unknown format {name!r}; known formats: {', '.join(FORMATS)}") from None


def formats_for_codebook(codebook_id: int) -> list[QuantFormat]:
    """Every format that decodes through one codebook, in declared order."""
    return [f for f in FORMATS.values() if f.codebook == codebook_id]


def codebook_name(codebook_id: int) -> str:
    """Human name of a codebook id, e.g. ``Q4_1/Q4_K``; KeyError for unknown ids."""
    members = formats_for_codebook(codebook_id)
    if not members:
        known = ", ".join(str(c) for c in sorted(KNOWN_CODEBOOKS))
        raise KeyError(f"unknown codebook id {codebook_id}; known ids: {known}")
    return "/".join(f.name for f in members)
