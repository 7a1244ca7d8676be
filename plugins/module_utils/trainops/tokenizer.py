"""Which Megatron tokenizer type a tokenizer file is.

Llama 3's ``tokenizer.model`` is a tiktoken BPE file (lines of
``<base64 token> <rank>``), not a SentencePiece model, although both are
usually named ``tokenizer.model``: the vendor runbook's mistake 4. This looks
at the content, never at the name.
"""

from __future__ import annotations

import base64
import binascii
import json
import os

TYPES = ("TikTokenizer", "SentencePieceTokenizer", "HuggingFaceTokenizer")


class TokenizerFormatError(ValueError):
    """The file is none of the known tokenizer formats."""


def detect_tokenizer_type(path: str) -> str:
    """Return the Megatron ``--tokenizer-type`` for the file or directory at ``path``."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "tokenizer.json")):
            return "HuggingFaceTokenizer"
        for name in ("tokenizer.model", "tokenizer.tiktoken"):
            inner = os.path.join(path, name)
            if os.path.isfile(inner):
                return detect_tokenizer_type(inner)
        raise TokenizerFormatError(f"{path}: directory has no tokenizer.json or tokenizer.model")
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if not head:
        raise TokenizerFormatError(f"{path}: file is empty")
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (ValueError, UnicodeDecodeError) as exc:
            raise TokenizerFormatError(f"{path}: starts like JSON but does not parse: {exc}") from None
        if isinstance(data, dict) and "model" in data:
            return "HuggingFaceTokenizer"
        raise TokenizerFormatError(f"{path}: JSON without a 'model' key is not a tokenizer.json")
    if _looks_like_tiktoken(head):
        return "TikTokenizer"
    if head[:1] == b"\x0a":  # protobuf field 1 (pieces), length-delimited
        return "SentencePieceTokenizer"
    raise TokenizerFormatError(f"{path}: neither a tiktoken BPE file, a SentencePiece model nor a tokenizer.json")


def _looks_like_tiktoken(head: bytes) -> bool:
    lines = head.split(b"\n")[:-1] or head.split(b"\n")
    checked = 0
    for line in lines[:20]:
        if not line:
            continue
        parts = line.split(b" ")
        if len(parts) != 2 or not parts[1].isdigit():
            return False
        try:
            base64.b64decode(parts[0], validate=True)
        except (binascii.Error, ValueError):
            return False
        checked += 1
    return checked > 0
