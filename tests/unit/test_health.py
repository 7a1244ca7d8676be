"""The health verdicts (trainops.health) from facts as roles/health_check gathers them, with the device tool's
outputs recorded on real machines (tests/fixtures/nvidia-smi, tests/fixtures/mthreads-gmi)."""

from __future__ import annotations

import json
from pathlib import Path

from trainops import health

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GIB = 1024**3
HEALTHY = (FIXTURES / "nvidia-smi" / "h100x8-healthy-565.57.01.txt").read_text()


def node(output: str = HEALTHY, tool: str = "nvidia-smi", slots: int = 8, free_gib: float = 500, **stack) -> dict:
    return {
        "slots": slots,
        "device_tool": tool,
        "device_query": {"rc": 0, "output": output},
        "stack": {"torch": "2.5.1", "megatron": "4f1c9a0e2b7d (1210 files)", "image": "sha256:aa", **stack},
        "disk": {"path": "/data/mtt-train-ops/checkpoints/x", "free_bytes": int(free_gib * GIB)},
        "kernel_log": {"readable": False, "error": "dmesg: read kernel buffer failed: Operation not permitted"},
    }


def check(verdict: dict, name: str) -> dict:
    return next(c for c in verdict["checks"] if c["check"] == name)


def test_healthy_nodes_pass_every_check_they_can_see():
    verdicts = health.judge({"n1": node(), "n2": node()}, {"card_memory_mib": 81920, "checkpoint_bytes": 105 * GIB})
    for v in verdicts.values():
        assert v["verdict"] == "healthy", v
        assert check(v, "kernel")["status"] == "skipped"
    assert health.lines(verdicts)[0] == (
        "n1  healthy   5 checks pass (cards, ecc, thermal, stack, disk); skipped: kernel (the kernel log is not "
        "readable here)"
    )


def test_a_row_remap_waiting_for_a_reset_makes_the_node_sick_and_names_the_field():
    bad = (FIXTURES / "nvidia-smi" / "a100x4-remap-pending-555.42.02.txt").read_text()
    verdicts = health.judge({"n1": node(), "n2": node(bad, slots=4, driver="565.57.01")})
    v = verdicts["n2"]
    assert v["verdict"] == "sick"
    ecc = check(v, "ecc")
    assert ecc["status"] == "sick" and ecc["field"] == "GPU 00000000:9E:00.0/Remapped Rows/Pending"
    assert "card 1 (00000000:9e:00.0): a row remap waits for a reset" in ecc["detail"]
    # its driver differs too: the two-node tie goes to the first node's value
    assert "driver 555.42.02 here, 565.57.01 on n1" in check(v, "stack")["detail"]
    assert verdicts["n1"]["verdict"] == "healthy"


def test_a_missing_card_and_a_hidden_part_of_memory_are_sick():
    table = (FIXTURES / "mthreads-gmi" / "s5000-x8-gmi2.4.1.txt").read_text()
    blocks = table.split("+-------------------------------------------------------------------+\n")
    one_less = "+-------------------------------------------------------------------+\n".join(blocks[:-2] + blocks[-1:])
    iommu = table.replace("0MiB(81920MiB)", "0MiB(32768MiB)", 1)
    verdicts = health.judge(
        {"n1": node(table, "mthreads-gmi"), "n2": node(one_less, "mthreads-gmi"), "n3": node(iommu, "mthreads-gmi")},
        {"card_memory_mib": 81920},
    )
    assert check(verdicts["n2"], "cards")["status"] == "sick"
    assert "mthreads-gmi lists 7 card(s)" in check(verdicts["n2"], "cards")["detail"]
    assert "slots=8 asks for 8" in check(verdicts["n2"], "cards")["detail"]
    assert "card 0 shows 32768 MiB of 81920 MiB (nominal)" in check(verdicts["n3"], "cards")["detail"]
    # the table has no ECC counters: unknown, not a pass
    assert check(verdicts["n1"], "ecc")["status"] == "unknown"
    assert verdicts["n1"]["verdict"] == "unknown"


def test_past_errors_and_slowdowns_degrade():
    gh200 = (FIXTURES / "nvidia-smi" / "gh200-aggregate-dbe-550.127.05.txt").read_text()
    slow = (FIXTURES / "nvidia-smi" / "h100x8-hwslowdown-535.161.08.txt").read_text()
    verdicts = health.judge({"a": node(gh200, slots=1), "b": node(slow)})
    assert check(verdicts["a"], "ecc")["status"] == "degraded"
    assert "1 uncorrected ECC error(s) in its past" in check(verdicts["a"], "ecc")["detail"]
    assert check(verdicts["b"], "thermal")["status"] == "degraded"
    assert "HW Slowdown, HW Power Brake Slowdown active" in check(verdicts["b"], "thermal")["detail"]
    alone = health.judge({"b": node(slow)})
    assert alone["b"]["verdict"] == "degraded" and health.left_out(alone, "exclude") == {}  # named, not left out


def test_the_odd_software_out_is_named_with_both_versions():
    verdicts = health.judge({"a": node(), "b": node(), "c": node(torch="2.4.0")})
    assert check(verdicts["c"], "stack")["detail"] == "torch 2.4.0 here, 2.5.1 on a, b"
    assert verdicts["a"]["verdict"] == verdicts["b"]["verdict"] == "healthy"


def test_free_space_against_the_plans_checkpoint():
    expected = {"checkpoint_bytes": 105 * GIB}
    verdicts = health.judge({"a": node(free_gib=50), "b": node(free_gib=150), "c": node(free_gib=300)}, expected)
    assert [check(verdicts[n], "disk")["status"] for n in "abc"] == ["sick", "degraded", "ok"]
    assert (
        "50.00 GiB free at /data/mtt-train-ops/checkpoints/x, a checkpoint of this plan takes 105.00 GiB"
        in (check(verdicts["a"], "disk")["detail"])
    )


def test_the_kernel_logs_xid_messages_since_the_last_check():
    lines = [
        "2026-12-01T10:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "2026-12-02T10:00:00,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 13, pid=99, Graphics Exception",
    ]
    facts = node()
    facts["kernel_log"] = {"readable": True, "lines": lines}
    since = health._stamp(lines[0])[0] + 1
    degraded = health.judge({"a": facts}, last_checked={"a": since})["a"]
    assert check(degraded, "kernel")["status"] == "degraded" and "Xid 13" in check(degraded, "kernel")["detail"]
    sick = health.judge({"a": facts})["a"]
    assert check(sick, "kernel")["status"] == "sick" and "fallen off the bus" in check(sick, "kernel")["detail"]


def test_a_node_without_facts_is_unknown_with_the_reason():
    verdicts = health.judge({"a": node(), "b": {"error": "the training container 'train' does not exist"}})
    assert verdicts["b"]["verdict"] == "unknown"
    assert verdicts["b"]["reason"] == "facts: the training container 'train' does not exist"


def test_policy_and_the_users_choice_of_nodes():
    bad = (FIXTURES / "nvidia-smi" / "a100x4-remap-pending-555.42.02.txt").read_text()
    verdicts = health.judge({"a": node(), "b": node(bad, slots=4)})
    assert list(health.left_out(verdicts, "exclude")) == ["b"]
    assert "its health check says sick" in health.left_out(verdicts, "exclude")["b"]
    assert health.left_out(verdicts, "warn") == health.left_out(verdicts, "off") == {}


def test_records_keep_every_check_and_when_each_node_was_checked(tmp_path):
    verdicts = health.judge({"a": node(), "b": node()})
    path = health.record(str(tmp_path), "quick", verdicts, {"a": {}, "b": {}}, 1000.0, "health.yml")
    assert Path(path).parent.name == "19700101T001640.000000Z"
    assert json.loads(Path(path).read_text())["verdicts"]["a"]["verdict"] == "healthy"
    health.record(str(tmp_path), "quick", {"a": verdicts["a"]}, {"a": {}}, 2000.0, "train.yml")
    assert health.last_checked(str(tmp_path)) == {"a": 2000.0, "b": 1000.0}
    assert health.last_checked(str(tmp_path), ["a"]) == {"a": 2000.0}  # the newest record has it: no older one read


def burned(*tflops: float, precision: str = "bf16") -> dict:
    """A node whose burn-in gave these TFLOP/s per card (burn_in.py's output)."""
    cards = [{"card": i, "tflops": t, "products": 100} for i, t in enumerate(tflops)]
    return dict(node(slots=len(tflops)), burn_in={"precision": precision, "dtype": "bfloat16", "cards": cards})


def test_the_burn_in_names_a_node_and_a_card_slow_against_the_fleet():
    verdicts = health.judge(
        {"a": burned(0.14, 0.15), "b": burned(0.15, 0.14), "c": burned(0.03, 0.04), "d": burned(0.14, 0.09)}
    )
    assert check(verdicts["a"], "burn_in")["status"] == "ok" and verdicts["a"]["verdict"] == "healthy"
    slow = check(verdicts["c"], "burn_in")
    assert slow["status"] == "sick" and slow["field"] == "burn_in.cards[].tflops"
    assert (
        "bf16 TFLOP/s card 0 0.03, card 1 0.04; the slowest (card 0) is 0.21x the other nodes' median card (0.14)"
        in (slow["detail"])
    )
    # one card under 0.8 of its own node's and of the fleet's: degraded, the card named
    one = check(verdicts["d"], "burn_in")
    assert one["status"] == "degraded" and "the slowest (card 1) is 0.64x" in one["detail"]
    assert "0.78x this node's (0.115)" in one["detail"]
    assert list(health.left_out(verdicts, "exclude")) == ["c"]


def test_a_card_whose_burn_in_failed_is_sick_and_a_burn_in_that_did_not_run_unknown():
    failed = burned(0.14, 0.14)
    failed["burn_in"]["cards"][1] = {"card": 1, "error": "RuntimeError: MUSA error: an illegal memory access"}
    verdicts = health.judge({"a": burned(0.14, 0.14), "b": failed, "c": dict(node(), burn_in={"error": "exit 1: x"})})
    assert check(verdicts["b"], "burn_in")["status"] == "sick"
    assert "card 1: RuntimeError: MUSA error" in check(verdicts["b"], "burn_in")["detail"]
    assert check(verdicts["c"], "burn_in")["status"] == "unknown" and verdicts["c"]["verdict"] == "unknown"
    # one node alone: its cards against each other only
    alone = check(health.judge({"a": burned(0.14, 0.04)})["a"], "burn_in")
    assert alone["status"] == "sick" and "0.44x this node's median card (0.09; no other node" in alone["detail"]
    # the quick level has no burn-in check at all
    assert all(c["check"] != "burn_in" for c in health.judge({"a": node()})["a"]["checks"])


def test_a_full_checks_results_stand_for_health_max_age_and_are_no_new_incident(tmp_path):
    full = health.judge({"a": burned(0.14, 0.15), "b": burned(0.03, 0.04)})
    health.record(str(tmp_path), "full", full, {}, 1000.0, "health.yml (-e level=full)")
    quick = health.judge({"a": node(), "b": node()})
    health.record(str(tmp_path), "quick", quick, {}, 2000.0, "train.yml")
    carried = health.carried_full(str(tmp_path), ["a", "b"], 1000.0 + 3 * 3600, 24 * 3600)
    assert [c["status"] for c in carried["a"]] == ["ok"] and [c["status"] for c in carried["b"]] == ["sick"]
    assert carried["b"][0]["detail"].endswith("(the full check of 1970-01-01 00:16 UTC, 3.0 h ago)")
    verdicts = health.judge({"a": node(), "b": node()}, carried=carried)
    assert verdicts["b"]["verdict"] == "sick" and verdicts["b"]["reason"].startswith("burn_in: bf16 TFLOP/s")
    assert list(health.left_out(verdicts, "exclude")) == ["b"]
    # the full check's own record made the incident; the quick check that carries it makes none
    assert [i["node"] for i in health.incidents(full, "health/x", "p", 1000.0)] == ["b"]
    assert health.incidents(verdicts, "health/y", "p", 2000.0) == []
    # older than health_max_age, or health_max_age 0: nothing is carried
    assert health.carried_full(str(tmp_path), ["a", "b"], 1000.0 + 25 * 3600, 24 * 3600) == {}
    assert health.carried_full(str(tmp_path), ["a", "b"], 1000.0 + 3600, 0) == {}
    # a newer full check that finds b well stands instead
    again = health.judge({"a": burned(0.14, 0.15), "b": burned(0.15, 0.14)})
    health.record(str(tmp_path), "full", again, {}, 3000.0, "health.yml (-e level=full)")
    assert health.carried_full(str(tmp_path), ["a", "b"], 4000.0, 24 * 3600)["b"][0]["status"] == "ok"
    # a full check's record is found by its directory's name: the quick ones are not read
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "19700101T001640.000000Z-full", "19700101T003320.000000Z", "19700101T005000.000000Z-full"
    ]  # fmt: skip


def test_a_nodes_own_all_reduce_slow_against_the_other_nodes_is_named():
    def coll(busbw: float, **more) -> dict:
        return dict(node(), node_collective={"tool": "all_reduce_perf", "ranks": 8, "bytes": 2**30,
                                             "busbw_gbps": busbw, "wrong": 0, **more})  # fmt: skip

    verdicts = health.judge({"a": coll(234.5), "b": coll(231.0), "c": coll(90.2), "d": coll(170.0), "e": coll(233.0)})
    assert check(verdicts["a"], "node_collective")["status"] == "ok"
    slow = check(verdicts["c"], "node_collective")
    assert slow["status"] == "sick" and slow["field"] == "node_collective.busbw_gbps"
    assert slow["detail"] == (
        "all_reduce_perf among 8 cards: 90.2 GB/s bus bandwidth at 1.00 GiB, 0.39x the other nodes' median (232)"
    )
    assert check(verdicts["d"], "node_collective")["status"] == "degraded"
    wrong = health.judge({"a": coll(234.5), "b": coll(234.0, wrong=3)})
    assert check(wrong["b"], "node_collective")["status"] == "sick" and "3 wrong element(s)" in wrong["b"]["reason"]
    one = health.judge({"a": dict(node(), node_collective={"skipped": "one card: nothing to all-reduce"})})
    assert check(one["a"], "node_collective")["status"] == "skipped" and one["a"]["verdict"] == "healthy"


def test_pair_rounds_test_every_pair_once_in_rounds_of_disjoint_pairs():
    assert health.pair_rounds(["n1", "n2", "n3"]) == [[["n2", "n3"]], [["n1", "n3"]], [["n1", "n2"]]]
    for count in range(2, 10):
        nodes = [f"n{i}" for i in range(count)]
        rounds = health.pair_rounds(nodes)
        assert len(rounds) == (count - 1 if count % 2 == 0 else count)
        pairs = [tuple(pair) for r in rounds for pair in r]
        assert sorted(pairs) == sorted((a, b) for i, a in enumerate(nodes) for b in nodes[i + 1 :])
        assert all(len({n for pair in r for n in pair}) == 2 * len(r) for r in rounds)  # disjoint in a round
    assert health.pair_rounds(["n1"]) == []


def fleet(busbw: float | None, threshold: float, pairs: dict[str, float | str] | None = None, **more) -> dict:
    nodes = more.pop("nodes", ["n1", "n2", "n3", "n4"])
    out = {"nodes": nodes, "tool": "gloo", "ranks": 2 * len(nodes), "bytes": 16 * 2**20, "busbw_gbps": busbw,
           "min_busbw_gbps": threshold, **more}  # fmt: skip
    if pairs:
        out["pairs"] = [
            {"nodes": key.split("+"), **({"error": value} if isinstance(value, str) else {"busbw_gbps": value})}
            for key, value in pairs.items()
        ]
    return out


def test_the_pairs_name_the_node_every_one_of_whose_pairs_is_slow():
    pairs = {"n1+n2": 0.50, "n3+n4": 0.02, "n1+n3": 0.03, "n2+n4": 0.45, "n1+n4": 0.52, "n2+n3": "exit 124: timeout"}
    checks = health.fleet_checks(fleet(0.04, 0.2, pairs))
    slow = checks["n3"]
    assert (slow["status"], slow["field"]) == ("sick", "fleet_collective.pairs[].busbw_gbps")
    assert slow["detail"] == (
        "gloo across 4 nodes (8 ranks): 0.04 GB/s bus bandwidth at 16.00 MiB, under health_min_busbw_gbps=0.2; "
        "every pair with n3 is slow: n3+n4 0.02 GB/s, n1+n3 0.03 GB/s, n2+n3 failed (exit 124: timeout); its best "
        "is 0.06x the median node's best pair (0.51)"
    )
    assert "check n3's network" in slow["action"]
    for name in ("n1", "n2", "n4"):
        assert checks[name]["status"] == "ok" and "n3 explains it" in checks[name]["detail"], checks[name]
    # judged with the nodes' other checks: n3 is sick, the others healthy
    facts = {n: dict(node(), fleet_collective=fleet(0.04, 0.2, pairs)) for n in ("n1", "n2", "n3", "n4")}
    verdicts = health.judge(facts)
    assert [v["verdict"] for v in verdicts.values()] == ["healthy", "healthy", "sick", "healthy"]
    assert verdicts["n3"]["reason"].startswith("fleet_collective: gloo across 4 nodes")


def test_a_slow_pair_of_fast_nodes_names_the_path_between_them():
    pairs = {"n1+n2": 0.10, "n3+n4": 0.50, "n1+n3": 0.48, "n2+n4": 0.47, "n1+n4": 0.52, "n2+n3": 0.49}
    checks = health.fleet_checks(fleet(0.15, 0.2, pairs))
    for name in ("n1", "n2"):
        assert checks[name]["status"] == "degraded", checks[name]
        assert (
            "the pair n1+n2 is slow (n1+n2 0.1 GB/s, against the median node's best pair 0.51)"
            in (checks[name]["detail"])
        )
        assert checks[name]["action"].startswith("check the path between n1 and n2")
    assert checks["n3"]["status"] == checks["n4"]["status"] == "ok"
    assert "n1+n2 explains it" in checks["n3"]["detail"]


def test_the_all_reduce_across_the_nodes_at_or_above_its_threshold_needs_no_pairs():
    checks = health.fleet_checks(fleet(0.45, 0.2))
    assert {c["status"] for c in checks.values()} == {"ok"}
    assert checks["n1"]["detail"].endswith("(at or above health_min_busbw_gbps=0.2)")
    assert health.fleet_checks(fleet(0.45, 0))["n2"]["detail"].endswith("(no threshold set)")


def test_what_the_pairs_cannot_place_is_said_not_guessed():
    two = health.fleet_checks(fleet(0.05, 0.2, nodes=["n1", "n2"]))
    assert {c["status"] for c in two.values()} == {"degraded"}
    assert "two nodes cannot tell which of them is slow" in two["n1"]["detail"]
    failed = health.fleet_checks(fleet(None, 0, {"n1+n2": "exit 1", "n3+n4": "exit 1"}, error="exit 124: timeout"))
    assert {c["status"] for c in failed.values()} == {"unknown"}
    assert failed["n1"]["detail"].startswith("gloo across 4 nodes (8 ranks) failed: exit 124: timeout; every pair")
    even = {"n1+n2": 0.5, "n3+n4": 0.5, "n1+n3": 0.5, "n2+n4": 0.5, "n1+n4": 0.5, "n2+n3": 0.5}
    together = health.fleet_checks(fleet(0.1, 0.2, even))
    assert {c["status"] for c in together.values()} == {"unknown"}
    assert "no pair is slow" in together["n4"]["detail"]
    skipped = health.fleet_checks(fleet(None, 100, skipped="no mpirun in the training image"))
    assert {c["status"] for c in skipped.values()} == {"skipped"}


def test_a_full_checks_fleet_verdict_is_carried_by_the_quick_check(tmp_path):
    pairs = {"n1+n2": 0.50, "n1+n3": 0.03, "n2+n3": 0.02}
    facts = {
        n: dict(node(), fleet_collective=fleet(0.03, 0.2, pairs, nodes=["n1", "n2", "n3"])) for n in ("n1", "n2", "n3")
    }
    verdicts = health.judge(facts)
    health.record(str(tmp_path), "full", verdicts, facts, 1000.0, "health.yml")
    carried = health.carried_full(str(tmp_path), ["n1", "n2", "n3"], 1600.0, 3600)
    assert [c["check"] for c in carried["n3"]] == ["fleet_collective"] and carried["n3"][0]["status"] == "sick"
    assert health.judge({n: node() for n in ("n1", "n2", "n3")}, carried=carried)["n3"]["verdict"] == "sick"
