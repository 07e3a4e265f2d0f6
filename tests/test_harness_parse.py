"""The harness stdout contract on captured output of build/bench programs."""

from pathlib import Path

from hakbench.collect.harness import parse_harness_output

DATA = Path(__file__).parent / "data"


def test_random_mixed_output():
    h = parse_harness_output((DATA / "harness_random_mixed.txt").read_text())
    assert h["throughput"] == 36021692
    assert h["ops"] == 20000 and h["seconds"] == 0.000555
    assert h["checksum"] == "3a0d6a6d33de140e"  # stays a string: leading zeros matter
    assert h["maxrss_kb"] == 3744
    assert h["malloc_impl"].endswith("libc.so.6")


def test_preloaded_allocator_is_named():
    h = parse_harness_output((DATA / "harness_tiny_hot_mimalloc.txt").read_text())
    assert "libmimalloc.so" in h["malloc_impl"]
    assert h["checksum"] == "0ed5c677f046af37"
    assert h["throughput"] == 168917492


def test_missing_throughput_is_none():
    assert parse_harness_output("ops=1\nseconds=0.1\n")["throughput"] is None
