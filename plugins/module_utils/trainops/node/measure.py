"""Measure a Megatron dataset and its tokenizer in the training container (mtt-train-ops, role dataset).

    python3 measure.py --data-path PREFIX --tokenizer-path PATH

Prints ``{"sizes": {"PREFIX.bin": bytes, "PREFIX.idx": bytes, "PATH": bytes}, "manifest": {...} | null}`` as
JSON: a directory's size is the sum of its files'; a missing path is null. ``manifest`` is the ``output`` part of
``PREFIX.manifest.json`` (what playbooks/data.yml wrote: ``bin_bytes``, ``idx_bytes``), null where there is none or
it cannot be read (the planner names a bad manifest); ``data_path_is_directory`` when the prefix is a directory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def size(path: str) -> int | None:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(path) for f in names)
    return os.path.getsize(path) if os.path.isfile(path) else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-path", required=True, help="Megatron data prefix (.bin/.idx are added)")
    parser.add_argument("--tokenizer-path", required=True, help="tokenizer file or directory")
    args = parser.parse_args(argv)
    paths = [args.data_path + ".bin", args.data_path + ".idx", args.tokenizer_path]
    print(
        json.dumps(
            {
                "sizes": {path: size(path) for path in paths},
                "manifest": written(args.data_path),
                "data_path_is_directory": os.path.isdir(args.data_path),
            }
        )
    )
    return 0


def written(prefix: str) -> dict | None:
    try:
        with open(prefix + ".manifest.json", encoding="utf-8") as handle:
            output = json.load(handle).get("output")
    except (OSError, ValueError, AttributeError):
        return None
    return output if isinstance(output, dict) else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
