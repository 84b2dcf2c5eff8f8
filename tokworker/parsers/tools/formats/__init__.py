"""One module per model family's tool-call format, each a declaration on a core in ../core/: its markers,
its key names, and the few modes no core has (harmony's channels, functionary's python tool). The
registry in ../__init__.py names them by vLLM's parser names.
"""
