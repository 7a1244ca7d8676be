"""What train.yml reads in the master's container after an attempt (mtt-train-ops, role launch).

    python3 -c "$(cat run_marks.py)" CHECKPOINT_DIR RUN_DIR

Prints ``{"checkpoint": "<latest_checkpointed_iteration.txt's text, or empty>", "restarting": true|false}``: the
checkpoint a new attempt resumes from (Megatron's tracker file), and whether the run's restart mark
(``<run dir>/restarting``, written with the run's files when ``-e max_restarts`` is set) is still there: stop.yml
removes it, and then train.yml starts no new attempt.
"""

from __future__ import annotations

import json
import os
import sys

TRACKER = "latest_checkpointed_iteration.txt"
RESTART_MARK = "restarting"


def marks(checkpoint_dir: str, run_dir: str) -> dict:
    try:
        with open(os.path.join(checkpoint_dir, TRACKER), encoding="utf-8") as handle:
            checkpoint = handle.read().strip()
    except OSError:
        checkpoint = ""
    return {"checkpoint": checkpoint, "restarting": os.path.isfile(os.path.join(run_dir, RESTART_MARK))}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(64)
    print(json.dumps(marks(sys.argv[1], sys.argv[2])))
