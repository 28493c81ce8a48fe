"""The one settings object of a training run: every `metricsearch train` option, settable from a JSON/YAML file
(`--config`) and the command line (which wins), checked up front so a bad run fails in a second with a message
that names the option, not after the model has loaded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from metricsearch.core.errors import TrainerError

Objective = Literal["metricbert", "recobert", "sbert-siamese", "sbert-triplet"]
OBJECTIVES: tuple[str, ...] = Objective.__args__
CATALOG_OBJECTIVES = ("metricbert", "recobert")
MLM_OBJECTIVES = CATALOG_OBJECTIVES

# The run folder's layout (docs/training.md), named here so the cheap checks need not import the loop.
BEST_FOLDER, LAST_FOLDER, HEAD_FOLDER = "best", "last", "mlm_head"
STATE_FILE, LOG_FILE, CURVES_FILE, TRAINING_FILE = "trainer_state.pt", "train_log.jsonl", "curves.png", "training.json"


class TrainConfig(BaseModel):
    """A validated run configuration. `None` on an optional field means "the objective's default", resolved by
    the validator, so the saved config (`<out>/config.json`) states every value the run used."""

    model_config = ConfigDict(extra="forbid")

    objective: Objective
    out: Path
    catalog: Path | None = None
    pairs: Path | None = None
    triplets: Path | None = None
    base: Path | None = Field(None, description="sentence-transformers folder; None = packaged all-MiniLM-L6-v2")

    seed: int = 42
    max_steps: int | None = Field(None, gt=0)
    epochs: int | None = Field(None, gt=0, description="None: 1, or as many steps as fit time_budget_s if given")
    batch_size: int = Field(16, ge=2)
    lr: float = Field(2e-5, gt=0)
    mlm_head_lr: float = Field(5e-4, gt=0)
    weight_decay: float = Field(0.01, ge=0)
    warmup_ratio: float = Field(0.1, ge=0, lt=1)
    max_grad_norm: float = Field(1.0, gt=0)
    max_seq_length: int = Field(128, gt=0)
    time_budget_s: float | None = Field(None, gt=0)
    bf16: bool | None = None

    eval_every: int = Field(100, gt=0)
    log_every: int = Field(10, gt=0)
    patience: int = Field(5, gt=0)
    val_fraction: float = Field(0.1, ge=0, lt=1)
    val_max: int = Field(1000, ge=2)

    mining: Literal["hardest", "random"] = "hardest"
    loss: Literal["triplet", "contrastive", "cosine"] = "triplet"
    distance: Literal["angular", "cosine"] = "angular"
    title_variants: float | None = Field(None, ge=0, le=1)
    margin: float | None = Field(None, gt=0)
    similarity_weight: float = Field(1.0, ge=0)
    mlm_weight: float | None = Field(None, ge=0)
    mlm_probability: float = Field(0.15, gt=0, le=1)
    mlm_warmup_steps: int | None = Field(None, ge=0)
    siamese_distance: Literal["cosine", "euclidean"] = "cosine"
    triplet_distance: Literal["euclidean", "cosine"] = "euclidean"
    pooling: Literal["mean", "cov", "svd"] = "mean"
    rank_k: int | None = Field(None, gt=0, description="rank of the svd pooling")

    resume: bool = False

    @model_validator(mode="after")
    def _resolve(self) -> TrainConfig:
        """Check the inputs each objective needs and fill the objective-dependent defaults."""
        needs = {
            "metricbert": ("catalog", "--catalog FILE (id, title, description)"),
            "recobert": ("catalog", "--catalog FILE (id, title, description)"),
            "sbert-siamese": ("pairs", "--pairs FILE (text_a, text_b, score)"),
            "sbert-triplet": ("triplets", "--triplets FILE (anchor, positive, negative)"),
        }
        field, what = needs[self.objective]
        if getattr(self, field) is None:
            raise ValueError(f"objective {self.objective} trains on {what}; none given")
        unused = [f"--{name}" for name in ("catalog", "pairs", "triplets") if name != field and getattr(self, name)]
        if unused:
            raise ValueError(f"objective {self.objective} does not read {', '.join(unused)}; it trains on {what}")

        if self.max_steps is None and self.epochs is None and self.time_budget_s is None:
            self.epochs = 1
        if self.objective in MLM_OBJECTIVES:
            self.mlm_weight = 1.0 if self.mlm_weight is None else self.mlm_weight
            self.mlm_warmup_steps = 100 if self.mlm_warmup_steps is None else self.mlm_warmup_steps
            if self.mlm_weight == 0:
                self.mlm_warmup_steps = 0  # no head to warm up
        else:
            _reject_unused(self, ("mlm_weight", "mlm_warmup_steps"), "metricbert and recobert")
            self.mlm_weight, self.mlm_warmup_steps = 0.0, 0
        if self.objective == "metricbert":
            self.title_variants = self.title_variants or 0.0
        else:
            _reject_unused(self, ("title_variants",), "metricbert")
        self.margin = self._margin()
        if (self.pooling == "svd") != (self.rank_k is not None):
            raise ValueError(
                "--rank-k K goes with --pooling svd, and only with it (a cov model is truncated at export: "
                "`metricsearch export --pooling cov --rank-k K`)"
            )
        if self.max_steps is not None and self.mlm_warmup_steps >= self.max_steps:
            raise ValueError(
                f"mlm_warmup_steps ({self.mlm_warmup_steps}) must be below max_steps ({self.max_steps}): the "
                "encoder trains only after the head-only warm-up"
            )
        return self

    def _margin(self) -> float | None:
        """The margin of the chosen loss: MetricBERT's paper gives none for its triplet loss, so 0.1 on the [0, 1]
        angular scale (about 18 degrees); its contrastive and cosine ablations have fixed margins (PAIR_MARGINS);
        SBERT triplets use 1 for euclidean (Reimers & Gurevych) and 0.5 for cosine distance (sentence-transformers'
        default of 5 can never be met by unit vectors, whose distances are at most 2)."""
        if self.objective == "metricbert":
            if self.loss != "triplet":
                if self.margin is not None:
                    raise ValueError(
                        f"--loss {self.loss} uses the paper's margins on cosine similarity (m_pos = 1, m_neg = "
                        f"{0 if self.loss == 'contrastive' else -1}) and takes no --margin"
                    )
                return None
            return self.margin or 0.1
        if self.objective == "sbert-triplet":
            return self.margin or (1.0 if self.triplet_distance == "euclidean" else 0.5)
        if self.margin is not None:
            raise ValueError(f"--margin applies to metricbert and sbert-triplet, not {self.objective}")
        return None

    @property
    def uses_mlm(self) -> bool:
        return self.mlm_weight > 0


def _reject_unused(config: TrainConfig, names: tuple[str, ...], used_by: str) -> None:
    """Stop on an option of `names` given to an objective other than those in `used_by`."""
    given = [f"--{n.replace('_', '-')}" for n in names if getattr(config, n) is not None]
    if given:
        raise ValueError(f"{', '.join(given)} applies to {used_by} only, not {config.objective}")


def read_config_file(path: Path) -> dict[str, Any]:
    """Options from a `.json`, `.yaml` or `.yml` file: keys are the option names, with `-` or `_`."""
    path = Path(path)
    if not path.is_file():
        raise TrainerError(f"{path}: no such config file")
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise TrainerError(f"{path}: not valid YAML ({exc})") from exc
    elif suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TrainerError(f"{path}: not valid JSON ({exc})") from exc
    else:
        raise TrainerError(f"{path}: unknown config format; use .json, .yaml or .yml")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TrainerError(f"{path}: must hold a mapping of option names to values")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def build_config(cli: dict[str, Any], config_file: Path | None = None) -> TrainConfig:
    """Merge the file's options with the command line's (a CLI value that is not None wins) and validate."""
    values = read_config_file(config_file) if config_file else {}
    values.update({k: v for k, v in cli.items() if v is not None})
    try:
        return TrainConfig(**values)
    except ValidationError as exc:
        raise TrainerError(_describe(exc)) from exc


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        name = ".".join(str(p) for p in error["loc"])
        option = f"--{name.replace('_', '-')}" if name else "config"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "literal_error" and name == "objective":
            message = f"unknown objective {error['input']!r}; choose one of {', '.join(OBJECTIVES)}"
        elif error["type"] == "extra_forbidden":
            message = "unknown option"
        elif error["type"] == "missing":
            message = "required"
        problems.append(f"{option}: {message}" if name else message)
    return "; ".join(problems)


def distributed_env() -> tuple[int, int, int]:
    """(rank, local rank, world size) as torchrun sets them; (0, 0, 1) in a plain run. The one place the trainer
    reads the environment."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
