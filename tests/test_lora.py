"""LoRA adapters leave and enter: a LoRA run's checkpoint holds pytorch_lora_weights.safetensors that diffusers'
`load_lora_weights` reads into a tiny SD3 / FLUX pipeline, which then draws the workbench policy's images (the
deterministic ODE from the same noise); adapters saved by peft (as Flow-GRPO does) or by diffusers load onto a base
folder; bad adapters are one message each."""

from __future__ import annotations

import json
import re
import warnings
from types import SimpleNamespace

import pytest
import torch
from tiny_pipelines import save_tiny_sd3

from workbench.core.errors import WorkbenchError
from workbench.flow.sampler import sample_group
from workbench.flow.trajectory import SamplingConfig
from workbench.models.lora import LORA_FILE, adapter_format, load_adapter, lora_file
from workbench.train import TrainConfig, Trainer
from workbench.train.sources import load_policy
from workbench.train.store import RunStore

RUN = dict(group=2, steps=2, chunks="1,1", prompts_per_iteration=1, eval_prompts=0, report_to="none", device="cpu",
           lora_rank=4, iterations=1, lr=0.02, max_sequence_length=16,
           dtype="float32")  # lr: a step the images show; float32 as the diffusers pipelines it is compared with
TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"]
PROMPT = "a photo of a cat"




@pytest.fixture(scope="module")
def sd3_run(sd3_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "sd3-lora"
    Trainer(TrainConfig(model=str(sd3_dir), **RUN), run).run()
    return run


def pipeline(folder, cls_name: str):
    import diffusers

    extra = {"text_encoder_3": None, "tokenizer_3": None} if cls_name == "StableDiffusion3Pipeline" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(diffusers, cls_name).from_pretrained(str(folder), local_files_only=True, **extra)


def ode_group(policy):
    """One deterministic Euler-ODE image at fixed noise, through the workbench's sampler."""
    return sample_group(policy, PROMPT, SamplingConfig(group=1, steps=3, noise_level=0.0, seed=7))


@torch.no_grad()
def diffusers_sd3(pipe, group, tokens: int):
    """The same image through StableDiffusion3Pipeline.__call__ from the group's x_T: (latents, images)."""
    x_T = group.states[:, 0]
    latents = pipe(PROMPT, num_inference_steps=3, guidance_scale=1.0, latents=x_T, max_sequence_length=tokens,
                   output_type="latent").images
    images = pipe(PROMPT, num_inference_steps=3, guidance_scale=1.0, latents=x_T, max_sequence_length=tokens,
                  output_type="pt").images
    return latents, images


@torch.no_grad()
def diffusers_flux(pipe, group, tokens: int, guidance: float):
    """The same image through FluxPipeline.__call__ from the group's x_T (packed as the pipeline packs it)."""
    x_T = group.states[:, 0]  # (1, C, H, W)
    b, c, h, w = x_T.shape
    side = h * pipe.vae_scale_factor
    packed = pipe._pack_latents(x_T, b, c, h, w)
    call = dict(num_inference_steps=3, guidance_scale=guidance, latents=packed, max_sequence_length=tokens,
                height=side, width=side)
    latents = pipe._unpack_latents(pipe(PROMPT, output_type="latent", **call).images, side, side,
                                   pipe.vae_scale_factor)
    images = pipe(PROMPT, output_type="pt", **call).images
    return latents, images


def test_a_lora_run_leaves_a_diffusers_lora_that_draws_the_policy_images_sd3(sd3_dir, sd3_run):
    checkpoint = RunStore(sd3_run).checkpoints()[0]
    assert (checkpoint / LORA_FILE).is_file() and adapter_format(checkpoint) == "diffusers"
    policy = load_policy(str(sd3_run), device="cpu")
    wrapped = SimpleNamespace(pipe=policy.pipe, transformer=SimpleNamespace(module=policy.transformer))  # as DDP
    assert lora_file(wrapped).layers.keys() == lora_file(policy).layers.keys() and len(lora_file(policy).layers) == len(
        [n for n, _ in policy.transformer.named_parameters() if "lora_" in n])
    group = ode_group(policy)
    pipe = pipeline(sd3_dir, "StableDiffusion3Pipeline")
    base_latents, _ = diffusers_sd3(pipe, group, policy.max_sequence_length)
    pipe.load_lora_weights(str(checkpoint))
    latents, images = diffusers_sd3(pipe, group, policy.max_sequence_length)
    assert torch.allclose(latents, group.states[:, -1], atol=1e-4)
    assert torch.allclose(images, group.images, atol=1e-4)
    # the run's adapter changed the image by far more than the tolerance: the comparison can fail
    assert (base_latents - group.states[:, -1]).abs().max() > 100 * 1e-4


def test_a_lora_run_leaves_a_diffusers_lora_that_draws_the_policy_images_flux(flux_dir, tmp_path):
    run = tmp_path / "flux-lora"
    Trainer(TrainConfig(model=str(flux_dir), resolution=32, **RUN), run).run()
    checkpoint = RunStore(run).checkpoints()[0]
    policy = load_policy(str(run), device="cpu")
    group = ode_group(policy)
    pipe = pipeline(flux_dir, "FluxPipeline")
    base_latents, _ = diffusers_flux(pipe, group, policy.max_sequence_length, policy.guidance)
    pipe.load_lora_weights(str(checkpoint))
    latents, images = diffusers_flux(pipe, group, policy.max_sequence_length, policy.guidance)
    assert torch.allclose(latents, group.states[:, -1], atol=1e-4)
    assert torch.allclose(images, group.images, atol=1e-4)
    assert (base_latents - group.states[:, -1]).abs().max() > 100 * 1e-4


def test_a_full_fine_tune_and_the_embedded_model_leave_no_lora_file(tmp_path):
    run = tmp_path / "embedded"
    Trainer(TrainConfig(**{**RUN, "lora_rank": 0, "max_sequence_length": None, "lr": 3e-5}), run).run()
    assert not (RunStore(run).checkpoints()[0] / LORA_FILE).exists()


def peft_adapter(base, out, config=None, scale: float = 0.2):
    """An adapter saved by peft itself, as Flow-GRPO saves one (`PeftModel.save_pretrained`), with nonzero B."""
    import diffusers
    from peft import LoraConfig, get_peft_model

    index = json.loads((base / "model_index.json").read_text())
    cls = getattr(diffusers, index["transformer"][1])
    torch.manual_seed(1)
    model = get_peft_model(cls.from_pretrained(str(base / "transformer")),
                           config or LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=scale)
    model.save_pretrained(str(out))
    return out


def test_a_peft_adapter_loads_onto_its_base_and_matches_peft(sd3_dir, tmp_path):
    adapter = peft_adapter(sd3_dir, tmp_path / "flow-grpo-lora")
    assert adapter_format(adapter) == "peft"
    base = load_policy(str(sd3_dir), device="cpu")
    tuned = load_policy(str(sd3_dir), device="cpu")
    load_adapter(tuned, adapter)
    # peft's own PeftModel.from_pretrained on a fresh transformer gives the same velocity
    import diffusers
    from peft import PeftModel

    reference = PeftModel.from_pretrained(diffusers.SD3Transformer2DModel.from_pretrained(
        str(sd3_dir / "transformer")), str(adapter)).eval()
    torch.manual_seed(0)
    x, sigma = torch.randn(1, 4, 32, 32), torch.tensor([0.6])
    embeds, pooled = torch.randn(1, 77 + tuned.max_sequence_length, 32), torch.randn(1, 64)
    with torch.no_grad():
        ours = tuned.denoise(x, sigma, embeds, pooled)
        theirs = reference(hidden_states=x, timestep=sigma * 1000, encoder_hidden_states=embeds,
                           pooled_projections=pooled, return_dict=False)[0]
        plain = base.denoise(x, sigma, embeds, pooled)
    assert torch.allclose(ours, theirs, atol=1e-5) and (ours - plain).abs().max() > 1e-2


def test_bad_adapters_are_one_message_each(sd3_dir, flux_dir, tmp_path):
    from peft import LoHaConfig, LoraConfig

    policy = load_policy(str(sd3_dir), device="cpu")
    wide = save_tiny_sd3(tmp_path / "sd3-wide", heads=2)  # the same layers, half the width
    cases = {
        "does not exist": tmp_path / "nowhere",
        "holds no LoRA adapter": tmp_path,
        "is a LOHA adapter, not LoRA": peft_adapter(sd3_dir, tmp_path / "loha",
                                                      LoHaConfig(r=4, alpha=8, target_modules=TARGETS)),
        "add_k_proj is 32 -> 32 features but the adapter has lora_A (4, 16)": peft_adapter(wide, tmp_path / "wide"),
        "are not in the transformer": peft_adapter(flux_dir, tmp_path / "flux",
                                                   LoraConfig(r=4, target_modules=["to_q", "proj_mlp"])),
    }
    only_config = tmp_path / "only-config"
    only_config.mkdir()
    (only_config / "adapter_config.json").write_text((tmp_path / "wide" / "adapter_config.json").read_text())
    cases["has adapter_config.json but no weights"] = only_config
    cases["is a file; give the folder"] = tmp_path / "wide" / "adapter_model.safetensors"
    from diffusers import FluxPipeline
    from safetensors.torch import load_file, save_file

    flux_layers = {k.removeprefix("base_model.model."): v
                   for k, v in load_file(str(tmp_path / "flux" / "adapter_model.safetensors")).items()}
    FluxPipeline.save_lora_weights(str(tmp_path / "flux-diffusers"), transformer_lora_layers=flux_layers)
    cases["2 of its 3 layers are not in the transformer"] = tmp_path / "flux-diffusers"
    (tmp_path / "not-lora").mkdir()
    save_file({"transformer.proj_out.weight": torch.zeros(2, 2)}, str(tmp_path / "not-lora" / LORA_FILE))
    cases["is not a LoRA adapter of a transformer"] = tmp_path / "not-lora"
    for message, folder in cases.items():
        with pytest.raises(WorkbenchError, match=re.escape(message)):
            load_adapter(policy, folder)
    with pytest.raises(WorkbenchError, match="not to the embedded model"):
        load_adapter(load_policy(None, device="cpu"), tmp_path / "wide")


def test_a_base_with_an_adapter_is_one_source_everywhere(sd3_dir, sd3_run, tmp_path, capsys):
    from workbench.cli.main import main as cli
    from workbench.train.sources import resolve_source

    adapter = peft_adapter(sd3_dir, tmp_path / "flow-grpo-lora")
    source = resolve_source(str(sd3_dir), str(adapter))
    assert source == resolve_source(f"{sd3_dir} + {adapter}") == resolve_source(source.key)
    assert source.short == f"{sd3_dir.name} + flow-grpo-lora" and "with the LoRA adapter" in source.label
    assert cli(["sample", "--model", str(sd3_dir), "--lora", str(adapter), "--device", "cpu", "--prompt", PROMPT,
                "--num", "2", "--steps", "2", "--out", str(tmp_path / "grid.png")]) == 0
    checkpoint = RunStore(sd3_run).checkpoints()[0]  # a run's LoRA file is an adapter like any other
    assert resolve_source(f"{sd3_dir} + {checkpoint}").adapter == str(checkpoint)
    capsys.readouterr()
    refusals = {
        ("--lora", str(adapter)): "needs a base model",
        ("--model", str(sd3_run), "--lora", str(adapter)): "is a fine-tuning run; a LoRA adapter goes on a base",
        ("--model", str(sd3_dir), "--lora", str(tmp_path / "none")): "does not exist",
        ("--model", f"{sd3_dir} + {adapter}", "--lora", str(adapter)): "two LoRA adapters given",
    }
    for flags, message in refusals.items():
        assert cli(["sample", *flags, "--device", "cpu", "--prompt", PROMPT, "--out", str(tmp_path / "x.png")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err, err


def test_compare_measures_an_external_lora_against_its_base(sd3_dir, sd3_run, tmp_path):
    from urllib.parse import parse_qs, urlparse

    from workbench.ui import handlers as h
    from workbench.ui import layout  # noqa: F401 - registers the app's tabs, which links name
    from workbench.ui import policies as pol
    from workbench.ui.share import parse_query, view_link
    from workbench.ui.state import Session
    from workbench.ui.workbench import Workbench

    adapter = peft_adapter(sd3_dir, tmp_path / "loras" / "flow-grpo-lora")
    outside = Workbench(model=str(sd3_dir), device="cpu", runs_root=str(sd3_run.parent), curve_prompts=2)
    status = pol.pick_policy(outside, f"base + {adapter}", Session())[-1]  # an adapter loads only from the app's
    assert "is not a folder this app offers" in status and not outside._policies, status  # folders (--models)
    wb = Workbench(model=str(sd3_dir), device="cpu", runs_root=str(sd3_run.parent), curve_prompts=2,
                   models=[str(tmp_path / "loras")])
    checkpoint = RunStore(sd3_run).checkpoints()[0]
    for typed, name in ((f"base + {adapter}", "flow-grpo-lora"), (f"{sd3_dir} + {checkpoint}", checkpoint.name)):
        menu, header, session, *_, status = pol.pick_policy(wb, typed, Session())
        assert status.startswith("✓") and "with the LoRA adapter" in header.replace("\\", ""), status
        session = h.generate(wb, PROMPT, 2, 3, 0.7, 0, "", session)[-2]
        assert session.reward_spec == "jpeg_compressibility"  # the real model's default, no toy reward
        figure, images, text, session, status = pol.compare(wb, pol.RUN_BASE, 2, session)
        before, after = session.comparison.groups
        assert session.comparison.labels == (sd3_dir.name, f"{sd3_dir.name} + {name}") and status.startswith("✓")
        assert (before.states[:, 0] == after.states[:, 0]).all() and not torch.equal(before.images, after.images)
        assert all(torch.isfinite(c.step_credit).all() for c in session.comparison.credits)
        link = view_link(PROMPT, 2, 3, 0.7, 0, "flow_grpo", "", "", 2, "mc", session, "attribution", "http://x/")
        query = {k: v[-1] for k, v in parse_qs(urlparse(link).query).items()}
        assert wb.source(parse_query(query)["model"]) == wb.source(session.source)  # the link carries the adapter


def test_a_fine_tune_starts_from_a_base_with_an_adapter(sd3_dir, tmp_path, capsys):
    from workbench.cli.main import main as cli
    from workbench.models.lora import merge_adapter

    adapter = peft_adapter(sd3_dir, tmp_path / "flow-grpo-lora")
    applied, merged = load_policy(f"{sd3_dir} + {adapter}", device="cpu"), load_policy(str(sd3_dir), device="cpu")
    merge_adapter(merged, adapter)
    assert not [n for n, _ in merged.transformer.named_parameters() if "lora_" in n]  # folded into the weights
    group, again = ode_group(applied), ode_group(merged)
    assert torch.allclose(group.states, again.states, atol=1e-4)
    run = tmp_path / "on-top"
    flags = ["--group", "2", "--steps", "2", "--chunks", "1,1", "--prompts-per-iteration", "1", "--eval-prompts", "0",
             "--report-to", "none", "--device", "cpu", "--lora-rank", "4", "--iterations", "1",
             "--dtype", "float32", "--max-sequence-length", "16"]  # float32: compared with float32 policies
    assert cli(["train", "--model", str(sd3_dir), "--lora", str(adapter), *flags, "--out", str(run)]) == 0
    assert json.loads((run / "config.json").read_text())["lora"] == str(adapter)
    tuned = load_policy(str(run), device="cpu")  # the run comes back on model + adapter, with its own LoRA
    short = dict(device="cpu", max_sequence_length=16)  # the run's T5 tokens
    plain, on_top = (ode_group(load_policy(source, **short)) for source in (str(sd3_dir), f"{sd3_dir} + {adapter}"))
    assert (ode_group(tuned).states - on_top.states).abs().max() < (plain.states - on_top.states).abs().max() / 10
    capsys.readouterr()
    assert cli(["train", "--lora", str(adapter), *flags[:-4], "--out", str(tmp_path / "no-base")]) == 2
    assert "a LoRA adapter goes on an SD3 / FLUX model folder" in capsys.readouterr().err


def test_download_gives_the_lora_file_on_its_own(sd3_run, sd3_dir):
    from pathlib import Path

    from safetensors import safe_open

    from workbench.ui import run_handlers as rh
    from workbench.ui.workbench import Workbench

    wb = Workbench(model=str(sd3_dir), device="cpu", runs_root=str(sd3_run.parent))
    files, status = rh.download(wb, sd3_run.name)
    lora = [Path(f) for f in files if f.endswith(LORA_FILE)]
    assert status.startswith("✓ prepared 3 file(s)") and len(lora) == 1
    with safe_open(str(lora[0]), "pt") as f:
        assert all(k.startswith("transformer.") and ".lora_" in k for k in f.keys())
        assert json.loads(f.metadata()["lora_adapter_metadata"])["transformer.r"] == RUN["lora_rank"]


def test_the_adapters_are_gaussian_float32_with_alpha_twice_the_rank_and_only_they_train():
    """`add_lora` as the trainer calls it, on the embedded transformer in bfloat16: every attention projection gets
    an adapter with scaling alpha / r = 2 (alpha defaults to 2 r), A drawn from N(0, 1/r) (peft's "gaussian", not
    its default Kaiming-uniform: |A| <= 1/sqrt(96) here), B zero, the adapters in float32 and the base frozen."""
    from peft.tuners.lora import LoraLayer

    from workbench.models.embedded import build_embedded
    from workbench.train.trainable import add_lora

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # diffusers' note on casting with to()
        transformer = build_embedded(seed=0).transformer.to(torch.bfloat16)
    add_lora(transformer, 4, None, seed=0)
    layers = [m for m in transformer.modules() if isinstance(m, LoraLayer)]
    assert len(layers) == 31 and {m.scaling["default"] for m in layers} == {2.0}
    a = torch.cat([m.lora_A["default"].weight.detach().flatten() for m in layers])  # (31 * 4 * 96,)
    assert a.std().item() == pytest.approx(1 / 4, rel=0.05)
    assert all(not m.lora_B["default"].weight.any() for m in layers)
    params = dict(transformer.named_parameters())
    assert {n for n, p in params.items() if p.requires_grad} == {n for n in params if "lora_" in n}
    assert {params[n].dtype for n in params if "lora_" in n} == {torch.float32}
    add_lora(halved := build_embedded(seed=0).transformer, 4, 2.0)
    assert {m.scaling["default"] for m in halved.modules() if isinstance(m, LoraLayer)} == {0.5}


def test_a_model_without_attention_projections_cannot_take_adapters():
    from diffusers.loaders.peft import PeftAdapterMixin

    from workbench.train.trainable import add_lora

    class Bare(torch.nn.Module, PeftAdapterMixin):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

    with pytest.raises(WorkbenchError, match=r"^cannot add LoRA adapters to this model \(Target modules \{.*\} not "
                                             r"found in the base model\. Please check the target modules and try "
                                             r"again\.\); use lora_rank 0 for full fine-tuning$"):
        add_lora(Bare(), 4, None)
