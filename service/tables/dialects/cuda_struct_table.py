"""Dialect `cuda-struct-table`: the package's struct table as a CUDA C++ header, callable on host and device.

The same table as `struct-table` (the package's `[table]` struct and fields, the Llaminar key packing and
M policy, sorted exact tables, the fallback: segments or a decision tree): every function is
`__host__ __device__` under nvcc (plain `inline` for a host compiler, which the validator also uses), and
the header lists the package's variant space, so a consumer maps a looked-up config back to the variant
(kernel symbol) it names: `<Package>VariantIndex(config)` gives the index in the package's declared
order for the `cuda` backend, `k<Package>VariantNames[i]` its canonical name (host only).
Namespace `tunebase::cuda::<package>`; the entry point is `select<Package>(codebook_id, m, n, k, out)`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kernels.packages.package import KernelPackage
from service.tables.dialects.base import RuleMap
from service.tables.dialects.struct_table import StructTableDialect, TableShapeError, namespace_name
from service.tables.model import HeaderInfo, TableChoice
from service.tables.policy import Fallback

QUALIFIER = "TUNEBASE_TABLE_FN"
_MACRO = f"""\
#if defined(__CUDACC__)
#define {QUALIFIER} __host__ __device__ inline
#else
#define {QUALIFIER} inline
#endif
"""


class CudaStructTableDialect(StructTableDialect):
    """struct-table, CUDA-callable, plus the package's variant list."""

    name: str = "cuda-struct-table"
    cuda: bool = True  # the validator also compiles it with nvcc (when nvcc is installed)

    def __init__(self, package: KernelPackage) -> None:
        super().__init__(package)
        self.namespace = f"tunebase::cuda::{namespace_name(package.name)}"
        self.structs = self._structs()
        self.variants = [v for v in package.space("cuda")]
        if not self.variants:
            raise TableShapeError(f"kernel package {package.name} has no variant for the cuda backend")
        configs: dict[tuple[int, ...], str] = {}
        for v in self.variants:
            config = self.codec.parse_variant(v.name)
            if config in configs:
                raise TableShapeError(
                    f"table.fields: {v.name} and {configs[config]} store the same config {config}; "
                    "a consumer could not tell which kernel a looked-up entry names"
                )
            configs[config] = v.name

    def render(
        self, choices: Sequence[TableChoice], fallback: Fallback | RuleMap, header_info: HeaderInfo
    ) -> str:
        text = super().render(choices, fallback, header_info)
        text = text.replace("#pragma once\n", "#pragma once\n\n" + _MACRO, 1)
        text = re.sub(r"(?m)^inline ", f"{QUALIFIER} ", text)
        return text.replace(
            f"}}  // namespace {self.namespace}\n",
            self._variant_list() + f"}}  // namespace {self.namespace}\n",
        )

    def device_probe_source(self, header_name: str) -> str:
        """A CUDA unit that includes the header twice and calls the lookup in device code."""
        p, s, ns = self.stem, self.struct, self.namespace
        return f"""\
#include "{header_name}"
#include "{header_name}"

__global__ void tunebase_table_probe(int *out, unsigned char codebook, int m, int n, int k) {{
    {ns}::{s} cfg{{}};
    out[0] = {ns}::select{p}(codebook, m, n, k, cfg) ? {ns}::{p}VariantIndex(cfg) : -2;
}}
"""

    @staticmethod
    def _plain(text: str) -> str:
        """The text as struct-table spells it (the parsers look for `inline` functions)."""
        return re.sub(rf"(?m)^{QUALIFIER} ", "inline ", text)

    def emitted_keys(self, text: str) -> dict[int, list[int]]:
        return super().emitted_keys(self._plain(text))

    def emitted_codebooks(self, text: str) -> set[int]:
        return super().emitted_codebooks(self._plain(text))

    def _variant_list(self) -> str:
        p, s = self.stem, self.struct
        checks = []
        for index, v in enumerate(self.variants):
            config = self.codec.parse_variant(v.name)
            test = " && ".join(f"c.{f} == {value}" for f, value in zip(self.fields, config, strict=True))
            checks.append(f"    if ({test}) {{\n        return {index};  // {v.name}\n    }}")
        names = ", ".join(f'"{v.name}"' for v in self.variants)
        body = "\n".join(checks)
        return f"""\
// The package's variants for the cuda backend, in declared order.
inline constexpr int k{p}VariantCount = {len(self.variants)};
inline constexpr const char *k{p}VariantNames[k{p}VariantCount] = {{{names}}};  // host only

// Index (in k{p}VariantNames) of the variant a looked-up config names; -1 if none.
{QUALIFIER} int {p}VariantIndex(const {s} &c) {{
{body}
    return -1;
}}

"""
