"""data.yml's request (``-e input=... output_prefix=... tokenizer=...``), checked on the controller before any node."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from .dataset_manifest import manifest_path
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
    prefix, source = str(options.get("output_prefix") or ""), str(options.get("input") or "")
    if prefix.lower().endswith((".bin", ".idx")):
        found.append(f"-e output_prefix={prefix!r} must not end in .bin/.idx (they are added)")
    elif prefix.endswith("/"):
        found.append(f"-e output_prefix={prefix!r} names a directory: give a file prefix in it, as {prefix}name")
    outputs = [prefix + suffix for suffix in ("", ".bin", ".idx")] + [manifest_path(prefix)]
    if source and posixpath.normpath(source) in map(posixpath.normpath, outputs):
        found.append(
            f"-e input={source!r} is what -e output_prefix={prefix!r} writes ({', '.join(outputs[1:])}): the build "
            "would replace its own input; give another output_prefix"
        )
    return found
