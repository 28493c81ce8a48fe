"""The training loop: AdamW with linear warm-up and decay, gradient clipping, bf16 autocast (inside the
objectives), the MLM head's head-only warm-up, validation with early stopping, checkpoints and resume.

What a run writes under `out/` (docs/training.md):
- `best/`: the sentence-transformers folder with the best validation metric (exportable), plus `mlm_head/` when
  an MLM head is trained and `training.json` (objective, step, metric, data digest);
- `last/`: the latest state for `--resume` (model, head, optimizer, scheduler, step, data order, RNG states),
  written at each evaluation and at the end;
- `train_log.jsonl`: one JSON object per logged step, evaluation and the final summary;
- `curves.png`: loss and validation curves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from sentence_transformers import SentenceTransformer
from torch import nn
from tqdm import tqdm

from metricsearch.core.errors import TrainerError
from metricsearch.trainer.config import (
    BEST_FOLDER,
    CURVES_FILE,
    HEAD_FOLDER,
    LAST_FOLDER,
    LOG_FILE,
    STATE_FILE,
    TRAINING_FILE,
    TrainConfig,
)
from metricsearch.trainer.distributed import Distributed
from metricsearch.trainer.mlm import freeze_encoder
from metricsearch.trainer.model import save_atomically, save_model
from metricsearch.trainer.objectives import Objective
from metricsearch.trainer.plots import plot_curves, read_log
from metricsearch.trainer.validation import Validator

NO_DECAY = ("bias", "LayerNorm.weight", "LayerNorm.bias", "layer_norm.weight", "layer_norm.bias")


@dataclass(frozen=True)
class TrainResult:
    steps: int
    metric: str | None
    best_value: float | None
    best_step: int | None
    seconds: float
    best_dir: Path
    stopped: str
    primary: bool = True  # False in the other torchrun processes, which neither evaluate nor save

    def summary(self, objective: str) -> str:
        if self.best_value is None:
            best = "no validation"
        elif self.best_step == 0 and self.steps > 0:  # best/ is then the starting model, which a user must be told
            best = (
                f"training never beat the starting model ({self.metric} {self.best_value:.4f} at step 0), so best/ "
                "holds the starting model"
            )
        else:
            best = f"best {self.metric} {self.best_value:.4f} at step {self.best_step}"
        return f"{objective}: {self.steps} steps in {self.seconds:.0f} s ({self.stopped}); {best} -> {self.best_dir}"


def lr_factors(step: int, *, head_warmup: int, warmup: int, total: int) -> tuple[float, float]:
    """(encoder, MLM head) learning-rate factors at optimizer step `step` (0-based).

    The encoder is frozen (factor 0) during the head-only warm-up, then follows transformers'
    `get_linear_schedule_with_warmup` over the remaining steps; the head runs at its full rate during its warm-up
    and then decays with the encoder. Written out because transformers' schedule applies one lambda to every
    parameter group and cannot start one group later than another.
    """
    if step < head_warmup:
        return 0.0, 1.0
    s, span = step - head_warmup, total - head_warmup
    encoder = s / max(1, warmup) if s < warmup else max(0.0, (span - s) / max(1, span - warmup))
    return encoder, max(0.0, (span - s) / max(1, span))


class Loop:
    """One run: call `run()` once. Rank 0 alone evaluates, logs and writes files."""

    def __init__(
        self,
        config: TrainConfig,
        model: SentenceTransformer,
        objective: Objective,
        examples: Sequence[Any],
        validator: Validator | None,
        *,
        generator: torch.Generator,
        started: float,
        provenance: dict[str, Any],
        dist: Distributed | None = None,
    ) -> None:
        self.config, self.model, self.objective, self.examples = config, model, objective, examples
        self.validator, self.generator, self.started, self.provenance = validator, generator, started, provenance
        self.dist = dist or Distributed()
        self.out = Path(config.out)
        self.global_batch = config.batch_size * self.dist.world_size
        self.batches_per_epoch = len(examples) // self.global_batch
        if self.batches_per_epoch == 0:
            raise TrainerError(
                f"{len(examples)} training examples make no full batch of {self.global_batch}: lower --batch-size"
            )
        # None until planned: with only a time budget, the steps that fit it are measured when the run starts.
        self.total: int | None = config.max_steps or (config.epochs and config.epochs * self.batches_per_epoch)
        self.head_warmup = config.mlm_warmup_steps
        self.warmup = 0
        self.order = torch.Generator().manual_seed(config.seed)
        self.optimizer, self.parameters = self._optimizer()
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None

        self.step = self.epoch = self.position = 0
        self.permutation = torch.randperm(len(examples), generator=self.order)
        self.best_value: float | None = None
        self.best_step: int | None = None
        self.stale_evals = 0
        self.last_eval_step: int | None = None
        self.eval_seconds = self.save_seconds = 0.0
        self.step_lr = 0.0

    # --- setup

    def _optimizer(self) -> tuple[torch.optim.Optimizer, list[nn.Parameter]]:
        """AdamW with BERT's groups: no weight decay on biases and LayerNorm; the head at its own learning rate."""
        groups = []
        modules = [("encoder", self.model, self.config.lr)]
        if self.objective.head is not None:
            modules.append(("head", self.objective.head, self.config.mlm_head_lr))
        for role, module, lr in modules:
            named = list(module.named_parameters())
            decay = [p for n, p in named if not n.endswith(NO_DECAY)]
            no_decay = [p for n, p in named if n.endswith(NO_DECAY)]
            groups += [
                {"params": decay, "lr": lr, "weight_decay": self.config.weight_decay, "role": role},
                {"params": no_decay, "lr": lr, "weight_decay": 0.0, "role": role},
            ]
        parameters = [p for g in groups for p in g["params"]]
        return torch.optim.AdamW([g for g in groups if g["params"]]), parameters

    def _schedule(self, state: dict[str, Any] | None) -> torch.optim.lr_scheduler.LambdaLR:
        """The learning-rate schedule over `self.total` steps (known by now), restored from `state` on resume."""
        if self.total is None or self.head_warmup >= self.total:
            steps = f"{self.total} steps"
            if self.config.time_budget_s is not None and self.config.max_steps is None:
                steps += f" (all that --time-budget-s {self.config.time_budget_s:g} fits, evaluations included)"
            raise TrainerError(
                f"--mlm-warmup-steps {self.head_warmup} leaves no joint training in {steps}: lower it, "
                "or raise --max-steps, --epochs or --time-budget-s"
            )
        if state is not None and state["step"] > self.total:
            raise TrainerError(f"cannot resume: the saved run is at step {state['step']}, past {self.total} steps")
        self.warmup = round(self.config.warmup_ratio * (self.total - self.head_warmup))
        scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lambdas())
        if state is not None:
            # In this order: building the scheduler sets each group's lr to its step-0 value, which the saved
            # optimizer state then overwrites with the rate the run had reached.
            scheduler.load_state_dict(state["scheduler"])
            self.optimizer.load_state_dict(state["optimizer"])
        return scheduler

    def _plan_total(self) -> int:
        """The step at which a run bounded only by --time-budget-s ends, so the linear decay reaches 0 there: the
        budget left (less a final evaluation and checkpoint) over the time of a step plus its share of the
        periodic evaluations. A step is timed on the next batch, forward and backward three times, keeping the
        fastest (the first warms up the allocator and bf16 kernels; on a shared machine a slow outlier would plan
        far too few steps, while too many only end at the budget with the rate not fully decayed), with the
        gradients and every random state discarded afterwards, so the run itself is the same as if the budget had
        been given as --max-steps."""
        states = (self.generator.get_state(), torch.get_rng_state())
        freeze_encoder(self.model, False)
        batch = self._peek_batch()
        seconds = []
        for _ in range(3):
            began = time.perf_counter()
            self.objective(batch).total.backward()
            seconds.append(time.perf_counter() - began)
        self.optimizer.zero_grad(set_to_none=True)
        self.generator.set_state(states[0])
        torch.set_rng_state(states[1])
        step_seconds = min(seconds[1:])
        per_step = step_seconds + (self.eval_seconds + self.save_seconds) / self.config.eval_every
        left = self.config.time_budget_s - (time.perf_counter() - self.started) - self.eval_seconds - self.save_seconds
        planned = self.step + max(0, int(left / per_step))
        if self.dist.main:
            self._log({"kind": "budget", "step": self.step, "step_s": round(step_seconds, 4), "total_steps": planned})
        return int(self.dist.from_main(planned, self.model.device))

    def _lambdas(self) -> list:
        def encoder(step: int) -> float:
            return lr_factors(step, head_warmup=self.head_warmup, warmup=self.warmup, total=self.total)[0]

        def head(step: int) -> float:
            return lr_factors(step, head_warmup=self.head_warmup, warmup=self.warmup, total=self.total)[1]

        return [encoder if g["role"] == "encoder" else head for g in self.optimizer.param_groups]

    # --- the run

    def run(self, resume: dict[str, Any] | None = None) -> TrainResult:
        if resume is not None:
            self._restore(resume)
        elif self.dist.main:
            self._log({"kind": "start", "config": self.config.model_dump(mode="json")})
            self._evaluate()  # the base model is the first candidate for best/
        if self.config.max_steps is None and self.config.epochs is None:
            self.total = self._plan_total()
        self.scheduler = self._schedule(resume)
        if self.dist.main:
            self._log({"kind": "resume" if resume else "plan", "step": self.step, **self._sizes()})
        stopped = "max steps"
        bar = tqdm(
            total=self.total,
            initial=self.step,
            desc=f"train {self.config.objective}",
            unit="step",
            disable=not self.dist.main,
            dynamic_ncols=True,
        )
        pending: dict[str, list[float]] = {}
        with bar:
            while self.step < self.total:
                freeze_encoder(self.model, self.step < self.head_warmup)
                parts = self._train_step()
                for k, v in parts.items():
                    pending.setdefault(k, []).append(v)
                self.step += 1
                bar.update(1)
                if self.step % self.config.log_every == 0 or self.step == self.total:
                    self._log_train({k: sum(v) / len(v) for k, v in pending.items()})
                    bar.set_postfix(loss=f"{parts['loss']:.4f}", refresh=False)
                    pending = {}
                if self.step > self.head_warmup and self.step % self.config.eval_every == 0 and self.step < self.total:
                    if self.dist.from_main(self.dist.main and self._evaluate(), self.model.device):
                        stopped = "early stopping"
                        break
                    self._save_last()
                if self.dist.from_main(self.dist.main and self._over_budget(), self.model.device):
                    stopped = "time budget"
                    break
        freeze_encoder(self.model, False)
        if self.dist.main and self.step > self.head_warmup and self.last_eval_step != self.step:
            self._evaluate()
        self._save_last()
        return self._finish(stopped)

    def _sizes(self) -> dict[str, Any]:
        return {
            "train_examples": len(self.examples),
            "validation_examples": self.validator.size if self.validator else 0,
            "total_steps": self.total,
            "batches_per_epoch": self.batches_per_epoch,
            "world_size": self.dist.world_size,
        }

    def _next_batch(self) -> list[Any]:
        if self.position == self.batches_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
            self.permutation = torch.randperm(len(self.examples), generator=self.order)
        batch = self._peek_batch()
        self.position += 1
        return batch

    def _peek_batch(self) -> list[Any]:
        """This process's share of the current global batch (the last full batch once an epoch is used up)."""
        position = min(self.position, self.batches_per_epoch - 1)
        start = position * self.global_batch + self.dist.rank * self.config.batch_size
        return [self.examples[i] for i in self.permutation[start : start + self.config.batch_size].tolist()]

    def _train_step(self) -> dict[str, float]:
        batch = self._next_batch()
        self.optimizer.zero_grad(set_to_none=True)
        result = self.objective(batch)
        if not torch.isfinite(result.total):
            raise TrainerError(
                f"the loss became {result.total.item()} at step {self.step + 1}: lower --lr, or train with --no-bf16"
            )
        result.total.backward()
        trainable = [p for p in self.parameters if p.requires_grad]
        self.dist.average_gradients(trainable)
        torch.nn.utils.clip_grad_norm_(trainable, self.config.max_grad_norm)
        self.step_lr = next(g["lr"] for g in self.optimizer.param_groups if g["role"] == "encoder")
        self.optimizer.step()
        self.scheduler.step()
        return self.dist.mean({"loss": result.total.item(), **result.parts}, self.model.device)

    def _over_budget(self) -> bool:
        """Stop early enough that the final evaluation and checkpoint (timed at the last ones) fit the budget."""
        budget = self.config.time_budget_s
        remaining_work = self.eval_seconds + self.save_seconds
        return budget is not None and time.perf_counter() - self.started + remaining_work >= budget

    # --- evaluation and checkpoints (rank 0)

    def _evaluate(self) -> bool:
        """Validate, save best/ on improvement; return whether patience has run out."""
        self.last_eval_step = self.step
        if self.validator is None:
            return False
        began = time.perf_counter()
        value = self.validator(self.model)
        improved = self.best_value is None or value > self.best_value
        if improved:
            self.best_value, self.best_step, self.stale_evals = value, self.step, 0
            self._save_best()
        else:
            self.stale_evals += 1
        self.eval_seconds = time.perf_counter() - began
        self._log(
            {
                "kind": "eval",
                "step": self.step,
                "metric": self.validator.metric,
                "value": value,
                "best": self.best_value,
                "improved": improved,
                "eval_s": round(self.eval_seconds, 3),
            }
        )
        return self.stale_evals >= self.config.patience

    def _save_best(self) -> None:
        def write(folder: Path) -> None:
            save_model(self.model, folder)
            if self.objective.head is not None:
                self.objective.head.save(folder / HEAD_FOLDER)
            training = self.provenance | {
                "step": self.step,
                "metric": self.validator.metric if self.validator else None,
                "value": self.best_value,
            }
            (folder / TRAINING_FILE).write_text(json.dumps(training, indent=2) + "\n")

        save_atomically(write, self.out / BEST_FOLDER)

    def _save_last(self) -> None:
        if not self.dist.main:
            return

        def write(folder: Path) -> None:
            save_model(self.model, folder)
            if self.objective.head is not None:
                self.objective.head.save(folder / HEAD_FOLDER)
            torch.save(self._state(), folder / STATE_FILE)

        began = time.perf_counter()
        save_atomically(write, self.out / LAST_FOLDER)
        self.save_seconds = time.perf_counter() - began

    def _state(self) -> dict[str, Any]:
        state = {
            "step": self.step,
            "epoch": self.epoch,
            "position": self.position,
            "permutation": self.permutation,
            "order_rng": self.order.get_state(),
            "objective_rng": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "best_value": self.best_value,
            "best_step": self.best_step,
            "stale_evals": self.stale_evals,
            "last_eval_step": self.last_eval_step,
            "eval_seconds": self.eval_seconds,
            "save_seconds": self.save_seconds,
            "objective": self.config.objective,
            "seed": self.config.seed,  # it also drew the held-out slice, which must stay out of training
            "batch_size": self.config.batch_size,
            "world_size": self.dist.world_size,
        }
        if torch.cuda.is_available():
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        return state

    def _restore(self, state: dict[str, Any]) -> None:
        for key, mine in (
            ("objective", self.config.objective),
            ("seed", self.config.seed),
            ("batch_size", self.config.batch_size),
            ("world_size", self.dist.world_size),
        ):
            if state[key] != mine:
                raise TrainerError(f"cannot resume: the saved run used {key} {state[key]!r}, this one {mine!r}")
        if state["step"] > self.total:
            raise TrainerError(
                f"cannot resume: the saved run is at step {state['step']}, past --max-steps {self.total}"
            )
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        self.permutation = state["permutation"]
        self.order.set_state(state["order_rng"])
        self.generator.set_state(state["objective_rng"])
        torch.set_rng_state(state["torch_rng"])
        if "cuda_rng" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self.best_value, self.best_step = state["best_value"], state["best_step"]
        self.stale_evals, self.last_eval_step = state["stale_evals"], state["last_eval_step"]
        self.eval_seconds, self.save_seconds = state["eval_seconds"], state["save_seconds"]
        if self.dist.main:
            self._truncate_log()

    def _truncate_log(self) -> None:
        """Drop what a crashed run logged after its last checkpoint, so steps are not logged twice."""
        path = self.out / LOG_FILE
        if path.is_file():
            kept = [r for r in read_log(path) if r.get("step", 0) <= self.step and r.get("kind") != "summary"]
            path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")

    def _log_train(self, means: dict[str, float]) -> None:
        self._log(
            {
                "kind": "train",
                "step": self.step,
                "epoch": self.epoch,
                "phase": "head-warmup" if self.step <= self.head_warmup else "joint",
                "loss": means.pop("loss"),
                "parts": means,
                "lr": self.step_lr,  # the encoder's rate in the step just taken
            }
        )

    def _log(self, record: dict[str, Any]) -> None:
        if not self.dist.main:
            return
        record = record | {"elapsed_s": round(time.perf_counter() - self.started, 3)}
        with (self.out / LOG_FILE).open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, allow_nan=False) + "\n")

    def _finish(self, stopped: str) -> TrainResult:
        seconds = time.perf_counter() - self.started
        if self.dist.main:
            if self.validator is None:
                self.best_step = self.step
                self._save_best()  # without validation the final weights are the result
            result = TrainResult(
                steps=self.step,
                metric=self.validator.metric if self.validator else None,
                best_value=self.best_value,
                best_step=self.best_step,
                seconds=seconds,
                best_dir=self.out / BEST_FOLDER,
                stopped=stopped,
            )
            self._log(
                {
                    "kind": "summary",
                    "step": self.step,
                    "stopped": stopped,
                    "best_step": self.best_step,
                    "best": self.best_value,
                    "seconds": round(seconds, 3),
                }
            )
            plot_curves(self.out / LOG_FILE, self.out / CURVES_FILE, title=f"{self.config.objective} ({self.out.name})")
            return result
        return TrainResult(self.step, None, None, None, seconds, self.out / BEST_FOLDER, stopped, primary=False)
