"""data.yml's request (``-e input=... output_prefix=... tokenizer=...``), checked on the controller before any node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Options that name a path inside the training container; each is required.
PATHS = ("input", "output_prefix", "tokenizer")
#: Whole-number options and their least value.
COUNTS = {"workers": 0, "max_bad_lines": 0}


def problems(options: Mapping[str, Any]) -> list[str]:
    """Every problem of the request, each naming the ``-e`` option, its value and what is accepted."""
    found = []
    for name in PATHS:
        value = "" if options.get(name) is None else str(options[name])
        if not value:
            found.append(f"-e {name}=... is required")
        elif not value.startswith("/"):
            found.append(f"{name}={value} must be an absolute path inside the container")
    for name, least in COUNTS.items():
        value = str(options.get(name, least))
        if not (value.isascii() and value.isdigit() and int(value) >= least):
            found.append(f"{name}={value} must be a whole number >= {least}")
    prefix = str(options.get("output_prefix") or "")
    if prefix.endswith((".bin", ".idx")):
        found.append(f"output_prefix={prefix} must not end in .bin/.idx (they are added)")
    if not str(options.get("json_key", "text")):
        found.append("json_key must not be empty")
    return found
