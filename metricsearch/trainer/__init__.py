"""Fine-tuning of BERT-family encoders on catalogs without similarity labels (MetricBERT, RecoBERT) and on scored
pairs or triplets (SBERT). Needs the `train` extra (torch)."""

from metricsearch.trainer.config import PSEUDO_FILE, TrainConfig, build_config
from metricsearch.trainer.pseudo import mine_pseudo_matches
from metricsearch.trainer.train import train

__all__ = ["PSEUDO_FILE", "TrainConfig", "build_config", "mine_pseudo_matches", "train"]
