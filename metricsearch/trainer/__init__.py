"""Fine-tuning of BERT-family encoders on catalogs without similarity labels (MetricBERT, RecoBERT) and on scored
pairs or triplets (SBERT). Needs the `train` extra (torch)."""

from metricsearch.trainer.config import TrainConfig, build_config
from metricsearch.trainer.train import train

__all__ = ["TrainConfig", "build_config", "train"]
