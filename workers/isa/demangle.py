"""C++ kernel names made readable with LLVM's own demangler (`llvm-cxxfilt`, or binutils' `c++filt`).

One subprocess for all names of a file; when no demangler is installed the names stay as they are
(a mangled name is still a correct name, only a less readable one).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

DEMANGLERS = ("llvm-cxxfilt", "llvm-cxxfilt-15", "c++filt")
TIMEOUT_S = 30


def demangler() -> str | None:
    return next((path for name in DEMANGLERS if (path := shutil.which(name))), None)


def demangle(names: Sequence[str]) -> list[str]:
    """Each name demangled (Itanium ABI); names that are not mangled come back unchanged."""
    tool = demangler()
    if tool is None or not any(name.startswith("_Z") for name in names):
        return list(names)
    try:
        text = "\n".join(names) + "\n"
        proc = subprocess.run(
            [tool], input=text, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return list(names)
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != len(names):
        return list(names)
    return lines
