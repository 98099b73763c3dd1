"""Random-weight SD3 / FLUX pipelines built from configs (models/random_pipelines.py): at real size on the meta
device they have the published models' parameter counts (transformer and text encoders), tiny they are the same
classes, load as a folder and sample."""

from __future__ import annotations

import pytest
import torch

from workbench.models.architectures import ARCHITECTURES
from workbench.models.random_pipelines import random_pipeline, random_policy, save_random_pipeline
from workbench.train.prompt_sets import is_pipeline_folder


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name", ["sd3.5-medium", "flux.1-dev"])
def test_real_size_on_meta_has_the_published_counts(name):
    pipe = random_pipeline(name, "meta", torch.bfloat16)
    arch = ARCHITECTURES[name]
    expected = getattr(__import__("diffusers"), arch.transformer_class)
    assert type(pipe.transformer) is expected and pipe.transformer.device.type == "meta"
    encoders = [m for m in (pipe.text_encoder, pipe.text_encoder_2, getattr(pipe, "text_encoder_3", None)) if m]
    assert 2 * sum(count(m) for m in encoders) == pytest.approx(arch.text_encoder_bytes, rel=0.01)
    assert count(pipe.vae) == pytest.approx(arch.vae_params, rel=0.01)


@pytest.mark.parametrize("name", ["sd3.5-medium", "flux.1-dev"])
def test_tiny_pipelines_are_folders_and_policies(tmp_path, name):
    folder = save_random_pipeline(name, tmp_path / name)
    assert is_pipeline_folder(str(folder))
    policy = random_policy(name, "cpu", torch.float32, seed=1, tiny=True)
    assert policy.name.endswith(f"random-{name}-tiny")
    a = random_pipeline(name, "cpu", torch.float32, seed=3, tiny=True).transformer
    b = random_pipeline(name, "cpu", torch.float32, seed=3, tiny=True).transformer
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))  # the seed decides the weights
