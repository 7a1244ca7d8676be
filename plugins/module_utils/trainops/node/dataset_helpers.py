"""In the training container: Megatron-LM's dataset helpers (megatron/core/datasets/helpers_cpp), built when they
do not import, as the vendor's launch script does.

    python3 dataset_helpers.py --megatron-home /home/Megatron-LM --mode build|check

Megatron core 0.14 compiles the helpers at start-up on rank 0 (initialize.py's _compile_dependencies), but the
vendor's musa_patch makes that step a no-op, and its script runs ``python setup.py build_ext --inplace`` in the
Megatron tree instead. Without the helpers, the first run on real data fails to import them. This program
checks the import from the tree (the launch's PYTHONPATH puts the tree first); with --mode build it builds them when the
import fails (setup.py's build_ext --inplace, else the tree's make -C megatron/core/datasets) and checks again.
Prints one JSON object: tree (the tree has a megatron package), importable, built (this call built them), seconds,
module (the file that imported) and error (what failed, with the build's last lines).
"""

import argparse
import json
import os
import subprocess
import sys
import time

#: run with the tree as the launch runs (cwd and PYTHONPATH the tree): prints the module's file. megatron.core is
#: registered unexecuted (as smoke_train.py does): its __init__ imports torch and the model stack, seconds of CPU that
#: the helpers, a pybind11 module under an empty datasets/__init__.py, do not need.
CHECK = """
import importlib.util, os, sys
spec = importlib.util.find_spec("megatron.core")
if spec is not None:
    sys.modules["megatron.core"] = importlib.util.module_from_spec(spec)
import megatron.core.datasets.helpers_cpp as helpers
tree, path = os.path.realpath(sys.argv[1]), os.path.realpath(helpers.__file__)
print(path)
if not path.startswith(tree + os.sep):
    sys.exit(f"the helpers import from {path}, not from the tree {tree}")
"""


def importable(tree: str) -> tuple[bool, str]:
    """Whether the tree's helpers import, as the launch imports them (the tree first on the path); the module's
    file, or the error's last line."""
    env = dict(os.environ, PYTHONPATH=tree, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHECK, tree], cwd=tree, env=env, capture_output=True, text=True
    )
    if done.returncode == 0:
        return True, done.stdout.strip()
    lines = (done.stderr or done.stdout).strip().splitlines()
    return False, lines[-1] if lines else f"exit status {done.returncode}"


def build(tree: str) -> tuple[bool, str]:
    """Build the helpers in place; whether the build ran without error, and its last lines."""
    if os.path.isfile(os.path.join(tree, "setup.py")):
        command = [sys.executable, "setup.py", "build_ext", "--inplace"]
    else:
        command = ["make", "-C", os.path.join(tree, "megatron", "core", "datasets")]
    try:
        done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    except OSError as exc:
        return False, f"{' '.join(command)}: {exc}"
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
    return done.returncode == 0, f"{' '.join(command)} (exit status {done.returncode}): {tail}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megatron-home", required=True)
    parser.add_argument("--mode", choices=("build", "check"), default="check")
    args = parser.parse_args(argv)
    tree = args.megatron_home.rstrip("/") or "/"
    result = {"tree": os.path.isdir(os.path.join(tree, "megatron")), "importable": False, "built": False}
    result.update(seconds=0.0, module="", error="")
    if not result["tree"]:
        result["error"] = f"no Megatron-LM tree at {tree} (no {tree}/megatron)"
        print(json.dumps(result))
        return 0
    ok, detail = importable(tree)
    if not ok and args.mode == "build":
        started = time.monotonic()
        built, log = build(tree)
        result["seconds"] = round(time.monotonic() - started, 1)
        ok, detail = importable(tree)
        result["built"] = ok
        if not ok:
            detail = f"{detail}; the build: {log}" if built else f"the build failed: {log}"
    result["importable"] = ok
    result["module" if ok else "error"] = detail
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
