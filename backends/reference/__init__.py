"""The reference backend: unfused, obvious NumPy. It is the definition every backend must match."""
