"""hakbench matrix: axis expansion, interleaved round order, resume, and a real quick run.

The runs use mixed_short (20k iterations, a few ms per process) under the real runner, so
the whole file takes a few seconds and asserts nothing about time.
"""

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from hakbench.cli import main
from hakbench.experiments import matrix, matrix_spec
from hakbench.tables import matrix_summary

TWO_ALLOCATORS = """
name = "tiny"
runs = 3
warmup = 1
seed = 11
reference = { allocator = "system" }
[axes]
allocator = ["hakmem", "system"]
workload = ["mixed_short"]
"""


def write(tmp_path: Path, text: str, name: str = "m.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def read_samples(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def test_expansion_crosses_hakmem_axes_and_collapses_them_for_references():
    spec = matrix_spec.parse_matrix(
        """
        reference = { allocator = "mimalloc" }
        [axes]
        allocator = ["hakmem", "system", "mimalloc"]
        variant = ["fast"]
        profile = ["C7_SAFE", "balanced"]
        HAKMEM_VERBOSE = [0, 1]
        workload = ["mixed", "tiny_hot"]
        """
    )
    coords = matrix_spec.expand_coords(spec, validate_options=False)
    # per workload: hakmem 1 variant x 2 profiles x 2 switch values, plus one cell per reference
    assert len(coords) == 2 * (4 + 2)
    assert [c["workload"] for c in coords] == ["mixed"] * 6 + ["tiny_hot"] * 6
    hakmem = [c for c in coords if c["allocator"] == "hakmem" and c["workload"] == "mixed"]
    assert {(c["profile"], c["HAKMEM_VERBOSE"]) for c in hakmem} == {
        ("C7_SAFE", "0"),
        ("C7_SAFE", "1"),
        ("BALANCED", "0"),
        ("BALANCED", "1"),
    }
    assert {"workload": "mixed", "allocator": "system"} in coords
    assert matrix_spec.coords_label(hakmem[1]) == "hakmem:fast/C7_SAFE[HAKMEM_VERBOSE=1]"
    # every cell's reference is mimalloc on the same workload
    refs = matrix_summary.reference_index(coords, spec.reference)
    for c, r in zip(coords, refs, strict=True):
        assert coords[r] == {"workload": c["workload"], "allocator": "mimalloc"}


def test_reference_on_a_hakmem_cell_matches_the_other_hakmem_axes():
    coords = [
        {"workload": "w", "allocator": "hakmem", "variant": "fast", "HAKMEM_X": "0"},
        {"workload": "w", "allocator": "hakmem", "variant": "fast", "HAKMEM_X": "1"},
        {"workload": "w", "allocator": "hakmem", "variant": "stats", "HAKMEM_X": "0"},
        {"workload": "w", "allocator": "hakmem", "variant": "stats", "HAKMEM_X": "1"},
    ]
    # v2 on/off style: each cell is compared to the HAKMEM_X=0 cell of its own variant
    refs = matrix_summary.reference_index(coords, {"HAKMEM_X": "0", "allocator": "hakmem"})
    assert refs == [0, 0, 2, 2]


def test_every_round_runs_every_cell_once_in_a_seeded_shuffled_order():
    planned = matrix.plan(n_cells=6, runs=4, warmup=1, seed=3)
    assert len(planned) == 6 * 5
    rounds = [[p for p in planned if p.round == r] for r in range(5)]
    for r, samples in enumerate(rounds):
        assert sorted(p.index for p in samples) == list(range(6))
        assert {p.phase for p in samples} == {"warmup" if r == 0 else "measure"}
    # rounds come one after another, never mixed
    assert [p.round for p in planned] == sorted(p.round for p in planned)
    orders = {tuple(p.index for p in samples) for samples in rounds}
    assert len(orders) > 1, "each round should get its own order"
    assert matrix.plan(6, 4, 1, 3) == planned
    assert matrix.plan(6, 4, 1, 4) != planned
    # adding rounds keeps the earlier ones (what --resume relies on)
    assert matrix.plan(6, 6, 1, 3)[: len(planned)] == planned


@pytest.mark.parametrize(
    "axes, named",
    [
        ('allocator = ["hakmem", "nosuchalloc"]\nworkload = ["mixed_short"]', "nosuchalloc"),
        ('allocator = ["system"]\nworkload = ["mixed_short", "no_such_workload"]', "no_such"),
        ('allocator = ["hakmem"]\nprofile = ["NO_SUCH_PROFILE"]\nworkload = ["mixed"]', "NO_SUCH"),
        ('allocator = ["hakmem"]\nvariant = ["turbo"]\nworkload = ["mixed"]', "turbo"),
        ('allocator = ["hakmem"]\nHAKMEM_NO_SUCH_SWITCH = [0, 1]\nworkload = ["mixed"]', "NO_SUCH"),
        ('allocator = ["hakmem"]\nworkloads = ["mixed"]', "workloads"),
    ],
)
def test_an_axis_value_that_does_not_exist_exits_2_naming_it(tmp_path, axes, named):
    f = write(tmp_path, f"[axes]\n{axes}\n")
    result = CliRunner().invoke(main, ["matrix", str(f), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert named in result.output
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_quick_matrix_end_to_end(tmp_path):
    f = write(tmp_path, TWO_ALLOCATORS)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["matrix", str(f), "--out", str(out)])
    assert result.exit_code == 0, result.output
    samples = read_samples(out)
    assert len(samples) == 2 * (1 + 3)
    assert [s["seq"] for s in samples] == list(range(8))
    assert Counter(s["phase"] for s in samples) == {"warmup": 2, "measure": 6}
    assert all(s["status"] == "ok" for s in samples), [s["error"] for s in samples]
    # the two cells ran the same operations
    assert len({s["harness"]["checksum"] for s in samples}) == 1
    meta = json.loads((out / "meta.json").read_text())
    assert [c["label"] for c in meta["cells"]] == ["hakmem:fast", "system"]
    assert meta["matrix"]["runs"] == 3 and meta["matrix"]["seed"] == 11
    assert meta["load"]["available"] and "Load: other processes used" in result.output
    rows = (out / "summary.csv").read_text().splitlines()
    assert rows[0].startswith("cell,label,workload,metric,status,n,")
    system = next(r.split(",") for r in rows[1:] if r.split(",")[1] == "system")
    assert system[4:7] == ["ok", "3", "0"]
    assert system[11] == "1.0000"  # the reference's own ratio
    hakmem = next(r.split(",") for r in rows[1:] if r.split(",")[1] == "hakmem:fast")
    assert hakmem[10] == "system" and float(hakmem[11]) > 0 and hakmem[14] == "3"
    assert "hakmem:fast" in result.output and str(out) in result.output


def test_resume_runs_only_the_missing_samples(tmp_path):
    f = write(tmp_path, TWO_ALLOCATORS)
    spec = matrix_spec.load_matrix(f)
    out = tmp_path / "run"
    matrix.run_matrix(spec, out, runs=2)
    first = read_samples(out)
    assert len(first) == 2 * 3
    # an interrupted run: the last two samples never made it to disk
    lines = (out / "samples.jsonl").read_text().splitlines(keepends=True)
    (out / "samples.jsonl").write_text("".join(lines[:-2]))
    lost = {(s["cell"], s["round"]) for s in first[-2:]}

    # by default a resume finishes the plan the run started with (2 rounds, not the file's 3)
    run = matrix.run_matrix(spec, out, resume=True)
    assert run.reused == 4 and run.ran == 2
    after = read_samples(out)
    assert after[:4] == first[:4], "samples already there are kept as they were"
    assert {(s["cell"], s["round"]) for s in after[4:]} == lost

    run = matrix.run_matrix(spec, out, runs=3, resume=True)
    assert run.reused == 6 and run.ran == 2  # round 3 for both cells
    after = read_samples(out)
    keys = [(s["cell"], s["round"]) for s in after]
    assert len(keys) == len(set(keys)) == 2 * 4
    assert [s["seq"] for s in after] == list(range(8))
    assert json.loads((out / "meta.json").read_text())["matrix"]["runs"] == 3

    again = matrix.run_matrix(spec, out, runs=3, resume=True)
    assert again.ran == 0 and len(read_samples(out)) == 8


def test_resume_refuses_a_run_of_other_cells(tmp_path):
    out = tmp_path / "run"
    matrix.run_matrix(matrix_spec.load_matrix(write(tmp_path, TWO_ALLOCATORS)), out, runs=1)
    other = write(tmp_path, TWO_ALLOCATORS.replace('"hakmem", ', ""), "other.toml")
    result = CliRunner().invoke(main, ["matrix", str(other), "--resume", str(out)])
    assert result.exit_code == 2
    assert "other cells" in result.output


def test_an_allocator_that_is_not_there_is_skipped_with_a_note(tmp_path):
    spec = matrix_spec.load_matrix(write(tmp_path, TWO_ALLOCATORS))
    empty_build = tmp_path / "build"  # no libhakmem here: its cell is skipped, not failed
    cells, skipped = matrix.make_matrix_cells(spec, build=empty_build)
    assert [c.label for c in cells] == ["system"]
    assert skipped[0].label == "hakmem:fast" and "not built" in skipped[0].reason


def test_instruction_counts_run_once_per_cell_after_the_timed_rounds(tmp_path):
    spec = matrix_spec.load_matrix(write(tmp_path, TWO_ALLOCATORS.replace("runs = 3", "runs = 1")))
    out = tmp_path / "run"
    run = matrix.run_matrix(spec, out, instructions=True)
    phases = [s["phase"] for s in read_samples(out)]
    assert phases == ["warmup"] * 2 + ["measure"] * 2 + ["instructions"] * 2
    counted = [s for s in read_samples(out) if s["phase"] == "instructions"]
    assert all(s["status"] == "ok" for s in counted), [s["error"] for s in counted]
    ir = matrix_summary.summarize(read_samples(out), run.meta["cells"], "ir_per_op")
    assert all(s.n == 1 and s.median > 0 for s in ir)
    # the timed summary is not disturbed by the instruction round
    assert all(s.n == 1 and s.n_failed == 0 for s in run.summaries)


THREE_ALLOCATORS = """
name = "three"
runs = 4
warmup = 1
seed = 7
reference = { allocator = "system" }
[axes]
allocator = ["hakmem", "mimalloc", "system"]
workload = ["mixed_short"]
"""


def test_each_cell_runs_back_to_back_with_its_reference(tmp_path):
    """Adjacent pairs (issue 14): a cell and its reference are neighbours in run order, in
    random order within the pair, and the reference runs once beside each cell it is
    compared with; the ratio is taken within those pairs only."""
    from hakbench.core.allocators import resolve_allocator

    if not resolve_allocator("mimalloc").available:
        pytest.skip("libmimalloc2.0 not installed")
    out = tmp_path / "run"
    run = matrix.run_matrix(matrix_spec.load_matrix(write(tmp_path, THREE_ALLOCATORS)), out)
    samples = read_samples(out)
    keys = {c["label"]: c["key"] for c in run.meta["cells"]}
    assert len(samples) == 2 * 2 * (1 + 4)  # two pairs a round, warm-up round included
    by_pair: dict = {}
    for s in samples:
        by_pair.setdefault((s["round"], s["pair"]), []).append(s)
    assert {p for _, p in by_pair} == {keys["hakmem:fast"], keys["mimalloc"]}
    orders = set()
    for (_, pair), (first, second) in by_pair.items():
        assert second["seq"] == first["seq"] + 1  # neighbours in time
        b = first if first["side"] == "B" else second
        a = second if b is first else first
        assert b["cell"] == pair and a["cell"] == keys["system"] and a["side"] == "A"
        orders.add(first["side"])
    assert orders == {"A", "B"}
    assert run.meta["matrix"]["plan"] == matrix.PLAN_VERSION
    summary = {s.label: s for s in run.summaries}
    assert summary["mimalloc"].n_pairs == 4 and summary["hakmem:fast"].n_pairs == 4
    assert summary["system"].n == 8  # the reference ran beside each of its two cells
    # an old run (plan 1: no adjacent pairs) is not resumed into the new order
    meta = json.loads((out / "meta.json").read_text())
    del meta["matrix"]["plan"]
    (out / "meta.json").write_text(json.dumps(meta))
    r = CliRunner().invoke(
        main, ["matrix", str(tmp_path / "m.toml"), "--resume", str(out), "--runs", "5"]
    )
    assert r.exit_code == 2 and "plan 1" in r.output
