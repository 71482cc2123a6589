import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]

# Threads per process: the machine's cores shared among pytest-xdist's workers (README's test command runs two), so
# that two workers' processes never start a thread per core each. Oversubscribed, OpenMP's parallel regions wait
# on a thread that is not running: a 40-step training test (tests/test_learning.py) took 178 s beside the other
# worker with two threads, 26 s alone. Set before torch is imported here; every child process (the CLI, torchrun's
# ranks, Snakemake's jobs, which set their rule's own count) inherits it. helpers.threads() reads it.
# And a thread that waits at the end of a parallel region sleeps rather than spins (OMP_WAIT_POLICY=PASSIVE): where
# a process runs two threads beside other work (the tests that run at the two threads `pacs train` uses on two
# cores), a spinning thread holds the core its partner needs. Six steps of the toy run at two threads beside a busy
# core: 2.8 s a step and 30 CPU seconds spinning, 1.1 s and 14 passive, the same weights bit for bit.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // WORKERS))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
DATA_FILES = ("math500.jsonl", "aime2024.jsonl", "aime2025.jsonl", "amc23.jsonl", "gsm8k_test.jsonl",
              "beyondaime.jsonl", "deepscaler_subset803.json")  # fmt: skip


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real benchmark files: PACS_DATA_DIR, default ../shared/data beside the repo.
    Missing data fails in CI (CI set) and skips elsewhere, naming what is missing."""
    path = Path(os.environ.get("PACS_DATA_DIR", REPO.parent / "shared" / "data")).resolve()
    missing = [f for f in DATA_FILES if not (path / f).is_file()]
    if missing:
        message = f"benchmark data missing in {path} (set PACS_DATA_DIR): {', '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def vllm_installed() -> None:
    """vLLM must be importable in CI; elsewhere the tests that need it skip, saying so."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        message = "vllm is not importable: pip install -e '.[cpu]' after torch==2.13.0 (README)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """``build(out)`` run once per test run, however many pytest-xdist workers ask for ``name``: in the run's
    shared temporary directory (the workers' common parent), under a file lock; the others wait for it and
    read the same files. A build that failed is tried again by the next to ask, from an empty directory."""
    root, worker = tmp_path_factory.getbasetemp(), os.environ.get("PYTEST_XDIST_WORKER")
    if worker and root.name.endswith(worker):  # not a pytest a worker's test started, which inherits the variable
        root = root.parent  # .../pytest-N/popen-gwK: the parent is the run's, shared by its workers
    out, done = root / "built" / name, root / "built" / f"{name}.done"
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(root / "built" / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            build(out)
            done.touch()
    return out


def _cli(*args) -> None:
    from pacs.cli import main

    assert main([str(a) for a in args]) == 0, args


@pytest.fixture(scope="session")
def prepared(shared_data, tmp_path_factory) -> Path:
    """The six real benchmarks as `pacs prepare-data --source local` writes them: NAME.parquet."""
    from pacs.data.sources import BENCHMARKS

    def build(out: Path) -> None:
        for name in BENCHMARKS:
            _cli("prepare-data", "--dataset", name, "--source", "local", "--data-dir", shared_data,
                 "--out", out / f"{name}.parquet")  # fmt: skip

    return built_once(tmp_path_factory, "prepared", build)


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory) -> Path:
    """The toy task's train.parquet and heldout.parquet, as `pacs toy-data` writes them."""
    return built_once(tmp_path_factory, "toy", lambda out: _cli("toy-data", "--out", out))


@pytest.fixture(scope="session")
def tiny_model(toy_data, tmp_path_factory) -> Path:
    """A tiny Qwen2 warm-started on the toy task, built by `pacs tiny-model` with this worker's share of the cores,
    while the other worker runs the modules that need no model (``FIRST``): alone, 41 s and 77 CPU seconds at two
    threads, 66 s and 65 CPU seconds at one, the same weights bit for bit."""
    from helpers import threads

    build = lambda out: _cli("tiny-model", "--data", toy_data, "--out", out / "model", "--threads", threads())  # noqa: E731
    return built_once(tmp_path_factory, "tiny", build) / "model"


@pytest.fixture(scope="session")
def toy_code_data(tmp_path_factory) -> Path:
    """The toy code task's train.parquet and heldout.parquet, as `pacs toy-data --task code` writes them."""
    return built_once(tmp_path_factory, "toy_code", lambda out: _cli("toy-data", "--task", "code", "--out", out))


@pytest.fixture(scope="session")
def tiny_code_model(toy_code_data, tmp_path_factory) -> Path:
    """A tiny Qwen2 warm-started on the toy code task, its held-out programs checked in the sandbox: built beside
    the other worker's tests, so with this worker's share of the cores (alone: 51 s at two threads, 70 s at one,
    of which 20 s the checks' sandboxes; at two threads beside the other worker, 116 s)."""
    from helpers import threads

    build = lambda out: _cli("tiny-model", "--data", toy_code_data, "--out", out / "model", "--threads", threads())  # noqa: E731
    return built_once(tmp_path_factory, "tiny_code", build) / "model"


def write_run_config(path: Path, model: Path, data_dir: Path, **sections) -> Path:
    """The toy-task run of `pacs bench train`, made small (6 steps of 16 prompts, a checkpoint every 2,
    no evaluation); ``sections`` override keys of a section (``algorithm`` as a whole)."""
    import yaml

    from pacs.bench.train import bench_config

    config = bench_config({"name": "pacs"}, model, data_dir, steps=6, seed=0)
    small = {
        "trainer": {"batch_size": 16, "mini_batch_size": 8, "micro_batch_size": 4},
        "checkpoint": {"save_every": 2},
        "eval": {"every": 0},
        "verifier": {"workers": 1},
    }
    for overrides in (small, sections):
        for section, values in overrides.items():
            config[section] = {**config.get(section, {}), **values} if section != "algorithm" else values
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="session")
def raw_tiny_model(toy_data, tmp_path_factory) -> Path:
    """The same tiny Qwen2 and tokenizer with random weights (no warm start): for fast mechanics tests."""
    from pacs.data.schema import read_prepared
    from pacs.data.toy import toy_solution
    from pacs.models.tiny import TinyModelConfig, tiny_qwen2, train_tokenizer

    def build(out: Path) -> None:
        train = read_prepared(toy_data / "train.parquet")
        corpus = [m[0]["content"] for m in train["prompt"]] + [toy_solution(g) for g in train["ground_truth"]]
        tokenizer = train_tokenizer(corpus + ["user\nassistant\n"], 512)
        tiny_qwen2(tokenizer, TinyModelConfig()).save_pretrained(out / "model")
        tokenizer.save_pretrained(out / "model")

    return built_once(tmp_path_factory, "raw", build) / "model"


# Under pytest-xdist (README's test command: two workers, `--dist loadfile`, `--no-loadscope-reorder`) each module
# runs whole on one worker (its module-scoped fixtures built once; the session-scoped ones are ``built_once`` for
# both workers), and these modules start first, slowest first (tests/README.md, "Time"): a long module started
# last would leave the other worker idle at the end. Second, the modules that need no model (the cluster's pip
# resolution, the sandbox's hostile programs): the other worker's work while the first builds the tiny model. Then
# the modules whose processes run one thread each, while test_workflow's local run and SLURM slice keep both cores
# busy; and last of these, the ones that run two processes or more (the memory plan traced, the generators beside
# their trainers): once the local run has ended, test_workflow's worker mostly waits on the slice's timeline (its
# sleeps and time limits, 100 to 270 s in profiled CI runs), and one-thread tests alone left the machine 58 to 90 %
# busy there. Measured since: no slower (two fresh-clone CI runs of one day, 1,600 s against 1,632 s for the order
# before), and no faster beyond the runs' spread: the machine is busy 94 to 96 % of either run.
FIRST = ("test_workflow.py", "test_install.py", "test_code_sandbox.py", "test_evaluate.py", "test_train_loop.py",
         "test_memory_trace.py", "test_generators.py", "test_distributed.py", "test_learning.py",
         "test_workflow_dag.py", "test_train_vllm.py", "test_train_code.py", "test_staleness.py", "test_train_fsdp.py")
SLOW_S = 60.0  # a test that takes longer carries the slow mark (tests/README.md, "Time")


def pytest_collection_modifyitems(config, items) -> None:
    """``FIRST``'s modules first, in its order; the others as collected."""
    order = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: order.get(item.path.name, len(FIRST)))


_durations: dict[str, list] = {}  # nodeid -> [seconds of setup, call and teardown, {marks}]
_cpu: dict[str, float] = {}  # module -> CPU seconds of its tests (user + system, the children waited for included)
_cpu_mark = [0.0]  # this process's CPU seconds at the end of the last phase measured


def cpu_seconds() -> float:
    """User and system seconds of this process and of every child process it waited for (theirs included)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_logstart(nodeid, location) -> None:
    _cpu_mark[0] = cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's CPU seconds on the report (``cpu_s_<phase>`` in its user properties), which reach the
    controller from an xdist worker: CPU, unlike time, does not grow when the other worker competes for the
    cores. Processes nobody waits for (SLURM's jobs, wandb's service) are not in it."""
    report = (yield).get_result()
    now = cpu_seconds()
    report.user_properties.append((f"cpu_s_{call.when}", now - _cpu_mark[0]))
    _cpu_mark[0] = now


def pytest_runtest_logreport(report) -> None:
    """With ``PACS_TRACEBACKS_AT_ONCE=1`` a failure's traceback is printed as it happens, not in the summary at
    the end: a GPU sitting's time limit may stop the suite before pytest prints one (tests/README.md). Each
    test's time is summed for the summary's time per mark."""
    if report.failed and os.environ.get("PACS_TRACEBACKS_AT_ONCE") == "1":
        sys.stderr.write(f"\n{report.nodeid} ({report.when}):\n{report.longreprtext}\n")
    entry = _durations.setdefault(report.nodeid, [0.0, set()])
    entry[0] += report.duration
    module = report.nodeid.split("::")[0]
    _cpu[module] = _cpu.get(module, 0.0) + sum(v for k, v in report.user_properties if k == f"cpu_s_{report.when}")
    entry[1] |= {m for m in ("slow", "gpu") if m in report.keywords}


def pytest_terminal_summary(terminalreporter) -> None:
    """The time per mark (slow, gpu, neither), summed over tests (workers run side by side: more than the wall
    time), and any test over ``SLOW_S`` without the slow mark."""
    if not _durations:
        return
    totals: dict[str, list] = {}
    for seconds, marks in _durations.values():
        total = totals.setdefault(",".join(sorted(marks)) or "unmarked", [0, 0.0])
        total[0], total[1] = total[0] + 1, total[1] + seconds
    write = terminalreporter.write_line
    terminalreporter.section("time per mark")
    for name, (count, seconds) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        write(f"{name}: {count} tests, {seconds:.0f} s")
    unmarked = sorted((s, n) for n, (s, marks) in _durations.items() if s > SLOW_S and "slow" not in marks)
    for seconds, nodeid in reversed(unmarked):
        write(f"over {SLOW_S:.0f} s without the slow mark: {nodeid} ({seconds:.0f} s)")
    terminalreporter.section("CPU seconds per module")  # the children waited for included
    write(f"all: {sum(_cpu.values()):.0f} s")
    for module, seconds in sorted(_cpu.items(), key=lambda kv: -kv[1]):
        write(f"{module}: {seconds:.0f} s")
