"""A Python client of the metricsearch HTTP API, typed on the API's own request and response models
(metricsearch.core.schemas). It needs only httpx and pydantic: it imports nothing of the service (no onnxruntime,
no qdrant), so an application that only calls the service installs neither."""

from metricsearch.client.http import AsyncClient, Client, ServiceError

__all__ = ["AsyncClient", "Client", "ServiceError"]
