"""The package's structure: no import circles in pacs/, counting the imports made inside functions too; what
the workflow and the launchers import leaves torch out."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import pacs

ROOT = Path(pacs.__file__).parent


def module_names() -> dict[str, Path]:
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_graph() -> dict[str, set[str]]:
    """``{module: {pacs modules it imports}}``: ``from pacs.a import b`` is ``pacs.a.b`` where that is a module,
    else ``pacs.a``; every import statement, at the top of a file or inside a function."""
    modules = module_names()
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]  # fmt: skip
            else:
                assert not isinstance(node, ast.ImportFrom) or node.level == 0, f"{path}: relative import"
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_pacs_imports_itself_back():
    graph = import_graph()
    assert graph["pacs.cli.main"] >= {"pacs.cli.bench", "pacs.cli.train"}  # the resolution reads submodules
    assert "pacs.plan.jobs" in graph["pacs.experiment"]  # and imports inside functions
    assert circles(graph) == []


# what the Snakefile imports (workflow/rules/common.smk), and the launchers of a training job: every Snakemake
# process (each job's on a cluster too) and every launcher would otherwise spend a second or more importing torch,
# 0.6 s importing math-verify (sympy) for configs that only name its extractors, and a third of a second importing
# matplotlib's pyplot for the report's figure names (workflow/rules/report.smk); the preflight's checkpoint
# check (its launcher's own) needs torch but not transformers (4 s more)
LIGHT = ("pacs.experiment", "pacs.config", "pacs.eval.diversity", "pacs.plan.jobs", "pacs.train.state.segments",
         "pacs.train.launch", "pacs.train.state.preflight", "pacs.cli", "pacs.report.figures",
         "pacs.report.tables")  # fmt: skip
CHECKPOINT_CHECK = ("pacs.train.state.retention", "pacs.train.state.checkpoint", "pacs.train.ranks.distributed")


HEAVY = {
    "light": (LIGHT, ("torch", "transformers", "vllm", "math_verify", "matplotlib")),
    "checkpoint": (CHECKPOINT_CHECK, ("transformers", "vllm")),
}


@pytest.mark.parametrize("kind", HEAVY)
def test_what_the_workflow_and_the_launchers_import_leaves_the_heavy_packages_out(kind):
    modules, absent = HEAVY[kind]
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(sorted(m for m in {absent!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


# transformers imports scikit-learn and SciPy at every start where they are installed (sentence-transformers
# installs them): a pacs command leaves them out (pacs.imports_left_out; 1.3 of the 4.9 CPU seconds of importing
# Qwen2), and the commands that use sentence-transformers take them back
def test_a_pacs_command_loads_qwen2_without_scikit_learn_and_scipy_and_the_embedder_takes_them_back(tmp_path):
    toy, embedder = tmp_path / "toy", tmp_path / "embedder"
    code = f"""
import sys
from pacs.cli import main
imported = lambda: "imported: " + " ".join(sorted(m for m in ("sklearn", "scipy") if sys.modules.get(m)))
assert main(["toy-data", "--task", "choice", "--train-size", "4", "--heldout-size", "2", "--out", {str(toy)!r}]) == 0
from transformers import AutoModelForCausalLM, Qwen2ForCausalLM
print(imported())
assert main(["tiny-embedder", "--out", {str(embedder)!r}]) == 0
print(imported())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = [line for line in done.stdout.splitlines() if line.startswith("imported:")]
    assert printed == ["imported: ", "imported: scipy sklearn"], done.stdout
    assert (embedder / "modules.json").is_file()
