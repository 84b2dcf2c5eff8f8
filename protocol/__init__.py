"""tokworker.protocol (installed from protocol/): the wire contract between API processes and tokworker workers,
msgspec Structs in msgpack frames."""
