"""Tokenizer detection looks at the content, never the name, and maps to what Megatron 0.14 can read."""

from __future__ import annotations

import base64
import json

import pytest
from presets import load_preset, make_plan
from trainops.errors import PlanError
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


def test_a_given_type_that_cannot_read_the_controllers_copy_is_refused(tmp_path):
    """-e tokenizer_type is checked against the file when the controller has it (issue 38, point 7)."""
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}}))
    hosts = [{"name": "n1", "ansible_host": "10.0.0.1", "slots": 8}]
    plan = {"model": load_preset("llama3-8b"), "hosts": hosts, "layout": {}, "run_id": "r"}
    with pytest.raises(PlanError, match=r"tokenizer_type=TikTokenizer does not read .* read by HuggingFaceTokenizer"):
        make_plan(**plan, tokenizer_path=str(tmp_path), tokenizer_type="TikTokenizer")
    done = make_plan(**plan, tokenizer_path=str(tmp_path), tokenizer_type="HuggingFaceTokenizer")
    assert done["tokenizer_type"] == "HuggingFaceTokenizer"
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    write_tiktoken(lonely / "tokenizer.model")  # no type of Megatron 0.14 reads it
    with pytest.raises(PlanError, match="tokenizer_type=SentencePieceTokenizer: .* tiktoken BPE file"):
        make_plan(**plan, tokenizer_path=str(lonely / "tokenizer.model"), tokenizer_type="SentencePieceTokenizer")
    # a path the controller does not have is the containers': the given type is taken
    done = make_plan(**plan, tokenizer_path="/nowhere/tok", tokenizer_type="SentencePieceTokenizer")
    assert done["tokenizer_type"] == "SentencePieceTokenizer"


# --- what the dataset builder reads -----------------------------------------------------------------------------


def test_llama3_special_tokens_layout():
    from trainops.tokenizer import llama3_special_tokens

    special = llama3_special_tokens(128000)
    assert len(special) == 256 and max(special.values()) == 128255
    assert special["<|begin_of_text|>"] == 128000 and special["<|end_of_text|>"] == 128001
    assert special["<|eot_id|>"] == 128009 and special["<|reserved_special_token_250|>"] == 128255


def test_read_tiktoken_ranks_names_the_bad_line(tmp_path):
    from trainops.tokenizer import read_tiktoken_ranks

    path = tmp_path / "tokenizer.model"
    write_tiktoken(path)
    assert read_tiktoken_ranks(str(path)) == {t: i for i, t in enumerate(TOKENS)}
    path.write_bytes(path.read_bytes() + b"not-base64!! x\n")
    with pytest.raises(TokenizerFormatError, match=r"tokenizer.model:5: not '<base64 token> <rank>'"):
        read_tiktoken_ranks(str(path))


def test_huggingface_eod_prefers_the_configured_eos():
    from trainops.tokenizer import huggingface_eod

    data = {"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": 5, "content": "</s>"}, {"id": 6, "content": "<e>"}]}
    assert huggingface_eod(data) == ("</s>", 5)
    assert huggingface_eod(data, {"eos_token": {"content": "<e>"}}) == ("<e>", 6)
    with pytest.raises(TokenizerFormatError, match="names eos_token '<x>'"):
        huggingface_eod(data, {"eos_token": "<x>"})
    with pytest.raises(TokenizerFormatError, match="no end-of-document token"):
        huggingface_eod({"model": {"vocab": {"a": 0}}})


def test_describe_tells_the_builder_how_to_encode(tmp_path):
    from trainops.tokenizer import describe

    path = tmp_path / "tokenizer.model"
    write_tiktoken(path)
    bare = describe(str(path))
    assert (bare["format"], bare["type"], bare["encoder"], bare["launch_ready"]) == (
        "tiktoken-bpe",
        "TikTokenizer",
        "tiktoken",
        False,
    )
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE"}}))
    beside = describe(str(path))
    assert (beside["type"], beside["model"], beside["encoder"], beside["launch_ready"]) == (
        "HuggingFaceTokenizer",
        str(tmp_path),
        "tiktoken",
        True,
    )
    directory = describe(str(tmp_path))
    assert (directory["encoder"], directory["source"]) == ("tokenizers", str(tmp_path / "tokenizer.json"))
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps([{"rank": 0, "token_bytes": "YQ==", "token_str": "a"}]))
    with pytest.raises(TokenizerFormatError, match="use_megatron_preprocess"):
        describe(str(vocab))
