"""Tokenizer format detection looks at the content, never the name."""

from __future__ import annotations

import base64
import json

import pytest
from trainops.tokenizer import TokenizerFormatError, detect_tokenizer_type


def test_tiktoken_named_tokenizer_model(tmp_path):
    path = tmp_path / "tokenizer.model"
    path.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate([b"a", b"b", b"ab", b" the"])))
    assert detect_tokenizer_type(str(path)) == "TikTokenizer"


def test_sentencepiece_protobuf(tmp_path):
    path = tmp_path / "tokenizer.model"
    path.write_bytes(b"\x0a\x0b\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02")
    assert detect_tokenizer_type(str(path)) == "SentencePieceTokenizer"


def test_huggingface_file_and_directory(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE"}}))
    assert detect_tokenizer_type(str(tmp_path / "tokenizer.json")) == "HuggingFaceTokenizer"
    assert detect_tokenizer_type(str(tmp_path)) == "HuggingFaceTokenizer"


@pytest.mark.parametrize("content", [b"", b"hello world\n", b'{"no": "model"}'])
def test_garbage_is_a_clear_error(tmp_path, content):
    path = tmp_path / "tok"
    path.write_bytes(content)
    with pytest.raises(TokenizerFormatError, match=str(path)):
        detect_tokenizer_type(str(path))
