"""The one progress bar: click's, with ok/failed counts; readable off a terminal."""

import io

from hakbench.engine.progress import Progress


def test_off_a_terminal_it_prints_the_first_step_each_tenth_and_every_failure():
    out = io.StringIO()
    bar = Progress(20, "ab", stream=out)
    for i in range(20):
        bar.step(ok=i != 8, note="killed by SIGSEGV" if i == 8 else "")
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("ab  [") and "1/20" in lines[0] and "1 ok" in lines[0]
    failure = next(x for x in lines if "9/20" in x)
    assert "8 ok, 1 failed killed by SIGSEGV" in failure
    assert "20/20" in lines[-1] and "19 ok, 1 failed" in lines[-1]
    assert len(lines) == 1 + 10 + 1  # first step, ten tenths, one failure
    assert bar.ok == 19 and bar.failed == 1 and bar.done == 20


def test_a_sequential_ab_shows_what_still_runs_and_the_budget_spent_without_an_eta():
    """A sequential A/B's total is a guess (it stops when decided or out of budget): its line
    has no ETA, and after a round it says how many workloads still run and how much of the
    budget is gone (in a log, at most every ``every_s`` seconds)."""
    import math

    from hakbench.experiments import ab
    from hakbench.stats.stopper import Stopper

    out = io.StringIO()
    bar = Progress(3636, "ab", stream=out, eta=False)
    bar.step()
    clock = iter([0.0, 1500.0, 1500.0]).__next__
    stopper = Stopper({"a": False, "b": False}, 1.0, max_time_s=3750.0, max_pairs=100, clock=clock)
    stopper.stop("a", "decided")

    class Run:
        progress = bar

    Run.stopper = stopper
    bar._last_line = -math.inf
    ab._budget_note(Run)
    last = out.getvalue().splitlines()[-1]
    assert "1 of 2 running, 25.0 of 62.5 min" in last, last
    assert "eta" not in last.lower()
    bar.step()
    ab._budget_note(Run)  # within 30 s of the last line: nothing more in a log
    assert out.getvalue().splitlines()[-1] == last
    bar.step(ok=False, note="killed by SIGSEGV")  # a sample's note does not replace it
    assert "1 of 2 running, 25.0 of 62.5 min killed by SIGSEGV" in bar.line(), bar.line()
