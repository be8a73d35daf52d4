"""llamay's conformance suite: every backend checked against `reference`, op by op and per model.

- op level (`op_cases`, `run_op_level`): each op on a grid of shapes and GGML weight types,
  run through the backend contract on the backend and on reference from the same seeded inputs,
  compared by normalized mean squared error under a per-op limit (`limits.py`).
- model level (`run_model_level`): greedy tokens and teacher-forced top-1 agreement against
  reference, plus fork and snapshot/restore on the backend.

The `llamay conformance` command (`command.py`, registered through the `llamay` plugin hook
in `plugin.py`) runs both and records the result; `pytest_plugin.py` offers the same cases to
pytest for backend authors. The core never imports this package.
"""
