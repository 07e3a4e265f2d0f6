"""The execution engine: the one sample loop (``engine``), one process (``runner``,
``process``, ``command_run``), the signal policy, storage, the seeded schedule, provenance.
Imports only ``hakbench.core`` and ``hakbench.collect``."""
