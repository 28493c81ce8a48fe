"""Turns a checkpoint into a model bundle (ONNX encoder, tokenizer, manifest)."""
