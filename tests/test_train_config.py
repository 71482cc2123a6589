import dataclasses

import pytest
import torch

from pacs.config import ConfigError, load_yaml
from pacs.train.settings.config import RunConfig, load_run_config, objective_config, resolve

MINIMAL = {"algorithm": {"name": "pacs"}, "model": {"path": "m"}, "data": {"train_files": ["t.parquet"]}}


def with_(section: str, **values) -> dict:
    return {**MINIMAL, section: {**MINIMAL.get(section, {}), **values}}


def test_defaults_are_the_official_settings():
    c = resolve(MINIMAL)
    assert (c.optim.lr, c.optim.weight_decay, c.optim.critic_lr) == (1e-6, 0.01, 1e-5)
    assert (c.rollout.n, c.rollout.temperature, c.rollout.top_p) == (8, 1.0, 1.0)
    assert (c.data.max_prompt_length, c.rollout.max_response_length) == (512, 4096)
    assert (c.trainer.batch_size, c.trainer.mini_batch_size, c.trainer.epochs) == (1024, 256, 1)
    assert (c.trainer.total_steps, c.checkpoint.save_every) == (300, 20)
    assert c.optim.grad_clip is None  # PACS: no gradient clipping
    for name in ("grpo", "ppo"):
        resolved = resolve({**MINIMAL, "algorithm": {"name": name}})
        assert resolved.optim.grad_clip == 1.0
        # Dr. GRPO's L is the response limit, written into the resolved config
        assert objective_config(resolved).max_response_length == 4096


def test_explicit_grad_clip_is_kept():
    assert resolve(with_("optim", grad_clip=0.5)).optim.grad_clip == 0.5
    assert resolve({**with_("optim", grad_clip=None), "algorithm": {"name": "grpo"}}).optim.grad_clip is None


@pytest.mark.parametrize(
    "data, key",
    [
        (with_("optim", lrr=1e-6), "optim.lrr"),
        (with_("trainer", batch_size="big"), "trainer.batch_size"),
        (with_("trainer", batch_size=True), "trainer.batch_size"),
        (with_("rollout", engine="sglang"), "rollout.engine"),
        (with_("optim", betas=[0.9]), "optim.betas"),
        ({**MINIMAL, "algorithm": {"name": "pacs", "options": {"betaa": 2}}}, "algorithm.options.betaa"),
        ({**MINIMAL, "algorithm": {"name": "pacs", "options": {"weighting": "bal"}}}, "weighting"),
        ({**MINIMAL, "algorithm": {"name": "dpo"}}, "algorithm.name"),
        ({"algorithm": {"name": "pacs"}, "data": {"train_files": []}}, "config.model"),
        (with_("trainer", batch_size=10, mini_batch_size=4), "trainer.mini_batch_size"),
        (with_("trainer", compile=True, pack_sequences=False), "trainer.pack_sequences"),  # recompiles per layer
        ({**MINIMAL, "extra": 1}, "config.extra"),
    ],
)
def test_bad_config_names_the_key(data, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        resolve(data)


def test_yaml_reads_exponent_floats():
    # PyYAML alone reads 1e-6 as the string "1e-6"
    assert load_yaml("lr: 1e-6\ncount: 3\nname: 1e6x") == {"lr": 1e-6, "count": 3, "name": "1e6x"}


def test_load_names_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("algorithm: {name: pacs}\nmodel: {path: m}\ndata: {train_files: [a]}\noptim: {lr: fast}\n")
    with pytest.raises(ConfigError, match=r"run\.yaml.*optim\.lr"):
        load_run_config(path)
    with pytest.raises(FileNotFoundError):
        load_run_config(tmp_path / "missing.yaml")


def test_a_strategy_the_ranks_cannot_run_is_an_error_naming_it():
    from pacs.ranks.distributed import DistEnv
    from pacs.train.loop import check_sizes

    fsdp = {**MINIMAL, "trainer": {"strategy": "fsdp", "compute_dtype": "bfloat16"}, "rollout": {"engine": "vllm"}}
    check_sizes(resolve(fsdp), DistEnv(0, 2))
    with pytest.raises(ValueError, match="trainer.compute_dtype bfloat16 applies to fsdp in a process group"):
        check_sizes(resolve(fsdp), DistEnv())  # outside pacs train it would compute in float32 without saying so
    check_sizes(resolve({**fsdp, "rollout": {"engine": "hf"}}), DistEnv(0, 2))  # gathered once per call


def test_a_fused_kernel_that_needs_cuda_is_an_error_on_a_cpu_naming_its_key(raw_tiny_model):
    """Liger's kernels and the autotuned attention are CUDA's: asked for on a CPU, an error names the key
    (pacs train and pacs bench update spread the model through the same check). Liger is on by default on CUDA
    for Qwen2 and Qwen3 (not other families, not under compile), off on a CPU; a value set wins. AdamW is fused
    on CUDA only, unless optim.fused says otherwise."""
    from transformers import AutoModelForCausalLM

    from pacs.config import from_dict
    from pacs.ranks.distributed import DistEnv
    from pacs.tensors.kernels import adamw, liger_on
    from pacs.train.settings.config import OptimConfig, TrainerConfig
    from pacs.train.update.models import scorer_of, spread

    default, compiled = TrainerConfig(), TrainerConfig(compile=True)
    assert [liger_on(default, "cuda:0", f) for f in ("qwen2", "qwen3", "llama")] == [True, True, False]
    assert not liger_on(default, "cpu", "qwen2") and not liger_on(compiled, "cuda:0", "qwen2")
    assert not liger_on(TrainerConfig(liger_kernels=False), "cuda:0", "qwen2")
    assert liger_on(TrainerConfig(liger_kernels=True), "cuda:0", "llama")

    for key in ("liger_kernels", "attention_autotune"):
        trainer = from_dict(TrainerConfig, {key: True})
        model = AutoModelForCausalLM.from_pretrained(raw_tiny_model)
        with pytest.raises(ValueError, match=f"trainer.{key} needs CUDA .* runs on cpu: set trainer.{key} false"):
            spread(scorer_of(model, trainer), trainer, DistEnv())
    with pytest.raises(ConfigError, match="trainer.attention_autotune .* needs trainer.pack_sequences true"):
        resolve({**MINIMAL, "trainer": {"attention_autotune": True, "pack_sequences": False}})
    with pytest.raises(ConfigError, match="trainer.compile and trainer.liger_kernels cannot both be on"):
        resolve({**MINIMAL, "trainer": {"compile": True, "liger_kernels": True}})
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert adamw(params, 1e-3, OptimConfig(), "cpu").defaults["fused"] is None  # torch's default on a CPU
    assert adamw(params, 1e-3, OptimConfig(), "cuda:0").defaults["fused"] is True
    assert adamw(params, 1e-3, OptimConfig(fused=False), "cuda:0").defaults["fused"] is None
    assert adamw(params, 1e-3, OptimConfig(fused=True), "cpu").defaults["fused"] is True


def _kernel_of(module: torch.nn.Module) -> tuple:
    """The function a module's forward runs and the settings it reads: what Liger patches on an instance (its
    forward and attributes) or builds from its own class."""
    settings = ("variance_epsilon", "offset", "casting_mode", "in_place", "row_mode")
    forward = module.forward.__func__
    return f"{forward.__module__}.{forward.__qualname__}", *(getattr(module, k, None) for k in settings)


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_liger_patches_the_policy_reference_and_critic_alike(family, raw_tiny_model, tmp_path, monkeypatch):
    """``trainer.liger_kernels`` on the models pacs train builds (``load_models``): the policy is patched after it
    is built, the reference and the critic are built after Liger replaced the family's classes, and each is
    patched again. Every RMSNorm (Qwen3's q_norm and k_norm too) and MLP of the three runs Liger's forward with the
    same settings, and the family's rotary embedding is Liger's. Liger's patching runs on a CPU, its kernels do
    not: the device check is lifted here, and transformers' modules are restored after the test."""
    import importlib

    from helpers import qwen3_like, transformers_modules_kept

    from pacs.algorithms.objectives import get_objective
    from pacs.ranks.distributed import DistEnv
    from pacs.train.update import models as train_models

    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    transformers_modules_kept(monkeypatch)
    monkeypatch.setattr(train_models, "check_device", lambda trainer, device: None)
    path = qwen3_like(raw_tiny_model, tmp_path / "qwen3") if family == "qwen3" else raw_tiny_model
    built = {}
    algorithms = {"pacs": {"name": "pacs", "options": {"reward_proxy": "reference"}}, "ppo": {"name": "ppo"}}
    for algorithm, section in algorithms.items():  # PACS v2's reference, PPO's critic
        config = resolve({**MINIMAL, "algorithm": section, "model": {"path": str(path)},
                          "trainer": {"liger_kernels": True}})  # fmt: skip
        objective = get_objective(algorithm)
        loaded = train_models.load_models(config, objective, objective.needs(objective_config(config)), None,
                                          DistEnv())  # fmt: skip
        built[f"{algorithm} policy"] = loaded.policy
        if loaded.reference is not None:
            built["reference"] = loaded.reference.model
        if loaded.critic is not None:
            built["critic"] = loaded.critic
    assert set(built) == {"pacs policy", "ppo policy", "reference", "critic"}
    patched = {}
    for name, model in built.items():
        modules = {k: m for k, m in model.base_model.named_modules() if k.endswith(("norm", "layernorm", "mlp"))}
        patched[name] = {k: _kernel_of(m) for k, m in modules.items()}
        norms = [k for k in modules if k.endswith("norm")]
        assert len(norms) == (4 if family == "qwen3" else 2) * len(model.base_model.layers) + 1, name
        for module, (forward, *_) in patched[name].items():
            assert forward.startswith("liger_kernel."), (name, module, forward)
    assert all(kernels == patched["pacs policy"] for kernels in patched.values()), patched
    assert modeling.apply_rotary_pos_emb.__module__.startswith("liger_kernel")


def dataclass_keys(cls, prefix: str = "") -> list[str]:
    """Every dotted key of a config dataclass, nested dataclasses opened (a dict field, as algorithm.options, whole)."""
    import typing

    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            keys += dataclass_keys(kind, f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def test_every_run_config_key_changes_either_what_a_run_computes_or_only_how():
    """pacs.train.settings.changes classifies each key of RunConfig once: a new key must be placed (a change of how
    resumes a stopped run, a change of what starts it again), and no entry names a key that is not there."""
    from pacs.train.settings import changes

    keys = dataclass_keys(RunConfig)
    unplaced = [k for k in keys if (changes.entry(k, changes.HOW) is None) == (changes.entry(k, changes.WHAT) is None)]
    assert unplaced == [], f"neither or both of HOW and WHAT in pacs/train/settings/changes.py: {unplaced}"
    stale = [e for e in changes.HOW + changes.WHAT if not any(k == e or k.startswith(e + ".") for k in keys)]
    assert stale == []
    assert changes.changes_only_how("trainer.micro_batch_size") and changes.changes_only_how("checkpoint.save_every")
    assert not changes.changes_only_how("algorithm.options.beta") and not changes.changes_only_how("trainer.seed")
    assert not changes.changes_only_how("a.key.nobody.placed")
    run = {"trainer": {"seed": 1, "micro_batch_size": 4}, "checkpoint": {"save_every": 2}, "algorithm": {"name": "pacs",
           "options": {"beta": 1.0}}}  # fmt: skip
    assert changes.what_part(run) == {"trainer": {"seed": 1}, "algorithm": {"name": "pacs", "options": {"beta": 1.0}}}
