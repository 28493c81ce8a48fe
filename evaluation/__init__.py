"""Offline evaluation: ranking metrics, task datasets, the models compared (bundles scored with the service's own
code, a running service over HTTP, baselines) and the reports; `metricsearch evaluate` and bench/quality.py use it."""
