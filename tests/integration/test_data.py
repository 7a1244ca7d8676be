"""playbooks/data.yml on the testbed: JSONL -> .bin/.idx in the master's training container, read back.

Tokenizers are trained in the container on a deterministic corpus (its own Python standard library sources) by
benchmarks/preprocess_throughput.py: a SentencePiece model, a byte-level BPE in tiktoken's file format, and the
same BPE as a Hugging Face tokenizer.json. Files go under /data/mtt-data-tests in node1's container only.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from testbed import NODE_CONTAINERS, ROOT, docker, has_megatron, in_container, in_node, latest_run, playbook

pytestmark = [pytest.mark.testbed]

BASE = "/data/mtt-data-tests"
FX = f"{BASE}/fx"
OUT = f"{BASE}/out"
FAST = ("-e", "data_build_poll_s=1")
TOKENIZERS = {
    "sentencepiece": (f"{FX}/sp/tokenizer.model", "SentencePieceTokenizer"),
    "tiktoken": (f"{FX}/tiktoken/tokenizer.model", "TikTokenizer"),
    "tiktoken-beside-json": (f"{FX}/hf/tokenizer.model", "HuggingFaceTokenizer"),
    "huggingface": (f"{FX}/hf/tokenizer.json", "HuggingFaceTokenizer"),
}

# Reads a dataset back with megatron-core's IndexedDataset and decodes it with the tokenizer's own library.
READ_BACK = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
from megatron.core.datasets.indexed_dataset import IndexedDataset
prefix, tok, kind, corpus = sys.argv[1:5]
manifest = json.load(open(prefix + ".manifest.json"))
if kind == "sentencepiece":
    import sentencepiece
    decode = sentencepiece.SentencePieceProcessor(model_file=tok).decode
elif kind == "huggingface":
    import tokenizers
    decode = tokenizers.Tokenizer.from_file(tok).decode
else:
    import base64, tiktoken
    ranks = {base64.b64decode(t): int(r) for t, r in (l.split() for l in open(tok, "rb") if l.strip())}
    decode = tiktoken.Encoding(name="t", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={}).decode
data = IndexedDataset(prefix)
texts = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8")]
eod = manifest["tokenizer"]["eod_id"]
wrong = [i for i, text in enumerate(texts) if data[i][-1] != eod or decode(data[i][:-1].tolist()) != text]
print(json.dumps({"documents": len(data), "texts": len(texts), "tokens": int(data.sequence_lengths.sum()),
                  "wrong": wrong[:5], "manifest": manifest}))
"""


def _put(path: str, content: bytes) -> None:
    """Write a file into node1's training container."""
    command = ["docker", "exec", "-i", NODE_CONTAINERS["node1"], "docker", "exec", "-i", "train"]
    command += ["sh", "-c", f"mkdir -p $(dirname {path}) && cat > {path}"]
    subprocess.run(command, input=content, check=True, timeout=60)


def _data(*extra: str, container_args: tuple[str, ...] = ()):
    return playbook("playbooks/data.yml", *FAST, *container_args, *extra, timeout=600)


def _args(input_path: str, prefix: str, tokenizer: str = TOKENIZERS["sentencepiece"][0]) -> list[str]:
    return ["-e", f"input={input_path}", "-e", f"output_prefix={prefix}", "-e", f"tokenizer={tokenizer}"]


@pytest.fixture(scope="module")
def fixtures(provisioned):
    in_container("node1", f"rm -rf {BASE} && mkdir -p {BASE}")
    _put(f"{BASE}/preprocess_throughput.py", (ROOT / "benchmarks" / "preprocess_throughput.py").read_bytes())
    made = in_container("node1", f"python3 {BASE}/preprocess_throughput.py fixtures {FX} --mb 2")
    yield json.loads(made.stdout)
    in_container("node1", f"rm -rf {BASE}", check=False)


@pytest.mark.parametrize("kind", list(TOKENIZERS))
def test_round_trip(fixtures, kind):
    tokenizer, expected_type = TOKENIZERS[kind]
    prefix = f"{OUT}/{kind}"
    result = _data(*_args(fixtures["corpus"], prefix, tokenizer), "-e", "workers=2")
    assert result.returncode == 0, result.stdout[-4000:]
    progress = [line for line in result.stdout.splitlines() if line.startswith("node1: done,")]
    assert progress and "documents" in progress[0] and "tokens/s" in progress[0]  # the live progress lines
    _put(f"{BASE}/read_back.py", READ_BACK.encode())
    library = {"sentencepiece": "sentencepiece", "huggingface": "huggingface"}.get(kind, "tiktoken")
    back = json.loads(
        in_container("node1", f"python3 {BASE}/read_back.py {prefix} {tokenizer} {library} {fixtures['corpus']}").stdout
    )
    assert back["documents"] == back["texts"] == fixtures["documents"]
    assert back["wrong"] == []
    manifest = back["manifest"]
    tok = manifest["tokenizer"]
    assert tok["type"] == expected_type and tok["path"] == tokenizer
    assert manifest["documents"] == fixtures["documents"] and manifest["tokens"] == back["tokens"]
    assert manifest["skipped"] == {"total": 0, "by_reason": {}, "first_lines": {}}
    assert manifest["input"]["bytes"] == fixtures["bytes"] and len(manifest["input"]["sha256"]) == 64
    assert manifest["workers"] == 2 and manifest["tokens_per_s"] > 0
    assert {"python", "numpy", "megatron_core"} <= set(manifest["versions"])
    if kind == "sentencepiece":
        assert (tok["vocab_size"], tok["eod_id"], tok["eod_token"]) == (2000, 2, "</s>")
    else:  # 3000 BPE ranks + Llama 3's 256 special tokens; <|end_of_text|> is the second
        assert (tok["vocab_size"], tok["eod_id"], tok["eod_token"]) == (3256, 3001, "<|end_of_text|>")
    assert tok["launch_ready"] is (kind != "tiktoken")
    # nothing temporary is left beside the dataset
    assert in_container("node1", f"ls -A {OUT} | grep '^\\.' || true").stdout == ""


def test_tiktoken_and_huggingface_encode_the_same_ids(fixtures):
    """The BPE as a tiktoken file and as tokenizer.json give byte-identical datasets."""
    for kind in ("tiktoken", "huggingface"):
        if in_container("node1", f"test -f {OUT}/{kind}.bin", check=False).returncode:
            pytest.skip("needs the round-trip datasets")
    same = in_container("node1", f"cmp {OUT}/tiktoken.bin {OUT}/huggingface.bin && echo same", check=False)
    assert same.stdout.strip() == "same"


def test_bad_lines_are_skipped_counted_and_limited(fixtures):
    lines = [
        '{"text": "first document"}',
        "{not json",
        '{"title": "no text"}',
        '{"text": ""}',
        "",
        '{"text": "second document"}',
        "[1, 2]",
        '{"text": 7}',
    ]
    _put(f"{BASE}/bad.jsonl", ("\n".join(lines) + "\n").encode())
    ok = _data(*_args(f"{BASE}/bad.jsonl", f"{OUT}/bad"), "-e", "max_bad_lines=5")
    assert ok.returncode == 0, ok.stdout[-4000:]
    manifest = json.loads(in_container("node1", f"cat {OUT}/bad.manifest.json").stdout)
    assert manifest["documents"] == 2
    assert manifest["skipped"]["by_reason"] == {
        "malformed_json": 1,
        "not_an_object": 1,
        "missing_key": 1,
        "not_text": 1,
        "empty_text": 1,
        "blank_line": 1,
    }
    assert manifest["skipped"]["first_lines"]["malformed_json"] == [2]
    assert manifest["skipped"]["first_lines"]["empty_text"] == [4]
    before = in_container("node1", f"md5sum {OUT}/bad.bin {OUT}/bad.idx {OUT}/bad.manifest.json").stdout

    over = _data(*_args(f"{BASE}/bad.jsonl", f"{OUT}/bad"), "-e", "max_bad_lines=2")
    assert over.returncode != 0
    assert f"node1: input {BASE}/bad.jsonl: more than max_bad_lines=2 bad lines" in over.stdout
    assert "malformed json: 1 (first at line(s) 2)" in over.stdout and "raise -e max_bad_lines" in over.stdout
    # the failed rebuild left the good dataset as it was, and no temporaries
    assert in_container("node1", f"md5sum {OUT}/bad.bin {OUT}/bad.idx {OUT}/bad.manifest.json").stdout == before
    assert in_container("node1", f"ls -A {OUT} | grep '^\\.' || true").stdout == ""

    no_key = _data(*_args(f"{BASE}/bad.jsonl", f"{OUT}/nokey"), "-e", "json_key=body", "-e", "max_bad_lines=100")
    assert no_key.returncode != 0
    assert "no document with text under key 'body'" in no_key.stdout and "check -e json_key" in no_key.stdout


def test_invalid_utf8_names_the_line(fixtures):
    _put(f"{BASE}/latin1.jsonl", b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    result = _data(*_args(f"{BASE}/latin1.jsonl", f"{OUT}/latin1"))
    assert result.returncode != 0
    assert f"node1: input {BASE}/latin1.jsonl:2: invalid UTF-8" in result.stdout
    assert "iconv" in result.stdout
    assert in_container("node1", f"ls {OUT}/latin1.bin", check=False).returncode != 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (_args(f"{BASE}/absent.jsonl", f"{OUT}/x"), f"node1: input {BASE}/absent.jsonl does not exist"),
        (_args(f"{FX}/corpus.jsonl", "/sys/mtt-data-tests/x"), "output directory /sys/mtt-data-tests is not writable"),
        (_args(f"{FX}/corpus.jsonl", f"{OUT}/x", f"{BASE}/preprocess_throughput.py"), "neither a tiktoken BPE"),
        (_args(f"{FX}/corpus.jsonl", f"{OUT}/x", f"{BASE}/no-tok"), f"tokenizer {BASE}/no-tok does not exist"),
        (
            # a container without a Megatron-LM tree there (the stand-in has one at /home/Megatron-LM when
            # make megatron-src gave it one)
            [
                *_args(f"{FX}/corpus.jsonl", f"{OUT}/x"),
                "-e",
                "use_megatron_preprocess=true",
                "-e",
                "data_build_megatron_home=/opt/no-megatron",
            ],  # fmt: skip
            "tools/preprocess_data.py is not in this container",
        ),
        (["-e", "input=relative.jsonl", "-e", f"output_prefix={OUT}/x"], "-e tokenizer=... is required"),
        ([*_args(f"{FX}/corpus.jsonl", f"{OUT}/x"), "-e", "workers=two"], "-e workers='two' is not an integer"),
    ],
    ids=[
        "missing-input",
        "unwritable-output",
        "not-a-tokenizer",
        "missing-tokenizer",
        "no-megatron",
        "args",
        "workers",
    ],
)
def test_what_can_be_checked_fails_before_starting(fixtures, extra, message):
    result = _data(*extra)
    assert result.returncode != 0
    assert message in " ".join(result.stdout.split()), result.stdout[-3000:]
    assert "Start the build in the background" not in result.stdout


def test_disk_full_cleans_up_and_keeps_the_old_dataset(fixtures):
    """A container whose output directory is a 512 KiB tmpfs: the build runs out of space."""
    image = in_node("node1", "docker inspect -f '{{.Config.Image}}' train").stdout.strip()
    full = f"{BASE}/full"
    in_node("node1", "docker rm -f mtt-data-full >/dev/null 2>&1 || true")
    in_node(
        "node1",
        f"docker run -d --name mtt-data-full --net host -v /data:/data --tmpfs {full}:size=512k {image} sleep 3600",
    )
    try:
        docker("exec", NODE_CONTAINERS["node1"], "docker", "exec", "mtt-data-full", "sh", "-c",
               f"echo old > {full}/ds.bin && echo old > {full}/ds.idx")  # fmt: skip
        result = _data(
            *_args(f"{FX}/corpus.jsonl", f"{full}/ds"), container_args=("-e", "container_name=mtt-data-full")
        )
        assert result.returncode != 0
        text = " ".join(result.stdout.split())
        assert f"node1: no space left on the device of {full}" in text, result.stdout[-3000:]
        assert "partial files were removed" in text
        listing = docker(
            "exec", NODE_CONTAINERS["node1"], "docker", "exec", "mtt-data-full", "sh", "-c",
            f"ls -A {full}; cat {full}/ds.bin {full}/ds.idx",
        ).stdout.split()  # fmt: skip
        assert listing == ["ds.bin", "ds.idx", "old", "old"]
    finally:
        in_node("node1", "docker rm -f mtt-data-full >/dev/null 2>&1 || true", check=False)


def _copy_to_node2(path: str) -> None:
    """Copy a file of node1's training container to the same path in node2's (storage is not shared)."""
    read = ["docker", "exec", NODE_CONTAINERS["node1"], "docker", "exec", "train", "cat", path]
    content = subprocess.run(read, capture_output=True, check=True, timeout=60).stdout
    command = ["docker", "exec", "-i", NODE_CONTAINERS["node2"], "docker", "exec", "-i", "train"]
    command += ["sh", "-c", f"mkdir -p $(dirname {path}) && cat > {path}"]
    subprocess.run(command, input=content, check=True, timeout=60)


def _built(fixtures, kind: str) -> str:
    """test_round_trip's dataset of ``kind`` (the same corpus and tokenizer), or, when that test did not run (-k),
    one data.yml builds now: its prefix."""
    prefix = f"{OUT}/{kind}"
    if in_container("node1", f"test -f {prefix}.manifest.json", check=False).returncode:
        built = _data(*_args(fixtures["corpus"], prefix, TOKENIZERS[kind][0]))
        assert built.returncode == 0, built.stdout[-4000:]
    return prefix


def test_train_takes_the_tokenizer_from_the_manifest_and_refuses_another(fixtures):
    tokenizer = TOKENIZERS["huggingface"][0]
    prefix = _built(fixtures, "huggingface")
    run = ("-e", "model=tiny", "-e", "seq_length=128", "-e", "num_microbatches=2", "-e", "train_iters=3")
    run += ("-e", f"data_path={prefix}", "-e", "exp=manifest-test")
    # The testbed inventory names its own tokenizer: not the one this dataset was made with.
    refused = playbook("train.yml", *run)
    assert refused.returncode != 0
    text = " ".join(refused.stdout.split())
    assert f"was tokenized with HuggingFaceTokenizer {tokenizer}" in text, text[-3000:]
    assert "but training was given tokenizer_path=/data/tokenizers/testbed" in text
    assert "Launch from the master" not in refused.stdout  # refused before anything was started
    for suffix in (".bin", ".idx", ".manifest.json"):
        _copy_to_node2(prefix + suffix)
    ran = playbook("train.yml", *run, "-e", f"tokenizer_path={tokenizer}")
    assert ran.returncode == 0, ran.stdout[-4000:]
    assert "HuggingFaceTokenizer (from the dataset's manifest" in ran.stdout
    summary = r"dataset +\S+/huggingface: [\d,]+ tokens in [\d,]+ documents; the run reads [\d.e+-]+ epoch"
    assert re.search(summary, ran.stdout), ran.stdout[-4000:]
    in_container("node2", f"rm -rf {BASE}", check=False)


def test_megatron_reads_the_dataset_and_tokenizer_that_data_yml_built(fixtures):
    """data.yml -> train.yml -e smoke=false: Megatron-LM's pretrain_gpt.py on 2 nodes (tp1 pp2 dp2) reads the
    SentencePiece dataset data.yml built, with its tokenizer, each node holding its own copy (storage not shared);
    the sample indexes Megatron builds on rank 0 go to the checkpoint storage the nodes share, where the ranks of
    node2 read them."""
    if not has_megatron():
        pytest.skip("the stand-in image has no Megatron-LM tree (make megatron-src MEGATRON_TARBALL=...)")
    tokenizer = TOKENIZERS["sentencepiece"][0]
    prefix = _built(fixtures, "sentencepiece")
    for path in (prefix + ".bin", prefix + ".idx", prefix + ".manifest.json", tokenizer):
        _copy_to_node2(path)
    exp = "megatron-data"
    in_container("node1", f"rm -rf /data/mtt-train-ops/checkpoints/{exp} /data/mtt-train-ops/runs/{exp}")
    run = ("-e", "smoke=false", "-e", "model=tiny", "-e", "seq_length=128", "-e", "gbs=8", "-e", "mbs=2")
    run += ("-e", "num_microbatches=none", "-e", "train_iters=6", "-e", "tp=1", "-e", "pp=2", "-e", f"exp={exp}")
    run += ("-e", f"data_path={prefix}", "-e", f"tokenizer_path={tokenizer}")
    run += ("-e", json.dumps({"training": {"save_interval": 0, "eval_iters": 0}}))
    ran = playbook("train.yml", *run)
    assert ran.returncode == 0, ran.stdout[-6000:]
    assert "job          Megatron-LM pretrain_gpt.py" in ran.stdout
    assert "SentencePieceTokenizer (from the dataset's manifest" in ran.stdout, ran.stdout[-4000:]
    run_dir = latest_run(exp)
    rank0 = next((run_dir / "node1").rglob("attempt_0/0/stdout.log")).read_text()
    # Megatron's own argument dump and start-up lines: this dataset, this tokenizer (2,000 pieces, padded)
    assert re.search(rf"data_path \.+ \['{re.escape(prefix)}'\]", rank0), rank0[:6000]
    assert re.search(rf"tokenizer_model \.+ {re.escape(tokenizer)}\n", rank0)
    assert "> building SentencePieceTokenizer tokenizer ..." in rank0
    assert re.search(r"padded vocab \(size: 200\d\) with \d+ dummy tokens", rank0), rank0[:8000]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["job"] == "megatron" and summary["state"] == "finished" and summary["last_iteration"] == 6
    # the sample indexes rank 0 built, on the storage the nodes share, describe this dataset
    cache = f"/data/mtt-train-ops/checkpoints/{exp}/data-cache"
    described = in_container("node2", f"cat {cache}/*-GPTDataset-train-description.txt", check=False).stdout
    assert f'"dataset_path": "{prefix}"' in described, described
    in_container("node2", f"rm -rf {BASE}", check=False)
