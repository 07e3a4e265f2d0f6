"""Load on the record: the /proc/stat arithmetic on captured text, and one real measurement
that a busy process outside hakbench shows up as other load."""

import os
import subprocess
import sys
import time

import pytest

from hakbench.engine.load import (
    LoadMonitor,
    OwnTimes,
    SystemStat,
    cpu_load,
    describe,
    parse_system_stat,
    run_queue,
)

# captured from this VM (2 CPUs), two readings 10 s apart
STAT_BEFORE = """\
cpu  530589 0 184110 74235 858 0 13127 2342 0 0
cpu0 255466 0 94036 44877 242 0 6794 1149 0 0
cpu1 275122 0 90073 29357 615 0 6333 1192 0 0
intr 91530512 0 9 0 0 0 0 0 0 0 0
ctxt 169716214
btime 1763884800
processes 25466
procs_running 6
procs_blocked 0
softirq 19434371 0 4047432 3 1071520 0 0 1 7383930 0 6931485
"""
STAT_AFTER = """\
cpu  531989 0 184390 74455 860 0 13147 2392 0 0
cpu0 256166 0 94176 44987 243 0 6804 1174 0 0
cpu1 275822 0 90213 29467 616 0 6343 1217 0 0
ctxt 169816214
procs_running 3
procs_blocked 1
"""


def test_parse_takes_the_aggregate_line_and_the_run_queue():
    s = parse_system_stat(STAT_BEFORE)
    assert s.busy_ticks == 530589 + 0 + 184110 + 0 + 13127  # user nice system irq softirq
    assert s.steal_ticks == 2342
    assert s.procs_running == 6


def test_parse_rejects_text_without_a_cpu_line():
    with pytest.raises(ValueError, match="cpu"):
        parse_system_stat("procs_running 2\n")


def test_other_cores_is_all_busy_time_less_our_own():
    before, after = parse_system_stat(STAT_BEFORE), parse_system_stat(STAT_AFTER)
    # 1400 + 280 + 20 = 1700 busy ticks at 100 Hz = 17 s of CPU in 10 s = 1.7 cores
    load = cpu_load(before, after, OwnTimes(1.0, 2.0), OwnTimes(3.0, 10.0), 10.0, 100)
    assert load["all_cores"] == pytest.approx(1.7)
    assert load["own_cores"] == pytest.approx(1.0)  # 2 s ourselves + 8 s our children
    assert load["other_cores"] == pytest.approx(0.7)
    assert load["steal_cores"] == pytest.approx(0.05)


def test_other_cores_never_negative():
    a = SystemStat(1000, 0, 1)
    b = SystemStat(1100, 0, 1)  # 1 s of ticks, but our own accounting says 1.2 s
    load = cpu_load(a, b, OwnTimes(0, 0), OwnTimes(0.2, 1.0), 1.0, 100)
    assert load["other_cores"] == 0.0


def test_run_queue_takes_the_sampler_out():
    q = run_queue([3, 4, 2, 3])
    assert q["run_queue_mean"] == pytest.approx(2.0)
    assert q["run_queue_max"] == 3
    assert run_queue([])["run_queue_mean"] is None


def test_describe_says_how_busy_in_cores():
    load = {
        "other_cores": 0.93,
        "run_queue_mean": 2.12,
        "run_queue_max": 5,
        "cpu_count": 2,
        "wall_s": 41.0,
        "steal_cores": 0.0,
    }
    text = describe(load)
    assert "other processes used 0.9 of a core" in text
    assert "run queue 2.1 on average, at most 5, on 2 CPUs" in text
    assert "steal" not in text
    assert "1.6 cores" in describe({**load, "other_cores": 1.6})
    assert "(steal)" in describe({**load, "steal_cores": 0.3})
    assert describe(None) == "Load: not recorded."


BUSY_LOOP = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_busy_process_elsewhere_shows_as_other_load():
    """A busy loop that is not (yet) ours to account shows up as other cores, at least as
    much as the loop itself used; one we waited for counts as our own."""
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        time.sleep(0.3)  # let it start
        used0 = _cpu_seconds(busy.pid)
        with LoadMonitor(interval_s=0.05) as mon:
            time.sleep(2.0)
            used = _cpu_seconds(busy.pid) - used0
        load = mon.result
    finally:
        busy.kill()
        busy.wait()
    assert load["available"]
    assert load["other_cores"] >= 0.5
    assert load["other_cores"] >= 0.8 * used / load["wall_s"]
    assert load["run_queue_samples"] >= 10
    assert load["run_queue_mean"] >= 0.5  # the busy loop is runnable all the time

    # our waited-for child is ours, not other load: all the CPU time it reports is ours
    child = BUSY_LOOP.replace("30", "1.5") + "print(time.process_time())\n"
    with LoadMonitor(interval_s=0.05) as mon:
        out = subprocess.run([sys.executable, "-c", child], check=True, capture_output=True)
    child_s = float(out.stdout)
    assert child_s > 0.1
    assert mon.result["own_cores"] * mon.result["wall_s"] >= 0.9 * child_s
