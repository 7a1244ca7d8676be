"""The provision report's core: the printed table and the JSON file on the controller."""

from __future__ import annotations

import json
import os

import pytest
from trainops.provision_report import provision_table, write_provision_report

ROWS = [
    {
        "node": "node1",
        "address": "10.0.0.1",
        "container": "train",
        "status": "running",
        "image": "registry.mthreads.com/mcconline/training-suite:v2.1.7",
        "sshd_port": 2222,
        "cards": 8,
        "card_names": ["MTT S5000"],
        "busbw_node_gbps": 187.25,
        "busbw_cluster_gbps": 41.0,
        "data": {"data.bin": 10, "data.idx": 2},
    },
    {
        "node": "node2",
        "address": "10.0.0.2",
        "container": "train",
        "status": "exited",
        "image": "x",
        "sshd_port": 2222,
        "cards": 8,
        "card_names": [],
        "busbw_node_gbps": None,
        "busbw_cluster_gbps": None,
        "data": {"data.bin": None},
    },
]


def test_the_table_has_a_header_and_one_line_per_node():
    lines = provision_table(ROWS).splitlines()
    assert lines[0].split() == [
        "node",
        "address",
        "container",
        "image",
        "sshd",
        "cards",
        "card",
        "node",
        "GB/s",
        "all",
        "GB/s",
        "data",
    ]
    first, second = lines[1].split(), lines[2]
    assert first[:3] == ["node1", "10.0.0.1", "train"]
    # images are cut to their column; bandwidth in 4 significant digits; the data verdict last
    assert "registry.mthreads.com/mcconline/training-sui  2222" in lines[1]
    assert first[-3:] == ["187.2", "41", "ok"]
    assert "train (exited)" in second and second.endswith("MISSING")
    assert provision_table([{"node": "n", "data": {}}]).splitlines()[1].endswith("not checked")


def test_a_supervisors_host_is_a_row_without_cards_or_data():
    """A login node of the supervisors group (docs/inventory.md): its container and sshd, no card, no dataset."""
    from trainops.provision_report import provision_rows

    rows = provision_rows(
        [{"name": "node1", "ansible_host": "10.0.0.1", "dataset_sizes": {"a.bin": 1}},
         {"name": "login1", "ansible_host": "10.0.0.9", "container_ssh_port": 2222,
          "container_facts": {"name": "train", "status": "running", "image": "img:1"}}],
        ["login1"],
    )  # fmt: skip
    assert [row["supervisors_host"] for row in rows] == [False, True]
    line = provision_table(rows).splitlines()[2].split()
    assert line[:3] == ["login1", "10.0.0.9", "train"] and line[-4:] == ["-", "-", "supervisors", "host"], line


def test_the_report_is_written_whole_into_a_new_directory(tmp_path):
    directory = tmp_path / "runs" / "deeper"
    path = write_provision_report(str(directory), "20261130-101500", ROWS)
    assert path == str(directory / "provision-20261130-101500.json")
    assert json.loads((directory / "provision-20261130-101500.json").read_text()) == {
        "timestamp": "20261130-101500",
        "nodes": ROWS,
    }
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in directory.iterdir()) == ["provision-20261130-101500.json"]


def test_a_failed_write_leaves_no_temporary_and_keeps_the_old_report(tmp_path):
    old = write_provision_report(str(tmp_path), "t", ROWS)
    with pytest.raises(TypeError):
        write_provision_report(str(tmp_path), "t", [{"node": object()}])
    assert json.loads(open(old).read())["nodes"] == ROWS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["provision-t.json"]


def test_the_card_exporters_addresses_close_the_table_when_any_serves():
    assert "card metrics" not in provision_table(ROWS)
    serving = [{**ROWS[0], "card_metrics": "http://10.0.0.1:9466/metrics"}, {**ROWS[1], "card_metrics": None}]
    assert provision_table(serving).splitlines()[-1] == "card metrics: node1 http://10.0.0.1:9466/metrics"
