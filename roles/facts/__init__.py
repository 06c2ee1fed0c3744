"""Custom pyinfra facts, one module per subject (read-only commands, one command per fact)."""
