"""The heap-misuse tables in Markdown: the compact matrix (patterns x allocators), the counts
of caught patterns per allocator, what glibc catches that another allocator does not, and
the tidy table. ``misuse.md`` of a run directory (``run_markdown``) and the "Heap misuse"
section of the scorecard (``scorecard_section``) are both drawn from rows alone
(``hakbench.tables.misuse_model``), so regenerating gives the same bytes.
"""

from __future__ import annotations

from hakbench.report import misuse_costs_md, misuse_suite_md
from hakbench.tables import misuse_suite_model
from hakbench.tables.misuse_model import (
    STOPPING_EFFECTS,
    counts,
    labels_of,
    missed_against,
    patterns_of,
)

REFERENCE = "system"
# how the scorecard's section is measured again, with the suite and the optional reference
REFRESH = (
    "HAKBENCH_MIMALLOC_BENCH=CHECKOUT HAKBENCH_HARDENED_MALLOC=libhardened_malloc.so "
    "hakbench scorecard --refresh --misuse"
)  # glibc: what the other allocators are held against
CELL = {"caught": "✔", "crashed": "crash", "hung": "hang", "error": "error"}
EFFECT_TAG = {"overlap": "overlap", "arbitrary-address": "arbitrary", "malloc-null": "NULL"}


def cell_text(row: dict | None) -> str:
    """One matrix cell: ✔ caught, ✘ not caught (with the effect when malloc handed out
    overlapping or chosen memory), crash, hang, error; — not run."""
    if row is None:
        return "—"
    if row["outcome"] == "not-caught":
        tag = EFFECT_TAG.get(row["effect"])
        text = f"✘ {tag}" if tag else "✘"
    else:
        text = CELL.get(row["outcome"], row["outcome"])
    runs, agree = int(row.get("runs") or 1), int(row.get("agree") or 1)
    return text if agree == runs else f"{text} {agree}/{runs}"


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def legend() -> str:
    return (
        "✔ caught: the allocator stopped the process (SIGABRT, or a nonzero exit with its "
        "message) · ✘ not caught: the program finished; `✘ overlap` malloc returned memory "
        "overlapping a live block, `✘ arbitrary` it returned the address the misuse wrote "
        "(a buffer of the probe's own) · crash: SIGSEGV/SIGBUS, stopped by no check · hang: "
        "the probe's 2 s CPU-time limit ended a looping allocator · `k/n`: k of the n runs of the "
        "pattern ended so, the others otherwise (address-space randomisation decides some)."
    )


def matrix_lines(rows: list[dict]) -> list[str]:
    labels = labels_of(rows)
    by = {(r["pattern"], r["label"]): r for r in rows}
    lines = [
        "| pattern | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for p in patterns_of(rows):
        lines.append(f"| {p} | " + " | ".join(cell_text(by.get((p, lbl))) for lbl in labels) + " |")
    return lines


def counts_lines(rows: list[dict]) -> list[str]:
    lines = [
        "| allocator | caught | crashed | hung | not caught | of which overlap or arbitrary "
        "address | error |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in counts(rows):
        b = c.by_outcome
        name = f"**{c.label}**" if c.label.startswith("hakmem") else c.label
        lines.append(
            f"| {name} | {c.caught} of {c.total} | {b['crashed']} | {b['hung']} "
            f"| {b['not-caught']} | {c.exploitable} | {b['error']} |"
        )
    return lines


def missed_lines(rows: list[dict], reference: str = REFERENCE) -> list[str]:
    """Per libhakmem build: the patterns glibc catches and it does not, with its outcome."""
    if reference not in labels_of(rows):
        return []
    by = {(r["pattern"], r["label"]): r for r in rows}
    lines = []
    for label in labels_of(rows):
        if not label.startswith("hakmem"):
            continue
        missed = missed_against(rows, label, reference)
        if not missed:
            lines.append(f"- {label}: catches every pattern glibc catches.")
            continue
        items = ", ".join(f"`{p}` ({cell_text(by[(p, label)])})" for p in missed)
        lines.append(f"- {label}: {len(missed)} caught by glibc, not by it: {items}.")
    return lines


def tidy_lines(rows: list[dict]) -> list[str]:
    lines = [
        "| allocator | pattern | outcome | effect | signal | exit | at | first stderr line "
        "| runs |",
        "|---|---|---|---|---|---:|---|---|---|",
    ]
    for r in rows:
        first = r["stderr_first"] or r.get("note", "")
        lines.append(
            f"| {r['label']} | {r['pattern']} | {r['outcome']} | {r['effect'] or '-'} "
            f"| {r['signal'] or '-'} | {r['exit_status'] or '-'} | {r['at'] or '-'} "
            f"| {_escape(first) or '-'} | {r['split'] or r['runs']} |"
        )
    return lines


def _skipped_lines(meta: dict) -> list[str]:
    lines = [f"- Skipped {s['label']}: {s['reason']}." for s in meta.get("skipped", [])]
    return [*lines, ""] if lines else []


def both_lines(rows: list[dict], records: list[dict]) -> list[str]:
    """One line per allocator: our patterns caught and the suite's probes caught, each
    counted by its own rule (a set not run: —)."""
    suite_rows = misuse_suite_model.rows_of(records)
    ours = {c.label: c for c in counts(rows)}
    theirs = {c.label: c for c in misuse_suite_model.counts(suite_rows, records)}
    lines = [
        "| allocator | our patterns caught | the suite's probes caught (every run) |",
        "|---|---:|---:|",
    ]
    for label in dict.fromkeys([*ours, *theirs]):
        name = f"**{label}**" if label.startswith("hakmem") else label
        mine = f"{ours[label].caught} of {ours[label].total}" if label in ours else "—"
        c = theirs.get(label)
        if c is None:
            suite = "—"
        elif c.usable is None or not c.usable.usable:
            suite = f"not usable ({c.by_outcome['caught']} by the contract alone)"
        else:
            suite = f"{c.counted} of {c.total}"
        lines.append(f"| {name} | {mine} | {suite} |")
    return lines


def _suite_lines(rows: list[dict], records: list[dict], meta: dict, level: str) -> list[str]:
    suite_rows = misuse_suite_model.rows_of(records)
    if not suite_rows:
        return []
    return misuse_suite_md.section_lines(suite_rows, records, meta, level)


def run_markdown(rows: list[dict], meta: dict, records: list[dict] = ()) -> str:
    """``misuse.md`` of a ``hakbench misuse`` run (``records``: every record, for the
    suite's probes)."""
    records = list(records)
    git = meta.get("git") or {}
    lines = [
        "# Heap misuse",
        "",
        f"`{meta.get('command', '?')}`, {meta.get('date', '?')}, commit "
        f"`{(git.get('commit') or 'unknown')[:12]}`"
        + (" (work tree had uncommitted changes)" if git.get("dirty") else "")
        + f"; {meta.get('probes_run', len(rows))} processes"
        + (", **interrupted**: the tables hold what finished" if meta.get("interrupted") else "")
        + ". Each probe (`build/bench/misuse_probe PATTERN`) performs one misuse, then a fixed "
        "amount of ordinary malloc/free activity, under the allocator preloaded (docs/misuse.md).",
        "",
        *_skipped_lines(meta),
        *(["## Both sets", "", *both_lines(rows, records), ""] if meta.get("suite") else []),
        *_suite_lines(rows, records, meta, "##"),
    ]
    if not rows:
        return "\n".join(lines)
    lines += ["## Our patterns: caught per allocator", "", *counts_lines(rows), ""]
    missed = missed_lines(rows)
    if missed:
        lines += [f"Caught by glibc ({REFERENCE}), not by libhakmem:", "", *missed, ""]
    lines += [
        "## Matrix",
        "",
        legend(),
        "",
        *matrix_lines(rows),
        "",
        "## Every probe",
        "",
        "`at`: the allocator call (or probe step) where the process stopped, or where "
        "malloc handed out the bad block, and how many calls after the misuse (`+0`: the "
        "misusing call itself).",
        "",
        *tidy_lines(rows),
        "",
    ]
    return "\n".join(lines)


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def anchors_text(meta: dict) -> str:
    """The allocators the others are held against in this run: glibc, and hardened_malloc
    when the run had it."""
    libraries = meta.get("libraries") or {}
    text = "glibc (`system`)"
    if misuse_suite_model.HARDENED in libraries:
        path = libraries[misuse_suite_model.HARDENED]
        text += (
            f" and GrapheneOS's hardened_malloc (`{misuse_suite_model.HARDENED}`, `{path}`; "
            "docs/misuse.md says how it is built)"
        )
    return text


def scorecard_section(
    rows: list[dict],
    meta: dict,
    stored: str,
    records: list[dict] = (),
    costs: list[dict] = (),
) -> str:
    """The "Heap misuse" section of SCORECARD.md, from the stored records (``rows``: our
    patterns' rows; ``records``: every record, for the suite's probes) and the builds' costs
    (``costs``: the rows of ``build_costs.csv``, shown beside the counts when given)."""
    records = list(records)
    git = meta.get("git") or {}
    suite = meta.get("suite")
    tables = (
        f"the tidy tables are `results/{stored}/misuse.csv` and `results/{stored}/suite-probes.csv`"
        if suite
        else f"the tidy table is `results/{stored}/misuse.csv`"
    )
    lines = [
        "## Heap misuse",
        "",
        f"Stored in `results/{stored}/` (`hakbench scorecard --refresh --misuse`, "
        f"{meta.get('date', '?')}, commit `{(git.get('commit') or 'unknown')[:10]}`"
        + (", work tree had uncommitted changes" if git.get("dirty") else "")
        + f"); {tables}. "
        + (
            "Two sets, each counted by its own rule: our own patterns and mimalloc-bench's "
            "security probes. "
            if suite
            else ""
        )
        + f"Anchors: {anchors_text(meta)}."
        + (f" Refresh: `{REFRESH}`." if suite else ""),
        "",
        *_skipped_lines(meta),
    ]
    if suite:
        lines += [*both_lines(rows, records), ""]
    lines += misuse_costs_md.costs_lines(list(costs), records)
    if rows:
        lines += _patterns_section(rows, meta, "### Our patterns" if suite else "")
    lines += _suite_lines(rows, records, meta, "###")
    return "\n".join(lines)


def _patterns_section(rows: list[dict], meta: dict, heading: str) -> list[str]:
    n_patterns = len(patterns_of(rows))
    effects = ", ".join(f"`{e}`" for e in STOPPING_EFFECTS)
    lines = [heading, ""] if heading else []
    lines += [
        f"{n_patterns} patterns, each "
        "one process of `build/bench/misuse_probe PATTERN` under the allocator: one misuse "
        "(overflow past the requested or the usable size, underflow, use after free, double "
        "free, free of a pointer inside or outside a block, realloc of a freed block) in tiny "
        "(40 B), mid (12,000 B) and large (~1.9 MiB) blocks, then a fixed amount of ordinary "
        "malloc/free activity that would expose it (docs/misuse.md). Each pattern ran "
        f"{_times(meta.get('runs', 1))} under each allocator; a cell is the outcome most runs "
        "had (`k/n` when they differed: address-space randomisation decides a few). A "
        f"not-caught pattern whose effect is one of {effects} handed out memory the program "
        "did not own.",
        "",
        *counts_lines(rows),
        "",
    ]
    missed = missed_lines(rows)
    if missed:
        lines += [f"Caught by glibc ({REFERENCE}), not by libhakmem:", "", *missed, ""]
    return [*lines, legend(), "", *matrix_lines(rows), ""]
