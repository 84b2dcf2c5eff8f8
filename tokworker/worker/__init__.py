"""The worker process (server.py), its stream table and stateless handlers, its limits and security, the
launcher that spawns and restarts local workers (launcher.py), and the standalone daemon (`tokworker serve`).

A worker is started as `python -m tokworker.worker '<WorkerOptions as JSON>'` by the launcher, which also
restarts it when it dies.
"""
