"""The worker process (server.py), its stream table and stateless handlers, its limits and security, the
standalone daemon (`tokworker serve`), key generation (`tokworker keys`) and the demo (`tokworker demo`).

A worker is started as `python -m tokworker.worker '<WorkerOptions as JSON>'` by the launcher
(frontend/launcher.py), which also restarts it when it dies.
"""
