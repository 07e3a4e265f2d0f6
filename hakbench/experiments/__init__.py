"""The experiments: ab, run, matrix (and its shards), soak, calibrate, gate, scorecard,
heap misuse, hotspots. Each drives the engine and judges with the statistics; the commands
(``hakbench.commands``) call them."""
