"""hakbench's modules form no import circle, not even through an import inside a function,
and import only down the layers of its subpackages.

A circle means two modules can only be understood (and changed) together; issue 14 broke
the ones between the engines and report/. This reads every module's imports with ast, so an
import placed in a function body to dodge the circle at load time counts as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hakbench

ROOT = Path(hakbench.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the hakbench modules it imports anywhere in its text."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    if sub in modules:
                        graph[name].add(sub)
                    elif node.module in modules:
                        graph[name].add(node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in modules)
        graph[name].discard(name)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    assert "hakbench.report.markdown" in graph["hakbench.experiments.ab_output"]  # in write_outputs
    assert "hakbench.engine.command_run" in graph["hakbench.engine.runner"]  # in run_sample


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_one_that_imports_it_back():
    assert circles(import_graph()) == []


# The layers, lowest first: a module imports only modules of its own package or of a lower
# layer. engine and stats share a layer and import neither each other. The reports read
# tables only: samples, summaries, rows (core, engine's readers, stats, tables), never an
# experiment that makes them; the experiments write their reports.
LAYERS = {
    "core": 0,  # base types and file formats
    "collect": 0,  # parsers: text in, data out
    "engine": 1,  # the sample loop, one process, storage, the schedule
    "stats": 1,  # figures and verdicts
    "tables": 2,  # what the reports read: summaries, the scorecard, misuse rows
    "report": 3,
    "experiments": 4,
    "commands": 5,
    "cli": 6,  # hakbench.cli and hakbench.__main__: the command line on top
}


def layer_of(module: str) -> str:
    """The package a module belongs to: hakbench.<package>[.x]; the top-level modules are
    the CLI (cli, __main__) and the package itself (its __version__, with core)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "core"
    if parts[1] in ("cli", "__main__"):
        return "cli"
    return parts[1]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        own = layer_of(module)
        for other in sorted(imported):
            theirs = layer_of(other)
            if theirs != own and LAYERS[theirs] >= LAYERS[own]:
                found.append(f"{module} ({own}) imports {other} ({theirs})")
    return found


def test_every_module_has_a_layer():
    assert {layer_of(m) for m in import_graph()} <= set(LAYERS)


def test_no_top_level_modules_but_the_cli():
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["__init__.py", "__main__.py", "cli.py"]


def test_layer_violations_are_found():
    graph = {
        "hakbench.engine.runner": {"hakbench.stats.stats", "hakbench.core.cell"},
        "hakbench.report.apps": {"hakbench.experiments.matrix", "hakbench.tables.x"},
        "hakbench.core.cell": {"hakbench.core.paths"},
    }
    assert layer_violations(graph) == [
        "hakbench.engine.runner (engine) imports hakbench.stats.stats (stats)",
        "hakbench.report.apps (report) imports hakbench.experiments.matrix (experiments)",
    ]


def test_imports_go_down_the_layers():
    assert layer_violations(import_graph()) == []


# Issue 28: no module over ~400 lines that holds more than one concern. A module that grows
# past this has likely taken on a second concern: split it by concern (plan, run, analysis,
# output), as ab, matrix, soak, calibrate, gate, scorecard and sequential were.
MAX_MODULE_LINES = 450


def test_no_module_grows_past_a_few_hundred_lines():
    long = {
        module_name(p): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"split by concern: {long}"


# Issue 41: no function over ~80 lines. A longer one does several things in a row; name
# each (a plan, a measurement, a verdict, a report section) as write_ab_report's sections,
# run_ab's plan/open/measure/result and gate_cmd's measure/refresh/judge were.
MAX_FUNCTION_LINES = 80


def long_functions(source: str) -> dict[str, int]:
    """function (Class.method for a method) -> its lines, for each longer than the limit."""
    found = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                n = child.end_lineno - child.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found[prefix + child.name] = n
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_long_functions_are_found():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    short = f"def short():\n{body}\n"  # the limit exactly: def line + 79
    long = f"class C:\n    def long(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
    long += "        return x0\n"
    assert long_functions(short) == {}
    assert long_functions(long) == {"C.long": MAX_FUNCTION_LINES + 1}


def test_no_function_grows_past_eighty_lines():
    long = {
        f"{module_name(p)}.{name}": n
        for p in ROOT.rglob("*.py")
        for name, n in long_functions(p.read_text()).items()
    }
    assert long == {}, f"split into named pieces: {long}"
