"""Tokenizer detection looks at the content, never the name, and maps to what Megatron 0.14 can read."""

from __future__ import annotations

import base64
import json

import pytest
from presets import load_preset
from trainops.errors import PlanError
from trainops.plan import make_plan
from trainops.tokenizer import TokenizerFormatError, detect_format, megatron_tokenizer

TOKENS = [b"a", b"b", b"ab", b" the"]


def write_tiktoken(path):
    path.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate(TOKENS)))


def test_tiktoken_named_tokenizer_model_is_not_sentencepiece(tmp_path):
    path = tmp_path / "tokenizer.model"
    write_tiktoken(path)
    assert detect_format(str(path)) == "tiktoken-bpe"


def test_tiktoken_alone_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "tokenizer.model"
    write_tiktoken(path)
    with pytest.raises(TokenizerFormatError, match="Hugging Face tokenizer directory"):
        megatron_tokenizer(str(path))


def test_tiktoken_beside_tokenizer_json_uses_huggingface(tmp_path):
    (tmp_path / "original").mkdir()
    path = tmp_path / "tokenizer.model"
    write_tiktoken(path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    assert megatron_tokenizer(str(path))[:2] == ("HuggingFaceTokenizer", str(tmp_path))


def test_sentencepiece_protobuf(tmp_path):
    path = tmp_path / "tokenizer.model"
    path.write_bytes(b"\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02")
    assert megatron_tokenizer(str(path))[:2] == ("SentencePieceTokenizer", str(path))


def test_huggingface_file_and_directory(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    assert megatron_tokenizer(str(tmp_path / "tokenizer.json"))[:2] == ("HuggingFaceTokenizer", str(tmp_path))
    assert megatron_tokenizer(str(tmp_path))[:2] == ("HuggingFaceTokenizer", str(tmp_path))


def test_megatron_tiktoken_json(tmp_path):
    vocab = [{"rank": i, "token_bytes": base64.b64encode(t).decode(), "token_str": ""} for i, t in enumerate(TOKENS)]
    path = tmp_path / "vocab.json"
    path.write_text(json.dumps(vocab))
    assert megatron_tokenizer(str(path))[0] == "TikTokenizer"


@pytest.mark.parametrize("content", [b"", b"hello world\n", b'{"no": "model"}'])
def test_garbage_is_a_clear_error(tmp_path, content):
    path = tmp_path / "tok"
    path.write_bytes(content)
    with pytest.raises(TokenizerFormatError, match=str(path)):
        detect_format(str(path))


def test_plan_uses_the_detected_tokenizer(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}}))
    hosts = [{"name": "n1", "ansible_host": "10.0.0.1", "slots": 8}]
    plan = make_plan(
        model=load_preset("llama3-8b"),
        hosts=hosts,
        layout={},
        run_id="r",
        tokenizer_path=str(tmp_path / "tokenizer.json"),
    )
    args = plan["megatron_args"]
    assert args[args.index("--tokenizer-type") + 1] == "HuggingFaceTokenizer"
    assert args[args.index("--tokenizer-model") + 1] == str(tmp_path)
    bad = tmp_path / "lonely"
    bad.mkdir()
    write_tiktoken(bad / "tokenizer.model")
    with pytest.raises(PlanError, match="tiktoken BPE file"):
        make_plan(
            model=load_preset("llama3-8b"),
            hosts=hosts,
            layout={},
            run_id="r",
            tokenizer_path=str(bad / "tokenizer.model"),
        )
