"""Megatron-LM's own pretrain_gpt.py (core_v0.14.0, unmodified) trains in the testbed's stand-in image on the CPU.

One container of the stand-in image (`docker run`, no network) runs every check; the ranks are torchrun's, gloo.
(a) The CPU patch's pretrain_gpt.py trains a tiny GPT with TP=2 PP=2 and the distributed optimizer, saves a
    torch_dist checkpoint, and a second run resumed from it has the uninterrupted run's loss.
(b) Each patch is needed: with it left out (MTT_CPU_PATCH_SKIP, test only), Megatron fails where the patch's
    table says, or, for the silent ones (the CUDA RNG, D3), trains to a different loss. These checks run on one
    rank wherever a point does not need TP or PP, with as few iterations as show the point.
(c) A Llama's save exported to Hugging Face and imported again (issue 37) starts a run exactly where Megatron's own
    load of the save does; a copy of the export with one layer's SwiGLU halves swapped fails the export's parity
    check, naming that layer.
The image must hold a Megatron-LM tree (make megatron-src); without one the module is skipped.

The module needs the stand-in image, not the testbed's nodes (marker `standin`): `make test` runs it beside the
testbed's tests, its container in the CPU cgroup MTT_STANDIN_CGROUP_PARENT names (tools/test-all.sh makes one that
runs only on CPU time nobody else wants), so that it uses the time the testbed's tests spend waiting; the tests it
runs beside still lose some speed to it (benchmarks/RESULTS.md). Its time limits, there only to stop a hang, allow
for the minutes such a container may wait for a CPU.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
import re
import subprocess
import uuid

import pytest

from testbed import ROOT, env, images

pytestmark = pytest.mark.standin

#: The CPU cgroup the module's container runs in (docker run --cgroup-parent), when make test gives one.
CGROUP_PARENT = os.environ.get("MTT_STANDIN_CGROUP_PARENT", "")
#: A launch that fails at a missing patch takes 4-5 s alone and a 4-rank run under a minute: a limit of minutes
#: stops a hang, also when the container waits for the CPU behind the testbed's tests.
LAUNCH_TIMEOUT_S = 900

PATCH = "/home/megatron-lm-musa-patch/examples/llama3/pretrain_gpt.py"
#: A tiny GPT in fp32 with dropout off (so that a resume can equal an uninterrupted run), mock data.
MODEL = (
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
    "--vocab-size 4096 --make-vocab-size-divisible-by 256 --tokenizer-type NullTokenizer --mock-data "
    "--micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine "
    "--lr-warmup-iters 2 --seed 1234 --attention-dropout 0 --hidden-dropout 0 "
    "--transformer-impl local --use-distributed-optimizer --ckpt-format torch_dist --distributed-backend gloo "
    "--no-gradient-accumulation-fusion --no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-dropout-fusion "
    "--no-rope-fusion --no-persist-layer-norm --log-interval 1 --eval-interval 1000 --eval-iters 0 "
    "--save-interval 1000 --distributed-timeout-minutes 15"  # not 10: the container may wait for the CPU (above)
)
_PORTS = itertools.count(29400)
_ITERATION = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?lm loss: ([0-9.E+-]+)")


def _run(*cmd: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def container():
    """A container of the stand-in image (built as `make testbed-up` builds it), removed at the end. The image ships
    the Megatron-LM tree uncompiled: the first launch writes its bytecode and every later launch reuses it, as in a
    training container provision.yml starts."""
    for step in (["testbed/host-setup.sh"], ["testbed/build-images.sh"]):
        done = _run(*step, timeout=3600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    built = images()
    if not built["standin_megatron_tree"]:
        pytest.skip(
            "the stand-in image has no Megatron-LM tree: run `make megatron-src MEGATRON_TARBALL=<core_v0.14.0 "
            "tarball>` (or MEGATRON_GIT=<clone>) first"
        )
    name = f"mtt-megatron-cpu-{uuid.uuid4().hex[:8]}"
    in_cgroup = ("--cgroup-parent", CGROUP_PARENT) if CGROUP_PARENT else ()
    started = _run(
        "docker", "run", "-d", "--rm", "--name", name, "--network", "none", "--shm-size", "1g", *in_cgroup,
        "-e", "OMP_NUM_THREADS=1", built["standin_image"], "sleep", "infinity",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    # the image ships the dataset helpers unbuilt and the patch makes Megatron's compile a no-op, as the vendor's
    # image and musa_patch do: build them as provision.yml does (roles/dataset_helpers)
    script = (ROOT / "plugins/module_utils/trainops/node/dataset_helpers.py").read_text()
    built = _run("docker", "exec", name, "python3", "-c", script, "--megatron-home=/home/Megatron-LM", "--mode=build")
    assert built.returncode == 0 and '"importable": true' in built.stdout, built.stdout + built.stderr
    yield name
    _run("docker", "rm", "-f", name)


def megatron(
    container: str, name: str, *, tp=1, pp=1, ranks=1, until=2, extra="", skip="", timeout=LAUNCH_TIMEOUT_S, model=MODEL
):
    """torchrun of the patched pretrain_gpt.py in the container, checkpoints in /tmp/ckpt/<name>; returns
    (exit status, output, {iteration: lm loss})."""
    command = (
        f"MTT_CPU_PATCH_SKIP={skip} timeout {timeout - 10} torchrun --nproc-per-node {ranks} "
        f"--master-port {next(_PORTS)} {PATCH} {model} "
        f"--tensor-model-parallel-size {tp} --pipeline-model-parallel-size {pp} --exit-interval {until} "
        f"--save /tmp/ckpt/{name} {extra} 2>&1"
    )
    done = subprocess.run(
        ["docker", "exec", container, "bash", "-c", command], capture_output=True, text=True, timeout=timeout
    )
    losses = {int(i): float(loss) for i, loss in _ITERATION.findall(done.stdout)}
    return done.returncode, done.stdout, losses


def _close(a: dict[int, float], b: dict[int, float], iterations) -> float:
    return max(abs(a[i] - b[i]) / abs(a[i]) for i in iterations)


def test_the_tree_and_the_wheel_are_one_megatron_core(container):
    script = (
        "cd / && python3 -W ignore -c 'import megatron.core as m; print(m.__version__, m.__file__)' && "
        "cd /home/Megatron-LM && python3 -W ignore -c 'import megatron.core as m; print(m.__version__, m.__file__)'"
    )
    done = subprocess.run(["docker", "exec", container, "bash", "-c", script], capture_output=True, text=True)
    wheel, tree = done.stdout.split("\n")[:2]
    assert wheel.startswith("0.14.0 /usr/local/lib/python3") and tree.startswith("0.14.0 /home/Megatron-LM/"), done
    license_check = ["docker", "exec", container, "grep", "-q", "NVIDIA", "/home/Megatron-LM/LICENSE"]
    assert subprocess.run(license_check).returncode == 0


def test_tp2_pp2_trains_saves_and_resumes_to_the_same_loss(container):
    """4 ranks: 6 iterations with torch_dist checkpoints at 3 and 6; a second run loads iteration 3 and trains
    4-6 to the uninterrupted run's loss (fp32, dropout off)."""
    rc, out, straight = megatron(container, "tp2pp2", tp=2, pp=2, ranks=4, until=6, extra="--save-interval 3")
    assert rc == 0 and sorted(straight) == [1, 2, 3, 4, 5, 6], out[-4000:]
    assert "successfully saved checkpoint from iteration       3" in out, out[-3000:]
    resume = "--load /tmp/ckpt/tp2pp2 --ckpt-step 3 --save-interval 3"
    rc, out, resumed = megatron(container, "tp2pp2-resumed", tp=2, pp=2, ranks=4, until=6, extra=resume)
    assert rc == 0 and "successfully loaded checkpoint from /tmp/ckpt/tp2pp2 [ t 1/2, p 1/2 ] at iteration 3" in out
    assert sorted(resumed) == [4, 5, 6], out[-4000:]
    assert _close(straight, resumed, [4, 5, 6]) < 1e-5, (straight, resumed)


#: A Llama (grouped-query attention, SwiGLU, RMSNorm, RoPE, untied embeddings) in bf16 on mock data; its vocabulary
#: (4,159 + the NullTokenizer's end-of-document token) needs no padding at tp=1 and 64 rows at tp=2.
LLAMA = (
    "--num-layers 4 --hidden-size 128 --ffn-hidden-size 352 --num-attention-heads 8 --group-query-attention "
    "--num-query-groups 4 --seq-length 64 --max-position-embeddings 128 --position-embedding-type rope "
    "--no-position-embedding --swiglu --normalization RMSNorm --untie-embeddings-and-output-weights "
    "--disable-bias-linear --vocab-size 4159 --make-vocab-size-divisible-by 64 --tokenizer-type NullTokenizer "
    "--mock-data --micro-batch-size 2 --global-batch-size 8 --train-iters 20 --lr 1e-3 --min-lr 1e-4 "
    "--lr-decay-style cosine --lr-warmup-iters 2 --seed 1234 --attention-dropout 0 --hidden-dropout 0 "
    "--transformer-impl local --use-distributed-optimizer --ckpt-format torch_dist --distributed-backend gloo "
    "--no-gradient-accumulation-fusion --no-masked-softmax-fusion --no-bias-gelu-fusion --no-bias-dropout-fusion "
    "--no-rope-fusion --no-persist-layer-norm --log-interval 1 --eval-interval 1000 --eval-iters 0 "
    "--save-interval 1000 --bf16 --distributed-timeout-minutes 15"
)


#: A copy of an export with the SwiGLU halves (gate and up) of layer 2 swapped, then the export's own parity check of
#: that copy against the save: a real layout error that loads and runs. Arguments: the export, the copy, the save.
SWAP_ONE_LAYERS_SWIGLU = """
import json, shutil, sys
from safetensors.torch import load_file, save_file
sys.path.insert(0, "/tmp/pkg")
from trainops.node import export_hf
from megatron.core import dist_checkpointing
export, bad, save = sys.argv[1:4]
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
print(json.dumps(export_hf.parity(args, save, bad, config["vocab_size"], None, 4, 128)))
"""


def _node_program(container: str, program: str, *args: str) -> dict:
    """One of the node package's programs (copied into the container) with Megatron on its path; its JSON line."""
    done = subprocess.run(
        ["docker", "exec", "-e", "PYTHONPATH=/home/Megatron-LM", container, "python3", "-W", "ignore",
         f"/tmp/pkg/trainops/node/{program}", *args], capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S,
    )  # fmt: skip
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_llama_exported_and_imported_again_starts_exactly_where_megatrons_own_load_of_its_save_does(container):
    """Issue 37's round trip, exact: a tp=2 pp=2 save exported to Hugging Face and imported again; at tp=1 pp=2, a run
    from the import and a run Megatron starts from the save itself (--pretrained-checkpoint, its own resharding load)
    print the same losses to the last digit. A copy of the export with one layer's SwiGLU halves swapped fails the
    export's parity check at that layer."""
    rc, out, _ = megatron(container, "llama-tp2pp2", model=LLAMA, tp=2, pp=2, ranks=4, until=6)
    assert rc == 0 and "successfully saved checkpoint from iteration       6" in out, out[-3000:]
    subprocess.run(["docker", "exec", container, "mkdir", "-p", "/tmp/pkg"], check=True)
    subprocess.run(["docker", "cp", str(ROOT / "plugins/module_utils/trainops"), f"{container}:/tmp/pkg/"], check=True)
    exported = _node_program(container, "export_hf.py", "--save", "/tmp/ckpt/llama-tp2pp2/iter_0000006",
                             "--out", "/tmp/llama-hf")  # fmt: skip
    assert exported["verified"] and (exported["vocab_size"], exported["padded_vocab_size"]) == (4160, 4224)
    # the check is no formality: the SwiGLU halves of layer 2 swapped in a copy of the export fail it, at layer 2
    swapped = subprocess.run(
        ["docker", "exec", "-e", "PYTHONPATH=/home/Megatron-LM", container, "python3", "-W", "ignore", "-c",
         SWAP_ONE_LAYERS_SWIGLU, "/tmp/llama-hf", "/tmp/llama-hf-swapped", "/tmp/ckpt/llama-tp2pp2/iter_0000006"],
        capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S,
    )  # fmt: skip
    assert swapped.stdout.strip(), swapped.stderr[-3000:]
    parity = json.loads(swapped.stdout.strip().splitlines()[-1])
    assert not parity["passed"] and parity["first_differing_layer"] == 2, parity
    assert parity["largest_logit_difference"] > parity["logit_tolerance"]
    # what a user can get wrong is refused before anything is written, naming the cause
    other = _node_program(container, "import_hf.py", "--hf", "/tmp/llama-hf", "--out", "/tmp/refused",
                          "--expect", '{"hidden_size": 4096, "num_key_value_heads": 8}')  # fmt: skip
    assert other["error"].startswith("/tmp/llama-hf is not the run's model: hidden_size is 128 in config.json, 4096")
    assert "num_key_value_heads is 4 in config.json, 8 in the run's model" in other["error"]
    missing = _node_program(container, "import_hf.py", "--hf", "/tmp/no-such-dir", "--out", "/tmp/refused")
    assert "--hf must name a Hugging Face model directory" in missing["error"], missing
    assert subprocess.run(["docker", "exec", container, "test", "-e", "/tmp/refused"]).returncode != 0
    imported = _node_program(container, "import_hf.py", "--hf", "/tmp/llama-hf", "--out", "/tmp/llama-imported")
    assert imported["verified"] and not imported["reused"], imported
    losses = {}
    for name, start in (("from-import", "/tmp/llama-imported"), ("from-save", "/tmp/ckpt/llama-tp2pp2")):
        extra = f"--pretrained-checkpoint {start} --load /tmp/ckpt/{name}"
        rc, out, losses[name] = megatron(container, name, model=LLAMA, tp=1, pp=2, ranks=2, until=2, extra=extra)
        assert rc == 0 and f"attempting to finetune with checkpoint in {start}" in out, out[-3000:]
    assert sorted(losses["from-save"]) == [1, 2] and losses["from-import"] == losses["from-save"], losses


#: patch left out -> what its absence does on one rank (a traceback's text)
CRASHES = {
    "environment": "_warmup_jit_function",  # torch.compile runs, the inductor trips on the CPU-as-CUDA device
    "cuda_api": "AssertionError: Megatron requires CUDA.",
    "device_redirect": "AssertionError: Torch not compiled with CUDA enabled",
    "cuda_type_names": "TypeError: Wrapped parameters must be one of torch.cuda.FloatTensor",
    "no_compile_dependencies": "megatron/legacy/fused_kernels/__init__.py",
}


#: what test_each_patch_is_needed leaves out besides CRASHES
SILENT_OR_AT_RESUME = {
    "cuda_rng",
    "distopt_d1_step_before_first_step",
    "distopt_d2_step_not_in_checkpoint",
    "distopt_d3_shared_step",
    "enum_pickle_by_value",
}


def test_every_patch_is_left_out_once():
    table = (
        ROOT / "testbed/images/training-suite-standin/rootfs/home/megatron-lm-musa-patch/patch_targets.py"
    ).read_text()
    declared = set(re.findall(r'^    "([a-z0-9_]+)": Patch\(', table, re.M))
    assert declared and declared == set(CRASHES) | SILENT_OR_AT_RESUME


def test_each_patch_is_needed(container):
    """Every patch of the table, left out one at a time, makes Megatron fail or train to another loss. The runs are
    single-threaded (OMP_NUM_THREADS=1), each with its own port and checkpoint directory: two run at once, and a run
    that resumes starts once the save it loads is written."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:

        def launch(name: str, **kwargs) -> concurrent.futures.Future:
            return pool.submit(megatron, container, name, **kwargs)

        base_run = launch("base", until=4, extra="--save-interval 2")
        crashes = {patch: launch(f"no-{patch}", until=1, skip=patch) for patch in CRASHES}
        # The CUDA RNG: without it seeding the tracker does nothing and the initial weights are others.
        no_rng_run = launch("no-cuda_rng", until=1, skip="cuda_rng")
        # Enum members pickled by name (Debian's Python 3.11.2): a checkpoint written without the patch cannot load.
        no_enum_run = launch("no-enum", until=1, skip="enum_pickle_by_value")
        rc, out, base = base_run.result()
        assert rc == 0 and sorted(base) == [1, 2, 3, 4], out[-4000:]
        # The distributed optimizer's resume (from the base run's iteration 2): D1 and D2 fail at the load, D3
        # trains on with a wrong bias correction; with every patch the resume equals the base run.
        resume = "--load /tmp/ckpt/base --ckpt-step 2"
        resumed_run = launch("resumed", until=4, extra=resume)
        at_resume = {
            patch: (launch(f"no-{patch}", until=3, extra=resume, skip=patch), expected)
            for patch, expected in {
                "distopt_d1_step_before_first_step": "assert len(steps) == 1",
                "distopt_d2_step_not_in_checkpoint": "KeyError: 'step'",
            }.items()
        }
        no_d3_run = launch("no-d3", until=4, extra=resume, skip="distopt_d3_shared_step")
        no_enum = no_enum_run.result()
        no_enum_resumed_run = launch(
            "no-enum-resumed", until=2, extra="--load /tmp/ckpt/no-enum", skip="enum_pickle_by_value"
        )

        problems = []
        for patch, expected in CRASHES.items():
            rc, out, _ = crashes[patch].result()
            if rc == 0 or expected not in out:
                problems.append(f"{patch}: exit {rc}, expected {expected!r} in:\n{out[-1500:]}")
        rc, out, no_rng = no_rng_run.result()
        if rc != 0 or abs(no_rng.get(1, 0.0) - base[1]) < 1e-4 * base[1]:
            problems.append(f"cuda_rng: exit {rc}, loss {no_rng.get(1)} against {base[1]} with it:\n{out[-1500:]}")
        rc, out, resumed = resumed_run.result()
        if rc != 0 or sorted(resumed) != [3, 4] or _close(base, resumed, [3, 4]) >= 1e-5:
            problems.append(f"resume with every patch: exit {rc}, {resumed} against {base}:\n{out[-1500:]}")
        for patch, (run, expected) in at_resume.items():
            rc, out, _ = run.result()
            if rc == 0 or expected not in out:
                problems.append(f"{patch}: exit {rc}, expected {expected!r} in:\n{out[-1500:]}")
        (rc, out, _), (rc2, out2, _) = no_enum, no_enum_resumed_run.result()
        if rc != 0 or rc2 == 0 or "GLOBAL getattr was not an allowed global" not in out2:
            problems.append(f"enum_pickle_by_value: exit {rc} then {rc2}:\n{out[-800:]}\n{out2[-1500:]}")
        rc, out, shared = no_d3_run.result()
        if rc != 0 or sorted(shared) != [3, 4] or _close(base, shared, [4]) < 1e-5:
            problems.append(f"distopt_d3_shared_step: exit {rc}, {shared} against {base}:\n{out[-1500:]}")
    assert not problems, "\n\n".join(problems)


def test_without_psutil_the_patch_fails_instead_of_hanging(container):
    """psutil hidden (a module of that name that fails to import): the patch stops at once, by name."""
    script = (
        "mkdir -p /tmp/nopsutil && echo 'raise ImportError(\"hidden by the test\")' > /tmp/nopsutil/psutil.py && "
        f"PYTHONPATH=/tmp/nopsutil timeout {LAUNCH_TIMEOUT_S - 10} python3 {PATCH} --help 2>&1"
    )
    done = subprocess.run(["docker", "exec", container, "bash", "-c", script], capture_output=True, text=True)
    assert done.returncode == 1 and "psutil is missing" in done.stdout, done.stdout[-2000:]
