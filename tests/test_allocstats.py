"""Allocator stats lines. Crafted in the format of ARCHITECTURE.md / issue 3 (libhakmem was
not built when these were written): ``[GROUP] key=value ...``, integers only."""

from pathlib import Path

from hakbench.collect.allocstats import parse_alloc_stats, route_hits

DATA = Path(__file__).parent / "data"


def test_groups_parsed_and_other_lines_ignored():
    groups = parse_alloc_stats((DATA / "allocstats_crafted.txt").read_text())
    assert groups["SS_OS_STATS"] == {"alloc": 2, "free": 3, "madvise": 2, "mmap_total": 2}
    assert "not_a_group" not in groups and "NOT_A_GROUP" not in groups


def test_repeated_group_is_summed():
    groups = parse_alloc_stats((DATA / "allocstats_crafted.txt").read_text())
    assert groups["FRONT_CLASS"] == {"c0_alloc": 11, "c7_alloc": 4}


def test_route_hits_zero_missing_and_compiled_out():
    groups = parse_alloc_stats((DATA / "allocstats_crafted.txt").read_text())
    assert route_hits(groups, "TINY_HEAP_STATS") == 0
    assert route_hits(groups, "HOTHEAP_V2_STATS") is None  # compiled=0: not reported
    assert route_hits(groups, "SMALL_HEAP_V3_STATS") is None
