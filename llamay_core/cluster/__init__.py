"""`llamay serve -replicas N`: several engine replicas on Ray Serve behind the one set of routes.

- `replica.py`: `EngineReplica`, a model and its scheduler inside one Serve replica.
- `routing.py`: `PrefixRouter`, which replica most likely holds a prompt's prefix pages.
- `adapter.py`: `ClusterScheduler`, the local scheduler's HTTP-side surface over the replicas,
  which `server/app.py` takes in place of its own `Scheduler`.
- `cluster_metrics.py`: /metrics summed over replicas, plus routing outcomes.
- `front.py`: the front's model view (tokenizer and chat template, no weights).
- `deploy.py`: start or join Ray, run the replicas as Serve applications, shut them down.
- `serve.py`: what `llamay serve -replicas` runs.

Ray is imported only in `deploy.py` (the optional extra `llamay[cluster]`).
"""
