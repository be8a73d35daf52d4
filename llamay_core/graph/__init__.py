"""The backend-neutral op graph: the op catalog, the Graph, and what a family hands the engine."""
