"""Device-tool and collective-test parsers against real outputs (tests/fixtures)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from trainops.collective import CollectiveParseError, parse_allreduce_perf
from trainops.gmi import GmiParseError, parse_mthreads_gmi, parse_nvidia_smi_csv

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def gmi(name: str) -> str:
    return (FIXTURES / "mthreads-gmi" / name).read_text()


def test_s5000_table_gmi_2_4():
    result = parse_mthreads_gmi(gmi("s5000-x8-gmi2.4.1.txt"))
    assert (result["tool_version"], result["driver_version"]) == ("2.4.1", "5.1.0-server")
    cards = result["cards"]
    assert [c["index"] for c in cards] == list(range(8))
    assert {c["name"] for c in cards} == {"MTT S5000"}
    assert cards[7]["bus_id"] == "00000000:da:00.0"
    assert all(c["memory_total_mib"] == 81920 and c["memory_used_mib"] == 0 for c in cards)
    assert all(c["processes"] == [] for c in cards)
    assert [c["temperature_c"] for c in cards] == [48, 48, 49, 48, 48, 50, 48, 49]  # the table's second lines


def test_s80_table_gmi_2_0_with_truncated_process_list():
    (card,) = parse_mthreads_gmi(gmi("s80-gmi2.0.0-processes-truncated.txt"))["cards"]
    assert (card["name"], card["memory_used_mib"], card["memory_total_mib"]) == ("MTT S80", 662, 16384)
    assert card["temperature_c"] == 41
    assert card["processes"] == [
        {"pid": 1123, "name": "/usr/lib/xorg/Xorg", "memory_mib": 134},
        {"pid": 1361, "name": "/usr/sbin/unity-greeter", "memory_mib": None},
    ]


def test_collapsed_whitespace_and_other_column_widths():
    text = gmi("s5000-x8-gmi2.4.1.txt")
    collapsed = "\n".join(re.sub(r"\s+", " ", line) for line in text.splitlines())
    assert len(parse_mthreads_gmi(collapsed)["cards"]) == 8
    assert parse_mthreads_gmi(collapsed)["cards"][5]["temperature_c"] == 50
    narrow = "\n".join(re.sub(r" {2,}", "  ", line) for line in text.splitlines())  # 1.x-style narrower columns
    assert parse_mthreads_gmi(narrow)["cards"][3]["bus_id"] == "00000000:5c:00.0"


def test_json_form():
    text = gmi("s5000-query-json-excerpt.txt")
    with pytest.raises(GmiParseError, match="does not parse"):
        parse_mthreads_gmi(text)  # the excerpt's "..." makes it invalid, as a truncated capture would be
    valid = text.replace("        ...\n", "").replace("        },\n    ]", "        }\n    ]")
    result = parse_mthreads_gmi(valid)
    assert result["driver_version"] == "3.3.5-server"
    assert result["cards"] == [
        {
            "index": 0,
            "name": "MTT S5000",
            "bus_id": "00000000:2a:00.0",
            "memory_total_mib": 81920,
            "memory_used_mib": 0,
            "utilization_pct": 0,
            "temperature_c": 27,
            "processes": [],
        }
    ]


def test_query_text_form():
    text = (
        "Driver Version : 3.0.0\nAttached GPUs : 1\nGPU 00000000:01:00.0\n    Product Name : MTT S4000\n"
        "    Bus Id : 00000000:01:00.0\n    FB Memory Usage\n        Total : 49152MiB\n        Used : 1024MiB\n"
        "        Free : 48128MiB\n    Utilization\n        Gpu : 3%\n"
    )
    (card,) = parse_mthreads_gmi(text)["cards"]
    assert (card["name"], card["memory_total_mib"], card["memory_used_mib"]) == ("MTT S4000", 49152, 1024)
    assert card["utilization_pct"] == 3 and card["bus_id"] == "00000000:01:00.0"


@pytest.mark.parametrize("text", ["", "bash: mthreads-gmi: command not found", "Failed to initialize MTML\n", None])
def test_garbage_is_a_clear_error(text):
    with pytest.raises(GmiParseError):
        parse_mthreads_gmi(text)


def test_nvidia_smi_csv():
    gpus = "0, NVIDIA H200, 00000000:18:00.0, 143771, 4, 0\n1, NVIDIA H200, 00000000:2A:00.0, 143771, 5210, 35\n"
    apps = "00000000:2A:00.0, 4242, python, 5200\n"
    cards = parse_nvidia_smi_csv(gpus, apps)["cards"]
    assert cards[1]["processes"] == [{"pid": 4242, "name": "python", "memory_mib": 5200}]
    with pytest.raises(GmiParseError):
        parse_nvidia_smi_csv("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")


def perf(name: str) -> dict:
    return parse_allreduce_perf((FIXTURES / "allreduce" / name).read_text())


def test_current_format_with_debug_lines():
    result = perf("v2-root-wrong.txt")
    assert len(result["rows"]) == 9  # NCCL INFO lines interleaved are not rows
    assert result["largest_size_bytes"] == 33554432 and result["largest_busbw_gbps"] == 300.52
    assert result["avg_busbw_gbps"] == pytest.approx(72.1953)
    assert (result["wrong"], result["out_of_bounds"], result["out_of_bounds_ok"]) == (0, 0, True)
    assert result["rows"][0]["redop"] == "sum" and result["rows"][0]["root"] == -1


def test_old_format_error_column():
    result = perf("v1-error-column.txt")
    assert result["rows"][0]["redop"] is None and result["rows"][0]["root"] is None
    assert result["largest_size_bytes"] == 134217728 and result["largest_busbw_gbps"] == 21.86
    assert result["wrong"] == 0


def test_mpi_prefix_and_corruption():
    result = perf("mpi-prefixed-wrong.txt")
    assert len(result["rows"]) == 3
    assert result["wrong"] == 3 and result["out_of_bounds"] == 3 and result["out_of_bounds_ok"] is False


def test_unchecked_run():
    result = perf("no-check.txt")
    assert result["wrong"] is None and result["checked"] is False
    assert result["largest_busbw_gbps"] == 234.55


def test_cputime_and_timestamp_columns():
    text = (
        "#       size         count      type   redop    root  cputime   algbw   busbw #wrong  cputime   algbw"
        "   busbw #wrong          timestamp\n"
        "     1048576        262144     float     sum      -1    28.15   37.25   65.19      0    27.52   38.10"
        "   66.67      0 2026-11-30 03:00:00\n"
    )
    (row,) = parse_allreduce_perf(text)["rows"]
    assert row["in_place"]["busbw_gbps"] == 66.67 and row["out_of_place"]["time_us"] == 28.15


@pytest.mark.parametrize("text", ["", "mpirun: command not found", "# only a header\n#  size count\n"])
def test_no_rows_is_a_clear_error(text):
    with pytest.raises(CollectiveParseError, match="no all_reduce_perf result rows"):
        parse_allreduce_perf(text)
