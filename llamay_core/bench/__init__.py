"""Measuring a model on a backend: prefill, decode, ttft and the state engine, honestly."""
