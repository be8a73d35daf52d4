"""An example llamay backend in NumPy: a complete, conformance-passing starting point."""
