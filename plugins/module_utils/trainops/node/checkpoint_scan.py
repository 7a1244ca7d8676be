"""Read, and on request tidy, an experiment's checkpoint directory (mtt-train-ops, role checkpoints); run in the
training container, with nothing but Python's standard library (no torch: a scan must cost the run nothing).

    checkpoint_scan.py scan DIR [--skip N,M] [--args] [--legacy OLD]   # print the listing (JSON) the controller judges
    checkpoint_scan.py adopt OLD DIR                  # move the old-style directory OLD to DIR (nothing if OLD is gone)
    checkpoint_scan.py resume DIR --tag T [--tracker N] [--set-aside iter_0000010 ...]
    checkpoint_scan.py apply DIR < {"remove": ["iter_0000005", ...], "ledger": {...}, "ledger_path": PATH}

``scan``: for every ``iter_NNNNNNN/``: its files (relative path -> size), for torch_dist the bytes each shard file
must hold by its own ``.metadata`` (``needed``: file -> the end of its last item; ``index_error`` when the index
cannot be read), a fingerprint of sampled bytes of its data files, and its mtime; with the tracker's text, the free
bytes of the file system (of the nearest directory that exists), and what was set aside before. ``--skip`` lists
those iterations (already judged) by name alone, ``"partial": true``. ``--args``: the newest save's ``args``, the
arguments Megatron recorded in it (``common.pt``, or a legacy save's ``mp_rank_*/model_optim_rng.pt``), as JSON,
read from the file's pickle alone (no torch; tensors are not read), or ``args_error``. ``--legacy OLD``: when DIR
holds no save and no tracker and OLD (the directory's name before the model joined it) exists, OLD is listed
instead, with ``"legacy_of": DIR``; ``adopt`` then moves it to DIR (docs/checkpoints.md).

``resume``: moves each named save to ``DIR/set-aside/<name>.<T>`` (kept, never deleted), then writes the tracker
(``latest_checkpointed_iteration.txt``) as N, whole, then renamed into place. ``apply``: removes the saves that
retention let go (never the tracker's), and writes the run's ledger. Both print what they did, as JSON.
"""

from __future__ import annotations

import argparse
import builtins
import collections
import copyreg
import hashlib
import json
import os
import pickle
import re
import shutil
import sys
import zipfile

TRACKER = "latest_checkpointed_iteration.txt"
SET_ASIDE = "set-aside"
ITER = re.compile(r"^iter_(\d{7,})$")
#: Sampled bytes: this many pieces of each data file, each this long, spread evenly through it.
SAMPLES, SAMPLE_BYTES = 16, 4096
DATA_SUFFIXES = (".distcp", ".pt")


class _Stub:
    """Any class of torch's checkpoint index, without torch: keeps what it was made with."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs, self.state = args, kwargs, {}

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            merged = dict(state[0] or {})
            merged.update(state[1] or {})
            state = merged
        self.state = state if isinstance(state, dict) else {"value": state}

    def __hash__(self):
        return id(self)

    def __call__(self, *args, **kwargs):
        return _Stub(*args, **kwargs)


_SAFE = {("collections", "OrderedDict"): collections.OrderedDict, ("copyreg", "_reconstructor"): copyreg._reconstructor}


class _IndexUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module == "builtins" and name in ("set", "frozenset", "tuple", "list", "dict", "slice", "complex"):
            return getattr(builtins, name)
        if (module, name) in _SAFE:
            return _SAFE[(module, name)]
        return type(name, (_Stub,), {"__module__": module})


class _ArgsUnpickler(_IndexUnpickler):
    """torch.save's pickle without torch: argparse's Namespace as itself, tensors' storages as stubs (unread)."""

    def find_class(self, module, name):
        if (module, name) == ("argparse", "Namespace"):
            return argparse.Namespace
        return super().find_class(module, name)

    def persistent_load(self, pid):
        return _Stub(pid)


def _plain(value, depth=0):
    """JSON's values for what a Namespace holds: a torch dtype or enum as its name, anything else as text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > 4:
        return repr(value)[:200]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, type):
        return f"{value.__module__}.{value.__name__}"
    if isinstance(value, _Stub):
        name = f"{type(value).__module__}.{type(value).__name__}"
        return f"{name}({', '.join(str(_plain(a, depth + 1)) for a in value.args)})" if value.args else name
    return repr(value)[:200]


def saved_args(path):
    """The ``args`` Megatron recorded in a save's ``common.pt`` (torch.save's zip: only its ``data.pkl`` is read),
    and the learning-rate scheduler's state (``opt_param_scheduler``, what Megatron compares on load; None when the
    save has none)."""
    with zipfile.ZipFile(path) as archive:
        name = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if name is None:
            raise ValueError("no data.pkl in the archive")
        with archive.open(name) as handle:
            state = _ArgsUnpickler(handle).load()
    args = state.get("args") if isinstance(state, dict) else None
    if args is None:
        raise ValueError("no 'args' in the saved state")
    scheduler = state.get("opt_param_scheduler")
    return (
        {key: _plain(value) for key, value in sorted(vars(args).items())},
        _plain(scheduler) if isinstance(scheduler, dict) else None,
    )


def args_file(path, files):
    """The file of a save that records Megatron's arguments: ``common.pt`` (torch_dist), or the first rank's."""
    if "common.pt" in files:
        return os.path.join(path, "common.pt")
    ranks = sorted(n for n in files if n.startswith("mp_rank_") and n.endswith("model_optim_rng.pt"))
    return os.path.join(path, ranks[0]) if ranks else None


def needed_bytes(metadata_path):
    """torch_dist's ``.metadata``: each shard file's size as its items' storage info says (offset + length)."""
    with open(metadata_path, "rb") as handle:
        index = _IndexUnpickler(handle).load()
    storage = getattr(index, "state", {}).get("storage_data")
    if not isinstance(storage, dict):
        raise ValueError("no storage_data in the index")
    need = {}
    for info in storage.values():
        state = getattr(info, "state", {})
        path, offset, length = state.get("relative_path"), state.get("offset"), state.get("length")
        if not isinstance(path, str) or not isinstance(offset, int) or not isinstance(length, int):
            raise ValueError("a storage entry without relative_path, offset and length")
        need[path] = max(need.get(path, 0), offset + length)
    return need


def fingerprint(directory, files):
    """sha256 over sampled pieces of every data file (sorted by name): equal only for equal tensor bytes there."""
    digest = hashlib.sha256()
    for name in sorted(files):
        if not name.endswith(DATA_SUFFIXES) or files[name] == 0:
            continue
        size = files[name]
        digest.update(f"{name}:{size}".encode())
        with open(os.path.join(directory, name), "rb") as handle:
            for k in range(SAMPLES):
                handle.seek(size * k // SAMPLES)
                digest.update(handle.read(SAMPLE_BYTES))
    return digest.hexdigest()[:32]


def read_save(directory, name):
    path = os.path.join(directory, name)
    files = {}
    for root, _, names in os.walk(path):
        for each in names:
            full = os.path.join(root, each)
            files[os.path.relpath(full, path)] = os.path.getsize(full)
    save = {"name": name, "iteration": int(ITER.match(name).group(1)), "files": files,
            "mtime": round(os.path.getmtime(path), 1)}  # fmt: skip
    if ".metadata" in files:
        try:
            save["needed"] = needed_bytes(os.path.join(path, ".metadata"))
        except Exception as exc:  # noqa: BLE001 - any unreadable index is a finding, named
            save["index_error"] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        save["fingerprint"] = fingerprint(path, files)
    except OSError as exc:
        save["fingerprint"] = None
        save["read_error"] = str(exc)
    return save


def with_args(listing):
    """The listing with the newest (fully read) save's ``args`` (and ``scheduler``), or its ``args_error``."""
    for save in sorted(listing["saves"], key=lambda s: -s["iteration"]):
        if save.get("partial"):
            continue
        path = os.path.join(listing["dir"], save["name"])
        found = args_file(path, save.get("files") or {})
        if found is None:
            continue
        try:
            save["args"], scheduler = saved_args(found)
            if scheduler is not None:
                save["scheduler"] = scheduler
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a finding, named
            save["args_error"] = f"{os.path.relpath(found, path)}: {type(exc).__name__}: {exc}"[:300]
        break
    return listing


def scan_for_resume(directory, read_args=False, legacy=None):
    """``scan``, with the saved arguments (``--args``) and the old-style directory (``--legacy``)."""
    out = scan(directory)
    if legacy and legacy != directory and not out["saves"] and out["tracker"] is None and os.path.isdir(legacy):
        out = dict(scan(legacy), legacy_of=directory)
    return with_args(out) if read_args else out


def adopt(old, directory):
    """Move the old-style directory to the experiment's: whole when the new one is not there, else entry by entry
    (the new one holds only what a launch made before it saved, such as data-cache/); nothing when ``old`` is gone
    (a peer on shared storage moved it)."""
    if not os.path.isdir(old):
        return {"moved": [], "from": old, "to": directory}
    if not os.path.exists(directory):
        os.makedirs(os.path.dirname(directory) or ".", exist_ok=True)
        os.replace(old, directory)
        return {"moved": [old], "from": old, "to": directory}
    moved = []
    for name in sorted(os.listdir(old)):
        target = os.path.join(directory, name)
        if not os.path.exists(target):
            os.replace(os.path.join(old, name), target)
            moved.append(name)
    if not os.listdir(old):
        os.rmdir(old)
    return {"moved": moved, "from": old, "to": directory}


def scan(directory, skip=()):
    out = {"dir": directory, "exists": os.path.isdir(directory), "tracker": None, "saves": [], "set_aside": []}
    existing = directory
    while not os.path.isdir(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    stat = os.statvfs(existing)
    out["free_bytes"] = stat.f_bavail * stat.f_frsize
    if not out["exists"]:
        return out
    try:
        with open(os.path.join(directory, TRACKER), encoding="utf-8") as handle:
            out["tracker"] = handle.read().strip()
    except OSError:
        pass
    for name in sorted(os.listdir(directory)):
        if not ITER.match(name) or not os.path.isdir(os.path.join(directory, name)):
            continue
        iteration = int(ITER.match(name).group(1))
        if iteration in skip:
            out["saves"].append({"name": name, "iteration": iteration, "partial": True})
            continue
        try:
            out["saves"].append(read_save(directory, name))
        except FileNotFoundError:  # removed while read (retention, a new save replacing it): not there
            continue
    aside = os.path.join(directory, SET_ASIDE)
    if os.path.isdir(aside):
        out["set_aside"] = sorted(os.listdir(aside))
    return out


def write_tracker(directory, iteration):
    path = os.path.join(directory, TRACKER)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(f"{iteration}\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(path + ".tmp", path)


def resume(directory, tag, tracker, names):
    moved = []
    for name in names:
        if not ITER.match(name):
            raise SystemExit(f"checkpoint_scan.py: {name!r} is not a save's name (iter_NNNNNNN)")
        source = os.path.join(directory, name)
        if os.path.isdir(source):
            os.makedirs(os.path.join(directory, SET_ASIDE), exist_ok=True)
            target = os.path.join(directory, SET_ASIDE, f"{name}.{tag}")
            os.replace(source, target)
            moved.append(target)
    if tracker is not None:
        write_tracker(directory, tracker)
    return {"moved": moved, "tracker": tracker}


def apply(directory, request):
    removed = []
    try:
        with open(os.path.join(directory, TRACKER), encoding="utf-8") as handle:
            keep = handle.read().strip()
    except OSError:
        keep = None
    for name in request.get("remove") or []:
        match = ITER.match(name)
        if not match or (keep is not None and keep.isdigit() and int(match.group(1)) == int(keep)):
            continue  # never anything but a save, never the tracker's
        path = os.path.join(directory, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
            removed.append(name)
    if request.get("ledger_path"):
        path = request["ledger_path"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(request.get("ledger"), handle, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)
    return {"removed": removed}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="checkpoint_scan.py")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("scan")
    one.add_argument("dir")
    one.add_argument("--skip", default="")
    one.add_argument("--args", action="store_true", help="read the newest save's recorded arguments")
    one.add_argument("--legacy", default=None, help="the old-style directory, listed when DIR holds no save")
    four = sub.add_parser("adopt")
    four.add_argument("old")
    four.add_argument("dir")
    two = sub.add_parser("resume")
    two.add_argument("dir")
    two.add_argument("--tag", required=True)
    two.add_argument("--tracker", type=int, default=None)
    two.add_argument("--set-aside", nargs="*", default=[])
    three = sub.add_parser("apply")
    three.add_argument("dir")
    args = parser.parse_args(argv)
    if args.command == "scan" and (args.args or args.legacy):
        result = scan_for_resume(args.dir, args.args, args.legacy)
    elif args.command == "scan":
        result = scan(args.dir, {int(x) for x in args.skip.split(",") if x.strip()})
    elif args.command == "adopt":
        result = adopt(args.old, args.dir)
    elif args.command == "resume":
        result = resume(args.dir, args.tag, args.tracker, args.set_aside)
    else:
        result = apply(args.dir, json.load(sys.stdin))
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
