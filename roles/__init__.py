"""pyinfra roles: one module per concern, each with one public ``@deploy`` and a documented ``DEFAULTS``."""
