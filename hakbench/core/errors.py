"""Exit codes and the errors that map to them.

Every command exits with one of these, so scripts and CI can tell outcomes apart:
0 done; 1 a gate tripped (``--fail-on``, ``scorecard --check``); 2 bad input (usage,
unknown names, malformed files); 3 the measurement itself failed (build error, no
sample succeeded); 4 ``ab --fail-on no-go`` could not decide (an INCONCLUSIVE verdict and
no NO-GO or FAILED one); 5 the public benchmark suite (mimalloc-bench) is not
found (hakbench.core.suites); 130 interrupted by Ctrl-C after writing what had finished.
"""

EXIT_OK = 0
EXIT_GATE = 1
EXIT_USAGE = 2
EXIT_RUNTIME = 3
EXIT_INCONCLUSIVE = 4
EXIT_SUITE = 5
EXIT_INTERRUPTED = 130


class HakbenchError(Exception):
    """An error with a one-line message and an exit code."""

    exit_code = EXIT_RUNTIME


class UsageError(HakbenchError):
    """Bad input: an unknown name, a malformed file, a bad flag value."""

    exit_code = EXIT_USAGE


class MeasurementError(HakbenchError):
    """The measurement could not be taken (build failed, nothing ran)."""

    exit_code = EXIT_RUNTIME
