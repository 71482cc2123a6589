"""The package's structure: no import circles in pacs/, counting the imports made inside functions too, not even
between its rooms (its sub-packages and top-level modules) or the trainer's; no room too large, no file too long
without its reason; what the workflow and the launchers import leaves torch out."""

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
    assert "pacs.plan.whole" in graph["pacs.experiment"]  # and imports inside functions
    assert circles(graph) == []


# pacs.train's rooms (docs/code-map.md), each on a floor: a room imports only rooms on lower
# floors; the loop and the job (pacs.train.loop, pacs.train.launch) stand above them all
TRAIN_FLOORS = {"settings": 0, "update": 1, "sampling": 2}
TRAIN_TOP = {"pacs.train", "pacs.train.loop", "pacs.train.launch"}
LONGEST = 400  # lines a file of pacs may have; a longer one says in its docstring why it is "kept whole"
LARGEST_ROOM = 0.15  # of the package's lines, in one room of the package


def train_room(module: str) -> str:
    """The room of a module of pacs.train ("top" for the loop, the job and the package itself)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in TRAIN_FLOORS else "top"


def train_floor(module: str) -> int:
    return TRAIN_FLOORS.get(train_room(module), len(TRAIN_FLOORS))


def test_the_trainer_s_rooms_import_only_the_rooms_below_them():
    """Every module of pacs.train is in a room (a sub-package whose docstring says what it holds and what it may
    import) or is the loop or the job; a room imports only rooms on lower floors, never one beside or above it."""
    graph = import_graph()
    train = {m for m in graph if m == "pacs.train" or m.startswith("pacs.train.")}
    loose = sorted(m for m in train - TRAIN_TOP if train_room(m) == "top")
    assert loose == [], f"outside the rooms {sorted(TRAIN_FLOORS)}: {loose}"
    for room in TRAIN_FLOORS:
        assert "May import" in pacs_docstring(f"pacs.train.{room}") or "Imports no other room" in pacs_docstring(
            f"pacs.train.{room}"), room  # fmt: skip
    upward = sorted((m, d) for m in train for d in graph[m] & train
                    if train_room(m) != train_room(d) and train_floor(d) >= train_floor(m))  # fmt: skip
    assert upward == []
    assert "pacs.train.sampling.staleness" in graph["pacs.train.loop"]  # the graph sees the rooms' modules


def pacs_docstring(module: str) -> str:
    return ast.get_docstring(ast.parse(module_names()[module].read_text(encoding="utf-8"))) or ""


def room_of(module: str) -> str:
    """The package's room a module is in: its sub-package or, for a module beside them, itself."""
    return ".".join(module.split(".")[:2])


def test_the_package_s_rooms_import_each_other_in_one_direction():
    """No circle between the package's rooms: were there one, some import would run from a room up to one that
    stands above it (``pacs.plan`` to ``pacs.bench``, say), and neither could be read without the other."""
    graph = import_graph()
    rooms: dict[str, set[str]] = {}
    for module, imported in graph.items():
        rooms.setdefault(room_of(module), set()).update(room_of(d) for d in imported if room_of(d) != room_of(module))
    assert circles(rooms) == []
    assert {"pacs.ranks", "pacs.tensors", "pacs.runs"} <= rooms["pacs.train"]  # the rooms the trainer stands on


def test_no_file_is_longer_than_one_reading_unless_it_says_why_and_no_room_holds_too_much():
    """A file of pacs past ``LONGEST`` lines says in its docstring why it is kept whole; no room of the package
    (a sub-package with all its files, or a module beside them) holds more than ``LARGEST_ROOM`` of its lines."""
    lines = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in module_names().items()}
    long = sorted(n for n, count in lines.items() if count > LONGEST and "kept whole" not in pacs_docstring(n))
    assert long == []
    rooms: dict[str, int] = {}
    for name, count in lines.items():
        rooms[room_of(name)] = rooms.get(room_of(name), 0) + count
    total = sum(lines.values())
    assert max(rooms.values()) <= LARGEST_ROOM * total, sorted(rooms.items(), key=lambda r: -r[1])[:3]
    assert rooms["pacs.train"] > lines["pacs.train.loop"]  # a room counts the files of its sub-packages


# what the Snakefile imports (workflow/rules/common.smk), and the launchers of a training job: every Snakemake
# process (each job's on a cluster too) and every launcher would otherwise spend a second or more importing torch,
# 0.6 s importing math-verify (sympy) for configs that only name its extractors, and a third of a second importing
# matplotlib's pyplot for the report's figure names (workflow/rules/report.smk); the preflight's checkpoint
# check (its launcher's own) needs torch but not transformers (4 s more)
LIGHT = ("pacs.experiment", "pacs.config", "pacs.eval.diversity", "pacs.plan.jobs", "pacs.runs.segments",
         "pacs.train.launch", "pacs.runs.preflight", "pacs.cli", "pacs.report.figures",
         "pacs.report.tables")  # fmt: skip
CHECKPOINT_CHECK = ("pacs.runs.retention", "pacs.runs.checkpoint", "pacs.ranks.distributed")


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
