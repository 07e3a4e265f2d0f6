"""The tables the reports read: matrix summaries, the scorecard, heap-misuse rows. No
measuring; imports ``hakbench.core``, ``hakbench.stats`` and the engine's pure helpers."""
