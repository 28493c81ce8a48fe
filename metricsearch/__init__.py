"""The `metricsearch` command line."""
