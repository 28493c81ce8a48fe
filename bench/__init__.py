"""Benchmarks, one per question, each regenerating its sections of BENCHMARKS.md or EVALUATION.md:

- latency: `/similar` latency and throughput, filters and recommendation options, beside the plain stack and txtai;
- profile: where a request's time goes (py-spy on the running service);
- indexing: `/index` items/s beside the bare encoder and txtai, and what synchronous writes cost;
- memory: the service's RSS per stored item;
- encoder: encoder runtimes and precisions;
- quality: what is served, scored through metricsearch.evaluation, beside its baselines;
- rollout: a model rollout under load (loadtests/soak.py is the long run).

The harness they share: report (the reports), data (the public datasets), catalog (a synthetic catalog at any
size), load (the service process, the project's client, wrk) and peers (the stacks compared against)."""
