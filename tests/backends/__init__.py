"""First-party test backends: the example backend with one realistic change each.

`variants.py` holds them, `plugin.py` registers them (tests add it as a temporary plugin), and
``python -m tests.backends conformance -backend test-int8 ...`` runs the llamay CLI with them
registered, which is how docs/backend-authors.md measured them.
"""
