"""The dataset manifest: schema, reading, what the planner takes from it, epochs."""

from __future__ import annotations

import copy
import json

import pytest
from trainops.dataset_manifest import (
    ManifestError,
    TokenizerMismatch,
    epochs,
    load,
    manifest_for_plan,
    manifest_path,
    problems,
    skipped_record,
    validate,
)

GOOD = {
    "schema_version": 1,
    "prefix": "/data/datasets/llama3",
    "builder": "mtt-train-ops jobs/build_dataset.py",
    "created": "2025-01-01T00:00:00+00:00",
    "tokenizer": {
        "type": "HuggingFaceTokenizer",
        "format": "tiktoken-bpe",
        "path": "/data/llama3-tokenizer/tokenizer.model",
        "model": "/data/llama3-tokenizer",
        "sha256": "ab" * 32,
        "vocab_size": 128256,
        "eod_id": 128001,
        "eod_token": "<|end_of_text|>",
        "launch_ready": True,
        "note": "",
    },
    "json_key": "text",
    "documents": 10,
    "tokens": 1000,
    "skipped": {"total": 2, "by_reason": {"malformed_json": 2}, "first_lines": {"malformed_json": [3, 9]}},
    "input": {"path": "/data/x.jsonl", "bytes": 5000, "sha256": "cd" * 32, "lines": 12},
    "output": {"bin_bytes": 4000, "idx_bytes": 200, "idx_sha256": "ef" * 32, "dtype": "int32"},
    "workers": 2,
    "elapsed_s": 1.5,
    "tokens_per_s": 666,
    "versions": {"python": "3.11.2", "numpy": "2.4.6", "megatron_core": "0.16.1", "tiktoken": "0.14.0"},
}


def test_a_good_manifest_validates_and_round_trips(tmp_path):
    assert problems(GOOD) == []
    path = tmp_path / "ds.manifest.json"
    path.write_text(json.dumps(GOOD))
    assert load(str(tmp_path / "ds")) == GOOD
    assert load(str(path)) == GOOD
    assert manifest_path("/a/b") == "/a/b.manifest.json"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda m: m.pop("tokens"), "missing field 'tokens'"),
        (lambda m: m["tokenizer"].pop("eod_id"), "missing field tokenizer.eod_id"),
        (lambda m: m.update(documents="10"), "field 'documents' is '10', expected an integer"),
        (lambda m: m["tokenizer"].update(type="GPT2BPETokenizer"), "tokenizer.type 'GPT2BPETokenizer'"),
        (lambda m: m["tokenizer"].update(eod_id=128256), "outside the vocabulary"),
        (lambda m: m.update(tokens=5), "every document has an eod"),
        (lambda m: m["skipped"].update(total=3), "skipped.total"),
        (lambda m: m.update(schema_version=2), "schema_version 2"),
        (lambda m: m.update(workers=True), "field 'workers' is True"),
    ],
)
def test_each_problem_is_named(change, expected):
    bad = copy.deepcopy(GOOD)
    change(bad)
    with pytest.raises(ManifestError, match="not a valid dataset manifest") as info:
        validate(bad)
    assert expected in str(info.value)


def test_missing_and_garbage_manifests_say_what_to_do(tmp_path):
    with pytest.raises(ManifestError, match="Build it with playbooks/data.yml"):
        load(str(tmp_path / "none"))
    (tmp_path / "x.manifest.json").write_text("{not json")
    with pytest.raises(ManifestError, match="is not JSON"):
        load(str(tmp_path / "x"))
    assert problems([1]) == ["the manifest is a list, not a JSON object"]


def test_skipped_record_counts_and_keeps_the_first_lines():
    record = skipped_record({"empty_text": 7, "malformed_json": 1}, {"empty_text": [9, 1, 2, 3, 4, 5, 6]})
    assert record == {
        "total": 8,
        "by_reason": {"malformed_json": 1, "empty_text": 7},
        "first_lines": {"malformed_json": [], "empty_text": [1, 2, 3, 4, 5]},
    }
    with pytest.raises(ManifestError, match="unknown skip reason"):
        skipped_record({"cosmic_ray": 1}, {})


def test_manifest_for_plan_gives_the_launch_tokenizer():
    plan = manifest_for_plan(GOOD)
    assert plan == {
        "tokenizer_type": "HuggingFaceTokenizer",
        "tokenizer_path": "/data/llama3-tokenizer",
        "vocab_size": 128256,
        "eod_id": 128001,
        "tokens": 1000,
        "documents": 10,
    }
    # the file, its directory (also the HF directory), with or without a trailing slash
    for same in ("/data/llama3-tokenizer/tokenizer.model", "/data/llama3-tokenizer", "/data/llama3-tokenizer/"):
        assert manifest_for_plan(GOOD, same)["tokenizer_type"] == "HuggingFaceTokenizer"
    assert manifest_for_plan(GOOD, None, "HuggingFaceTokenizer")["vocab_size"] == 128256


def test_a_different_tokenizer_is_a_clear_error():
    with pytest.raises(TokenizerMismatch, match=r"tokenized with HuggingFaceTokenizer /data/llama3-tokenizer/tok"):
        manifest_for_plan(GOOD, "/data/other-tokenizer/tokenizer.model")
    with pytest.raises(TokenizerMismatch, match="rebuild the dataset with playbooks/data.yml -e tokenizer=/x"):
        manifest_for_plan(GOOD, "/x")
    with pytest.raises(TokenizerMismatch, match="tokenizer_type=SentencePieceTokenizer"):
        manifest_for_plan(GOOD, None, "SentencePieceTokenizer")
    assert issubclass(TokenizerMismatch, ValueError)


def test_a_tokenizer_megatron_cannot_load_is_refused():
    bare = copy.deepcopy(GOOD)
    bare["tokenizer"].update(type="TikTokenizer", model=bare["tokenizer"]["path"], launch_ready=False, note="why")
    with pytest.raises(ManifestError, match="cannot load to train: why"):
        manifest_for_plan(bare)


def test_epochs():
    # Llama3-8B, gbs 512 x seq 4096 for 1000 iterations over a 1B-token dataset
    assert epochs(512 * 4096, 1000, 10**9) == pytest.approx(2.097152)
    assert epochs(0, 1000, 10) == 0
    with pytest.raises(ManifestError, match="nothing to train on"):
        epochs(1, 1, 0)
    with pytest.raises(ManifestError, match="negative"):
        epochs(-1, 1, 1)
