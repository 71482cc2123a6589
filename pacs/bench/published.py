"""Published measurements of RL steps, and the plan of each: ``pacs plan`` held to what others measured
(docs/plan-vs-published.md, tests/test_plan.py): a benchmark of the plan against the field.

Each row is one published step: its source, the config in ``config/published/`` that describes its workload to
the plan (model shape, GPUs, prompts × responses, lengths, what is scored), the mean response length it reports,
and its measured seconds by phase: generation, scoring and update together (the training and log-prob phases:
pacs computes them as one ``update`` of the step), the weight push and the whole step. A phase a source does not
report is None. ``priced`` prices a row at its own mean response length.
"""

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NEMO_8B = ("config/published/nemo_rl_llama8b.yaml",)
NEMO_8B_16 = (*NEMO_8B, "config/published/nemo_rl_llama8b_16gpu.yaml")
# the sources (docs/plan-vs-published.md names each in full)
BLOG = "blog"  # NeMo-RL v0.3 release blog (July 2025), table 1, as NVIDIA-NeMo/RL issue 959 quotes it
RERUN = "issue 959"  # NVIDIA-NeMo/RL issue 959: a user's rerun of the blog's configs
SUMMARY = "summary"  # NVIDIA-NeMo/RL docs/about/performance-summary.md, in its v0.4 and v0.5 versions


@dataclass(frozen=True)
class Published:
    name: str
    source: str
    configs: tuple[str, ...]
    mean_response: int  # generated tokens per response, as reported (a mean sequence less the plan's 128 prompt)
    step_s: float
    generate_s: float | None = None
    update_s: float | None = None  # scoring (log-probs) and training
    refit_s: float | None = None
    one_step_off: bool = False  # generation on GPUs of its own, one step ahead: the plan's best split

    def measured(self) -> dict[str, float]:
        phases = {"generate": self.generate_s, "score + update": self.update_s, "step": self.step_s}
        return {k: v for k, v in phases.items() if v is not None}


STEPS = (
    Published("Llama-3.1-8B GRPO, 8 H100, DTensor (FSDP2)", BLOG, NEMO_8B, 777, 122, 57, 38 + 19, 4),
    Published("the same, rerun", RERUN, NEMO_8B, 802, 129, 55, 40 + 19, 6),
    Published("the same, Megatron", BLOG, NEMO_8B, 795, 112, 58, 28 + 18, 5),
    Published("the same, Megatron, rerun", RERUN, NEMO_8B, 811, 116, 56, 27 + 18, 8),
    Published("Llama-3.1-8B GRPO, 16 H100, Megatron (v0.5)", SUMMARY + " v0.5", NEMO_8B_16, 1019 - 128, 92.8),
    Published("the same (v0.4)", SUMMARY + " v0.4", NEMO_8B_16, 1060 - 128, 97.7),
    Published("the same, one step off (v0.5)", SUMMARY + " v0.5", NEMO_8B_16, 1123 - 128, 64.8,
              one_step_off=True),
    Published("the same, one step off (v0.4)", SUMMARY + " v0.4", NEMO_8B_16, 1129 - 128, 74.6,
              one_step_off=True),
)  # fmt: skip


def priced(row: Published) -> dict[str, float]:
    """The plan's seconds of ``row``'s step by phase, at its mean response length: the colocated step, or the
    split of fewest GPU-hours for a step one off (its ``generators`` too)."""
    from pacs import experiment
    from pacs.plan.overlap import best

    config = experiment.workflow_config([ROOT / c for c in row.configs])
    config = experiment.merged(config, {"plan": {"mean_response_length": row.mean_response}})
    job = next(j for j in experiment.plan(config).jobs if j.kind == "train")
    split = best(job.splits) if row.one_step_off else job.splits[0]
    return {"generate": split.generate_s, "score + update": split.update_s, "refit": split.push_s,
            "step": split.step_s, "generators": split.generators}  # fmt: skip


def table() -> str:
    """docs/plan-vs-published.md's table: each row's measured seconds by phase, the plan's beside them."""
    lines = ["| published step | source | mean response | generate s | score + update s | refit s | step s | config |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in STEPS:
        plan = priced(row)
        measured = {"generate": row.generate_s, "score + update": row.update_s, "refit": row.refit_s,
                    "step": row.step_s}  # fmt: skip
        cells = [f"{v:g} (plan {plan[k]:.1f})" if v is not None else "-" for k, v in measured.items()]
        if row.one_step_off:
            cells[-1] += f", best split: {plan['generators']} generating GPUs"
        configs = " + ".join(f"`{Path(c).name}`" for c in row.configs)
        lines.append(f"| {row.name} | {row.source} | {row.mean_response} | {' | '.join(cells)} | {configs} |")
    return "\n".join(lines)
