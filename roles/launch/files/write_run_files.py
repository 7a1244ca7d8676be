"""Write a run's files into its directory in the training container (mtt-train-ops, role launch).

    python3 -c "$(cat write_run_files.py)" --run-dir DIR  < {"NAME": "TEXT", ...} (JSON on stdin)

Each file is written whole and then renamed into place (a reader never sees half a script); ``.sh`` and ``.py``
files are made executable. Creates ``DIR/logs``. Prints how many files were written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def write_files(run_dir: str, files: dict[str, str]) -> int:
    for name, text in files.items():
        path = os.path.join(run_dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path + ".tmp", 0o755 if name.endswith((".sh", ".py")) else 0o644)
        os.replace(path + ".tmp", path)
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    return len(files)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, help="the run's directory inside the container")
    args = parser.parse_args(argv)
    files = json.load(sys.stdin)
    bad = [name for name in files if name.startswith("/") or ".." in name.split("/")]
    if bad:
        print(f"refusing file names outside the run directory: {', '.join(bad)}", file=sys.stderr)
        return 2
    print(write_files(args.run_dir, files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
