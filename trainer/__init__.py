"""Fine-tuning of BERT-family encoders on catalogs (MetricBERT, RecoBERT, SBERT); built in issue 3."""
