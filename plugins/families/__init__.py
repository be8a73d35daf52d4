"""First-party model families. Each module is a plugin named after a GGUF architecture."""
