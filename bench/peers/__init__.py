"""The stacks the benchmarks compare against, measured in the same run (never part of the product): the plain stack
a user would otherwise write, and txtai through its own API."""
