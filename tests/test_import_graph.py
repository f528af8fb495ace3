"""The package's import graph has no cycles: contracts live in leaf modules and implementations depend on them.

Every import counts, including those inside functions and under `if TYPE_CHECKING:` (a cycle dodged by a late
import is still a cycle a reader has to hold in their head)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rsd", "analysis")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name and not name.startswith(t + "."):  # a submodule importing its own package's init
                    graph[name].add(t)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_find_cycles_finds_a_planted_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert find_cycles(import_graph()) == []


def test_conf_dir_is_defined_once_in_a_leaf():
    """rsd.paths imports nothing from the project, and no other module builds the conf/ directory's path."""
    from rsd.paths import CONF_DIR

    assert import_graph()["rsd.paths"] == set()
    assert (CONF_DIR / "config.yaml").is_file()
    sources = {p: p.read_text() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert [p.relative_to(ROOT).as_posix() for p, text in sources.items()
            if "CONF_DIR =" in text or '/ "conf"' in text] == ["rsd/paths.py"]


def layer(module: str) -> str:
    """`analysis`, or the folder under rsd/ (core, drafters, verify, models, data, harness, certify) or the leaf."""
    parts = module.split(".")
    return "analysis" if parts[0] == "analysis" else (parts[1] if len(parts) > 1 else "rsd")


# What each layer may not import: the algorithm (core, drafters, verify) knows nothing of the harness, certification,
# datasets or analysis; the model and data plumbing read only the harness's typed config blocks (schema); the harness
# never depends on certification; nothing in rsd/ depends on analysis.
FORBIDDEN = {
    **{algo: {"harness", "certify", "data", "analysis"} for algo in ("core", "drafters", "verify")},
    **{plumbing: {"certify", "analysis"} for plumbing in ("models", "data")},
    "harness": {"certify", "analysis"}, "certify": {"analysis"},
}
PLUMBING_READS = {"rsd.harness.schema"}


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if layer(b) in FORBIDDEN.get(layer(a), ())
                  or (layer(a) in ("models", "data") and layer(b) == "harness" and b not in PLUMBING_READS))


def test_layers_import_downward():
    assert layer_violations(import_graph()) == []


def test_the_layer_check_sees_planted_upward_imports():
    graph = import_graph()
    graph["rsd.core.tree"] |= {"rsd.harness.store"}
    graph["rsd.models.pairs"] |= {"rsd.harness.runner"}
    assert layer_violations(graph) == ["rsd.core.tree -> rsd.harness.store", "rsd.models.pairs -> rsd.harness.runner"]
