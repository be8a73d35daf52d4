"""The Metal backend (Apple GPUs) on PyObjC's Metal bindings. MSL kernels in kernels/.

Never run: this project has no Mac. It reports itself unavailable off macOS or without
pyobjc-framework-Metal, and docs/backends.md says so.
"""
