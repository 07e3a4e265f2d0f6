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
