"""export.yml (issue 37) on the 2-node testbed with Megatron-LM's own pretrain_gpt.py: the tiny preset (grouped-query
attention, SwiGLU, untied embeddings) trained at tp=2 pp=2 on the testbed's real dataset and tokenizer (the run
test_megatron_train.py checks end to end: testbed.tp2_pp2_run), its newest verified save exported to a Hugging Face
Llama directory on the master and fetched to the controller; the export checks itself against Megatron's own model on
the run's own tokens; a save the ledger does not list is refused before any node is contacted; the export goes back
in (train.yml -e init_from) at tp=1 pp=2, imported and checked on the master, and that run's first loss is the
exported model's on its first batch. That the parity check fails a real layout error in an export (the SwiGLU halves
of one layer swapped), naming that layer, is test_megatron_cpu.py's, in the stand-in image.

Needs a stand-in image with a Megatron-LM tree (`make megatron-src`; .ci/run gives it the vendored tarball).
"""

from __future__ import annotations

import base64
import json
import re

import pytest

from testbed import (
    TP2_PP2_EXP,
    clean_experiment,
    has_megatron,
    in_container,
    latest_run,
    nodes_contacted,
    playbook,
    tp2_pp2_run,
)

pytestmark = pytest.mark.testbed

EXP = TP2_PP2_EXP
REIMPORT = "export-reimport-tp1pp2"
#: Megatron on the testbed's real dataset and tokenizer (the plan's defaults there), for the import's run.
MEGATRON = (
    "-e", "smoke=false", "-e", "model=tiny", "-e", "seq_length=128", "-e", "gbs=8", "-e", "num_microbatches=none",
    "-e", "mbs=2", "-e", json.dumps({"training": {"save_interval": 5, "eval_iters": 0}}),
)  # fmt: skip

#: The loss the exported model gives the first global batch of a run, as Megatron computes it: the batch from the
#: run's own sample indexes (Megatron's GPTDataset files in its data cache: shuffle, sample and document index, read
#: as GPTDataset._query_document_sample_shuffle_indices does), the logits over the padded vocabulary with the
#: padding rows' logits 0 (a load of fewer rows zero-fills them: allow_shape_mismatch), float32.
FIRST_BATCH_LOSS = """
import glob, json, sys
import numpy, torch
from megatron.core.datasets.indexed_dataset import IndexedDataset
from transformers import LlamaForCausalLM
hf_dir, data_path, cache, gbs, seq, padded = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:])
(document,) = glob.glob(cache + "/*-GPTDataset-train-document_index.npy")
load = lambda kind: numpy.load(document.replace("document_index", kind), allow_pickle=True, mmap_mode="r")
documents, samples, shuffle = load("document_index"), load("sample_index"), load("shuffle_index")
dataset = IndexedDataset(data_path)
batch = []
for index in shuffle[:gbs]:
    (first, first_offset), (last, last_offset) = samples[index], samples[index + 1]
    if first == last:
        parts = [dataset.get(documents[first], offset=first_offset, length=last_offset - first_offset + 1)]
    else:
        parts = [dataset.get(documents[first], offset=first_offset)]
        parts += [dataset.get(documents[i]) for i in range(first + 1, last)]
        parts.append(dataset.get(documents[last], length=last_offset + 1))
    text = numpy.concatenate(parts)
    assert len(text) == seq + 1, (len(text), "a padded sample: the check reads whole ones only")
    batch.append(torch.from_numpy(text.astype(numpy.int64)))
text = torch.stack(batch)
model = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
with torch.no_grad():
    logits = model(input_ids=text[:, :-1]).logits
logits = torch.cat([logits, torch.zeros(*logits.shape[:2], padded - logits.shape[-1])], dim=-1)
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, padded).double(), text[:, 1:].reshape(-1))
print(json.dumps({"loss": float(loss)}))
"""


def _in_master(script: str, *args: str) -> dict:
    """A Python script in node1's training container (Megatron on its path), its last line as JSON."""
    encoded = base64.b64encode(script.encode()).decode()
    done = in_container(
        "node1",
        f"echo {encoded} | base64 -d > /tmp/check.py && PYTHONPATH=/home/Megatron-LM python3 -W ignore /tmp/check.py "
        + " ".join(args) + "; rm -f /tmp/check.py",
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def megatron(provisioned):
    if not has_megatron():
        pytest.skip("the stand-in image has no Megatron-LM tree (make megatron-src MEGATRON_TARBALL=...)")


def test_a_tp2_pp2_save_exports_to_a_llama_with_megatrons_logits_and_goes_back_in_at_tp1_pp2(megatron, tmp_path):
    trained, run_dir = tp2_pp2_run()  # saves at 5, 10 and 15; retention keeps the newest two
    assert trained.returncode == 0, trained.stdout[-5000:]
    plan = json.loads((run_dir / "plan" / "plan.json").read_text())
    assert (plan["tp"], plan["pp"], plan["data_path"]) == (2, 2, "/data/datasets/testbed_text_document")

    # a save the ledger does not list (retention removed iteration 5) is refused before any node is contacted
    gone = playbook("playbooks/export.yml", "-e", f"run={run_dir}", "-e", "iteration=5")
    assert gone.returncode != 0 and "iteration 5 was removed by the run's retention" in gone.stdout, gone.stdout[-3000:]
    assert not nodes_contacted(gone.stdout)

    fetched = tmp_path / "llama"
    done = playbook("playbooks/export.yml", "-e", f"run={run_dir}", "-e", f"export_dir={fetched}")
    assert done.returncode == 0, done.stdout[-5000:]
    node_dir = f"/data/mtt-train-ops/exports/{EXP}/{run_dir.name}-iter_0000015"
    assert f"export iter_0000015 (verified in the run's ledger) of {run_dir} on node1, to {node_dir}" in done.stdout
    assert re.search(r"verified: Megatron's model and transformers' LlamaForCausalLM on 4 sequences of 128 tokens "
                     r"\(/data/datasets/testbed_text_document\)", done.stdout), done.stdout[-3000:]  # fmt: skip

    # the model that was trained, as transformers reads it, fetched whole to the controller
    config = json.loads((fetched / "config.json").read_text())
    assert (fetched / "tokenizer.json").is_file() and (fetched / "generation_config.json").is_file()
    assert config["vocab_size"] == plan["vocab_size"] < plan["padded_vocab_size"], (config, plan["vocab_source"])
    assert {k: config[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                   "num_key_value_heads", "tie_word_embeddings", "architectures")} == {
        "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 4, "tie_word_embeddings": False, "architectures": ["LlamaForCausalLM"]}  # fmt: skip
    index = json.loads((fetched / "model.safetensors.index.json").read_text())
    assert len(index["weight_map"]) == 4 * 9 + 3 and "lm_head.weight" in index["weight_map"]
    assert sorted(set(index["weight_map"].values())) == [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    record = json.loads((fetched / "export.json").read_text())
    assert record["verified"] and record["iteration"] == 15 and record["parity"]["passed"]
    assert record["parity"]["loss_relative_difference"] <= 1e-4
    assert record["parity"]["largest_logit_difference"] <= record["parity"]["logit_tolerance"]

    # that the check is no formality (an export with one layer's SwiGLU halves swapped fails it, naming that layer)
    # is test_megatron_cpu.py's, on the same architecture in the stand-in image, off this module's time

    # an export is never written over
    again = playbook("playbooks/export.yml", "-e", f"run={run_dir}", "-e", f"export_dir={fetched}")
    assert again.returncode != 0 and f"-e export_dir={fetched} exists" in again.stdout
    assert not nodes_contacted(again.stdout)

    # ... and goes back in: a run at another layout (tp=1 pp=2) starts from the export (-e init_from), imported and
    # checked on the master, and its first loss is the exported model's on that batch. In float32 (-e
    # precision=fp32, not the default bf16) so that Megatron's loss and transformers' agree to the last digits.
    reimport = (*MEGATRON, "-e", "tp=1", "-e", "pp=2", "-e", "train_iters=2", "-e", "precision=fp32")
    programs = in_container("node1", "readlink -f /opt/mtt-train-ops/current").stdout.strip()
    clean_experiment(REIMPORT)
    in_container("node1", f"rm -rf /data/mtt-train-ops/checkpoints/{REIMPORT}.imported")
    started = playbook("train.yml", *reimport, "-e", f"exp={REIMPORT}", "-e", f"init_from={node_dir}")
    assert started.returncode == 0, started.stdout[-5000:]
    imported = f"/data/mtt-train-ops/checkpoints/{REIMPORT}.imported"
    assert f"init_from    {node_dir} imported to node1:{imported} (bfloat16, vocabulary {plan['vocab_size']})" in (
        started.stdout
    )
    assert f"resume       none: a fresh start from the weights of {node_dir} (imported to {imported})" in started.stdout
    # the same files again: the verified import is reused, not repeated
    again = in_container("node1", f"PYTHONPATH=/home/Megatron-LM python3 -W ignore {programs}/trainops/node/"
                                  f"import_hf.py --hf {node_dir} --out {imported} 2>/dev/null")  # fmt: skip
    assert json.loads(again.stdout.strip().splitlines()[-1])["reused"]
    reimport_run = latest_run(REIMPORT)
    reimport_plan = json.loads((reimport_run / "plan" / "plan.json").read_text())
    first = json.loads((reimport_run / "metrics.jsonl").read_text().splitlines()[0])
    assert first["iteration"] == 1
    expected = _in_master(
        FIRST_BATCH_LOSS, node_dir, plan["data_path"], f"{reimport_plan['checkpoint_dir']}/data-cache",
        str(reimport_plan["global_batch_size"]), str(reimport_plan["seq_length"]),
        str(reimport_plan["padded_vocab_size"]),
    )  # fmt: skip
    print(f"first loss {first['losses']['lm loss']}, the exported model's {expected['loss']}")  # for the record
    assert abs(first["losses"]["lm loss"] - expected["loss"]) <= 1e-4 * expected["loss"], (first, expected)
