from metricsearch.cli import app

app()
