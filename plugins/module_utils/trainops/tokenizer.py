"""What a tokenizer file is, and how Megatron-LM must be told to read it.

Llama 3's ``tokenizer.model`` is a tiktoken BPE file (lines of
``<base64 token> <rank>``), not a SentencePiece model, although both are
usually named ``tokenizer.model`` (the vendor runbook's mistake 4). This module
looks at the content, never at the name.

Megatron-LM core 0.14 reads the formats as follows
(``megatron/training/tokenizer/tokenizer.py``):

* ``SentencePieceTokenizer``: a SentencePiece model;
* ``HuggingFaceTokenizer``: a Hugging Face directory (``tokenizer.json``), via
  ``transformers.AutoTokenizer``;
* ``TikTokenizer``: Megatron's own tiktoken *JSON* vocabulary (a list of
  ``{rank, token_bytes, token_str}``; ``reload_mergeable_ranks`` asserts the
  ``.json`` suffix). It cannot read Llama 3's base64 ``tokenizer.model``.

So a tiktoken BPE file is used through the Hugging Face directory beside it
(Llama 3 checkouts ship ``tokenizer.json`` there), and refused with the fix
when there is none.
"""

from __future__ import annotations

import base64
import binascii
import json
import os

TYPES = ("TikTokenizer", "SentencePieceTokenizer", "HuggingFaceTokenizer")
FORMATS = ("tiktoken-bpe", "megatron-tiktoken-json", "sentencepiece", "huggingface")


class TokenizerFormatError(ValueError):
    """The file is none of the known tokenizer formats, or Megatron cannot read it."""


def detect_format(path: str) -> str:
    """One of :data:`FORMATS` for the file or directory at ``path``."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, "tokenizer.json")):
            return "huggingface"
        raise TokenizerFormatError(f"{path}: directory has no tokenizer.json")
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if not head:
        raise TokenizerFormatError(f"{path}: file is empty")
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (ValueError, UnicodeDecodeError) as exc:
            raise TokenizerFormatError(f"{path}: starts like JSON but does not parse: {exc}") from None
        if isinstance(data, dict) and "model" in data:
            return "huggingface"
        if isinstance(data, list) and data and isinstance(data[0], dict) and "token_bytes" in data[0]:
            return "megatron-tiktoken-json"
        raise TokenizerFormatError(f"{path}: JSON that is neither a tokenizer.json nor a Megatron tiktoken vocabulary")
    if _looks_like_tiktoken(head):
        return "tiktoken-bpe"
    if head[:1] == b"\x0a":  # protobuf field 1 (pieces), length-delimited
        return "sentencepiece"
    raise TokenizerFormatError(f"{path}: neither a tiktoken BPE file, a SentencePiece model nor a tokenizer.json")


def megatron_tokenizer(path: str) -> tuple[str, str, str]:
    """``(tokenizer type, path to pass as --tokenizer-model, note)`` for a readable file or directory."""
    fmt = detect_format(path)
    if fmt == "huggingface":
        directory = path if os.path.isdir(path) else os.path.dirname(path)
        return "HuggingFaceTokenizer", directory, f"Hugging Face tokenizer in {directory}"
    if fmt == "sentencepiece":
        return "SentencePieceTokenizer", path, "SentencePiece model"
    if fmt == "megatron-tiktoken-json":
        if not path.endswith(".json"):
            raise TokenizerFormatError(f"{path}: Megatron's TikTokenizer needs the file name to end in .json")
        return "TikTokenizer", path, "Megatron tiktoken JSON vocabulary"
    directory = os.path.dirname(path)
    if os.path.isfile(os.path.join(directory, "tokenizer.json")):
        return (
            "HuggingFaceTokenizer",
            directory,
            f"{os.path.basename(path)} is tiktoken BPE; using the Hugging Face tokenizer.json beside it",
        )
    raise TokenizerFormatError(
        f"{path} is a tiktoken BPE file (Llama 3's tokenizer.model), which Megatron-LM 0.14 cannot read: "
        "SentencePieceTokenizer fails on it and TikTokenizer wants Megatron's JSON vocabulary. Point "
        "tokenizer_path at the Hugging Face tokenizer directory (with tokenizer.json) instead"
    )


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
