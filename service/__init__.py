"""metricsearch online service: loads a model bundle, encodes with ONNX Runtime, stores in Qdrant, answers /similar."""
