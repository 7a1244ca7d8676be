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


# --- What the dataset builder (trainops/node/build_dataset.py) needs: how to encode, and which id ends a document. ---
# The builder copies this file next to itself into the container, so everything below is standard library only.

#: Regex split of Llama 3's tiktoken tokenizer (meta-llama/llama3, tokenizer.py).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"  # words, numbers up to 3 digits
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"  # punctuation, newlines, other space
)
#: Number of special tokens Llama 3 appends after the base ranks of its tiktoken file.
LLAMA3_NUM_SPECIAL = 256
#: End-of-document tokens looked for, in order, when a Hugging Face tokenizer names no eos token.
EOD_CANDIDATES = ("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>")


def llama3_special_tokens(num_base: int) -> dict[str, int]:
    """Llama 3's special tokens and ids for a tiktoken file of ``num_base`` ranks (128000 for Llama 3 itself).

    ``<|begin_of_text|>`` = num_base, ``<|end_of_text|>`` = num_base + 1, ..., 256 in all."""
    names = [
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|reserved_special_token_0|>",
        "<|reserved_special_token_1|>",
        "<|reserved_special_token_2|>",
        "<|reserved_special_token_3|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|reserved_special_token_4|>",
        "<|eot_id|>",
    ]
    names += [f"<|reserved_special_token_{i}|>" for i in range(5, LLAMA3_NUM_SPECIAL - 5)]
    return {name: num_base + i for i, name in enumerate(names)}


def read_tiktoken_ranks(path: str) -> dict[bytes, int]:
    """The ``{token bytes: rank}`` of a tiktoken BPE file, with the line number of any bad line in the error."""
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
            except (ValueError, binascii.Error):
                raise TokenizerFormatError(f"{path}:{number}: not '<base64 token> <rank>'") from None
    if not ranks:
        raise TokenizerFormatError(f"{path}: no ranks in the tiktoken file")
    return ranks


def huggingface_eod(tokenizer_json: dict, config: dict | None = None) -> tuple[str, int]:
    """``(token, id)`` ending a document for a parsed ``tokenizer.json`` (and ``tokenizer_config.json`` if any).

    The configured ``eos_token`` first, else the first of :data:`EOD_CANDIDATES` the tokenizer knows."""
    known = {t["content"]: t["id"] for t in tokenizer_json.get("added_tokens", []) if "content" in t and "id" in t}
    vocab = (tokenizer_json.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        known = {**vocab, **known}
    eos = (config or {}).get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    if eos:
        if eos in known:
            return eos, int(known[eos])
        raise TokenizerFormatError(f"tokenizer_config.json names eos_token {eos!r}, which tokenizer.json does not have")
    for name in EOD_CANDIDATES:
        if name in known:
            return name, int(known[name])
    raise TokenizerFormatError(
        "the Hugging Face tokenizer has no end-of-document token: no eos_token in tokenizer_config.json and none of "
        f"{', '.join(EOD_CANDIDATES)} in tokenizer.json; add eos_token to tokenizer_config.json beside it"
    )


def describe(path: str) -> dict:
    """What the builder and the manifest record about a tokenizer, without loading any tokenizer library.

    ``format`` (see :data:`FORMATS`), ``type`` (the Megatron ``--tokenizer-type`` to train with), ``model`` (the
    ``--tokenizer-model`` to pass), ``encoder`` (the library the builder encodes with) and ``note``.
    A tiktoken BPE file is encoded with tiktoken itself (ids are its ranks, then Llama 3's special tokens); training
    reads it through the ``tokenizer.json`` beside it (same ids). Without one, ``type`` is ``TikTokenizer`` and
    ``launch_ready`` is false: Megatron 0.14 cannot train with that file alone (see the module docstring)."""
    fmt = detect_format(path)
    if fmt == "megatron-tiktoken-json":
        raise TokenizerFormatError(
            f"{path} is Megatron's own tiktoken JSON vocabulary; the bundle's builder does not encode with it. "
            "Give the tiktoken BPE file or the Hugging Face tokenizer.json, or use -e use_megatron_preprocess=true"
        )
    encoder = {"tiktoken-bpe": "tiktoken", "sentencepiece": "sentencepiece", "huggingface": "tokenizers"}[fmt]
    try:
        kind, model, note = megatron_tokenizer(path)
        ready = True
    except TokenizerFormatError as exc:
        kind, model, note, ready = "TikTokenizer", path, str(exc), False
    source = path
    if fmt == "huggingface" and os.path.isdir(path):
        source = os.path.join(path, "tokenizer.json")
    return {
        "format": fmt,
        "type": kind,
        "model": model,
        "source": source,
        "encoder": encoder,
        "launch_ready": ready,
        "note": note,
    }
