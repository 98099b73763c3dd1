"""The Fine-tune form: its fields as a TrainConfig (`form_config`: a lesson's preset, an objective's companions,
the form's values), the settings of a real model (SD3 / FLUX) and the memory estimate line shown before Start.

With an SD3 / FLUX folder the tab shows, beside the LoRA rank, the settings that decide whether a run fits a device
(`REAL_FIELDS`): resolution, weights dtype, micro-batch (auto or a number), KL weight, prompts per iteration,
gradient checkpointing and text-encoder offload. `real_defaults` gives their starting values from the plan
`workbench train --model` makes on the app's device; `real_overrides` checks what they hold (one error line naming
the control) and turns them into TrainConfig fields; `estimate_line` names them and the plan's verdict with the
smallest change that would fit, the line Start is refused with when the run cannot fit (`run_handlers.start_run`).

The form and the command line share one planner, `train.dry_run.plan_run`: a micro-batch of "auto" becomes the
largest that fits the device by the estimate there, and the training process checks the same plan again.
"""

from __future__ import annotations

from workbench.core.errors import WorkbenchError
from workbench.train import PRESETS, TrainConfig, preset
from workbench.train.config_checks import RANGES
from workbench.train.model_settings import AUTO, REAL_LORA_RANK, is_real_model, model_defaults
from workbench.train.prompt_sets import is_pipeline_folder
from workbench.ui.guard import escape, number, parse_window, whole_number

APP_LIMITS = {"iterations": 2000, "group": 32, "steps": 64}  # a fine-tune started from the app is capped here
FORM_FIELDS = ("objective", "reward", "chunks", "lr", "iterations", "group", "steps", "lora_rank", "sde", "window",
               "lesson")
NO_LESSON = "none"  # the lesson menu's "no task": the world's training scenes, held-out adherence
DTYPES = ("bfloat16", "float32")
REAL_MODEL_LORA_RANK = REAL_LORA_RANK  # the form's LoRA rank for SD3 / FLUX (Flow-GRPO r 32), as `train --model`
MAX_RESOLUTION = 4096  # px: a 4096 px SD3.5 image is 65,536 latent tokens, already far past one GPU
APP_PROMPTS = 64  # prompts per iteration a run started from the app may have (`workbench train` takes more)
LABELS = {  # TrainConfig field -> the control's label (errors name the control as the page shows it)
    "resolution": "Resolution (px)", "dtype": "Weights dtype", "micro_batch": "Micro-batch (transitions per pass)",
    "kl_beta": "KL weight beta", "prompts_per_iteration": "Prompts per iteration",
    "gradient_checkpointing": "Gradient checkpointing", "offload_text_encoders": "Text encoders off the device"}
REAL_FIELDS = tuple(LABELS)  # the order of the controls, of `real_overrides`'s arguments and of the handlers' inputs


def real_model(wb) -> bool:
    """Whether the app's model (the one its fine-tunes train) is an SD3 / FLUX folder."""
    return is_pipeline_folder(wb.model_path)


def real_defaults(wb) -> dict:
    """The real-model controls' starting values (REAL_FIELDS order): the plan `workbench train --model` makes for the
    app's model on the app's device (`dry_run.plan_run`: LoRA r 32, bfloat16, 512 px or the model's own when
    smaller, checkpointing on, text encoders offloaded only when that makes it fit), the app's --resolution and a
    bfloat16 --dtype where given; the micro-batch stays auto."""
    from workbench.train.dry_run import plan_run

    config = TrainConfig(model=wb.model_path, resolution=wb.resolution or AUTO,
                         dtype="bfloat16" if wb.dtype == "bfloat16" else AUTO)
    plan = plan_run(config, wb.device, 1).config
    return {"resolution": plan.resolution, "dtype": plan.dtype, "micro_batch": AUTO, "kl_beta": plan.kl_beta,
            "prompts_per_iteration": plan.prompts_per_iteration, "gradient_checkpointing": plan.checkpointing,
            "offload_text_encoders": bool(plan.offload_text_encoders)}


def _switch(value, name: str) -> bool:
    """A checkbox's value: True or False, nothing else (an API call's "yes" is refused, not read as True)."""
    if not isinstance(value, bool):
        raise WorkbenchError(f"{name} must be true or false, got {value!r}"[:200])
    return value


def real_overrides(wb, resolution, dtype, micro_batch, kl_beta, prompts_per_iteration, gradient_checkpointing,
                   offload_text_encoders) -> tuple[dict, bool]:
    """(TrainConfig fields, whether the micro-batch is automatic) from the real-model controls, each checked with
    an error naming its control; automatic leaves micro_batch out (`auto_micro_batch` fills it in)."""
    from workbench.models.adapters import pipeline_geometry

    _, multiple = pipeline_geometry(wb.model_path)
    px = whole_number(resolution, LABELS["resolution"], multiple)
    if px % multiple or px > MAX_RESOLUTION:
        nearest = min(MAX_RESOLUTION - MAX_RESOLUTION % multiple, px - px % multiple)
        raise WorkbenchError(f"{LABELS['resolution']} must be a multiple of {multiple} up to {MAX_RESOLUTION} for this "
                             f"model (its VAE factor x patch), got {px}; try {nearest}")
    if dtype not in DTYPES:
        raise WorkbenchError(f"{LABELS['dtype']} must be one of {', '.join(DTYPES)}, got {str(dtype)[:40]!r}")
    auto = isinstance(micro_batch, str) and micro_batch.strip().lower() == AUTO
    try:
        micro = None if auto else whole_number(micro_batch, LABELS["micro_batch"], 1)
    except WorkbenchError:
        raise WorkbenchError(f"{LABELS['micro_batch']} must be {AUTO} or a whole number >= 1, got "
                             f"{str(micro_batch)[:40]!r}") from None
    beta = number(kl_beta, LABELS["kl_beta"])
    if beta < 0:
        raise WorkbenchError(f"{LABELS['kl_beta']} must be >= 0 (0 = no KL), got {beta:g}")
    prompts = whole_number(prompts_per_iteration, LABELS["prompts_per_iteration"], RANGES["prompts_per_iteration"][0])
    if prompts > APP_PROMPTS:
        raise WorkbenchError(f"{LABELS['prompts_per_iteration']} is at most {APP_PROMPTS} in the app (got {prompts});"
                             " run larger fine-tunes with `workbench train`")
    fields = dict(resolution=px, dtype=dtype, kl_beta=beta, prompts_per_iteration=prompts,
                  gradient_checkpointing=_switch(gradient_checkpointing, LABELS["gradient_checkpointing"]),
                  offload_text_encoders=_switch(offload_text_encoders, LABELS["offload_text_encoders"]))
    return fields | ({} if auto else {"micro_batch": micro}), auto


def settings_words(config: TrainConfig, auto: bool) -> str:
    """The settings an estimate of a real model depends on, in words: '512 px, bfloat16, LoRA r32, ...'."""
    micro = config.micro_batch or config.minibatch_size
    return ", ".join([
        f"{config.resolution} px" if config.resolution else "the model's resolution", config.dtype,
        f"LoRA r{config.lora_rank}" if config.lora_rank else "full fine-tuning",
        f"micro-batch {micro} of {config.minibatch_size} transitions" + (f" ({AUTO})" if auto else ""),
        f"KL {config.kl_beta:g}" if config.kl_beta else "no KL",
        f"{config.prompts_per_iteration} prompt{'s' if config.prompts_per_iteration != 1 else ''} per iteration",
        f"gradient checkpointing {'on' if config.checkpointing else 'off'}",
        "text encoders off the device" if config.offload_text_encoders else "text encoders on the device"])


FLAGS = {"--resolution": LABELS["resolution"], "--dtype": LABELS["dtype"], "--micro-batch": LABELS["micro_batch"],
         "--prompts-per-iteration": LABELS["prompts_per_iteration"], "--lora-rank": "LoRA rank",
         "--gradient-checkpointing": f"{LABELS['gradient_checkpointing']} on",
         "--offload-text-encoders": f"{LABELS['offload_text_encoders']} on"}  # the plan's fixes, as controls


def in_controls(verdict: str) -> str:
    """The plan's verdict with its command-line flags named as the tab's controls."""
    for flag in sorted(FLAGS, key=len, reverse=True):
        verdict = verdict.replace(flag, FLAGS[flag])
    return verdict


def estimate_line(plan, auto: bool = False) -> tuple[str, str | None]:
    """(the Markdown line of a run's plan (`dry_run.plan_run`, the one `workbench train --dry-run` prints): for a
    real model the settings its estimate depends on, then the verdict with the smallest change that would fit and
    the larger parts; None when it fits, else the one line Start is refused with)."""
    config, estimate = plan.config, plan.estimate
    real = is_real_model(config.model)
    parts = ", ".join(f"{name} {value / 1e9:.2f} GB" for name, value in vars(estimate).items() if value >= 5e7)
    named = f" at {settings_words(config, auto)}" if real else ""
    verdict = in_controls(plan.verdict)
    fit = plan.fits is not False
    line = (f"{'' if fit else '⚠ '}**Memory estimate of an iteration**{escape(named)} (docs/methods.md; an estimate "
            f"until measured on this device): {escape(verdict)}" + (f" ({parts})" if parts else "") + ".")
    if fit:
        return line, None
    return line, f"not started: the memory estimate{named} {verdict}"


def real_controls(wb, hint) -> list:
    """The real-model settings' controls in REAL_FIELDS order, at `real_defaults` (built only for an SD3 / FLUX
    model: the embedded model's form has none); `hint(field)` is the field's docstring, shortened. No min / max on
    the numbers: the handlers check them and name the control."""
    import gradio as gr

    from workbench.models.adapters import pipeline_geometry

    value, (native, multiple) = real_defaults(wb), pipeline_geometry(wb.model_path)
    with gr.Row(elem_id="train-real-settings"):
        resolution = gr.Number(value["resolution"], precision=0, label=LABELS["resolution"], elem_id="train-resolution",
                               info=f"a multiple of {multiple} (the model draws {native} px); memory grows with its "
                                    "square")
        dtype = gr.Dropdown(list(DTYPES), value=value["dtype"], label=LABELS["dtype"], elem_id="train-dtype",
                            info="what the weights load in; LoRA weights and log-probs stay float32")
        micro = gr.Dropdown([AUTO, "1", "2", "4", "8", "16", "32"], value=value["micro_batch"], allow_custom_value=True,
                            label=LABELS["micro_batch"], elem_id="train-micro-batch",
                            info="auto: the largest that fits the device by the estimate; the gradient is the same")
        kl = gr.Number(value["kl_beta"], label=LABELS["kl_beta"], elem_id="train-kl", info=hint("kl_beta"))
    with gr.Row(elem_id="train-real-switches"):
        prompts = gr.Number(value["prompts_per_iteration"], precision=0, elem_id="train-prompts",
                            label=f"{LABELS['prompts_per_iteration']} (at most {APP_PROMPTS} here)",
                            info=hint("prompts_per_iteration"))
        checkpointing = gr.Checkbox(value["gradient_checkpointing"], label=LABELS["gradient_checkpointing"],
                                    elem_id="train-checkpointing",
                                    info="recompute activations in the backward pass: less memory, ~1 more forward")
        offload = gr.Checkbox(value["offload_text_encoders"], label=LABELS["offload_text_encoders"],
                              elem_id="train-offload", info="encode prompts on the CPU once: T5's weights leave the "
                                                            "device")
    return [resolution, dtype, micro, kl, prompts, checkpointing, offload]


def lesson_names() -> list[str]:
    """Presets that bring a task (e.g. crosses): the lessons of the Fine-tune tab."""
    return [name for name in PRESETS.names() if preset(name).task is not None]


def lesson_base(lesson: str | None) -> TrainConfig:
    """The TrainConfig a lesson starts from: its preset, or TrainConfig's defaults for NO_LESSON."""
    if not lesson or lesson == NO_LESSON:
        return TrainConfig()
    if lesson not in lesson_names():
        raise WorkbenchError(f"unknown lesson '{lesson}'; valid: {NO_LESSON}, {', '.join(lesson_names())}")
    return preset(lesson)


def method_settings(objective: str) -> dict:
    """What an objective's preset changes from TrainConfig's defaults (DAPO's dynamic sampling, GPG's advantages,
    ...), so a lesson can take a method with its companions; {} for an objective without a preset."""
    if objective not in PRESETS:
        return {}
    default, method = TrainConfig().to_dict(), preset(objective).to_dict()
    return {k: v for k, v in method.items() if v != default[k]}


def form_config(wb, objective: str, reward: str, chunks: str, lr, iterations, group, steps, lora_rank,
                sde: str, window: str, lesson: str | None = None, *real) -> TrainConfig:
    """The TrainConfig of the Fine-tune form: the lesson's preset (its task, evaluation and tuned settings), then
    what the objective's preset adds to its loss (dapo, gpg, gspo, gfpo: DAPO's dynamic sampling, GPG's advantages,
    ...), then the form's values, with a real model's settings `real` (`train_form.REAL_FIELDS`; a micro-batch of
    "auto" chosen from the estimate); TrainConfig validates it all."""
    return form_plan(wb, objective, reward, chunks, lr, iterations, group, steps, lora_rank, sde, window, lesson,
                     *real)[0].config


def form_plan(wb, objective: str, reward: str, chunks: str, lr, iterations, group, steps, lora_rank,
              sde: str, window: str, lesson: str | None = None, *real) -> tuple:
    """(the plan of the form's run on the app's device, whether its micro-batch was automatic): the form's
    TrainConfig resolved by `dry_run.plan_run`, the same plan `workbench train` makes (auto: the largest
    micro-batch that fits by the estimate)."""
    from workbench.train.dry_run import plan_run

    if real and not real_model(wb):
        raise WorkbenchError("the resolution, dtype, micro-batch, KL, prompts and memory settings are for SD3 / FLUX "
                             "models; the embedded model takes the form's other fields")
    if real_model(wb) and lesson not in (None, "", NO_LESSON):
        raise WorkbenchError(f"the lesson '{lesson}' teaches the embedded model's toy world; this app's model is an "
                             f"SD3 / FLUX folder, which trains on the shipped real prompts: choose {NO_LESSON}")
    extra, auto = real_overrides(wb, *real) if real else ({}, False)
    overrides = dict(reward=(reward or "").strip() or None, chunks=(chunks or "").replace(" ", ""),
                     lr=number(lr, "learning rate"),
                     iterations=whole_number(iterations, "iterations", 1), group=whole_number(group, "group size", 2),
                     steps=whole_number(steps, "steps", 1), lora_rank=whole_number(lora_rank, "LoRA rank", 0),
                     sde=sde or "", window=parse_window(window), model=wb.model_path, device=wb.explicit_device,
                     resolution=wb.resolution, dtype="bfloat16" if wb.dtype == "bfloat16" else "float32")
    for name, cap in APP_LIMITS.items():
        if overrides[name] > cap:
            raise WorkbenchError(f"{name} is at most {cap} in the app (got {overrides[name]}); "
                                 "run larger fine-tunes with `workbench train`")
    base = lesson_base(lesson)
    config = TrainConfig.from_dict(base.to_dict() | method_settings(objective) | {"objective": objective or ""}
                                   | overrides | extra)
    return plan_run(config, wb.device, 1), auto


def lesson_form(config: TrainConfig) -> tuple:
    """The form's values (FORM_FIELDS without the lesson) for a config (its model's defaults resolved)."""
    config = model_defaults(config)
    window = "" if config.window is None else f"{config.window[0]},{config.window[1]}"
    return (config.objective, config.reward, config.chunks, config.lr, config.iterations, config.group, config.steps,
            config.lora_rank, config.sde, window)
