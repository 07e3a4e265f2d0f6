"""The README and the guides are manuals; dated measurement logs live in docs/notebook/.

A guide says how things work now and how to use them; what was measured when goes into a
lab-notebook file (docs/notebook/<date>-<topic>.md) that the guide links where a claim
rests on it. These tests keep timestamps and "measured on <date>" logs out of the manuals,
and every pointer in the docs pointing at something that exists: a relative link at a file,
its `#anchor` at a heading of that file, and a section named in quotes after a file's name
(`docs/allocator.md, "Remote free"`) at text of that file, so that moving a section between
a guide and the notebook cannot leave a reader at a dead end.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NOTEBOOK = DOCS / "notebook"

# Guides exempt from the dated-log check while being split into manual and notebook. Empty:
# every guide is a manual now (issue #41); a name here must be a real file in docs/.
PENDING = set()

# What a dated log looks like, as opposed to a manual's sentence.
DATED = [
    # a clock time in UTC: "12:05 UTC", "12:05-12:27 UTC", "01:52, 02:15 UTC"
    (re.compile(r"\b\d{1,2}:\d\d(?:\s*[-–]\s*\d{1,2}:\d\d)?\s*UTC\b"), "UTC time"),
    # an ISO date with a time of day: "2026-11-26 01:12", "2026-11-26T01:12"
    (re.compile(r"\b20\d\d-\d\d-\d\d[ T]\d{1,2}:\d\d\b"), "date with time"),
    # "measured here (2026-11-26", "measured first (2026-11-23", "measured on 2026-11-22"
    (
        re.compile(r"\bmeasured\b[^\n.]{0,25}?\(?\b(?:on\s+)?(?<!/)20\d\d-\d\d-\d\d", re.I),
        "'measured ... <date>'",
    ),
    # a heading that dates itself: "## The done-when (2026-11-24 ...)"
    (re.compile(r"^#+ .*\b20\d\d-\d\d-\d\d", re.M), "dated heading"),
]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")

# A section named in quotes after a file: `docs/allocator.md, "Remote free"`,
# `[docs/measuring.md](docs/measuring.md), "Reading a verdict"`, `allocator.md ("Stats")`.
QUOTED_SECTION = re.compile(
    r"((?:docs/|results/)?(?:notebook/)?[\w.-]+\.md)`?\]?(?:\([^)\s]*\))?`?,?\s+\(?"
    r"(?:end of\s+)?\"([^\"]+)\""
)


def manuals():
    """README.md and the guides in docs/ (not the notebook), minus the pending ones."""
    return [ROOT / "README.md"] + sorted(p for p in DOCS.glob("*.md") if p.name not in PENDING)


def all_docs():
    return [ROOT / "README.md"] + sorted(DOCS.rglob("*.md"))


def pointing_docs():
    """Every Markdown file whose pointers are checked: the docs and the reports in results/."""
    return all_docs() + sorted((ROOT / "results").glob("*.md"))


def dated_lines(text):
    """(line number, kind, line) for each line of `text` that reads as a dated log."""
    kinds = {}
    lines = text.splitlines()
    for pattern, kind in DATED:
        for m in pattern.finditer(text):
            n = text.count("\n", 0, m.start())
            kinds.setdefault(n, []).append(kind)
    return [
        (n + 1, ", ".join(dict.fromkeys(k)), lines[n].strip()) for n, k in sorted(kinds.items())
    ]


def in_code_fence(text, offset):
    return text.count("```", 0, offset) % 2 == 1


def relative_targets(text):
    """Every relative link target in `text` (outside code fences), anchor included."""
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # http:, mailto:
        if not in_code_fence(text, m.start()):
            yield target


def relative_links(text):
    for target in relative_targets(text):
        if not target.startswith("#"):
            yield target.split("#", 1)[0]


def anchors(text):
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    seen, out = {}, set()
    for m in re.finditer(r"^#{1,6} (.*)$", text, re.M):
        if in_code_fence(text, m.start()):
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_anchors(path):
    """Relative links of `path` whose #anchor names no heading of the target Markdown file."""
    broken = []
    for target in relative_targets(path.read_text()):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file) if file else path
        if anchor and dest.suffix == ".md" and dest.is_file():
            if anchor not in anchors(dest.read_text()):
                broken.append(target)
    return broken


def _plain(text):
    return " ".join(re.sub(r"[`*]", "", text).lower().split())


def _named_file(path, name, root):
    bases = [root] if name.startswith(("docs/", "results/")) else [path.parent, root / "docs", root]
    return next((base / name for base in bases if (base / name).is_file()), None)


def stale_section_names(path, root=ROOT):
    """(file, "section") pairs that `path` names in quotes and that file no longer contains."""
    stale = []
    for m in QUOTED_SECTION.finditer(path.read_text()):
        target = _named_file(path, m.group(1), root)
        if target is not None and _plain(m.group(2)) not in _plain(target.read_text()):
            stale.append((m.group(1), " ".join(m.group(2).split())))
    return stale


def rel(path):
    return str(path.relative_to(ROOT))


def test_pending_guides_exist():
    # The exemption names real files; a renamed guide must not slip out of the check.
    for name in PENDING:
        assert (DOCS / name).is_file(), name


@pytest.mark.parametrize("path", manuals(), ids=rel)
def test_no_dated_logs_in_manuals(path):
    found = dated_lines(path.read_text())
    assert not found, (
        f"{rel(path)} has dated measurement logs; move them to docs/notebook/<date>-<topic>.md "
        "and link the notebook from here:\n"
        + "\n".join(f"  line {n} ({kind}): {line[:120]}" for n, kind, line in found)
    )


def test_detector_sees_a_dated_log():
    # The patterns catch the logs this test exists to keep out.
    for log in [
        "Measured here (2026-11-26 01:12 UTC, `make demo`, 23 s in all)",
        "#### Issue #17's done-when, measured first (2026-11-23 12:05-12:27 UTC)",
        "5 min 13 s and 5 min 35 s (2026-11-26 01:52, 02:15 UTC)",
        "measured on 2026-11-22: 1.048 and 0.957",
    ]:
        assert dated_lines(log), log
    for manual in [
        "`make test` takes 5-6 minutes ([timings](docs/notebook/2026-11-26-readme.md)).",
        "reports in `results/calibration/sequential-2026-11-24/`",
        "2.9 ms ([measured](notebook/2026-11-23-measuring.md)).",
    ]:
        assert not dated_lines(manual), manual


@pytest.mark.parametrize("path", pointing_docs(), ids=rel)
def test_relative_links_resolve(path):
    broken = [t for t in relative_links(path.read_text()) if t and not (path.parent / t).exists()]
    assert not broken, f"{rel(path)} links to missing files: {broken}"


@pytest.mark.parametrize("path", pointing_docs(), ids=rel)
def test_anchors_resolve(path):
    broken = broken_anchors(path)
    assert not broken, f"{rel(path)} links to missing headings: {broken}"


def test_a_broken_anchor_is_reported(tmp_path):
    (tmp_path / "guide.md").write_text("# Guide\n## Remote free\ntext\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n## Here\n[ok](guide.md#remote-free) [gone](guide.md#large-blocks)\n"
        "[local](#here) [local gone](#there) [file only](guide.md)\n"
        "```\n[in a fence](guide.md#nowhere)\n```\n"
    )
    assert broken_anchors(page) == ["guide.md#large-blocks", "#there"]


@pytest.mark.parametrize("path", pointing_docs(), ids=rel)
def test_quoted_section_names_exist(path):
    stale = stale_section_names(path)
    assert not stale, f"{rel(path)} names sections its targets no longer have: {stale}"


def test_a_stale_section_name_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n## Remote free\n- **Spans from chunks** (speed-first).\n"
    )
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        'See docs/guide.md, "Remote free", and guide.md ("Spans from\nchunks"); but\n'
        'docs/guide.md, "Where the three memory workloads stand" moved to the notebook.\n'
    )
    assert stale_section_names(page, root=tmp_path) == [
        ("docs/guide.md", "Where the three memory workloads stand")
    ]


def test_anchor_slugs_follow_github():
    text = "# `make demo`\n## The gate's cost (2026-11-23)\n## Tour\n## Tour\n"
    assert anchors(text) == {"make-demo", "the-gates-cost-2026-11-23", "tour", "tour-1"}


def test_notebook_index_lists_every_entry():
    index = (NOTEBOOK / "README.md").read_text()
    linked = {Path(t).name for t in relative_links(index)}
    entries = {p.name for p in NOTEBOOK.glob("*.md") if p.name != "README.md"}
    assert entries, "docs/notebook/ has no entries"
    assert entries <= linked, f"docs/notebook/README.md misses {sorted(entries - linked)}"


def test_readme_is_short_and_starts_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    commands = re.findall(r"^(make \w+)", text, re.M)
    assert commands[:2] == ["make demo", "make test"]


def _commands(lines) -> list[str]:
    """The command lines of a recipe, white space folded (the comments after them too)."""
    return [" ".join(line.split()) for line in lines if line.strip()]


def test_the_slurm_recipe_in_the_guide_is_the_files_own_header():
    # the guide shows how to submit the array job; tests/test_slurm.py submits the files
    # themselves: the guide's lines must be the ones shard.sbatch's header gives, so the
    # recipe a user copies is the one that ran
    header = []
    for line in (ROOT / "scripts/slurm/shard.sbatch").read_text().splitlines()[1:]:
        if line.startswith("#   "):
            header.append(line[4:].split("#")[0])
        elif header:
            break
    guide = (DOCS / "hakbench-internals.md").read_text()
    block = guide.split("header says how to submit them:\n\n  ```\n", 1)[1]
    shown = [line.split("#")[0] for line in block.split("```", 1)[0].splitlines()]
    assert len(_commands(header)) == 4
    assert _commands(shown) == _commands(header)
