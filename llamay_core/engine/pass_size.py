"""How many tokens one forward pass takes by default (kept free of NumPy: the CLI imports it)."""

# As llama.cpp's n_ubatch: 512-row GEMMs run 5-15% faster than 256-row ones on the cpu backend
# (docs/performance.md), and a prompt of 512 tokens or fewer takes a single pass.
DEFAULT_UBATCH = 512
