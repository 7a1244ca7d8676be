"""Raw JSONL to Megatron's indexed dataset (.bin/.idx), with a manifest; run inside the training container.

    python3 build_dataset.py --input X.jsonl --output-prefix /data/datasets/foo --tokenizer TOK [--workers N]
                             [--json-key text] [--max-bad-lines 100] [--progress FILE] [--node NAME] [--check]

Each JSONL line is one document. ``--workers`` processes tokenize chunks of lines (each single-threaded, so N
workers use about N cores plus the main process, which reads, writes and hashes); documents stay in input order.
The end-of-document token is appended to every document; no BOS is added. The pair is written by megatron-core's
own ``IndexedDatasetBuilder`` to a temporary prefix beside the output, then renamed into place, then the manifest
(``<prefix>.manifest.json``) is written last: a manifest means a finished dataset. On any failure the temporaries
are removed and an existing dataset is left as it was.

Needs the standard library, numpy, megatron-core and the tokenizer's library (tiktoken, sentencepiece or tokenizers).
The tokenizer detection and the manifest schema are the core's (``trainops.tokenizer``, ``trainops.dataset_manifest``),
imported from the node package this file belongs to (or the checkout it is run from).

Exit status: 0 done; 2 bad input or tokenizer (the message names the line and the fix); 3 no space left; 1 other.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import errno
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from multiprocessing import get_context

HERE = os.path.dirname(os.path.abspath(__file__))
# run as a script: the package's parent (.../trainops/node/ -> ...), not this directory, holds ``trainops``
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from trainops import dataset_manifest as manifest_schema  # noqa: E402
from trainops import tokenizer as tokmod  # noqa: E402

#: Bytes of input per task handed to a worker.
CHUNK_BYTES = 1 << 20
#: Seconds between progress reports.
PROGRESS_EVERY_S = 2.0
#: Reasons that count against --max-bad-lines (blank lines are skipped but not counted as bad).
BAD_REASONS = tuple(r for r in manifest_schema.SKIP_REASONS if r != "blank_line")


class BuildError(Exception):
    """A failure with its message for the user (names the file, the line and the fix)."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


# --- tokenizers -----------------------------------------------------------------------------------------------


def load_tokenizer(path: str) -> dict:
    """``describe()`` of the tokenizer plus ``vocab_size``, ``eod_id``, ``eod_token``, ``library`` (name, version)."""
    try:
        info = tokmod.describe(path)
    except FileNotFoundError:
        raise BuildError(
            f"tokenizer {path} does not exist: give -e tokenizer=<file or directory in the container>"
        ) from None
    except tokmod.TokenizerFormatError as exc:
        raise BuildError(f"tokenizer {exc}") from None
    return _make_encoder(info)[2]


def _make_encoder(info: dict):
    """``(encode(list of str) -> list of list of int, decode(ids) -> str, info with vocab and eod)``."""
    fmt, source = info["format"], info["source"]
    try:
        if fmt == "tiktoken-bpe":
            import tiktoken

            ranks = tokmod.read_tiktoken_ranks(source)
            special = tokmod.llama3_special_tokens(len(ranks))
            eod_token, eod = "<|end_of_text|>", special["<|end_of_text|>"]
            beside = os.path.join(os.path.dirname(source), "tokenizer.json")
            if os.path.isfile(beside):  # training reads it through this file: its eod must be the same id
                hf_token, hf_eod = tokmod.huggingface_eod(_read_json(beside), _tokenizer_config(beside))
                if hf_eod != eod:
                    raise BuildError(
                        f"tokenizer {source}: its tokenizer.json says the end-of-document token is {hf_token} = "
                        f"{hf_eod}, but the tiktoken file's Llama 3 layout gives {eod_token} = {eod}. "
                        "Give the tokenizer.json (or its directory) as -e tokenizer instead"
                    )
            enc = tiktoken.Encoding(
                name="bundle", pat_str=tokmod.LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=special
            )
            vocab = len(ranks) + len(special)
            library = ("tiktoken", tiktoken.__version__)

            def encode(texts):
                return [enc.encode_ordinary(t) for t in texts]

            decode = enc.decode
        elif fmt == "sentencepiece":
            import sentencepiece

            sp = sentencepiece.SentencePieceProcessor(model_file=source)
            eod = sp.eos_id()
            if eod < 0:
                raise BuildError(
                    f"tokenizer {source}: the SentencePiece model has no eos token (eos_id -1); "
                    "train it with an eos piece (--eos_id)"
                )
            eod_token, vocab = sp.id_to_piece(eod), sp.get_piece_size()
            library = ("sentencepiece", sentencepiece.__version__)

            def encode(texts):
                return sp.encode(texts, num_threads=1)

            decode = sp.decode
        else:
            import tokenizers

            tok = tokenizers.Tokenizer.from_file(source)
            eod_token, eod = tokmod.huggingface_eod(_read_json(source), _tokenizer_config(source))
            vocab = tok.get_vocab_size(with_added_tokens=True)
            library = ("tokenizers", tokenizers.__version__)

            def encode(texts):
                return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]

            def decode(ids):
                return tok.decode(ids, skip_special_tokens=False)

    except ImportError as exc:
        raise BuildError(
            f"tokenizer {source} is {fmt}, but this Python lacks its library ({exc}); install it in the image",
            status=1,
        ) from None
    except tokmod.TokenizerFormatError as exc:
        raise BuildError(f"tokenizer {source}: {exc}") from None
    info = dict(info, vocab_size=vocab, eod_id=eod, eod_token=eod_token, library=list(library))
    return encode, decode, info


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _tokenizer_config(tokenizer_json: str) -> dict | None:
    config = os.path.join(os.path.dirname(tokenizer_json), "tokenizer_config.json")
    return _read_json(config) if os.path.isfile(config) else None


# --- workers --------------------------------------------------------------------------------------------------

_WORKER: dict = {}


def _worker_init(tokenizer_path: str, json_key: str, dtype_name: str) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one worker, one core
    os.environ["RAYON_NUM_THREADS"] = "1"
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides
    # Pool.terminate() ends workers with SIGTERM; the main process's handler (sys.exit, inherited by fork) would
    # run Python in a worker blocked on the task queue's lock and could leave it waiting there for ever.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    import numpy

    encode, _, info = _make_encoder(tokmod.describe(tokenizer_path))
    _WORKER.update(encode=encode, eod=info["eod_id"], key=json_key, dtype=numpy.dtype(dtype_name), np=numpy)


def encode_chunk(task: tuple[int, bytes]):
    """Tokenize the lines of one chunk: ``(tokens bytes, lengths, skipped [(line, reason)], error or None)``."""
    first_line, data = task
    numpy, key = _WORKER["np"], _WORKER["key"]
    texts, skipped = [], []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()  # the empty piece after the last newline
    for number, raw in enumerate(lines, start=first_line):
        if not raw.strip():
            skipped.append((number, "blank_line"))
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return b"", None, skipped, (number, f"invalid UTF-8 at byte {exc.start} of the line")
        try:
            doc = json.loads(line)
        except ValueError:
            skipped.append((number, "malformed_json"))
            continue
        if not isinstance(doc, dict):
            skipped.append((number, "not_an_object"))
        elif key not in doc:
            skipped.append((number, "missing_key"))
        elif not isinstance(doc[key], str):
            skipped.append((number, "not_text"))
        elif not doc[key]:
            skipped.append((number, "empty_text"))
        else:
            texts.append(doc[key])
    ids = _WORKER["encode"](texts) if texts else []
    eod = _WORKER["eod"]
    for doc in ids:
        doc.append(eod)
    lengths = numpy.fromiter((len(d) for d in ids), dtype=numpy.int64, count=len(ids))
    flat = numpy.fromiter((t for d in ids for t in d), dtype=_WORKER["dtype"], count=int(lengths.sum()))
    return flat.tobytes(), lengths, skipped, None


def read_chunks(path: str, digest, size: int = CHUNK_BYTES):
    """``(first line number, bytes of whole lines)`` of the file; feeds ``digest`` with every byte read."""
    line = 1
    rest = b""
    with open(path, "rb") as handle:
        while True:
            block = handle.read(size)
            if not block:
                break
            digest.update(block)
            block = rest + block
            cut = block.rfind(b"\n")
            if cut < 0:
                rest = block
                continue
            yield line, block[: cut + 1]
            line += block.count(b"\n", 0, cut + 1)
            rest = block[cut + 1 :]
    if rest:
        yield line, rest


# --- the build ------------------------------------------------------------------------------------------------


class Progress:
    """Progress as one JSON object, replaced atomically in ``path`` and printed as a line on stdout."""

    def __init__(self, path: str | None, input_bytes: int):
        self.path, self.input_bytes, self.start, self.last = path, input_bytes, time.time(), 0.0

    def report(self, state: str, force: bool = False, **fields) -> dict:
        now = time.time()
        if not force and now - self.last < PROGRESS_EVERY_S:
            return {}
        self.last = now
        elapsed = now - self.start
        record = {"state": state, "elapsed_s": round(elapsed, 1), **fields}
        if "tokens" in fields and "tokens_per_s" not in fields:
            record["tokens_per_s"] = round(fields["tokens"] / elapsed) if elapsed > 0 else 0
        if "bytes" in fields and self.input_bytes:
            record["percent"] = round(100.0 * fields["bytes"] / self.input_bytes, 1)
        if self.path:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            os.replace(tmp, self.path)
        print("progress " + json.dumps(record), flush=True)
        return record


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def check(args) -> dict:
    """What can be known before building: input, output directory, tokenizer. Raises :class:`BuildError`."""
    if not os.path.isfile(args.input):
        what = "is a directory" if os.path.isdir(args.input) else "does not exist"
        raise BuildError(f"input {args.input} {what}: give -e input=<a JSONL file visible in the container>")
    if not os.access(args.input, os.R_OK):
        raise BuildError(f"input {args.input} is not readable: fix its permissions")
    out_dir = os.path.dirname(os.path.abspath(args.output_prefix))
    try:
        os.makedirs(out_dir, exist_ok=True)
        probe = os.path.join(out_dir, f".{os.path.basename(args.output_prefix)}.probe{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as exc:
        raise BuildError(
            f"output directory {out_dir} is not writable ({exc.strerror}): choose another output_prefix "
            "or make the directory writable"
        ) from None
    if args.megatron_preprocess and not os.path.isfile(args.megatron_preprocess):
        raise BuildError(
            f"Megatron-LM's preprocessing tool {args.megatron_preprocess} is not in this container (the CPU "
            "testbed's stand-in image has no Megatron-LM checkout): run without -e use_megatron_preprocess=true "
            "to use the bundle's builder, or set megatron_home to the image's Megatron-LM directory"
        )
    tokenizer = load_tokenizer(args.tokenizer)
    if args.megatron_preprocess and not tokenizer["launch_ready"]:
        raise BuildError(f"tokenizer {args.tokenizer}: {tokenizer['note']}")
    free = shutil.disk_usage(out_dir).free
    return {
        "input": args.input,
        "input_bytes": os.path.getsize(args.input),
        "output_dir": out_dir,
        "free_bytes": free,
        "tokenizer": {k: tokenizer[k] for k in ("format", "type", "model", "vocab_size", "eod_id", "eod_token")},
        "launch_ready": tokenizer["launch_ready"],
        "note": tokenizer["note"],
    }


def temp_prefix(output_prefix: str) -> str:
    base = os.path.basename(output_prefix)
    return os.path.join(os.path.dirname(os.path.abspath(output_prefix)), f".{base}.tmp{os.getpid()}")


def versions(library: list[str]) -> dict:
    import megatron.core
    import numpy

    return {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "megatron_core": getattr(megatron.core, "__version__", "unknown"),
        library[0]: library[1],
    }


def build(args, tmp: str, progress: Progress) -> dict:
    """Write ``tmp``.bin/.idx and return the manifest (not yet written)."""
    import numpy
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    tokenizer = load_tokenizer(args.tokenizer)
    dtype = DType.optimal_dtype(tokenizer["vocab_size"])
    input_bytes = os.path.getsize(args.input)
    digest = hashlib.sha256()
    builder = IndexedDatasetBuilder(tmp + ".bin", dtype=dtype)
    counts: collections.Counter = collections.Counter()
    first_lines: dict[str, list[int]] = collections.defaultdict(list)
    documents = tokens = read = lines = 0
    start = time.time()
    ctx = get_context("fork")
    with ctx.Pool(
        args.workers, initializer=_worker_init, initargs=(args.tokenizer, args.json_key, numpy.dtype(dtype).name)
    ) as pool:
        pending: collections.deque = collections.deque()
        chunks = read_chunks(args.input, digest)
        exhausted = False
        while pending or not exhausted:
            while not exhausted and len(pending) < 2 * args.workers + 2:
                task = next(chunks, None)
                if task is None:
                    exhausted = True
                else:
                    pending.append(
                        (task[0], len(task[1]), task[1].count(b"\n"), pool.apply_async(encode_chunk, (task,)))
                    )
            if not pending:
                break
            first, nbytes, nlines, result = pending.popleft()
            flat, lengths, skipped, error = result.get()
            if error:
                number, why = error
                raise BuildError(
                    f"input {args.input}:{number}: {why}. The file must be UTF-8 JSONL; re-encode it "
                    f"(e.g. iconv -f <encoding> -t UTF-8) or remove the line"
                )
            for number, reason in skipped:
                counts[reason] += 1
                if len(first_lines[reason]) < manifest_schema.FIRST_LINES_KEPT:
                    first_lines[reason].append(number)
            bad = sum(counts[r] for r in BAD_REASONS)
            if bad > args.max_bad_lines:
                raise BuildError(
                    f"input {args.input}: more than max_bad_lines={args.max_bad_lines} bad lines "
                    f"({_describe_skips(counts, first_lines)}); fix the input, or raise -e max_bad_lines"
                )
            array = numpy.frombuffer(flat, dtype=dtype)
            offset = 0
            for length in lengths.tolist():
                builder.add_document(array[offset : offset + length], [length])
                offset += length
            documents += len(lengths)
            tokens += len(array)
            read += nbytes
            lines += nlines
            progress.report("running", documents=documents, tokens=tokens, bytes=read, skipped=sum(counts.values()))
    builder.finalize(tmp + ".idx")
    if documents == 0:
        raise BuildError(
            f"input {args.input}: no document with text under key {args.json_key!r} "
            f"({_describe_skips(counts, first_lines) or 'the file is empty'}); check -e json_key"
        )
    return _manifest(
        args,
        tokenizer,
        tmp,
        start,
        builder="mtt-train-ops trainops/node/build_dataset.py",
        documents=documents,
        tokens=tokens,
        skipped=manifest_schema.skipped_record(dict(counts), first_lines),
        input_record={"path": args.input, "bytes": input_bytes, "sha256": digest.hexdigest(), "lines": lines},
        dtype=numpy.dtype(dtype).name,
    )


def _manifest(
    args, tokenizer, tmp, start, *, builder, documents, tokens, skipped, input_record, dtype, megatron_tokenizer=None
) -> dict:
    """The manifest of a dataset written to the temporary prefix ``tmp`` (either builder).

    ``megatron_tokenizer``: the tokenizer Megatron-LM's tool built, whose vocabulary and eod are recorded instead.
    """
    elapsed = time.time() - start
    manifest = {
        "schema_version": manifest_schema.SCHEMA_VERSION,
        "prefix": args.output_prefix,
        "builder": builder,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "tokenizer": {
            "type": tokenizer["type"],
            "format": tokenizer["format"],
            "path": args.tokenizer,
            "model": tokenizer["model"],
            "sha256": sha256_file(tokenizer["source"]),
            "vocab_size": tokenizer["vocab_size"],
            "eod_id": tokenizer["eod_id"],
            "eod_token": tokenizer["eod_token"],
            "launch_ready": tokenizer["launch_ready"],
            "note": tokenizer["note"],
        },
        "json_key": args.json_key,
        "documents": documents,
        "tokens": tokens,
        "skipped": skipped,
        "input": input_record,
        "output": {
            "bin_bytes": os.path.getsize(tmp + ".bin"),
            "idx_bytes": os.path.getsize(tmp + ".idx"),
            "idx_sha256": sha256_file(tmp + ".idx"),
            "dtype": dtype,
        },
        "workers": args.workers,
        "elapsed_s": round(elapsed, 3),
        "tokens_per_s": round(tokens / elapsed) if elapsed > 0 else 0,
        "versions": versions(tokenizer["library"]),
    }
    if megatron_tokenizer is not None:
        record = manifest["tokenizer"]
        del record["eod_token"]  # Megatron's own eod may not be the detected token (SentencePiece adds <EOD>)
        record.update(vocab_size=int(megatron_tokenizer.vocab_size), eod_id=int(megatron_tokenizer.eod))
        record["launch_ready"] = True
    return manifest


def _describe_skips(counts, first_lines) -> str:
    return ", ".join(
        f"{reason.replace('_', ' ')}: {counts[reason]} (first at line(s) {', '.join(map(str, first_lines[reason]))})"
        for reason in manifest_schema.SKIP_REASONS
        if counts.get(reason)
    )


def build_with_megatron(args, tmp: str, progress: Progress) -> dict:
    """Run Megatron-LM's own ``tools/preprocess_data.py`` into ``tmp`` and return the manifest."""
    tool = args.megatron_preprocess
    tokenizer = load_tokenizer(args.tokenizer)
    home = os.path.dirname(os.path.dirname(tool))
    cmd = [sys.executable, tool, "--input", args.input, "--output-prefix", tmp, "--json-keys", args.json_key]
    cmd += ["--tokenizer-type", tokenizer["type"], "--tokenizer-model", tokenizer["model"]]
    cmd += ["--workers", str(args.workers), "--append-eod", "--log-interval", "10000"]
    print("running " + " ".join(cmd), flush=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [home, os.environ.get("PYTHONPATH")])))
    start = time.time()
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        tail: collections.deque = collections.deque(maxlen=20)
        for line in proc.stdout:
            tail.append(line.rstrip())
            print(line, end="", flush=True)
            if line.startswith("Processed "):
                progress.report("running", force=True, documents=int(line.split()[1]))
    if proc.returncode != 0:
        raise BuildError(f"{tool} failed (exit {proc.returncode}): " + " | ".join(tail), status=1)
    produced = f"{tmp}_{args.json_key}_document"
    os.replace(produced + ".bin", tmp + ".bin")
    os.replace(produced + ".idx", tmp + ".idx")
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(tmp)
    documents, tokens = len(dataset.document_indices) - 1, int(dataset.sequence_lengths.sum())
    sys.path.insert(0, home)
    from megatron.training.tokenizer import build_tokenizer  # the image's Megatron-LM

    megatron_tok = build_tokenizer(
        argparse.Namespace(
            rank=1,
            tokenizer_type=tokenizer["type"],
            tokenizer_model=tokenizer["model"],
            vocab_extra_ids=0,
            make_vocab_size_divisible_by=128,
            tensor_model_parallel_size=1,
        )
    )
    index_dtype = dataset.index.dtype
    return _manifest(
        args,
        tokenizer,
        tmp,
        start,
        builder=f"Megatron-LM {tool}",
        documents=documents,
        tokens=tokens,
        skipped=manifest_schema.skipped_record({}, {}),
        input_record={
            "path": args.input,
            "bytes": os.path.getsize(args.input),
            "sha256": sha256_file(args.input),
            "lines": -1,
        },
        dtype=str(getattr(index_dtype, "__name__", index_dtype)),
        megatron_tokenizer=megatron_tok,
    )


def publish(tmp: str, prefix: str, manifest: dict) -> None:
    """Validate the manifest, then move .bin and .idx into place and write the manifest last."""
    manifest_schema.validate(manifest, f"manifest of {prefix}")
    with open(tmp + ".manifest.json", "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    for suffix in (".bin", ".idx"):
        with open(tmp + suffix, "rb") as handle:
            os.fsync(handle.fileno())
    # the old manifest goes first: while the pair is being swapped no manifest vouches for it
    old = manifest_schema.manifest_path(prefix)
    if os.path.exists(old):
        os.unlink(old)
    os.replace(tmp + ".bin", prefix + ".bin")
    os.replace(tmp + ".idx", prefix + ".idx")
    os.replace(tmp + ".manifest.json", old)


def cleanup(tmp: str, key: str) -> None:
    for path in (
        tmp + ".bin",
        tmp + ".idx",
        tmp + ".manifest.json",
        f"{tmp}_{key}_document.bin",
        f"{tmp}_{key}_document.idx",
    ):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="JSONL file, one document per line")
    parser.add_argument("--output-prefix", required=True, help="dataset prefix (.bin/.idx/.manifest.json added)")
    parser.add_argument("--tokenizer", required=True, help="tiktoken BPE file, SentencePiece model, or HF tokenizer")
    parser.add_argument("--json-key", default="text", help="key of the text in each JSON object")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--max-bad-lines", type=int, default=100, help="bad lines skipped before failing")
    parser.add_argument("--progress", help="file that holds the latest progress as JSON")
    parser.add_argument("--node", default=platform.node(), help="name used in messages")
    parser.add_argument("--check", action="store_true", help="only check input, output directory and tokenizer")
    parser.add_argument("--megatron-preprocess", help="run this Megatron-LM tools/preprocess_data.py instead")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    progress = Progress(args.progress, 0)
    tmp = temp_prefix(args.output_prefix)
    try:
        facts = check(args)
        if args.check:
            print(json.dumps(facts))
            return 0
        progress.input_bytes = facts["input_bytes"]
        progress.report("starting", force=True, documents=0, tokens=0, bytes=0, tokenizer=facts["tokenizer"])
        if args.megatron_preprocess:
            manifest = build_with_megatron(args, tmp, progress)
        else:
            manifest = build(args, tmp, progress)
        publish(tmp, args.output_prefix, manifest)
    except BuildError as exc:
        return _fail(args, tmp, progress, str(exc), exc.status)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            out_dir = os.path.dirname(os.path.abspath(args.output_prefix))
            return _fail(
                args,
                tmp,
                progress,
                f"no space left on the device of {out_dir} while writing the dataset ({exc.strerror}); the partial "
                f"files were removed and any existing {args.output_prefix}.bin/.idx left as it was. Free space "
                "there (the .bin needs about 2-4 bytes per token) or choose another output_prefix",
                3,
            )
        return _fail(args, tmp, progress, f"{type(exc).__name__}: {exc}", 1)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:
        return _fail(args, tmp, progress, f"{type(exc).__name__}: {exc}", 1)
    progress.report(
        "done",
        force=True,
        documents=manifest["documents"],
        tokens=manifest["tokens"],
        bytes=manifest["input"]["bytes"],
        skipped=manifest["skipped"]["total"],
        tokens_per_s=manifest["tokens_per_s"],
        manifest=manifest_schema.manifest_path(args.output_prefix),
    )
    return 0


def _fail(args, tmp: str, progress: Progress, message: str, status: int) -> int:
    cleanup(tmp, args.json_key)
    message = f"{args.node}: {message}"
    try:
        progress.report("failed", force=True, error=message, status=status)
    except OSError:
        pass
    print("ERROR: " + message, file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
