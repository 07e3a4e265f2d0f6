"""The base: errors, paths, metrics, workload/profile/option files, cells, allocators, the clean
environment. Imports nothing of hakbench but itself and ``hakbench.collect``."""
