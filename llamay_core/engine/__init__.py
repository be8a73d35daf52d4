"""The engine: KV pages, the forward driver, sampling and generation."""
