"""Inputs of command workloads, generated deterministically by hakbench (no downloads).

A workload names a generator and its parameters (``input = { generator = "sql", rows =
20000 }``); ``input_path`` writes the text once into ``build/inputs/`` under a name keyed by
the generator, its parameters and this module's generator version, and returns the path.
Each generator is a pure function of its parameters (its own ``random.Random(seed)``), so
the same workload always reads the same bytes, on any machine.

What each input makes its program do, allocator-wise:

- ``sql``: sqlite3 building tables of short random strings, an index, joins, GROUP BY and
  ORDER BY over them (page cache, many small row buffers).
- ``c_source``: a C file of many functions with local structs, switches and loops for
  ``gcc -O2``: cc1 builds and frees GIMPLE/RTL nodes by the million (obstacks and GC).
- ``lua``: tables of strings and closures built and dropped, string concatenation,
  ``gsub`` (lots of short-lived small objects under Lua's incremental GC).
- ``perl``: hashes of strings, regex substitutions, sort, join/split (Perl's SV arenas and
  string buffers that grow by realloc).
- ``python``: json round trips, regex scans, dicts of strings (pymalloc for <= 512 B,
  malloc above it).
- ``smt2``: SMT-LIB integer/boolean problems for z3 (term DAGs, clause databases).
- ``postscript``: pages of paths, curves and text for ghostscript to rasterise.

Outputs printed by the scripts are deterministic (sorted, counted, hashed in the program),
so a workload's output check can compare them byte for byte across allocators.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import string
from collections.abc import Callable
from pathlib import Path

from hakbench.core import paths
from hakbench.core.errors import UsageError

# Bump when a generator's output changes for the same parameters: it is part of the key.
GENERATOR_VERSION = 1


def _words(rng: random.Random, n: int, lo: int = 3, hi: int = 12) -> list[str]:
    letters = string.ascii_lowercase
    return ["".join(rng.choices(letters, k=rng.randint(lo, hi))) for _ in range(n)]


def gen_sql(rows: int = 20000, seed: int = 1) -> str:
    rng = random.Random(seed)
    words = _words(rng, 500)
    out = [
        "PRAGMA journal_mode=OFF;",
        "PRAGMA synchronous=OFF;",
        "CREATE TABLE person(id INTEGER PRIMARY KEY, name TEXT, city TEXT, score INTEGER, "
        "note TEXT);",
        "CREATE TABLE visit(pid INTEGER, place TEXT, n INTEGER);",
        "BEGIN;",
    ]
    for i in range(rows):
        note = " ".join(rng.choices(words, k=rng.randint(1, 12)))
        out.append(
            f"INSERT INTO person VALUES({i},'{rng.choice(words)}','{rng.choice(words[:40])}',"
            f"{rng.randint(0, 10000)},'{note}');"
        )
        for _ in range(rng.randint(0, 3)):
            out.append(
                f"INSERT INTO visit VALUES({i},'{rng.choice(words[:80])}',{rng.randint(1, 9)});"
            )
    out += [
        "COMMIT;",
        "CREATE INDEX person_city ON person(city, score);",
        "CREATE INDEX visit_pid ON visit(pid);",
        "SELECT city, count(*), sum(score), max(length(note)) FROM person GROUP BY city "
        "ORDER BY city;",
        "SELECT p.city, v.place, count(*), sum(v.n) FROM person p JOIN visit v ON v.pid = p.id "
        "GROUP BY p.city, v.place ORDER BY 3 DESC, 1, 2 LIMIT 40;",
        "SELECT name, group_concat(place, ',') FROM (SELECT p.name, v.place FROM person p "
        "JOIN visit v ON v.pid = p.id WHERE p.score < 500 ORDER BY p.id, v.place) "
        "GROUP BY name ORDER BY name LIMIT 60;",
        "UPDATE person SET note = note || ' ' || name WHERE score % 3 = 0;",
        "DELETE FROM visit WHERE n < 3;",
        "SELECT count(*), sum(length(note)) FROM person;",
        "SELECT count(*), sum(n) FROM visit;",
        "SELECT upper(substr(note, 1, 20)) AS k, count(*) FROM person GROUP BY k "
        "ORDER BY 2 DESC, 1 LIMIT 20;",
    ]
    return "\n".join(out) + "\n"


def gen_c_source(functions: int = 120, seed: int = 1) -> str:
    rng = random.Random(seed)
    out = ["#include <stddef.h>", "#include <string.h>", ""]
    out.append("struct node { int key; double w; struct node *next; char tag[16]; };")
    for f in range(functions):
        n_vars = rng.randint(4, 10)
        vs = [f"v{i}" for i in range(n_vars)]
        body = [f"  int {v} = {rng.randint(-50, 50)} + a;" for v in vs]
        body.append("  struct node local[8]; memset(local, 0, sizeof local);")
        for _ in range(rng.randint(6, 16)):
            a, b, c = rng.choice(vs), rng.choice(vs), rng.choice(vs)
            kind = rng.randrange(4)
            if kind == 0:
                body.append(f"  for (int i = 0; i < n; i++) {{ {a} += {b} * i ^ {c}; }}")
            elif kind == 1:
                cases = " ".join(
                    f"case {k}: {a} = {b} + {k}; break;" for k in range(rng.randint(3, 9))
                )
                body.append(f"  switch ({c} & 7) {{ {cases} default: {a} ^= 3; }}")
            elif kind == 2:
                body.append(
                    f"  if ({a} > {b}) {{ local[{rng.randrange(8)}].key = {c}; }} "
                    f"else {{ {c} = local[{rng.randrange(8)}].key - {a}; }}"
                )
            else:
                body.append(
                    f"  local[{rng.randrange(8)}].w = {a} * 0.5 + {b}; "
                    f"{c} += (int)local[{rng.randrange(8)}].w;"
                )
        body.append("  return " + " + ".join(vs) + ";")
        out.append(f"int f{f}(int a, int n) {{")
        out += body
        out.append("}")
        out.append("")
    calls = " + ".join(f"f{i}(x, 3)" for i in range(functions))
    out.append(f"int all_functions(int x) {{ return {calls}; }}")
    return "\n".join(out) + "\n"


def gen_lua(rounds: int = 40, size: int = 5000, seed: int = 1) -> str:
    return f"""-- generated by hakbench.core.inputs (seed {seed})
local seed = {seed}
local function rnd() seed = (seed * 1103515245 + 12345) % 2147483648; return seed end
local total, kept = 0, {{}}
for r = 1, {rounds} do
  local t = {{}}
  for i = 1, {size} do
    local s = string.format("k%d_%d", rnd() % 1000, i)
    t[s] = {{ name = s, len = #s, tags = {{ s:upper(), s:rep(2) }} }}
  end
  local parts = {{}}
  for k, v in pairs(t) do
    if v.len % 3 == 0 then parts[#parts + 1] = k end
  end
  table.sort(parts)
  local joined = table.concat(parts, ",")
  local replaced = joined:gsub("k(%d+)_", function(d) return "<" .. d .. ">" end)
  total = total + #replaced
  kept[r % 7] = t
  local fns = {{}}
  for i = 1, 200 do fns[i] = function(x) return x + i + r end end
  for i = 1, 200 do total = total + fns[i](0) % 3 end
end
print("total", total)
"""


def gen_perl(rounds: int = 30, size: int = 8000, seed: int = 1) -> str:
    return f"""# generated by hakbench.core.inputs (seed {seed})
use strict; use warnings;
my $seed = {seed};
sub rnd {{ $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed; }}
my ($total, %keep) = (0);
for my $r (1 .. {rounds}) {{
  my %h;
  for my $i (1 .. {size}) {{
    my $k = sprintf("w%d_%d", rnd() % 5000, $i);
    $h{{$k}} = [ uc($k), length($k), $k x 3 ];
  }}
  my @keys = sort grep {{ $h{{$_}}[1] % 2 }} keys %h;
  my $s = join(" ", @keys);
  (my $t = $s) =~ s/w(\\d+)_/<$1>/g;
  my @parts = split /\\s+/, $t;
  $total += scalar(@parts) + length($t);
  $keep{{$r % 5}} = \\%h;
}}
print "total $total\\n";
"""


def gen_python(rounds: int = 12, size: int = 20000, seed: int = 1) -> str:
    return f"""# generated by hakbench.core.inputs (seed {seed}); stdlib only
import hashlib, json, random, re
rng = random.Random({seed})
words = ["".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(3, 12)))
         for _ in range(3000)]
digest = hashlib.sha256()
for r in range({rounds}):
    records = [{{"id": i, "name": rng.choice(words), "tags": rng.sample(words, 3),
                "score": rng.random()}} for i in range({size})]
    text = json.dumps(records)
    back = json.loads(text)
    index = {{}}
    for rec in back:
        index.setdefault(rec["name"], []).append(rec["id"])
    found = re.findall(r'"name": "([a-h]+)"', text)
    counts = {{}}
    for w in found:
        counts[w] = counts.get(w, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    digest.update(repr((len(text), len(index), top)).encode())
print(digest.hexdigest())
"""


def gen_smt2(problems: int = 6, vars: int = 60, clauses: int = 160, seed: int = 1) -> str:
    rng = random.Random(seed)
    out = ["(set-logic QF_LIA)"]
    for p in range(problems):
        out.append("(push 1)")
        xs = [f"x{p}_{i}" for i in range(vars)]
        for x in xs:
            out.append(f"(declare-const {x} Int)")
            out.append(f"(assert (and (>= {x} -{vars}) (<= {x} {vars})))")
        for _ in range(clauses):
            lits = []
            for _ in range(3):
                a, b = rng.sample(xs, 2)
                op = rng.choice(["<", "<=", "=", ">"])
                lits.append(f"({op} (+ {a} {rng.randint(-5, 5)}) (* {rng.randint(1, 3)} {b}))")
            out.append(f"(assert (or {' '.join(lits)}))")
        total = " ".join(rng.sample(xs, min(12, vars)))
        out.append(f"(assert (= (+ {total}) {rng.randint(-20, 20)}))")
        out.append("(check-sat)")
        out.append("(pop 1)")
    return "\n".join(out) + "\n"


def gen_postscript(pages: int = 4, shapes: int = 1500, seed: int = 1) -> str:
    rng = random.Random(seed)
    out = ["%!PS-Adobe-3.0", "%%Pages: " + str(pages), "/Helvetica findfont 14 scalefont setfont"]
    for page in range(1, pages + 1):
        out.append(f"%%Page: {page} {page}")
        for _ in range(shapes):
            x, y = rng.uniform(0, 600), rng.uniform(0, 780)
            r, g, b = (rng.random() for _ in range(3))
            out.append(f"{r:.3f} {g:.3f} {b:.3f} setrgbcolor")
            kind = rng.randrange(3)
            if kind == 0:
                out.append(
                    f"newpath {x:.1f} {y:.1f} moveto {rng.uniform(-90, 90):.1f} "
                    f"{rng.uniform(-90, 90):.1f} {rng.uniform(-90, 90):.1f} "
                    f"{rng.uniform(-90, 90):.1f} {rng.uniform(-90, 90):.1f} "
                    f"{rng.uniform(-90, 90):.1f} rcurveto closepath fill"
                )
            elif kind == 1:
                out.append(
                    f"newpath {x:.1f} {y:.1f} {rng.uniform(2, 40):.1f} 0 360 arc "
                    f"{rng.uniform(0.2, 3):.2f} setlinewidth stroke"
                )
            else:
                word = "".join(rng.choices(string.ascii_letters, k=rng.randint(3, 10)))
                out.append(f"{x:.1f} {y:.1f} moveto ({word}) show")
        out.append("showpage")
    out.append("%%EOF")
    return "\n".join(out) + "\n"


# name -> (generator, file suffix)
GENERATORS: dict[str, tuple[Callable[..., str], str]] = {
    "sql": (gen_sql, ".sql"),
    "c_source": (gen_c_source, ".c"),
    "lua": (gen_lua, ".lua"),
    "perl": (gen_perl, ".pl"),
    "python": (gen_python, ".py"),
    "smt2": (gen_smt2, ".smt2"),
    "postscript": (gen_postscript, ".ps"),
}


def check_input_spec(spec: dict, where: str) -> None:
    """``{generator = NAME, PARAM = value, ...}``: the generator exists and takes the params."""
    import inspect

    name = spec.get("generator")
    if name not in GENERATORS:
        raise UsageError(
            f"{where}: input generator {name!r} unknown; known: {', '.join(GENERATORS)}"
        )
    params = {k: v for k, v in spec.items() if k != "generator"}
    accepted = inspect.signature(GENERATORS[name][0]).parameters
    for k, v in params.items():
        if k not in accepted:
            raise UsageError(
                f"{where}: generator {name} has no parameter '{k}'; it takes {', '.join(accepted)}"
            )
        if not isinstance(v, int) or isinstance(v, bool):
            raise UsageError(f"{where}: generator parameter {k} must be an integer, got {v!r}")


def input_key(spec: dict) -> str:
    """The cache key of an input: generator, parameters, generator version."""
    text = json.dumps([GENERATOR_VERSION, sorted(spec.items())], sort_keys=True)
    return f"{spec['generator']}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"


def generate(spec: dict) -> str:
    fn, _ = GENERATORS[spec["generator"]]
    return fn(**{k: v for k, v in spec.items() if k != "generator"})


def input_path(spec: dict, cache: Path | None = None) -> Path:
    """The generated file for ``spec``, written once (atomically) into the cache."""
    cache = cache or paths.build_dir() / "inputs"
    _, suffix = GENERATORS[spec["generator"]]
    path = cache / (input_key(spec) + suffix)
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(generate(spec))
        os.replace(tmp, path)
    return path
