"""The state engine beyond the page pool: snapshots, the prefix cache, conformance records."""
