"""export.yml (issue 37) on the 2-node testbed with Megatron-LM's own pretrain_gpt.py: the tiny preset (grouped-query
attention, SwiGLU, untied embeddings) trained at tp=2 pp=2 on the testbed's real dataset and tokenizer, its newest
verified save exported to a Hugging Face Llama directory on the master and fetched to the controller; the export
checks itself against Megatron's own model on the run's own tokens; a save the ledger does not list is refused
before any node is contacted; a real layout error in an export (the SwiGLU halves of one layer swapped) fails the
same parity check and names that layer.

Needs a stand-in image with a Megatron-LM tree (`make megatron-src`; .ci/run gives it the vendored tarball).
"""

from __future__ import annotations

import base64
import json
import re

import pytest

from testbed import clean_experiment, has_megatron, in_container, latest_run, nodes_contacted, playbook

pytestmark = pytest.mark.testbed

EXP = "export-tp2pp2"
#: Megatron on the testbed's real dataset and tokenizer (the plan's defaults there), tp=2 pp=2 over the two nodes'
#: four ranks; saves at 5 and 10, retention keeping only the newest (so the ledger lists 10 alone).
TRAIN = (
    "-e", "smoke=false", "-e", "model=tiny", "-e", "tp=2", "-e", "pp=2", "-e", "seq_length=128", "-e", "gbs=8",
    "-e", "num_microbatches=none", "-e", "mbs=2", "-e", "train_iters=10", "-e", "keep_checkpoints=1",
    "-e", json.dumps({"training": {"save_interval": 5, "eval_iters": 0}}), "-e", f"exp={EXP}",
)  # fmt: skip
SWAP_ONE_LAYERS_SWIGLU = """
import json, shutil, sys
from safetensors.torch import load_file, save_file
sys.path.insert(0, sys.argv[1])
from trainops.node import export_hf
from megatron.core import dist_checkpointing
export, bad, save = sys.argv[2], sys.argv[3], sys.argv[4]
shutil.copytree(export, bad)
weights = json.load(open(bad + "/model.safetensors.index.json"))["weight_map"]
shard = bad + "/" + weights["model.layers.2.mlp.gate_proj.weight"]
tensors = load_file(shard)
gate, up = "model.layers.2.mlp.gate_proj.weight", "model.layers.2.mlp.up_proj.weight"
tensors[gate], tensors[up] = tensors[up], tensors[gate]
save_file(tensors, shard, metadata={"format": "pt"})
export_hf.init_distributed(bad)
args = dist_checkpointing.load_common_state_dict(save)["args"]
config = json.load(open(bad + "/config.json"))
print(json.dumps(export_hf.parity(args, save, bad, config["vocab_size"], sys.argv[5], 4, 128)))
"""


@pytest.fixture(scope="module")
def megatron(provisioned):
    if not has_megatron():
        pytest.skip("the stand-in image has no Megatron-LM tree (make megatron-src MEGATRON_TARBALL=...)")


def test_a_tp2_pp2_save_exports_to_a_llama_with_megatrons_logits_and_a_swapped_swiglu_is_caught(megatron, tmp_path):
    clean_experiment(EXP)
    trained = playbook("train.yml", *TRAIN)
    assert trained.returncode == 0, trained.stdout[-5000:]
    run_dir = latest_run(EXP)
    plan = json.loads((run_dir / "plan" / "plan.json").read_text())
    assert (plan["tp"], plan["pp"], plan["data_path"]) == (2, 2, "/data/datasets/testbed_text_document")

    # a save the ledger does not list (retention removed iteration 5) is refused before any node is contacted
    gone = playbook("playbooks/export.yml", "-e", f"run={run_dir}", "-e", "iteration=5")
    assert gone.returncode != 0 and "iteration 5 was removed by the run's retention" in gone.stdout, gone.stdout[-3000:]
    assert not nodes_contacted(gone.stdout)

    fetched = tmp_path / "llama"
    done = playbook("playbooks/export.yml", "-e", f"run={run_dir}", "-e", f"export_dir={fetched}")
    assert done.returncode == 0, done.stdout[-5000:]
    node_dir = f"/data/mtt-train-ops/exports/{EXP}/{run_dir.name}-iter_0000010"
    assert f"export iter_0000010 (verified in the run's ledger) of {run_dir} on node1, to {node_dir}" in done.stdout
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
    assert record["verified"] and record["iteration"] == 10 and record["parity"]["passed"]
    assert record["parity"]["loss_relative_difference"] <= 1e-4
    assert record["parity"]["largest_logit_difference"] <= record["parity"]["logit_tolerance"]

    # the check is no formality: the SwiGLU halves of layer 2 swapped in a copy fail it, at layer 2
    save = f"{plan['checkpoint_dir']}/iter_0000010"
    programs = in_container("node1", "readlink -f /opt/mtt-train-ops/current").stdout.strip()
    script = base64.b64encode(SWAP_ONE_LAYERS_SWIGLU.encode()).decode()
    swapped = in_container(
        "node1",
        f"echo {script} | base64 -d > /tmp/swap.py && PYTHONPATH=/home/Megatron-LM python3 -W ignore /tmp/swap.py "
        f"{programs} {node_dir} /tmp/swapped {save} /data/datasets/testbed_text_document; rm -rf /tmp/swap*",
    )
    parity = json.loads(swapped.stdout.strip().splitlines()[-1])
    assert not parity["passed"] and parity["first_differing_layer"] == 2, parity
    assert parity["largest_logit_difference"] > parity["logit_tolerance"]

    # an export is never written over
    again = playbook("playbooks/export.yml", "-e", f"run={run_dir}", "-e", f"export_dir={fetched}")
    assert again.returncode != 0 and f"-e export_dir={fetched} exists" in again.stdout
    assert not nodes_contacted(again.stdout)
