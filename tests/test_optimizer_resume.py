"""A resume steps with the AdamW kernels the config asks for (``optim.fused``), not those of the run that wrote
the checkpoint: ``Optimizer.load_state_dict`` would keep the saved param groups' ``fused`` and ``foreach``."""

import copy

import pytest
import torch

from pacs.runs import checkpoint as ckpt
from pacs.tensors.kernels import adamw
from pacs.train.settings.config import OptimConfig

# on CUDA (``pytest -m gpu``) the fused kernel reads ``step`` on the device, the multi-tensor one on the CPU
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: torch.cuda.is_available() is False")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, CUDA])]
FLAGS = ("fused", "foreach", "capturable", "differentiable")


def _grads(model: torch.nn.Module, seed: int) -> None:
    """Gradients that depend on the weights (the same for equal weights), from inputs drawn from ``seed``."""
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed)).to(next(model.parameters()).device)
    model.zero_grad()
    model(x).square().mean().backward()


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> None:
    _grads(model, seed)
    optimizer.step()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("saved", "resumed"), [(False, True), (True, False)])
def test_a_resume_steps_with_the_configs_adamw_kernels(tmp_path, device, saved, resumed):
    """A checkpoint written with ``optim.fused`` ``saved`` resumed with ``resumed``: every param group keeps the
    implementation flags the resumed run built it with, each ``step`` lies where those kernels keep it, and two
    steps after the load give the parameters of a run that took all its steps with the resumed kernels, to fp32
    rounding."""
    torch.manual_seed(0)
    start = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to(device)
    lr = 1e-2

    writer = copy.deepcopy(start)
    old = adamw(writer.parameters(), lr, OptimConfig(fused=saved), device)
    _step(writer, old, seed=1)
    ckpt.save_resume_state(tmp_path, {"optimizer": (writer, old)}, {})
    ckpt.save_counters(tmp_path, {"step": 1})

    resumed_model = copy.deepcopy(writer)  # the weights the checkpoint's HF files hold
    new = adamw(resumed_model.parameters(), lr, OptimConfig(fused=resumed), device)
    state, _ = ckpt.load_trainer_state(tmp_path, 0, {"optimizer": (resumed_model, new)}, {})
    assert state == {"step": 1}

    never_saved = copy.deepcopy(start)
    reference = adamw(never_saved.parameters(), lr, OptimConfig(fused=resumed), device)
    _step(never_saved, reference, seed=1)
    for group, fresh in zip(new.param_groups, reference.param_groups, strict=True):
        assert {k: group[k] for k in FLAGS} == {k: fresh[k] for k in FLAGS}
        assert bool(group["fused"]) is resumed
    for p, q in zip(resumed_model.parameters(), never_saved.parameters(), strict=True):
        step, fresh = new.state[p]["step"], reference.state[q]["step"]
        assert (step.item(), step.device, step.dtype) == (fresh.item(), fresh.device, fresh.dtype)

    for seed in (2, 3):
        _step(resumed_model, new, seed)
        _step(never_saved, reference, seed)
    for (name, a), b in zip(resumed_model.named_parameters(), never_saved.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
