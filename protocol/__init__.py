"""The wire contract between API processes and tokworker workers: msgspec Structs, msgpack frames."""
