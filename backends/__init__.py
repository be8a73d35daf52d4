"""First-party llamay backends, each a plugin registered through the `llamay` entry points."""
