"""The house rules, checked on the source (AST, no imports): planning imports no
TensorFlow, nothing outside the CLI imports the CLI, the core imports nothing built
on it, no import cycles, no huge files."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "meshpar"
HEAVY = ("tensorflow", "mesh_tensorflow")
MAX_LINES = 650


def _modules():
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name, path):
    """Every module name ``name`` imports, at any depth of the file (lazy imports count)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def _internal(name):
    """Internal modules ``name`` depends on (package faces excluded from cycles)."""
    return {m for m in IMPORTS[name] if m in MODULES and m != name
            and MODULES[m].name != "__init__.py"}


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("meshpar.planning")))
def test_planning_imports_no_tensorflow(name):
    heavy = {m for m in IMPORTS[name] if m.split(".")[0] in HEAVY}
    inside = {m for m in IMPORTS[name] if m.startswith("meshpar.")
              and not m.startswith(("meshpar.planning", "meshpar.core.splits"))}
    assert not heavy and not inside, f"{name} imports {sorted(heavy | inside)}"


def test_nothing_outside_the_cli_imports_the_cli():
    offenders = {name: sorted(m for m in IMPORTS[name] if m.startswith("meshpar.cli"))
                 for name in MODULES
                 if not name.startswith("meshpar.cli") and name != "meshpar.__main__"}
    assert not {k: v for k, v in offenders.items() if v}


#: What the core (the uneven mesh and its collectives) is built on: TF and Mesh-TF,
#: the shim, and the planner's plain model description; training, runtime, models,
#: benchmarks and the CLI are built on the core, not the other way round.
ABOVE_THE_CORE = ("meshpar.training", "meshpar.runtime", "meshpar.models", "meshpar.bench",
                  "meshpar.evaluation", "meshpar.data", "meshpar.cli", "meshpar.viz")


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("meshpar.core")))
def test_the_core_imports_nothing_built_on_it(name):
    above = sorted(m for m in IMPORTS[name] if m.startswith(ABOVE_THE_CORE))
    assert not above, f"{name} imports {above}"


def test_there_are_no_import_cycles():
    graph = {name: _internal(name) for name in MODULES if MODULES[name].name != "__init__.py"}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in graph.get(node, ()):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles


def test_the_checker_finds_a_cycle_when_there_is_one(tmp_path):
    # The cycle test above must be able to fail: a two-module cycle is found.
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import meshpar.b\n")
    b.write_text("from meshpar import a\n")
    assert "meshpar.b" in _imports("meshpar.a", a)
    assert "meshpar.a" in _imports("meshpar.b", b)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_huge(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name}: {lines} lines; split it by concept"


def test_every_test_module_that_starts_workers_runs_in_the_cluster_group():
    """`make test` runs two test processes; a module that starts TF worker
    processes (a LocalCluster, a benchmark) outside the ``cluster`` group could
    run next to another cluster on the same pinned cores (tests/conftest.py)."""
    import re

    from conftest import CLUSTER_MODULES

    here = pathlib.Path(__file__).stem  # names the patterns, starts nothing
    starts = {path.stem for path in (ROOT / "tests").glob("test_*.py") if path.stem != here
              and re.search(r"LocalCluster|local_cluster|run_benchmark\(", path.read_text())}
    assert starts == set(CLUSTER_MODULES)
