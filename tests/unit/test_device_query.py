"""The device tool's full query (nvidia-smi -q, mthreads-gmi -q / -q -j) read into each card's health facts, against
recorded real outputs (tests/fixtures/nvidia-smi/README.md says where each came from)."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainops import device_query
from trainops.gmi import GmiParseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def smi(name: str) -> dict:
    return device_query.parse((FIXTURES / "nvidia-smi" / name).read_text())


def test_a_healthy_h100_server():
    result = smi("h100x8-healthy-565.57.01.txt")
    assert result["driver_version"] == "565.57.01" and result["cuda_version"] == "12.7"
    cards = result["cards"]
    assert [c["index"] for c in cards] == list(range(8))
    assert cards[0]["bus_id"] == "00000000:18:00.0" and cards[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert {c["memory_total_mib"] for c in cards} == {81559}
    for card in cards:
        assert (card["ecc_uncorrected_volatile"], card["ecc_uncorrected_aggregate"]) == (0, 0)
        assert (card["remap_pending"], card["remap_failed"], card["throttle_active"]) == (False, False, [])
        # driver 565 gives the margins to the card's temperature limit, not a slowdown temperature
        assert (card["slowdown_temp_c"], card["slowdown_tlimit_margin_c"]) == (None, -2.0)
        assert card["temperature_c"] > 0 and card["tlimit_margin_c"] > 0


def test_a_row_remap_waiting_for_a_reset_is_read_with_its_field():
    cards = smi("a100x4-remap-pending-555.42.02.txt")["cards"]
    pending = [c for c in cards if c["remap_pending"]]
    assert [c["bus_id"] for c in pending] == ["00000000:9e:00.0"]
    assert pending[0]["fields"]["remap_pending"] == "GPU 00000000:9E:00.0/Remapped Rows/Pending"
    assert all(c["ecc_uncorrected_volatile"] == 0 for c in cards)


def test_an_uncorrected_error_in_the_cards_past_is_aggregate_only():
    (card,) = smi("gh200-aggregate-dbe-550.127.05.txt")["cards"]
    assert (card["ecc_uncorrected_volatile"], card["ecc_uncorrected_aggregate"]) == (0, 1)
    assert card["fields"]["ecc_uncorrected_aggregate"].endswith("Aggregate/DRAM Uncorrectable")


def test_the_pre_ampere_layout_counts_double_bit_totals_and_retired_pages():
    cards = smi("v100x8-retiredpages-550.127.05.txt")["cards"]
    assert len(cards) == 8 and {c["memory_total_mib"] for c in cards} == {16384}
    assert all(c["ecc_uncorrected_volatile"] == 0 and c["ecc_uncorrected_aggregate"] == 0 for c in cards)
    assert [c["retired_pages"] for c in cards if c["retired_pages"]] == [1]
    assert not any(c["retired_pending"] for c in cards)
    assert all(c["remap_pending"] is None for c in cards)  # 'Remapped Rows : N/A'


def test_hardware_slowdown_reasons_are_read():
    cards = smi("h100x8-hwslowdown-535.161.08.txt")["cards"]
    assert all(c["throttle_active"] == ["HW Slowdown", "HW Power Brake Slowdown"] for c in cards)
    healthy = smi("h200-healthy-550.90.12.txt")["cards"]
    assert healthy[0]["throttle_active"] == []


def test_the_mthreads_gmi_json_query():
    text = (FIXTURES / "mthreads-gmi" / "s5000-query-json-excerpt.txt").read_text()
    # the recorded excerpt elides the other seven cards with '...': cut it to the first card, as the tool prints one
    first = text.split("\n        },\n")[0] + "\n        }\n    ]\n}\n"
    result = device_query.parse(first)
    (card,) = result["cards"]
    assert result["driver_version"] == "3.3.5-server"
    assert (card["name"], card["bus_id"], card["memory_total_mib"], card["temperature_c"]) == (
        "MTT S5000",
        "00000000:2a:00.0",
        81920,
        27.0,
    )
    assert card["ecc_uncorrected_volatile"] is None  # not in this output: unknown, never 0


def test_mthreads_gmi_text_sections_open_with_the_cards_number():
    text = (
        "Driver Version               :  2.7.0\n"
        "Attached GPUs                :  1\n"
        "GPU0 00000000:01:00.0\n"
        "    Product Name             :  MTT S90\n"
        "    FB Memory Usage\n"
        "        Total                :  24576MiB\n"
    )
    (card,) = device_query.parse(text)["cards"]
    assert (card["name"], card["bus_id"], card["memory_total_mib"]) == ("MTT S90", "00000000:01:00.0", 24576)


@pytest.mark.parametrize("text", ["", "   \n", "no cards here\n", "{not json"])
def test_garbage_is_refused_with_what_was_expected(text):
    with pytest.raises(GmiParseError):
        device_query.parse(text)
