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
PSEUDO_FILE = "pseudo_matches.jsonl"  # the mined triplets a --pseudo-matches run trains on


class TrainConfig(BaseModel):
    """A validated run configuration. `None` on an optional field means "the objective's default", resolved by
    the validator, so the saved config (`<out>/config.json`) states every value the run used. Each description is
    the --help of the `metricsearch train` option of that name."""

    model_config = ConfigDict(extra="forbid")

    objective: Objective = Field(
        description="metricbert, recobert (on --catalog), sbert-siamese (--pairs) or sbert-triplet (--triplets)"
    )
    out: Path = Field(description="run folder to write: best/, last/, train_log.jsonl, curves.png (required)")
    catalog: Path | None = Field(None, description="catalog .csv/.jsonl (id, title, description)")
    pairs: Path | None = Field(None, description="pairs .csv/.tsv/.jsonl (text_a, text_b, score)")
    triplets: Path | None = Field(None, description="triplets .csv/.tsv/.jsonl (anchor, positive, negative)")
    base: Path | None = Field(
        None, description="sentence-transformers folder to start from; default: packaged all-MiniLM-L6-v2"
    )
    pseudo_matches: Path | None = Field(
        None,
        description="metricbert: bundle whose ranking pairs the --catalog's two sources (its `source` column); "
        "trains on those pseudo-matches and lexical hard negatives instead of title vs description",
    )

    seed: int = Field(42, description="seed of data order, masking, mining and dropout")
    max_steps: int | None = Field(None, gt=0, description="optimizer steps; overrides --epochs")
    epochs: int | None = Field(None, gt=0, description="passes over the data; unset: 1, or what fits --time-budget-s")
    batch_size: int = Field(16, ge=2, description="examples per step (per process under torchrun)")
    lr: float = Field(2e-5, gt=0, description="peak learning rate of the encoder")
    mlm_head_lr: float = Field(5e-4, gt=0, description="learning rate of the new MLM head")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay")
    warmup_ratio: float = Field(0.1, ge=0, lt=1, description="share of encoder steps warming up")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    max_seq_length: int = Field(128, gt=0, description="tokens a text keeps, at most the model's")
    time_budget_s: float | None = Field(
        None, gt=0, description="stop in time to evaluate and save within this many seconds"
    )
    bf16: bool | None = Field(None, description="bf16 autocast; unset: where the GPU runs it natively")

    eval_every: int = Field(100, gt=0, description="validate every N steps")
    log_every: int = Field(10, gt=0, description="log the mean losses every N steps")
    patience: int = Field(5, gt=0, description="stop after N validations without improvement")
    val_fraction: float = Field(0.1, ge=0, lt=1, description="share held out for validation; 0 = none")
    val_max: int = Field(1000, ge=2, description="most held-out examples")

    mining: Literal["hardest", "random"] = Field("hardest", description="metricbert negatives")
    loss: Literal["triplet", "contrastive", "cosine"] = Field("triplet", description="metricbert loss")
    distance: Literal["angular", "cosine"] = Field("angular", description="metricbert distance")
    title_variants: float | None = Field(
        None,
        ge=0,
        le=1,
        description="metricbert: share of positives that are a perturbed copy of the anchor's own title instead of "
        "its description; unset: 0, the paper's",
    )
    margin: float | None = Field(
        None, gt=0, description="margin of the triplet/contrastive loss; unset: the objective's (docs/training.md)"
    )
    similarity_weight: float = Field(1.0, ge=0, description="lambda: weight of the metric/TDM loss")
    mlm_weight: float | None = Field(
        None, ge=0, description="metricbert, recobert: weight of the MLM loss, 0 disables MLM; unset: 1"
    )
    mlm_probability: float = Field(0.15, gt=0, le=1, description="share of tokens masked")
    mlm_warmup_steps: int | None = Field(
        None,
        ge=0,
        description="metricbert, recobert: head-only steps with the encoder frozen, before joint; unset: 100",
    )
    siamese_distance: Literal["cosine", "euclidean"] = Field("cosine", description="sbert-siamese distance")
    triplet_distance: Literal["euclidean", "cosine"] = Field("euclidean", description="sbert-triplet distance")
    pooling: Literal["mean", "cov", "svd"] = Field(
        "mean", description="mean, cov (token covariance A^T A) or svd (rank-k, needs --rank-k); S_F for cov/svd"
    )
    rank_k: int | None = Field(None, gt=0, description="rank k of --pooling svd")

    resume: bool = Field(False, description="continue the run in --out from last/")

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

        if self.pseudo_matches is not None:
            self._check_pseudo_matches()
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

    def _check_pseudo_matches(self) -> None:
        """Pseudo-matches train MetricBERT's triplet loss on mined text triplets: no MLM (it reads a catalog's
        titles and descriptions, which the triplets are not) and no title variants."""
        if self.objective != "metricbert":
            raise ValueError(f"--pseudo-matches trains metricbert, not {self.objective}")
        if self.mlm_weight:
            raise ValueError("--pseudo-matches trains on mined triplets, without MLM: leave --mlm-weight unset or 0")
        given = [f"--{n.replace('_', '-')}" for n in ("title_variants", "mlm_warmup_steps") if getattr(self, n)]
        if given:
            raise ValueError(f"{', '.join(given)} applies to a catalog's own titles, not to --pseudo-matches")
        self.mlm_weight = 0.0

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
