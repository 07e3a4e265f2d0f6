"""hakbench misuse: the classification of real probe output (tests/data/misuse_records.jsonl,
records of a real `scorecard --refresh --misuse` under every allocator), the tidy table and
its summaries, and one short real run of a few patterns under glibc and libhakmem."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.core.errors import UsageError
from hakbench.experiments import misuse
from hakbench.report.misuse_md import cell_text, matrix_lines, run_markdown, scorecard_section
from hakbench.tables.misuse_model import (
    CSV_FIELDS,
    classify,
    compact_stdout,
    counts,
    missed_against,
    pattern_family,
    row_of,
    rows_csv,
    rows_of,
)

DATA = Path(__file__).parent / "data" / "misuse_records.jsonl"


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines()]


def record(records, label, pattern, n=0):
    return [r for r in records if r["label"] == label and r["pattern"] == pattern][n]


@pytest.mark.parametrize(
    "label, pattern, outcome, effect, signal, at, stderr",
    [
        ("system", "double-free-tiny", "caught", "", "SIGABRT", "free +0", "double free detected"),
        ("system", "overflow-usable-1m-write-tiny", "crashed", "", "SIGSEGV", "write +0", ""),
        ("system", "uaf-write-mid", "not-caught", "silent", "", "", ""),
        ("jemalloc", "double-free-large", "hung", "", "SIGPROF", "malloc +1", ""),
        ("mimalloc", "double-free-mid", "not-caught", "overlap", "", "malloc +6", ""),
        ("tcmalloc", "free-stack", "caught", "", "SIGABRT", "free +0", "Attempt to free invalid"),
        (
            "tbbmalloc",
            "free-p+1-mid",
            "caught",
            "",
            "SIGABRT",
            "free +0",
            "free(): invalid pointer",
        ),
        ("hakmem:fast", "uaf-write-mid", "not-caught", "arbitrary-address", "", "malloc +2", ""),
        ("hakmem:fast", "uaf-read-tiny", "not-caught", "read-pointer", "", "", ""),
        ("hakmem:fast", "free-p+16-tiny", "not-caught", "overlap", "", "malloc +78", ""),
        (
            "hakmem:debug",
            "uaf-write-mid",
            "caught",
            "",
            "SIGABRT",
            "malloc +1",
            "free list corrupted",
        ),
        (
            "jemalloc",
            "overflow-usable-1m-write-tiny",
            "not-caught",
            "neighbor-overwritten",
            "",
            "",
            "",
        ),
    ],
)
def test_real_probe_output_is_classified(
    records, label, pattern, outcome, effect, signal, at, stderr
):
    row = row_of(record(records, label, pattern))
    assert (row["outcome"], row["effect"], row["signal"], row["at"]) == (
        outcome,
        effect,
        signal,
        at,
    )
    assert stderr in row["stderr_first"]
    assert row["label"] == label and row["pattern"] == pattern
    assert row["note"] == ("ended by the probe's CPU limit" if outcome == "hung" else "")


def test_a_check_late_in_the_activity_is_still_caught(records):
    row = row_of(record(records, "hakmem:fast", "overflow-usable-1-write-tiny"))
    assert row["outcome"] == "caught" and row["at"].startswith("free +")
    assert int(row["at"].split("+")[1]) > 1000  # when the page emptied, not at the misuse


def test_what_is_not_the_allocator_speaking():
    ended = "pattern=x\nmalloc_impl=/usr/lib/libc.so.6\nmisuse=3 w\ncall=5 free\n"

    def verdict(**kw):
        args = dict(returncode=0, signal=None, timed_out=False, stdout=ended, stderr="")
        return classify(**{**args, **kw})

    assert verdict().outcome == "error"  # exit 0 without end=1
    assert verdict(stdout=ended + "effect=overlap\nend=1\n").effect == "overlap"
    own = verdict(returncode=1, stderr="misuse_probe: mmap of 65536 bytes failed\n")
    assert own.outcome == "error" and own.note.startswith("misuse_probe: mmap")
    assert verdict(returncode=3, stderr="myalloc: heap corrupted\n").outcome == "caught"
    assert verdict(returncode=3).outcome == "crashed"  # a nonzero exit with no message
    assert verdict(returncode=-4, stderr="myalloc: check failed\n").outcome == "caught"  # trap
    assert verdict(returncode=-4).outcome == "crashed"
    assert verdict(returncode=-9, timed_out=True).outcome == "hung"
    wrong = verdict(returncode=-6, expect_impl="libhakmem.so")
    assert wrong.outcome == "error" and "is not libhakmem.so" in wrong.note
    assert verdict(stdout=ended + "call=9 malloc\nend=1\n").at == ""  # silent: ran to the end
    assert (
        classify(
            returncode=-11, signal=None, timed_out=False, stdout="call=2 malloc\n", stderr=""
        ).at
        == "malloc (before the misuse)"
    )


def test_compaction_keeps_the_classification(records):
    full = "pattern=p\nmalloc_impl=/x/libc.so.6\n" + "".join(
        f"call={i} malloc\n" for i in range(1, 40)
    )
    full += "misuse=40 free the block again\ncall=40 free\n" + "".join(
        f"call={i} malloc\n" for i in range(41, 2000)
    )
    full += "effect=overlap\noutcome=not-caught\nend=1\n"
    small = compact_stdout(full)
    assert small.count("call=") == 1 and len(small) < len(full) / 20
    a, b = (
        classify(returncode=0, signal=None, timed_out=False, stdout=t, stderr="")
        for t in (full, small)
    )
    assert a == b and a.at == "malloc +1959"


def test_pattern_families():
    assert pattern_family("overflow-usable-1m-memcpy-large") == ("overflow-usable", "large")
    assert pattern_family("uaf-read-mid") == ("uaf-read", "mid")
    assert pattern_family("double-free-interleaved") == ("double-free", "")
    assert pattern_family("free-p-16-tiny") == ("free-interior", "tiny")
    assert pattern_family("free-mmap") == ("free-foreign", "")
    assert pattern_family("realloc-freed-large") == ("realloc-freed", "large")


def test_runs_that_differ_take_the_majority_and_say_so(records):
    (row,) = [
        r for r in rows_of(records) if r["label"] == "system" and r["pattern"] == "uaf-write-tiny"
    ]
    assert (row["outcome"], row["runs"], row["agree"]) == ("caught", 3, 2)
    assert row["split"] == "caught 2, crashed 1"
    assert cell_text(row) == "✔ 2/3"
    tie = [dict(r, label="x") for r in records if r["pattern"] == "uaf-write-tiny"][1:]
    (tied,) = rows_of(tie)
    assert tied["outcome"] == "crashed"  # 1 caught, 1 crashed: the less protective wins


def test_table_counts_and_matrix(records):
    rows = rows_of(records)
    text = rows_csv(rows)
    assert text.splitlines()[0] == ",".join(CSV_FIELDS)
    assert len(text.splitlines()) == 1 + len({(r["label"], r["pattern"]) for r in records})
    by = {c.label: c for c in counts(rows)}
    assert by["system"].caught == 2 and by["system"].total == 4
    assert by["hakmem:fast"].exploitable == 2  # arbitrary-address and overlap
    assert missed_against(rows, "hakmem:fast") == []  # glibc caught none of fast's patterns here
    assert missed_against(rows, "hakmem:debug") == []
    lines = matrix_lines(rows)
    assert lines[0].startswith("| pattern | system | jemalloc | mimalloc |")
    assert any(line.startswith("| uaf-write-mid | ✘ |") for line in lines)
    md = run_markdown(rows, {"command": "hakbench misuse", "date": "d", "runs": 3})
    assert (
        "## Matrix" in md and "| hakmem:fast | uaf-write-mid | not-caught | arbitrary-address" in md
    )
    section = scorecard_section(rows, {"date": "d", "runs": 3}, "misuse")
    assert section.startswith("## Heap misuse") and section == scorecard_section(
        rows, {"date": "d", "runs": 3}, "misuse"
    )


def test_missed_against_lists_what_glibc_caught():
    def row(label, pattern, outcome):
        return {"label": label, "pattern": pattern, "outcome": outcome, "effect": ""}

    rows = [
        row("system", "a", "caught"),
        row("system", "b", "caught"),
        row("system", "c", "crashed"),
    ]
    rows += [row("hakmem:fast", "a", "caught"), row("hakmem:fast", "b", "not-caught")]
    rows += [row("hakmem:fast", "c", "not-caught")]
    assert missed_against(rows, "hakmem:fast") == ["b"]


def test_patterns_by_name_and_glob():
    known = ["double-free-tiny", "double-free-mid", "uaf-read-tiny"]
    assert misuse.select_patterns(known, []) == known
    assert misuse.select_patterns(known, ["uaf-read-tiny", "double-free-*"]) == known
    with pytest.raises(UsageError, match="closest: double-free-mid"):
        misuse.select_patterns(known, ["double-free-mids"])


def test_hakmem_expands_to_its_variants_and_a_missing_build_is_skipped(tmp_path):
    found, skipped = misuse.resolve_targets(["system", "hakmem"], ["fast"], build=tmp_path)
    assert [a.label for a in found] == ["system"]
    assert skipped == [
        {
            "label": "hakmem:fast",
            "reason": f"{tmp_path}/fast/libhakmem.so not built (run `make build`)",
        }
    ]
    found, _ = misuse.resolve_targets(["hakmem", "system"], ["fast", "debug"])
    assert [a.label for a in found] == ["hakmem:fast", "hakmem:debug", "system"]


def test_a_short_real_run_under_glibc_and_libhakmem(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        main,
        [
            "misuse",
            "-a",
            "system",
            "-a",
            "hakmem",
            "--variant",
            "fast",
            "-n",
            "1",
            "--out",
            str(out),
            "-p",
            "double-free-tiny",
            "-p",
            "free-p+1-mid",
            "-p",
            "uaf-read-mid",
        ],
    )
    assert result.exit_code == 0, result.output
    for name in ("probes.jsonl", "misuse.csv", "misuse.md", "meta.json"):
        assert (out / name).is_file(), name
    lines = (out / "misuse.csv").read_text().splitlines()
    rows = {
        (r["label"], r["pattern"]): r
        for r in rows_of([json.loads(x) for x in (out / "probes.jsonl").read_text().splitlines()])
    }
    assert len(lines) == 1 + 6
    glibc, hakmem = rows["system", "double-free-tiny"], rows["hakmem:fast", "double-free-tiny"]
    assert glibc["outcome"] == "caught" and "double free" in glibc["stderr_first"]
    assert hakmem["outcome"] == "caught" and hakmem["stderr_first"].startswith(
        "hakmem: free(): double free"
    )
    assert rows["hakmem:fast", "free-p+1-mid"]["stderr_first"].startswith(
        "hakmem: free(): invalid pointer"
    )
    assert all(r["outcome"] != "error" for r in rows.values())
    assert "| double-free-tiny | ✔ | ✔ |" in result.output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["allocators"] == ["system", "hakmem:fast"] and meta["runs"] == 1


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    runner = CliRunner()
    bad = runner.invoke(main, ["misuse", "-p", "no-such-pattern", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "unknown misuse pattern 'no-such-pattern'" in bad.output
    listed = runner.invoke(main, ["misuse", "--list", "-p", "free-p+1-*"])
    assert listed.exit_code == 0 and listed.output.split() == [
        "free-p+1-tiny",
        "free-p+1-mid",
        "free-p+1-large",
    ]
    group = runner.invoke(main, ["ab", "-w", "@misuse"])
    assert group.exit_code == 2 and "hakbench misuse" in group.output
