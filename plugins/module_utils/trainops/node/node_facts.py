"""Run in a training container by roles/health_check: print, as one JSON object, the facts the quick
health check judges on the controller (trainops.health): the device tool's full query, the software stack and the
free space where checkpoints go. It only reads; it changes nothing. Standard library only."""

import argparse
import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata

#: The device tool's query forms, fullest first: a form that fails (an older driver) gives way to the next.
QUERIES = {
    "mthreads-gmi": [["mthreads-gmi", "-q", "-j"], ["mthreads-gmi", "-q"], ["mthreads-gmi"]],
    "nvidia-smi": [["nvidia-smi", "-q"]],
}
PACKAGES = {
    "torch": ("torch",),
    "torch_musa": ("torch_musa", "torch-musa"),
    "nccl": ("nvidia-nccl-cu12", "nvidia-nccl-cu11", "mccl"),
}


def device_query(tool, timeout=60):
    """The fullest query form of ``tool`` that answers: ``{"rc", "output", "argv"}`` (also the card exporter's)."""
    last = {"rc": 127, "output": f"{tool}: not found", "argv": []}
    for argv in QUERIES.get(tool, [[tool, "-q"]]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            last = {"rc": 127, "output": str(exc), "argv": argv}
            continue
        output = done.stdout if done.returncode == 0 else (done.stderr or done.stdout)
        last = {"rc": done.returncode, "output": output, "argv": argv}
        if done.returncode == 0 and output.strip():
            if argv[1:] == ["-q", "-j"] and not output.lstrip().startswith("{"):
                continue
            return last
    return last


def version(names):
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def tree_digest(home):
    """A digest of the Python sources under ``home`` (the Megatron-LM tree the job imports), and their count."""
    if not home or not os.path.isdir(home):
        return None
    digest, count = hashlib.sha256(), 0
    for root, dirs, files in os.walk(home):
        dirs[:] = sorted(d for d in dirs if d not in (".git", "__pycache__"))
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, home).encode() + b"\0")
                with open(path, "rb") as f:
                    digest.update(f.read())
                count += 1
    return f"{digest.hexdigest()[:12]} ({count} files)"


def free_space(path):
    probe = path
    while probe and not os.path.isdir(probe):
        probe = os.path.dirname(probe.rstrip("/")) or "/"
    try:
        st = os.statvfs(probe)
    except OSError as exc:
        return {"error": f"{path}: {exc}"}
    free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    return {"path": probe, "for": path, "free_bytes": free, "total_bytes": total}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device-tool", default="")
    parser.add_argument("--megatron-home", default="")
    parser.add_argument("--disk-path", required=True)
    args = parser.parse_args()
    stack = {key: version(names) for key, names in PACKAGES.items()}
    stack["python"] = platform.python_version()
    stack["megatron"] = tree_digest(args.megatron_home)
    facts = {"stack": stack, "disk": free_space(args.disk_path)}
    if args.device_tool:
        facts["device_query"] = device_query(args.device_tool)
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
