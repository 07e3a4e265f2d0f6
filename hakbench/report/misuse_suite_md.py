"""The suite's security probes in Markdown: the counts per allocator (with the benign
programs' verdict), what the anchors catch that libhakmem does not, the matrix (programs x
allocators, one mark per size) and the tidy table. Drawn from rows and records alone
(``hakbench.tables.misuse_suite_model``), so regenerating gives the same bytes.
"""

from __future__ import annotations

from hakbench.tables.misuse_suite_model import (
    HARDENED,
    SIZES,
    caught_by_not,
    counts,
    probe_program,
    programs_of,
    usability,
)

# The allocators the others are held against, when a run has them: glibc (what every
# program gets) and GrapheneOS's hardened_malloc (a hardened allocator, given by path).
ANCHORS = ("system", HARDENED)
MARK = {"caught": "✔", "not-caught": "✘", "hung": "hang", "error": "error"}


def mark(row: dict | None) -> str:
    """One probe's cell: ✔ caught in every run, ✘ in none, ``k/n`` in k of n runs, hang,
    error; — not run."""
    if row is None:
        return "—"
    if row["outcome"] == "sometimes":
        return f"{row['caught_runs']}/{row['runs']}"
    return MARK[row["outcome"]]


def legend() -> str:
    return (
        "One mark per size (small 8 B, medium 4,096 B, large 256 KiB; the C++ probes: one, "
        "at 4,096 B): ✔ caught in every run (the process ended without printing NOT_CAUGHT: "
        "stopped by the allocator, a crash, or the misuse had no effect), ✘ NOT_CAUGHT in every "
        "run, `k/n` caught in k of the n runs, hang: hakbench's timeout ended it, error: it "
        "could not run under the allocator. *not usable*: the allocator failed the suite's "
        "benign programs, and none of its probes is counted."
    )


def labels_of(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["label"] for r in rows))


def _usable_text(u) -> str:
    if u is None:
        return "not run"
    return (
        f"ran {len(u.programs)} of {len(u.programs)}" if u.usable else f"**not usable**: {u.reason}"
    )


def counts_lines(rows: list[dict], records: list[dict]) -> list[str]:
    lines = [
        "| allocator | benign programs | caught (every run) | of which a fault | of which no "
        "effect | caught in some runs | not caught | hung | error | runs caught |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in counts(rows, records):
        b = c.by_outcome
        name = f"**{c.label}**" if c.label.startswith("hakmem") else c.label
        ok = c.usable is not None and c.usable.usable
        caught = (
            f"{c.counted} of {c.total}"
            if ok
            else f"not counted ({b['caught']} of {c.total} by the contract alone)"
        )
        lines.append(
            f"| {name} | {_escape(_usable_text(c.usable))} | {caught} | {c.crashed} "
            f"| {c.finished} | {b['sometimes']} "
            f"| {b['not-caught']} | {b['hung']} | {b['error']} "
            f"| {c.caught_runs} of {c.runs} ({c.share:.0%}) |"
        )
    return lines


def missed_lines(rows: list[dict]) -> list[str]:
    """Per libhakmem build and anchor present: the probes the anchor catches in every run
    and the build does not."""
    labels = labels_of(rows)
    by = {(r["probe"], r["label"]): r for r in rows}
    lines = []
    for label in (lbl for lbl in labels if lbl.startswith("hakmem")):
        for anchor in (a for a in ANCHORS if a in labels):
            missed = caught_by_not(rows, anchor, label)
            items = ", ".join(f"`{p}` ({mark(by[(p, label)])})" for p in missed)
            lines.append(
                f"- {label}: {len(missed)} caught by {anchor}, not by it"
                + (f": {items}." if missed else ".")
            )
    return lines


def matrix_lines(rows: list[dict], records: list[dict]) -> list[str]:
    labels = labels_of(rows)
    usable = usability(records)
    by = {(r["probe"], r["label"]): r for r in rows}
    probes_of: dict[str, list[str]] = {}
    for r in rows:
        program = probe_program(r["probe"])[0]
        if r["probe"] not in probes_of.setdefault(program, []):
            probes_of[program].append(r["probe"])
    heads = [
        lbl if (usable.get(lbl) is None or usable[lbl].usable) else f"{lbl} *not usable*"
        for lbl in labels
    ]
    lines = [
        "| program | sizes | " + " | ".join(heads) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    for program in programs_of(r["probe"] for r in rows):
        probes = sorted(
            probes_of[program], key=lambda p: SIZES.index(probe_program(p)[1] or "medium")
        )
        sizes = " ".join(probe_program(p)[1][:1].upper() or "—" for p in probes)
        cells = [" ".join(mark(by.get((p, lbl))) for p in probes) for lbl in labels]
        lines.append(f"| {program} | {sizes} | " + " | ".join(cells) + " |")
    return lines


def tidy_lines(rows: list[dict]) -> list[str]:
    lines = [
        "| allocator | probe | outcome | caught runs | ended | first stderr line | note |",
        "|---|---|---|---:|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['probe']} | {r['outcome']} | {r['caught_runs']}/{r['runs']} "
            f"| {r['ended'] or '-'} | {_escape(r['stderr_first']) or '-'} "
            f"| {_escape(r['split'] or r['note']) or '-'} |"
        )
    return lines


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def describe(meta: dict, rows: list[dict]) -> str:
    """Which suite, which probes, how many runs, and the counting rule, in one paragraph."""
    suite = meta.get("suite") or {}
    benign = ", ".join(
        f"`{b['program']} {' '.join(b['args'])}`".replace(" `", "`")
        for b in suite.get("benign", [])
    )
    n = len({r["probe"] for r in rows})
    runs = meta.get("runs", 1)
    return (
        f"mimalloc-bench's `security/` programs ({n} probes; suite commit "
        f"`{str(suite.get('commit', '?'))[:12]}`), each one process under the allocator "
        f"{'once' if runs == 1 else f'{runs} times'}: a probe prints `NOT_CAUGHT` when the "
        "allocator let its misuse pass. A probe is counted as caught when every run ended "
        "without printing it (none by hakbench's timeout), and only for an allocator that "
        "ran the suite's benign programs "
        f"({benign}: exit 0, the expected output, malloc from the allocator) in the same "
        "call (docs/misuse.md). The contract counts every way of not printing it: *of which "
        "a fault* ended by SIGSEGV or SIGBUS (a guard page or unmapped memory: a defence of "
        "some allocators, the layout's luck in others), *of which no effect* exited 0 "
        "(memory zeroed, a block not handed back at once, NULL for an impossible size); the "
        "rest ended by the allocator's check (SIGABRT, or an exit with its message)."
    )


def section_lines(
    rows: list[dict], records: list[dict], meta: dict, level: str = "##"
) -> list[str]:
    """The suite's probes of a run or of the scorecard: description, counts, what the
    anchors catch that libhakmem does not, the matrix."""
    lines = [
        f"{level} The suite's security probes (mimalloc-bench)",
        "",
        describe(meta, rows),
        "",
        *counts_lines(rows, records),
        "",
    ]
    missed = missed_lines(rows)
    if missed:
        lines += ["Caught by an anchor in every run, not by libhakmem:", "", *missed, ""]
    lines += [legend(), "", *matrix_lines(rows, records), ""]
    return lines
