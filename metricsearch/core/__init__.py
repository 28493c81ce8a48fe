"""The contract and the math every part shares: the bundle manifest and its rules, the item and match records, the
one file reader, the pure scoring and rerank functions, ranking metrics and the one error root. It imports no other
part of metricsearch, and nothing heavier than numpy and pydantic."""
