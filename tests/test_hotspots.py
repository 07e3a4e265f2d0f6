"""hotspots: perf report parsing on captured text, grouping by origin, the command end to end."""

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core import paths
from hakbench.experiments.hotspots import (
    BACKEND,
    FRONT,
    Hotspot,
    classify,
    group_totals,
    hakmem_group_by_name,
    parse_nm,
    parse_perf_report,
    parse_report_header,
)

DATA = Path(__file__).parent / "data"
HARNESS = {"bench_random_mixed", "bench_random_mixed_hakmem"}


def test_parse_report_with_kernel_symbols():
    text = (DATA / "perf_report_system_bigws.txt").read_text()
    rows = parse_perf_report(text)
    assert len(rows) == 17
    top = rows[0]
    assert (top.rank, top.self_pct, top.dso, top.symbol, top.space) == (
        1,
        34.33,
        "bench_random_mixed",
        "hb_mixed_run",
        "user",
    )
    clear = next(r for r in rows if r.symbol == "clear_page_erms")
    assert (clear.dso, clear.space, clear.self_pct) == ("[kernel.kallsyms]", "kernel", 5.07)
    assert parse_report_header(text) == {"samples": "3K", "event": "cpu-clock"}


def test_parse_report_with_unpadded_and_unresolved_symbols():
    rows = parse_perf_report((DATA / "perf_report_jemalloc_mixed.txt").read_text())
    # a symbol as wide as its column is followed directly by the separator
    assert any(r.symbol == "pthread_mutex_trylock@@GLIBC_2.34" for r in rows)
    assert any(r.dso == "ld-linux-x86-64.so.2" for r in rows)
    unresolved = [r for r in rows if r.symbol.startswith("0x")]
    assert len(unresolved) == 8 and all(r.dso == "libjemalloc.so.2" for r in rows[-8:])


def test_groups_by_origin():
    rows = parse_perf_report((DATA / "perf_report_system_bigws.txt").read_text())
    groups = {r.symbol: classify(r, {}, HARNESS) for r in rows}
    assert groups["hb_mixed_run"] == "harness"
    assert groups["_int_free"] == "libc"
    assert groups["exc_page_fault"] == "kernel"
    jem = parse_perf_report((DATA / "perf_report_jemalloc_mixed.txt").read_text())
    jgroups = {(r.dso, r.symbol): classify(r, {}, HARNESS) for r in jem}
    assert jgroups[("libjemalloc.so.2", "malloc")] == "other allocator"
    assert jgroups[("ld-linux-x86-64.so.2", "strcmp")] == "libc"
    assert jgroups[("bench_random_mixed", "free@plt")] == "harness"


def test_hakmem_symbols_grouped_by_source_file_then_name():
    # real `nm --defined-only -l build/fast/libhakmem.so` lines (no debug info: no file),
    # plus two with a file of origin as a -g build prints them
    nm = (
        "0000000000005320 T __libc_malloc\n"
        "00000000000051a0 t checked_page.constprop.0\n"
        "0000000000005570 t hak_free.localalias\n"
        "00000000000054a0 t hak_free_slow\n"
        "0000000000002610 t hak_heap_find_page\n"
        "00000000000043b0 t hak_os_superslab_get\n"
        "0000000000004a10 t legacy_alloc_slow\n"
        "0000000000004b10 t alloc_slow_SMALLHEAP_V3\n"
        "0000000000004c10 t hak_arena_superslab_get\n"
        "0000000000003a40 t hak_options_init\n"
        "0000000000001d20 t pop_block\t/src/allocator/src/front_tinyheap.c:88\n"
        "0000000000001e20 t take_page\t/src/allocator/src/superslab.c:120\n"
        "0000000000004000 D hak_options\n"
    )
    ours = parse_nm(nm)
    assert ours == {
        "__libc_malloc": FRONT,
        "checked_page.constprop.0": FRONT,
        "hak_free.localalias": FRONT,
        "hak_free_slow": BACKEND,
        "hak_heap_find_page": BACKEND,
        "hak_os_superslab_get": BACKEND,
        "legacy_alloc_slow": FRONT,  # the legacy front's own refill (before the fronts' table)
        "alloc_slow_SMALLHEAP_V3": FRONT,  # a row of the fronts' table: its refill
        "hak_arena_superslab_get": BACKEND,
        "hak_options_init": BACKEND,
        "pop_block": FRONT,
        "take_page": BACKEND,
    }
    # a static twin: libhakmem's symbols inside the harness binary are libhakmem's
    twin = Hotspot(1, 10.0, "take_page", "bench_random_mixed_hakmem", "user")
    assert classify(twin, ours, HARNESS) == BACKEND
    # a libhakmem symbol nm did not list falls back to its name
    lib = Hotspot(2, 5.0, "cfree@GLIBC_2.2.5", "libhakmem.so", "user")
    assert classify(lib, {}, HARNESS) == FRONT
    assert hakmem_group_by_name("hak_malloc_slow") == BACKEND


def test_real_hakmem_report_splits_front_and_backend():
    rows = parse_perf_report((DATA / "perf_report_hakmem_mixed.txt").read_text())
    groups = {r.symbol: classify(r, {}, HARNESS) for r in rows}
    assert groups["hak_malloc"] == FRONT
    assert groups["hak_free"] == FRONT
    assert groups["hak_malloc_slow"] == BACKEND
    assert groups["hb_mixed_run"] == groups["malloc@plt"] == "harness"


def test_group_totals_sum_the_rows():
    rows = [
        Hotspot(1, 40.0, "a", "x", "user", "harness"),
        Hotspot(2, 25.5, "b", "y", "user", "libc"),
        Hotspot(3, 14.5, "c", "z", "user", "libc"),
    ]
    assert group_totals(rows) == {"harness": 40.0, "libc": 40.0}


def test_missing_perf_is_a_clear_error(monkeypatch, tmp_path):
    if not paths.bench_binary("bench_random_mixed").exists():
        pytest.skip("harness not built")
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no perf
    r = CliRunner().invoke(main, ["hotspots", "-a", "system", "--out", str(tmp_path / "o")])
    assert r.exit_code == 3
    assert "perf is not installed" in r.output


@pytest.mark.skipif(shutil.which("perf") is None, reason="needs perf")
def test_hotspots_end_to_end(tmp_path):
    if not paths.bench_binary("bench_random_mixed").exists():
        pytest.skip("harness not built")
    out = tmp_path / "hs"
    args = ["hotspots", "-a", "system", "-w", "mixed", "--scale", "5", "--out", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    for name in ("hotspots.csv", "hotspots.md", "meta.json", "perf.data", "perf_report.txt"):
        assert (out / name).exists(), name
    csv_text = (out / "hotspots.csv").read_text()
    assert csv_text.startswith("rank,self_pct,symbol,dso,space,group\n")
    assert ",bench_random_mixed,user,harness" in csv_text  # the harness loop is sampled
    assert ",libc" in csv_text  # and glibc's malloc/free
    assert "## By group" in (out / "hotspots.md").read_text()
