"""Maintenance scripts (regenerating the bundled tokenizer and the probed Unicode tables) and the llama.cpp
build and run helpers (llama_server.py) that the tests and the bench import."""
