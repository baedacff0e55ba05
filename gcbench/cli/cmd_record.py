"""``gcbench record``: live gradients of a model into a trace folder that ``run --trace`` replays."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gcbench.cli import options
from gcbench.cli.failures import user_errors
from gcbench.cli.grammar import model_arg
from gcbench.cli.output import plain, progress_bar
from gcbench.cli.preflight import check_device, check_output_dir

Model = Annotated[str, options.model("Zoo model name, 'hf:NAME[:key=value,...]' (Hugging Face), or package.module:factory.")]
WarmupSteps = Annotated[int, typer.Option(metavar="INT", help="Plain SGD steps before recording.")]
ImageSize = Annotated[int | None, typer.Option(metavar="INT", help="Override the input image size (CNNs).")]


@user_errors
def record(
    model: Model,
    out_path: Annotated[Path, options.out_path("Trace folder to write.")],
    steps: Annotated[int, options.steps("Steps to record.")] = 4,
    workers: Annotated[int, options.workers("Simulated workers (different batches each).")] = 2,
    seed: Annotated[int, options.seed("Seed of the model and batches.")] = 0,
    warmup_steps: WarmupSteps = 0,
    batch_size: Annotated[int | None, options.batch_size("Override the model's default batch size.")] = None,
    image_size: ImageSize = None,
    device: Annotated[str, options.device("Where the forward and backward passes run: cpu, cuda or cuda:N.")] = "cpu",
    quiet: options.Quiet = False,
) -> None:
    """Record live gradients of a model to a trace folder (manifest.json + safetensors).

    Examples: `gcbench record --model resnet18 --out traces/r18 --steps 8`, then `gcbench run quick --trace traces/r18`;
    `gcbench record --model resnet50 --device cuda --out traces/r50` computes the gradients on the GPU.
    """
    from gcbench.measure.suite import SourceSpec, Suite, check_option
    from gcbench.sources.recorder import record_live

    model = model_arg(model) or model
    # the ranges of a suite's live source: a bad value is one line before any gradient is computed
    for option, key, value in (("--steps", "steps", steps), ("--workers", "workers", workers),
                               ("--warmup-steps", "warmup_steps", warmup_steps), ("--batch-size", "batch_size", batch_size),
                               ("--image-size", "image_size", image_size)):
        check_option(SourceSpec, key, value, option)
    check_option(Suite, "seed", seed, "--seed")
    device = str(check_device(device))  # no CUDA, or a GPU that is not here: one line before the model is built
    check_output_dir(out_path, "--out")
    kwargs: dict[str, Any] = {}
    if batch_size is not None:
        kwargs["batch_size"] = batch_size
    if image_size is not None:
        kwargs["image_size"] = image_size
    with progress_bar(not quiet) as prog:
        path = record_live(model, steps=steps, workers=workers, out=out_path, seed=seed, warmup_steps=warmup_steps,
                           progress=lambda d, t, m: prog("record", d, t, f"{model}: forward + backward passes"), device=device,
                           **kwargs)
    size = sum(f.stat().st_size for f in Path(path).glob("*") if f.is_file())
    plain(f"trace: {path} — {steps} steps × {workers} workers, {size / 2**20:.1f} MiB")
