"""Tokens/s of the node package's build_dataset.py (1 and 2 workers) against Megatron-LM's tools/preprocess_data.py.

Runs where torch, megatron-core, sentencepiece, tiktoken and tokenizers are installed (the training container,
or a venv made from testbed/.cache/wheels). Two commands:

    python3 preprocess_throughput.py fixtures DIR [--mb 4]
        a deterministic corpus (DIR/corpus.jsonl: the sorted .py files of this Python's standard library, one
        document each, up to --mb MB) and tiny tokenizers trained on it: DIR/sp/tokenizer.model (SentencePiece),
        DIR/tiktoken/tokenizer.model (a byte-level BPE made with `tokenizers`, written in tiktoken's file format),
        DIR/hf/{tokenizer.json,tokenizer.model} (the same BPE as a Hugging Face tokenizer, Llama 3's layout).
        The integration tests (tests/integration/test_data.py) use this command too.

    python3 preprocess_throughput.py run DIR --megatron-lm CHECKOUT [--builder PATH]   (default: the node package's)
        times both programs on DIR/corpus.jsonl with the SentencePiece model and prints one JSON line per run.
        CHECKOUT is a Megatron-LM tree (tools/preprocess_data.py and megatron/training), e.g. from
        `git --git-dir=<mirror> archive core_v0.14.0 tools megatron/training | tar -x -C /tmp/mlm`.
"""

from __future__ import annotations

import argparse
import base64
import glob
import io
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
#: Llama 3's split pattern (kept equal to trainops.tokenizer.LLAMA3_PATTERN).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def corpus(path: str, megabytes: float) -> int:
    """Write the JSONL corpus; returns the number of documents."""
    limit = int(megabytes * 1e6)
    written = count = 0
    stdlib = sysconfig.get_paths()["stdlib"]
    with open(path, "w", encoding="utf-8") as out:
        for source in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)):
            if "site-packages" in source or "dist-packages" in source:
                continue
            try:
                with open(source, encoding="utf-8") as handle:
                    text = handle.read()
            except (UnicodeDecodeError, OSError):
                continue
            if not text.strip():
                continue
            line = json.dumps({"text": text, "source": os.path.relpath(source, stdlib)}, ensure_ascii=False)
            out.write(line + "\n")
            written += len(line) + 1
            count += 1
            if written >= limit:
                break
    return count


def texts(path: str, limit: int = 2000):
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if number >= limit:
                break
            yield json.loads(line)["text"]


def sentencepiece_model(corpus_path: str, out_dir: str, vocab: int = 2000) -> str:
    import sentencepiece

    model = io.BytesIO()
    lines = (line for text in texts(corpus_path, 400) for line in text.split("\n") if line.strip())
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=lines,
        model_writer=model,
        vocab_size=vocab,
        model_type="bpe",
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        allow_whitespace_only_pieces=True,
        split_digits=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.model")
    with open(path, "wb") as handle:
        handle.write(model.getvalue())
    return path


def bpe_tokenizers(corpus_path: str, tiktoken_dir: str, hf_dir: str, vocab: int = 3000) -> None:
    """A byte-level BPE with Llama 3's split and special-token layout: tiktoken file, and tokenizer.json beside one."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(texts(corpus_path, 400), trainer=trainer)
    # GPT-2's byte <-> printable character map, reversed: a token's characters back to its bytes
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = printable[:], 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    to_byte = {chr(c): b for b, c in zip(printable, chars, strict=True)}
    ranks = sorted(tok.get_vocab().items(), key=lambda item: item[1])
    lines = [base64.b64encode(bytes(to_byte[c] for c in token)) + b" %d" % rank for token, rank in ranks]
    names = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{i}|>" for i in range(4)]
    names += ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
    names += [f"<|reserved_special_token_{i}|>" for i in range(5, 251)]
    tok.add_special_tokens(names)
    for directory in (tiktoken_dir, hf_dir):
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "tokenizer.model"), "wb") as handle:
            handle.write(b"\n".join(lines) + b"\n")
    tok.save(os.path.join(hf_dir, "tokenizer.json"))


def fixtures(directory: str, megabytes: float) -> dict:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "corpus.jsonl")
    documents = corpus(path, megabytes)
    sentencepiece_model(path, os.path.join(directory, "sp"))
    bpe_tokenizers(path, os.path.join(directory, "tiktoken"), os.path.join(directory, "hf"))
    return {"corpus": path, "documents": documents, "bytes": os.path.getsize(path)}


def timed(cmd: list[str], env: dict | None = None) -> float:
    start = time.time()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return time.time() - start


def tokens_of(prefix: str) -> tuple[int, int]:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    data = IndexedDataset(prefix)
    return len(data.document_indices) - 1, int(data.sequence_lengths.sum())


def run(directory: str, megatron_lm: str, builder: str, workers: list[int], repeat: int) -> list[dict]:
    corpus_path = os.path.join(directory, "corpus.jsonl")
    model = os.path.join(directory, "sp", "tokenizer.model")
    tool = os.path.join(megatron_lm, "tools", "preprocess_data.py")
    env = dict(os.environ, PYTHONPATH=megatron_lm, PYTHONWARNINGS="ignore")
    results = []
    with tempfile.TemporaryDirectory() as out:
        for n in workers:
            for program in ("build_dataset", "preprocess_data"):
                best = None
                for _ in range(repeat):
                    if program == "build_dataset":
                        prefix = os.path.join(out, f"b{n}")
                        cmd = [sys.executable, builder, "--input", corpus_path, "--output-prefix", prefix]
                        cmd += ["--tokenizer", model, "--workers", str(n)]
                    else:
                        base = os.path.join(out, f"m{n}")
                        prefix = base + "_text_document"
                        cmd = [sys.executable, tool, "--input", corpus_path, "--output-prefix", base]
                        cmd += ["--tokenizer-type", "GPTSentencePieceTokenizer", "--tokenizer-model", model]
                        cmd += ["--workers", str(n), "--append-eod", "--log-interval", "100000"]
                    seconds = timed(cmd, env)
                    best = seconds if best is None else min(best, seconds)
                documents, tokens = tokens_of(prefix)
                row = {"program": program, "workers": n, "documents": documents, "tokens": tokens}
                row.update(seconds=round(best, 2), tokens_per_s=round(tokens / best))
                row["tokens_per_s_per_worker"] = round(tokens / best / n)
                print(json.dumps(row), flush=True)
                results.append(row)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("fixtures")
    make.add_argument("directory")
    make.add_argument("--mb", type=float, default=4.0)
    bench = sub.add_parser("run")
    bench.add_argument("directory")
    bench.add_argument("--megatron-lm", required=True)
    bench.add_argument(
        "--builder",
        default=os.path.join(os.path.dirname(HERE), "plugins", "module_utils", "trainops", "node", "build_dataset.py"),
    )
    bench.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    bench.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if args.command == "fixtures":
        print(json.dumps(fixtures(args.directory, args.mb)))
    else:
        run(args.directory, args.megatron_lm, args.builder, args.workers, args.repeat)


if __name__ == "__main__":
    main()
