"""data.yml's request (``-e input=... output_prefix=... tokenizer=...``), checked on the controller before any node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .options import OPTIONS, REQUIRED, OptionError, convert

#: data.yml's options (their types, ranges and defaults are :data:`.options.OPTIONS`').
NAMES = ("input", "output_prefix", "tokenizer", "json_key", "workers", "max_bad_lines")


def problems(options: Mapping[str, Any]) -> list[str]:
    """Every problem of the request, each naming the ``-e`` option, its value and what is accepted."""
    found = []
    for name in NAMES:
        if name not in options or options[name] is None:
            if name in REQUIRED["data"]:
                found.append(f"-e {name}=... is required: {OPTIONS[name].doc}")
            continue
        try:
            convert(OPTIONS[name], options[name])
        except OptionError as exc:
            found.append(str(exc))
    prefix = str(options.get("output_prefix") or "")
    if prefix.endswith((".bin", ".idx")):
        found.append(f"-e output_prefix={prefix!r} must not end in .bin/.idx (they are added)")
    return found
