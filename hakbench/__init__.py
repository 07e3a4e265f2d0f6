"""hakbench: the allocator lab's measurement toolkit (see README.md)."""

__version__ = "0.1.0"
