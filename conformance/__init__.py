"""llamay's conformance suite: every backend checked against `reference`, op by op and per model.

- op level (`cases.grid`, `harness.run_cases`): each op on a grid of shapes, GGML weight types
  and KV dtypes (page-table edges included, more layouts drawn by hypothesis in `shapes.py`),
  run through the backend contract on the backend and on reference from the same seeded inputs,
  compared by normalized mean squared error under a per-op limit (`limits.py`).
- model level (`model_level.run_model_level`): KL divergence from reference over a long real
  text (`long_text.py`) in batched sequences spanning many KV pages, tie-aware greedy tokens,
  and fork and snapshot/restore on the backend.

The `llamay conformance` command (`command.py`, registered through the `llamay` plugin hook
in `plugin.py`) runs both and records the result; `pytest_plugin.py` offers the same cases to
pytest for backend authors. The core never imports this package. `reference` itself is never
checked: it is what the others are compared with.
"""
