"""Megatron-LM's pretrain_gpt.py on the 2-node testbed: its start-up and step time per layout, what train.yml adds
to its first iteration, and the time to recover from a killed rank.

    . .venv/bin/activate; make megatron-src MEGATRON_TARBALL=...; make testbed-up
    ansible-playbook -i inventory/testbed provision.yml
    python benchmarks/megatron_testbed.py [--repeat 2] [--iters 30]

For each layout (tp2 pp2 dp1 and tp1 pp2 dp2: 4 ranks, 2 per node) and repetition, in one run:

* ``by hand``: the argument vector plan.yml renders for that layout (its plan.json), run as the runbook ran a
  job: torchrun started by ``docker exec`` in both training containers, workers first, no Ansible. Start-up is
  from the first torchrun to the first iteration line of the last rank (Megatron prints them there; its log is
  polled every 0.2 s); the step time is the median of Megatron's own "elapsed time per iteration" after the
  first 3 iterations.
* ``train.yml``: the same layout and vector through ``ansible-playbook train.yml``, timed the same way from its
  start; the overhead is ``train.yml - by hand``.

Then, once per repetition, recovery on tp1 pp2 dp2 (``-e max_restarts=1``, a torch_dist checkpoint every 10
iterations): from the SIGKILL of rank 3 (node2) after checkpoint 10 to the first iteration line of attempt 2's
last rank. It holds noticing the failure, stopping what is left, collecting, deciding, the launch, and
Megatron's own start-up and checkpoint load (compare it with ``by hand``'s start-up of that layout).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import tempfile
import time

from train_lifecycle import BIN, NODES, ROOT, env, in_container, playbook

LAYOUTS = ((2, 2), (1, 2))
#: What the testbed's Megatron tests run: the tiny preset on Megatron's mock data, fp32, no checkpoints.
MEGATRON = (
    "-e", "smoke=false", "-e", "model=tiny", "-e", "data_path=mock", "-e", "seq_length=128", "-e", "gbs=8",
    "-e", "mbs=2", "-e", "num_microbatches=none", "-e", "precision=fp32",
)  # fmt: skip
NO_SAVES = ("-e", json.dumps({"training": {"save_interval": 0, "eval_iters": 0}}))
ENTRYPOINT = "/home/megatron-lm-musa-patch/examples/llama3/pretrain_gpt.py"
PYTHONPATH = "/home/Megatron-LM:/home/megatron-lm-musa-patch"
_ELAPSED = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?elapsed time per iteration \(ms\): ([\d.]+)")


def _wait(check, what: str, timeout: float = 400, every: float = 0.2) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic()
        time.sleep(every)
    raise SystemExit(f"{what}: not after {timeout} s")


def _has_iteration(log_glob: str) -> bool:
    return in_container("node2", f"grep -qs ' iteration ' {log_glob}").returncode == 0


def _clean(exp: str) -> None:
    """The experiment's run dirs (node-local) and checkpoints (shared), on both nodes."""
    for node in NODES:
        in_container(node, f"rm -rf /data/mtt-train-ops/runs/{exp} /data/mtt-train-ops/checkpoints/{exp}")


def _step_ms(log_text: str) -> float:
    """The median of Megatron's own per-iteration time, after the first 3 iterations."""
    times = [float(ms) for it, ms in _ELAPSED.findall(log_text) if int(it) > 3]
    if not times:
        raise SystemExit("no Megatron iteration line with its elapsed time")
    return statistics.median(times)


def rendered_vector(tp: int, pp: int, iters: int) -> list[str]:
    """The Megatron argument vector plan.yml renders for the layout (the one train.yml launches)."""
    with tempfile.TemporaryDirectory() as plan_dir:
        planned = playbook("playbooks/plan.yml", "-e", f"tp={tp}", "-e", f"pp={pp}", "-e", f"train_iters={iters}",
                           "-e", f"plan_dir={plan_dir}", *MEGATRON, *NO_SAVES)  # fmt: skip
        if planned.returncode != 0:
            raise SystemExit(planned.stdout[-3000:])
        with open(f"{plan_dir}/plan.json", encoding="utf-8") as f:
            args = json.load(f)["megatron_args"]
    args[args.index("--tensorboard-dir") + 1] = "/tmp/bench-megatron-tb"
    return args


def by_hand(tp: int, pp: int, iters: int, round_: int) -> tuple[float, float]:
    """(start-up s, step ms) of the rendered vector under torchrun, started by hand on both nodes."""
    args = " ".join(rendered_vector(tp, pp, iters))
    log_dir = f"/tmp/bench-megatron-{tp}{pp}-{round_}"
    started = time.monotonic()
    for rank, node in sorted(enumerate(NODES), reverse=True):  # workers first, as the fan-out does
        torchrun = (
            f"rm -rf {log_dir}; PYTHONPATH={PYTHONPATH} OMP_NUM_THREADS=1 setsid -f nohup torchrun --nnodes 2 "
            f"--nproc_per_node 2 --node_rank {rank} --master_addr 172.30.0.11 --master_port 14398 "
            f"--rdzv_id mbench{round_}{tp}{pp} --max_restarts 0 --log_dir {log_dir} --redirects 3 "
            f"{ENTRYPOINT} {args} > /dev/null 2>&1 < /dev/null"
        )
        in_container(node, torchrun)
    log = f"{log_dir}/*/attempt_0/1/stdout.log"
    startup = _wait(lambda: _has_iteration(log), "the first iteration by hand") - started
    # to the end, polled every 3 s: a docker exec every 0.2 s costs these 2 cores enough to slow the steps measured
    last = f"grep -qs 'iteration *{iters}/' {log}"
    _wait(lambda: in_container("node2", last).returncode == 0, "the last iteration", every=3)
    text = in_container("node2", f"cat {log}").stdout
    for node in NODES:
        in_container(node, "pkill -f 'pretrain_gp[t].py'; true")
    time.sleep(2)
    return startup, _step_ms(text)


def with_train_yml(tp: int, pp: int, iters: int, round_: int) -> tuple[float, float]:
    """(seconds from train.yml's start to the last rank's first iteration line, step ms) of the same run."""
    exp = f"bench-megatron-{tp}{pp}-{round_}"
    runs = f"/data/mtt-train-ops/runs/{exp}"
    _clean(exp)
    started = time.monotonic()
    job = subprocess.Popen(
        [str(BIN / "ansible-playbook"), "-i", "inventory/testbed", "train.yml", "-e", f"tp={tp}", "-e", f"pp={pp}",
         "-e", f"train_iters={iters}", "-e", f"exp={exp}", *MEGATRON, *NO_SAVES],
        cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    log = f"{runs}/*/logs/node2/*/attempt_0/1/stdout.log"
    first = _wait(lambda: _has_iteration(log), "train.yml's first iteration") - started
    output, _ = job.communicate(timeout=600)
    if job.returncode != 0:
        raise SystemExit(output[-3000:])
    run_dir = sorted((ROOT / "runs" / exp).glob("2*"))[-1]
    text = "".join(p.read_text() for p in (run_dir / "node2").rglob("attempt_0/1/stdout.log"))
    return first, _step_ms(text)


def recovery(round_: int) -> float:
    """Seconds from the SIGKILL of rank 3 (after checkpoint 10) to attempt 2's first iteration line."""
    exp = f"bench-megatron-recover-{round_}"
    runs = f"/data/mtt-train-ops/runs/{exp}"
    tracker = f"/data/mtt-train-ops/checkpoints/{exp}/latest_checkpointed_iteration.txt"
    _clean(exp)
    saves = ("-e", json.dumps({"training": {"save_interval": 10, "eval_iters": 0}}))
    job = subprocess.Popen(
        [str(BIN / "ansible-playbook"), "-i", "inventory/testbed", "train.yml", "-e", "tp=1", "-e", "pp=2",
         "-e", "train_iters=100000", "-e", f"exp={exp}", "-e", "max_restarts=1", *MEGATRON, *saves],
        cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    rank_3 = (
        "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null | grep -qx RANK=3 && "
        "grep -qs pretrain_gpt $p/cmdline && echo ${p#/proc/}; done | head -1"
    )
    try:
        _wait(lambda: in_container("node1", f"grep -qs . {tracker}").returncode == 0, "checkpoint 10")
        in_container("node2", f"kill -9 $({rank_3})")
        killed = time.monotonic()
        log = f"{runs}/*/logs/node2/*/attempt_0/1/stdout.log"
        started = _wait(
            lambda: (
                in_container("node2", f"ls -d {runs}/*/attempt-1 >/dev/null 2>&1").returncode == 0
                and _has_iteration(log)
            ),
            "attempt 2's first iteration",
        )
        return started - killed
    finally:
        playbook("stop.yml")
        job.wait(timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    if playbook("stop.yml").returncode != 0:
        raise SystemExit("stop.yml failed: is the testbed provisioned?")
    rows: dict[str, list[tuple[float, ...]]] = {}
    recoveries = []
    for round_ in range(args.repeat):
        for tp, pp in LAYOUTS:
            name = f"tp{tp} pp{pp} dp{4 // (tp * pp)}"
            hand_start, hand_ms = by_hand(tp, pp, args.iters, round_)
            yml_start, yml_ms = with_train_yml(tp, pp, args.iters, round_)
            rows.setdefault(name, []).append((hand_start, yml_start, hand_ms, yml_ms))
            print(
                f"round {round_ + 1} {name}: start-up by hand {hand_start:5.1f} s, train.yml {yml_start:5.1f} s "
                f"(+{yml_start - hand_start:4.1f} s) | step {hand_ms:6.1f} ms by hand, {yml_ms:6.1f} ms train.yml",
                flush=True,
            )
        recoveries.append(recovery(round_))
        print(f"round {round_ + 1} recovery (tp1 pp2 dp2): kill to attempt 2's first iteration {recoveries[-1]:5.1f} s")
    for name, cols in rows.items():
        hand_start, yml_start, hand_ms, yml_ms = (statistics.median(col) for col in zip(*cols, strict=True))
        print(
            f"median {name}: start-up by hand {hand_start:5.1f} s | train.yml to the first iteration "
            f"{yml_start:5.1f} s | overhead {yml_start - hand_start:4.1f} s | step {hand_ms:6.1f} ms by hand, "
            f"{yml_ms:6.1f} ms in train.yml (ratio {yml_ms / hand_ms:.3f})"
        )
    print(f"median recovery (tp1 pp2 dp2): {statistics.median(recoveries):5.1f} s")


if __name__ == "__main__":
    main()
