"""What a workflow config asks for (pacs.experiment): sweeps expanded into methods, per-model run settings,
the checkpoints each benchmark evaluates, and the paper v2 configs."""

from pathlib import Path

import pytest
import yaml

from pacs import experiment
from pacs.config import ConfigError
from pacs.models.shapes import model_shape

REPO = Path(__file__).resolve().parents[1]


def tiny(**changes) -> dict:
    config = yaml.safe_load((REPO / "config/tiny.yaml").read_text())
    for key, value in changes.items():
        config = experiment.merged(config, {key: value})
    return config


BETA = {"label": "PACS (β={value})", "algorithm": {"name": "pacs", "options": {"weighting": "none"}},
        "sweep": {"key": "algorithm.options.beta", "values": [0.1, 1.0, 10], "label": "β"}}  # fmt: skip


def test_a_sweep_becomes_one_method_per_value():
    config = tiny()
    config["methods"] = {"grpo": config["methods"]["grpo"], "pacs_beta": BETA}
    methods = experiment.methods(config)
    assert list(methods) == ["grpo", "pacs_beta_0.1", "pacs_beta_1", "pacs_beta_10"]
    assert [m["label"] for m in methods.values()][1:] == ["PACS (β=0.1)", "PACS (β=1)", "PACS (β=10)"]
    assert methods["pacs_beta_10"]["swept"] == {"sweep": "pacs_beta", "key": "algorithm.options.beta", "label": "β",
                                                "value": 10}  # fmt: skip
    runs = experiment.run_configs(config)
    assert [runs[("tiny", f"pacs_beta_{v}")]["algorithm"]["options"]["beta"] for v in ("0.1", "1", "10")] == [
        0.1,
        1,
        10,
    ]
    assert runs[("tiny", "pacs_beta_1")]["algorithm"]["options"]["weighting"] == "none"  # the rest is kept
    assert experiment.methods({"methods": methods}) == methods  # expanding twice changes nothing
    # a run-config key, deep in train
    config["methods"]["pacs_beta"] = {**BETA, "sweep": {"key": "train.optim.lr", "values": [1e-4, 3e-4]}}
    runs = experiment.run_configs(config)
    assert [r["optim"]["lr"] for (_, m), r in runs.items() if m.startswith("pacs")] == [1e-4, 3e-4]


@pytest.mark.parametrize(
    "change, named",
    [
        ({"sweep": {"key": "beta", "values": [1]}}, "methods.pacs_beta.sweep.key 'beta'"),
        ({"sweep": {"key": "algorithm.name", "values": ["grpo"]}}, "methods.pacs_beta.sweep.key"),
        ({"label": "PACS"}, "methods.pacs_beta.label must show the swept value"),
        ({"sweep": {"key": "algorithm.options.beta", "values": [2]}}, "the method 'pacs_beta_2' it makes exists"),
        ({"sweep": {"key": "algorithm.options.bta", "values": [3]}}, "bta"),  # pacs's own loader
    ],
)
def test_a_bad_sweep_is_an_error_naming_its_key(change, named):
    config = tiny()
    config["methods"] = {"pacs_beta_2": config["methods"]["pacs"], "pacs_beta": {**BETA, **change}}
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(".", r"\.")):
        experiment.run_configs(config)


def test_a_model_overrides_train_and_a_method_overrides_the_model():
    config = tiny()
    config["models"]["tiny"]["train"] = {"trainer": {"total_steps": 60}, "optim": {"lr": 2e-4}}
    config["methods"]["grpo"]["train"] = {"optim": {"lr": 5e-5}}
    runs = experiment.run_configs(config)
    assert (runs[("tiny", "pacs")]["trainer"]["total_steps"], runs[("tiny", "pacs")]["optim"]["lr"]) == (60, 2e-4)
    assert (runs[("tiny", "grpo")]["trainer"]["total_steps"], runs[("tiny", "grpo")]["optim"]["lr"]) == (60, 5e-5)
    assert runs[("tiny", "grpo")]["trainer"]["batch_size"] == 32  # train's, untouched
    config["models"]["tiny"]["train"] = {"trainer": {"total_stps": 60}}
    with pytest.raises(ConfigError, match=r"models\.tiny\.train .*total_stps"):
        experiment.run_configs(config)
    # generator ranks are GPUs of the training job's own: some must be left to train
    config["models"]["tiny"]["train"] = {"rollout": {"generator_ranks": 2}}  # on policy, as allowed
    with pytest.raises(ConfigError, match=r"run tiny/\w+: rollout.generator_ranks 2 leaves none of the training "
                                          r"job's 2 rank\(s\) \(resources.train.gpu\) to train"):  # fmt: skip
        experiment.run_configs(experiment.merged(config, {"resources": {"train": {"gpu": 2}}}))
    runs = experiment.run_configs(experiment.merged(config, {"resources": {"train": {"gpu": 3}}}))
    assert runs[("tiny", "pacs")]["rollout"]["generator_ranks"] == 2


def test_the_checkpoints_each_benchmark_evaluates():
    config = tiny(train={"trainer": {"total_steps": 100}, "checkpoint": {"save_every": 10}},
                  eval={"checkpoints": [30, "last"], "every": 20})  # fmt: skip
    config["data"]["benchmarks"]["real"] = {"label": "R", "n": 1, "ks": [1], "checkpoints": ["last"]}
    run = experiment.run_configs(config)[("tiny", "pacs")]
    assert experiment.eval_steps(config, run, "toy_heldout") == [20, 30, 40, 60, 80, 100]
    assert experiment.eval_steps(config, run, "real") == [100]
    steps = {(e["benchmark"], e["step"]) for e in experiment.evaluations(config, {("tiny", "pacs"): run})}
    assert {s for b, s in steps if b == "toy_heldout"} == {0, 20, 30, 40, 60, 80, 100}  # 0: the base model
    with pytest.raises(ConfigError, match=r"eval\.checkpoints / eval\.every: step 25 is not a checkpoint"):
        experiment.eval_steps(experiment.merged(config, {"eval": {"every": 25}}), run, "toy_heldout")
    with pytest.raises(ConfigError, match="step 120 is not a checkpoint"):
        experiment.eval_steps(experiment.merged(config, {"eval": {"checkpoints": [120]}}), run, "toy_heldout")
    # the weights retention keeps: every evaluated step, and any the run's config names itself
    assert experiment.kept_weights(config, run) == [20, 30, 40, 60, 80, 100]
    named = experiment.run_configs(experiment.merged(config, {"train": {"checkpoint": {"keep_weights": [10]}}}))
    assert experiment.kept_weights(config, named[("tiny", "pacs")]) == [10, 20, 30, 40, 60, 80, 100]
    with pytest.raises(ConfigError, match="checkpoint.keep_resumable must be >= 2"):
        experiment.run_configs(experiment.merged(config, {"train": {"checkpoint": {"keep_resumable": 1}}}))


def test_paper_v2_and_its_base_overlay_plan_the_same_architectures():
    v2 = yaml.safe_load((REPO / "config/paper_v2.yaml").read_text())
    base = experiment.merged(v2, yaml.safe_load((REPO / "config/paper_v2_base.yaml").read_text()))
    runs = experiment.run_configs(base)
    assert runs[("qwen3-4b", "pacs")]["model"]["path"] == "Qwen/Qwen3-4B-Base"
    assert runs[("qwen3-8b", "grpo")]["model"]["path"] == "Qwen/Qwen3-8B-Base"
    assert runs[("qwen3-8b", "grpo")]["trainer"]["total_steps"] == 320  # the rest of v2 is kept
    for key in ("qwen3-4b", "qwen3-8b"):
        assert model_shape(v2["models"][key], key) == model_shape(base["models"][key], key)
        assert model_shape(v2["models"][key], key).model_type == "qwen3"
    plan = experiment.plan(v2)
    assert not plan.errors and {j.name.split("/")[1] for j in plan.jobs if j.name.startswith("train/")} == {
        "qwen3-4b", "qwen3-8b"}  # fmt: skip


def test_every_evaluation_of_an_experiment_runs_in_one_dtype():
    """Base and trained models alike: eval.settings.dtype, or for auto the one dtype the runs compute in (and
    write their checkpoints in); runs computing in different dtypes need it set."""
    paper = yaml.safe_load((REPO / "config/config.yaml").read_text())
    runs = experiment.run_configs(paper)
    assert {experiment.eval_settings(paper, b, runs)["dtype"] for b in paper["data"]["benchmarks"]} == {"bfloat16"}
    auto = experiment.merged(paper, {"eval": {"settings": {"dtype": "auto"}}})
    assert experiment.eval_settings(auto, "aime2024", runs)["dtype"] == "bfloat16"  # trainer.compute_dtype
    config = tiny()
    assert experiment.eval_settings(config, "toy_heldout", experiment.run_configs(config))["dtype"] == "float32"
    config["methods"]["grpo"]["train"] = {"model": {"dtype": "bfloat16"}}
    with pytest.raises(ConfigError, match="eval.settings.dtype auto: the runs compute in bfloat16 and float32"):
        experiment.eval_settings(config, "toy_heldout", experiment.run_configs(config))


def v2(*overlays: str) -> dict:
    config = yaml.safe_load((REPO / "config/paper_v2.yaml").read_text())
    for name in overlays:
        config = experiment.merged(config, yaml.safe_load((REPO / "config" / name).read_text()))
    return config


def test_the_v2_experiment_evaluates_out_of_domain_released_models_and_diversity():
    """Figure 6 on Qwen3-8B only (its base and final checkpoints, at the toolkit's sample counts and 30 s tests),
    Table 1's seven released models on the five benchmarks in domain, each in its own settings file, and
    Table 3's diversity of every method's last evaluation on AIME 2024 and 2025."""
    config = v2()
    runs = experiment.run_configs(config)
    evaluations = experiment.evaluations(config, runs)
    ood = {(e["model"], e["method"], e["step"]) for e in evaluations if e["benchmark"] == "livecodebench"}
    runs_8b = {("qwen3-8b", m, 320) for m in ("ppo", "grpo", "pacs", "pacs_no_weight")}
    assert ood == {("qwen3-8b", "base", 0)} | runs_8b
    released = [e for e in evaluations if e["method"] == "released"]
    assert len(released) == 7 * 5 and {e["benchmark"] for e in released} == {
        "math500", "amc23", "aime2024", "aime2025", "beyondaime"}  # fmt: skip
    settings = experiment.evaluation_settings(config, runs)
    lcb, gpqa = settings["eval_livecodebench"], settings["eval_gpqa"]
    assert (lcb["n"], lcb["code"]["grading"]) == (2, "glm45")
    assert settings["eval_math500"]["code"]["grading"] == "judge"  # filled in, and no math score depends on it
    assert experiment.benchmark_label(config, "livecodebench", runs) == "LiveCodeBench (GLM-4.5's grader)"
    assert experiment.benchmark_label(config, "math500", runs) == "MATH-500"
    assert (lcb["temperature"], lcb["max_tokens"]) == (0.6, 8192)
    assert gpqa["n"] == 8 and "chat_template" not in settings["eval_math500"]  # unset: files as before the key
    assert "chat_template" not in settings["eval_aime2024_limo"]  # its own template (choice)
    with_v2 = experiment.merged(config, {"released": {"limo": {"chat_template": "v2", "tensor_parallel_size": 2}}})
    limo = experiment.evaluation_settings(with_v2, runs)["eval_aime2024_limo"]
    assert limo["chat_template"] == "Qwen/Qwen3-4B" and limo["vllm"]["tensor_parallel_size"] == 2
    assert experiment.eval_gpus(with_v2, {"model": "limo"}) == 2
    assert experiment.eval_gpus(with_v2, {"model": "qwen3-8b"}) == 1
    jobs = experiment.diversity_jobs(config, runs)
    assert [(j["model"], j["benchmark"]) for j in jobs] == [(m, b) for b in ("aime2024", "aime2025")
                                                            for m in ("qwen3-4b", "qwen3-8b")]  # fmt: skip
    assert {m: e["step"] for m, e in jobs[1]["evaluations"].items()} == {
        "base": 0, "ppo": 320, "grpo": 320, "pacs": 320, "pacs_no_weight": 320}  # fmt: skip


def test_the_ablation_overlay_adds_qwen3_4b_runs_drawn_with_pacs_on_the_beta_axis():
    config = v2("paper_v2_ablations.yaml")
    runs = experiment.run_configs(config)
    added = sorted(set(runs) - set(experiment.run_configs(v2())))
    assert added == sorted(("qwen3-4b", m) for m in ("pacs_beta_0.1", "pacs_beta_0.5", "pacs_beta_2", "pacs_beta_10",
                                                     "pacs_grpo_score", "pacs_drgrpo_score"))  # fmt: skip
    options = {m: runs[("qwen3-4b", m)]["algorithm"]["options"] for _, m in added}
    assert [options[f"pacs_beta_{v}"]["beta"] for v in ("0.1", "0.5", "2", "10")] == [0.1, 0.5, 2.0, 10.0]
    assert (options["pacs_grpo_score"]["score"], options["pacs_grpo_score"]["norm_by_std"]) == ("grpo", True)
    assert (options["pacs_drgrpo_score"]["score"], options["pacs_drgrpo_score"]["norm_by_std"]) == ("grpo", False)
    assert all(o["reward_proxy"] == "reference" for o in options.values())
    assert all(runs[("qwen3-4b", m)]["trainer"]["reference_reset_every"] == 20 for _, m in added)
    swept = {m: s["swept"]["value"] for m, s in experiment.methods(config).items() if s.get("swept")}
    assert swept == {"pacs": 1.0, "pacs_beta_0.1": 0.1, "pacs_beta_0.5": 0.5, "pacs_beta_2": 2.0, "pacs_beta_10": 10.0}
    steps = {e["step"] for e in experiment.evaluations(config, runs) if e["method"] == "pacs_grpo_score"}
    assert steps == {120}  # the method's own checkpoints: its last only, not eval.every


@pytest.mark.parametrize(
    "change, named",
    [
        ({"released": {"tiny": {"path": "x", "label": "x"}}}, "released.tiny is also a key of models"),
        ({"released": {"r": {"label": "x"}}}, "released.r: give its path"),
        ({"methods": {"grpo": {"models": ["qwen"]}}}, "methods.grpo.models: 'qwen' is not a key of models"),
        ({"data": {"benchmarks": {"toy_heldout": {"models": ["qwen"]}}}}, "data.benchmarks.toy_heldout.models"),
        ({"methods": {"pacs_beta": {"sweep": {"include": ["grpo"]}}}}, "methods.grpo must set algorithm.options.beta"),
        ({"methods": {"pacs_beta": {"sweep": {"include": ["nope"]}}}}, "sweep.include: 'nope' must be a method"),
        # tiny's PACS takes one update per step, its β sweep two: β = 1 of PACS is no point of that sweep
        ({"methods": {"pacs_beta": {"sweep": {"include": ["pacs"]}}}}, "methods.pacs: its train differs"),
        ({"methods": {"pacs_beta": {"sweep": {"include": ["pacs"], "values": [1.0]}}}}, "one of the sweep's values"),
        ({"released": {"r": {"path": "x", "label": "x", "benchmarks": ["aime"]}}}, "released.r.benchmarks: 'aime'"),
        ({"diversity": {"benchmarks": ["aime"]}}, "diversity.benchmarks: 'aime' is not a key of data.benchmarks"),
    ],
)
def test_a_bad_released_model_restriction_or_include_is_an_error_naming_its_key(change, named):
    config = experiment.merged(tiny(), change)
    with pytest.raises(ConfigError, match=named.replace(".", r"\.").replace("(", r"\(")):
        runs = experiment.run_configs(config)
        experiment.evaluations(config, runs)
        experiment.diversity_jobs(config, runs)


def test_site_settings_caches_and_sbatch_options_the_executor_would_refuse():
    """cache_dir places every job's caches where the environment does not already; slurm_extra refuses what the SLURM
    executor sets itself (which it would refuse in its submission thread, where Snakemake then waits forever) and a
    warning signal other than TERM, naming the key; constraint and qos are resources of their own."""
    assert experiment.cache_environment(tiny(), {}) == {}
    caches = experiment.cache_environment(tiny(cache_dir="/shared/cache"), {"HF_HOME": "/staged/hf"})
    assert caches["PIP_CACHE_DIR"] == "/shared/cache/pip" and caches["VLLM_CACHE_ROOT"] == "/shared/cache/vllm"
    assert caches["TRITON_CACHE_DIR"] == "/shared/cache/triton" and "HF_HOME" not in caches  # the user's stands
    experiment.check_slurm_extra(tiny(resources={"train": {"slurm_extra": "--exclusive --signal=TERM@600",
                                                            "qos": "long", "constraint": "h100"}}))  # fmt: skip
    for extra, named in (("--qos=high", "quality of service"), ("-C h100", "node constraints"),
                         ("--time=10", "runtime/time limit"), ("--signal=USR1@600", "--signal=USR1@600"),
                         ("--signal=B:TERM@60", "--signal=B:TERM@60")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"resources.evaluate.slurm_extra .*{named}"):
            experiment.check_slurm_extra(tiny(resources={"evaluate": {"slurm_extra": extra}}))
