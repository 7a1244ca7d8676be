"""The manifest written beside a Megatron indexed dataset: how it was made, and what training must match.

``<prefix>.manifest.json`` is written by ``trainops/node/build_dataset.py`` (which imports this module from the node
package in the container, so it is standard library only) after the ``.bin``/``.idx`` pair is in place:
its presence marks a finished dataset. The planner reads it through :func:`manifest_for_plan` and :func:`epochs`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

#: Version of the manifest layout; bumped when a field changes meaning.
SCHEMA_VERSION = 1
#: Megatron tokenizer types a manifest may name.
TOKENIZER_TYPES = ("TikTokenizer", "SentencePieceTokenizer", "HuggingFaceTokenizer")
#: Reasons a line of the input is skipped (they count against max_bad_lines, except blank lines).
SKIP_REASONS = ("malformed_json", "not_an_object", "missing_key", "not_text", "empty_text", "blank_line")
#: Line numbers kept per skip reason.
FIRST_LINES_KEPT = 5

#: Top-level fields and their types; nested dicts are checked by :data:`_NESTED`.
_FIELDS = {
    "schema_version": int,
    "prefix": str,
    "builder": str,
    "created": str,
    "tokenizer": dict,
    "json_key": str,
    "documents": int,
    "tokens": int,
    "skipped": dict,
    "input": dict,
    "output": dict,
    "workers": int,
    "elapsed_s": (int, float),
    "tokens_per_s": (int, float),
    "versions": dict,
}
_NESTED = {
    "tokenizer": {
        "type": str,
        "format": str,
        "path": str,
        "model": str,
        "sha256": str,
        "vocab_size": int,
        "eod_id": int,
        "launch_ready": bool,
    },
    "input": {"path": str, "bytes": int, "sha256": str, "lines": int},
    "output": {"bin_bytes": int, "idx_bytes": int, "idx_sha256": str, "dtype": str},
    "versions": {"python": str},
}


class ManifestError(ValueError):
    """The manifest is missing, unreadable or inconsistent."""


class TokenizerMismatch(ManifestError):
    """Training was given a tokenizer other than the one the dataset was made with."""


def manifest_path(prefix: str) -> str:
    """Where the manifest of the dataset ``prefix`` (no ``.bin``/``.idx`` suffix) lies."""
    return prefix + ".manifest.json"


def skipped_record(counts: dict[str, int], first_lines: dict[str, list[int]]) -> dict:
    """The manifest's ``skipped``: total, counts per reason, and the first line numbers of each reason."""
    unknown = sorted(set(counts) - set(SKIP_REASONS))
    if unknown:
        raise ManifestError(f"unknown skip reason(s): {', '.join(unknown)}")
    return {
        "total": sum(counts.values()),
        "by_reason": {r: counts[r] for r in SKIP_REASONS if counts.get(r)},
        "first_lines": {r: sorted(first_lines.get(r, []))[:FIRST_LINES_KEPT] for r in SKIP_REASONS if counts.get(r)},
    }


def problems(manifest: object) -> list[str]:
    """Every problem of a parsed manifest (empty when it is valid)."""
    if not isinstance(manifest, dict):
        return [f"the manifest is a {type(manifest).__name__}, not a JSON object"]
    found = []
    for key, kind in _FIELDS.items():
        if key not in manifest:
            found.append(f"missing field {key!r}")
        elif not isinstance(manifest[key], kind) or isinstance(manifest[key], bool) and kind is int:
            found.append(f"field {key!r} is {manifest[key]!r}, expected {_kind_name(kind)}")
    for section, fields in _NESTED.items():
        value = manifest.get(section)
        if not isinstance(value, dict):
            continue
        for key, kind in fields.items():
            if key not in value:
                found.append(f"missing field {section}.{key}")
            elif not isinstance(value[key], kind) or isinstance(value[key], bool) and kind is int:
                found.append(f"field {section}.{key} is {value[key]!r}, expected {_kind_name(kind)}")
    if found:
        return found
    if manifest["schema_version"] != SCHEMA_VERSION:
        found.append(f"schema_version {manifest['schema_version']} is not {SCHEMA_VERSION}")
    tok = manifest["tokenizer"]
    if tok["type"] not in TOKENIZER_TYPES:
        found.append(f"tokenizer.type {tok['type']!r} is not one of {', '.join(TOKENIZER_TYPES)}")
    if tok["vocab_size"] <= 0 or not 0 <= tok["eod_id"] < tok["vocab_size"]:
        found.append(f"tokenizer.eod_id {tok['eod_id']} is outside the vocabulary (size {tok['vocab_size']})")
    for key in ("documents", "tokens", "workers"):
        if manifest[key] < 0:
            found.append(f"{key} is negative")
    if manifest["tokens"] < manifest["documents"]:
        found.append(f"tokens ({manifest['tokens']}) < documents ({manifest['documents']}): every document has an eod")
    skipped = manifest["skipped"]
    counts = skipped.get("by_reason", {})
    if not isinstance(counts, dict) or sum(counts.values()) != skipped.get("total"):
        found.append("skipped.total is not the sum of skipped.by_reason")
    elif set(counts) - set(SKIP_REASONS):
        found.append(f"unknown skip reason(s): {', '.join(sorted(set(counts) - set(SKIP_REASONS)))}")
    return found


def validate(manifest: object, where: str = "manifest") -> dict:
    """``manifest`` itself when valid; else :class:`ManifestError` listing every problem."""
    found = problems(manifest)
    if found:
        raise ManifestError(f"{where} is not a valid dataset manifest: " + "; ".join(found))
    return manifest  # type: ignore[return-value]


def loads(text: str, where: str = "manifest") -> dict:
    """Parse and validate a manifest's text."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestError(f"{where} is not JSON: {exc}") from None
    return validate(data, where)


def load(prefix_or_path: str) -> dict:
    """Read the manifest of a dataset prefix (or a ``.manifest.json`` path), with the fix when it is absent."""
    path = prefix_or_path if prefix_or_path.endswith(".manifest.json") else manifest_path(prefix_or_path)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise ManifestError(
            f"{path} does not exist: the dataset was not made by playbooks/data.yml, or its build did not finish. "
            "Build it with playbooks/data.yml"
        ) from None
    return loads(text, path)


def _same_tokenizer(given: str, tokenizer: dict) -> bool:
    given = os.path.normpath(given)
    path, model = os.path.normpath(tokenizer["path"]), os.path.normpath(tokenizer["model"])
    # the file itself, the directory passed to Megatron, or the directory holding the file
    return given in (path, model, os.path.dirname(path))


def manifest_for_plan(manifest: dict, tokenizer_path: str | None = None, tokenizer_type: str | None = None) -> dict:
    """What the planner takes from a dataset's manifest.

    ``tokenizer_type`` and ``tokenizer_path`` (the ``--tokenizer-model`` to pass), ``vocab_size``, ``eod_id``,
    ``tokens``, ``documents``. A ``tokenizer_path`` or ``tokenizer_type`` given to training that differs from the
    manifest's raises :class:`TokenizerMismatch`; a dataset whose tokenizer Megatron cannot load raises
    :class:`ManifestError`. Paths are compared as text (they live in the containers, not here)."""
    validate(manifest, manifest.get("prefix", "manifest") if isinstance(manifest, dict) else "manifest")
    tok = manifest["tokenizer"]
    made_with = f"{tok['type']} {tok['path']} (sha256 {tok['sha256'][:12]}…)"
    if tokenizer_path and not _same_tokenizer(tokenizer_path, tok):
        raise TokenizerMismatch(
            f"dataset {manifest['prefix']} was tokenized with {made_with}, but training was given "
            f"tokenizer_path={tokenizer_path}. Omit tokenizer_path to use the manifest's, or rebuild the dataset "
            f"with playbooks/data.yml -e tokenizer={tokenizer_path}"
        )
    if tokenizer_type and tokenizer_type != tok["type"]:
        raise TokenizerMismatch(
            f"dataset {manifest['prefix']} was tokenized with {made_with}, but training was given "
            f"tokenizer_type={tokenizer_type}. Omit tokenizer_type to use the manifest's ({tok['type']})"
        )
    if not tok["launch_ready"]:
        raise ManifestError(
            f"dataset {manifest['prefix']} was tokenized with {made_with}, which Megatron cannot load to train: "
            f"{tok.get('note', '')}. Put the matching Hugging Face tokenizer.json beside it and rebuild"
        )
    return {
        "tokenizer_type": tok["type"],
        "tokenizer_path": tok["model"],
        "vocab_size": tok["vocab_size"],
        "eod_id": tok["eod_id"],
        "tokens": manifest["tokens"],
        "documents": manifest["documents"],
    }


def epochs(tokens_per_iteration: int, train_iters: int, dataset_tokens: int) -> float:
    """How many passes over the dataset a run makes: ``tokens_per_iteration * train_iters / dataset_tokens``.

    ``tokens_per_iteration`` is global batch size x sequence length."""
    if dataset_tokens <= 0:
        raise ManifestError(f"the dataset has {dataset_tokens} tokens: nothing to train on")
    if tokens_per_iteration < 0 or train_iters < 0:
        raise ManifestError("tokens_per_iteration and train_iters must not be negative")
    return tokens_per_iteration * train_iters / dataset_tokens


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(
        {"int": "an integer", "float": "a number", "str": "a string", "dict": "an object"}.get(k.__name__, k.__name__)
        for k in kinds
    )


def written_size_problems(node: str, data_path: str, sizes: Mapping[str, Any], output: Any) -> list[str]:
    """Where a node's ``.bin``/``.idx`` are not the sizes its manifest says data.yml wrote (``output``: the
    manifest's ``output`` part, ``bin_bytes`` and ``idx_bytes``; None: no manifest, nothing to compare), each naming
    the node, the file, both sizes and the fix: a copy that did not finish, or data made again without its manifest."""
    if not isinstance(output, Mapping):
        return []
    problems = []
    for suffix, key in ((".bin", "bin_bytes"), (".idx", "idx_bytes")):
        path, expected = data_path + suffix, output.get(key)
        found = sizes.get(path)
        if isinstance(expected, int) and found is not None and found != expected:
            problems.append(
                f"{node}: {path} is {found:,} bytes, but its manifest ({data_path}.manifest.json) says data.yml "
                f"wrote {expected:,}: a copy that did not finish, or another dataset under the same prefix; copy "
                "the .bin/.idx and the manifest again from one source (or run playbooks/data.yml)"
            )
    return problems


def size_mismatch(sizes_by_node: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The files whose size differs between nodes, each as ``path: node1=SIZE node2=SIZE`` (``?``: missing); a node
    not measured (no sizes: left out of the run, or a spare) is not compared."""
    sizes_by_node = {node: sizes for node, sizes in sizes_by_node.items() if sizes}
    paths = list(dict.fromkeys(path for sizes in sizes_by_node.values() for path in (sizes or {})))
    lines = []
    for path in paths:
        seen = [(sizes or {}).get(path) for sizes in sizes_by_node.values()]
        if len(set(map(str, seen))) > 1:
            shown = " ".join(
                f"{node}={'?' if (sizes or {}).get(path) is None else sizes[path]}"
                for node, sizes in sizes_by_node.items()
            )
            lines.append(f"{path}: {shown}")
    return lines
