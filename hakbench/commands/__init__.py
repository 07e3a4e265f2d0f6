"""One module per sub-command family; each exposes ``COMMANDS``."""
