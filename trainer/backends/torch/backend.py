"""The torch backend's declaration: what it refuses, what its launch needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainer.backend_protocol import Job, LaunchEnv, Problem, ResumePoint, entrypoint_placement, trainer_argv
from trainer.backends.torch.checkpoint_folders import resume_point
from trainer.contract import TOKEN_ENV

if TYPE_CHECKING:
    import threading

    from trainer.config import RunConfig
    from trainer.report.reporters import Reporter


class TorchBackend:
    name = "torch"
    description = "One process, Hugging Face transformers, CPU or one GPU (the embedded default)."
    refused: Mapping[str, str] = {
        "resources.nodes": "backend torch runs in one process: set resources.nodes to 1, or use backend verl",
    }

    def train(
        self, config: RunConfig, reporter: Reporter, *, stop_event: threading.Event | None = None
    ) -> Any:
        if config.sft.enabled:
            from trainer.backends.torch.sft import train_sft

            return train_sft(config, reporter, stop_event=stop_event)
        if config.evaluation.enabled:
            from trainer.backends.torch.evaluate import evaluate

            return evaluate(config, reporter, stop_event=stop_event)
        from trainer.backends.torch.loop import train

        return train(config, reporter, stop_event=stop_event)

    def problems(self, config: RunConfig) -> list[Problem]:
        resources, problems = config.resources, []
        if resources.gpus_per_node > 1:
            problems.append(
                (
                    "resources.gpus_per_node",
                    "backend torch trains on one GPU: set resources.gpus_per_node to 0 or 1, or use backend verl",
                )
            )
        if config.executor == "ray" and config.trainer.device == "cuda" and resources.gpus_per_node < 1:
            problems.append(
                (
                    "resources.gpus_per_node",
                    "trainer.device is cuda on a Ray job that asks for no GPU: set resources.gpus_per_node to 1",
                )
            )
        return problems

    def check(self, config: RunConfig) -> list[Problem]:
        return []  # problems() says all there is to say

    def job(self, config: RunConfig, env: LaunchEnv) -> Job:
        # The trainer trains inside the job's entrypoint, so the entrypoint holds the GPU.
        return Job(
            argv=trainer_argv(env),
            env={TOKEN_ENV: env.token},
            num_cpus=config.resources.cpus,
            num_gpus=config.resources.gpus_per_node,
            **entrypoint_placement(config),
        )

    def resume_point(self, config: RunConfig) -> ResumePoint:
        return resume_point(config.trainer.checkpoint_dir, config.trainer.resume)

    def canonical_key(self, key: str) -> str | None:
        return None  # the torch backend logs our keys
