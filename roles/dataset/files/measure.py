"""Measure a Megatron dataset and its tokenizer in the training container (mtt-train-ops, role dataset).

    python3 -c "$(cat measure.py)" --data-path PREFIX --tokenizer-path PATH

Prints ``{"PREFIX.bin": bytes, "PREFIX.idx": bytes, "PATH": bytes}`` as JSON: a directory's size is the sum of
its files'; a missing path is null.
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
    print(json.dumps({path: size(path) for path in paths}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
