"""perf stat -x, parsing on captured output of this machine (and crafted shapes from the perf
source for what this VM cannot produce), and the runner's mapping onto metrics."""

from pathlib import Path

from hakbench.collect.perfstat import parse_perf_csv
from hakbench.engine.runner import perf_metrics, signal_from_perf_stderr

DATA = Path(__file__).parent / "data"


def test_captured_software_events_and_unsupported_hardware():
    st = parse_perf_csv((DATA / "perf_mixed_short.csv").read_text())
    assert st.counters["task-clock"].value == 1.28
    assert st.counters["task-clock"].unit == "msec"
    assert st.counters["page-faults"].value == 129
    for hw in ("cycles", "instructions", "branch-misses"):
        assert st.counters[hw].value is None
        assert st.counters[hw].status == "not supported"
    assert {"cycles", "instructions", "branch-misses"} <= set(st.unavailable())


def test_metrics_mark_hardware_unavailable_never_zero():
    metrics, unavailable = perf_metrics((DATA / "perf_mixed_short.csv").read_text())
    assert metrics["task_clock_ms"] == 1.28
    assert metrics["page_faults"] == 129 and metrics["minflt"] == 129
    assert metrics["majflt"] == 0
    assert abs(metrics["user_s"] - 0.002027) < 1e-12
    for name in ("cycles", "instructions", "branch_misses", "ipc"):
        assert name not in metrics
        assert name in unavailable


def test_zero_system_time_is_a_measured_zero():
    # perf prints a 0 ns rusage tool event as <not counted> (run time 0); its own footer
    # reports "0.000000000 seconds sys" for the same run.
    metrics, unavailable = perf_metrics((DATA / "perf_mixed_short.csv").read_text())
    assert metrics["sys_s"] == 0.0
    assert "sys_s" not in unavailable


def test_repeat_noise_column_is_found_by_its_percent_sign():
    st = parse_perf_csv((DATA / "perf_repeat3.csv").read_text())
    tc = st.counters["task-clock"]
    assert tc.value == 1.27 and tc.noise_pct == 1.13 and tc.running_pct == 100.0
    assert st.counters["page-faults"].noise_pct == 0.26
    assert st.counters["cycles"].value is None


def test_not_counted_and_multiplexed_lines():
    st = parse_perf_csv((DATA / "perf_crafted_not_counted.csv").read_text())
    assert st.counters["cycles"].status == "not counted"
    assert st.counters["instructions"].value == 8123456
    assert st.counters["instructions"].running_pct == 66.0
    metrics, unavailable = perf_metrics((DATA / "perf_crafted_not_counted.csv").read_text())
    assert "cycles" in unavailable and "ipc" in unavailable and "branch_misses" in unavailable
    assert metrics["instructions"] == 8123456 and "cycles" not in metrics


def test_ipc_when_both_hardware_counters_exist():
    text = "10,,cycles,5,100.00,,\n25,,instructions,5,100.00,2.50,insn per cycle\n"
    metrics, unavailable = perf_metrics(text)
    assert metrics["ipc"] == 2.5 and "ipc" not in unavailable


def test_signal_of_the_workload_from_perf_stderr():
    stderr = (DATA / "perf_signal_stderr.txt").read_text()
    assert signal_from_perf_stderr(stderr, "sh") == 11
    assert signal_from_perf_stderr(stderr, "other") is None
    assert signal_from_perf_stderr("bench: about to crash\n", "sh") is None


def test_unreaped_child_has_no_cpu_times():
    # perf 6.1's SIGCHLD race: it never wait4()s the child, so both rusage tool events are
    # empty; that is "not measured", not a zero.
    text = (
        "0.65,msec,task-clock,653994,100.00,0.456,CPUs utilized\n"
        "<not counted>,ns,user_time,0,100.00,,\n"
        "<not counted>,ns,system_time,0,100.00,,\n"
    )
    metrics, unavailable = perf_metrics(text)
    assert "user_s" not in metrics and "sys_s" not in metrics
    assert {"user_s", "sys_s"} <= set(unavailable)
