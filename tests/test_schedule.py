"""The one scheduler: rounds, seeded shuffles, adjacent pairs (pure functions)."""

from collections import Counter

import pytest

from hakbench.engine.schedule import A, B, ab_schedule, plan


def rounds_of(slots):
    out: dict[int, list] = {}
    for s in slots:
        out.setdefault(s.round, []).append(s)
    return out


def test_every_round_runs_every_cell_once_in_a_seeded_shuffle():
    slots = plan(6, 4, seed=5, warmup=1)
    by_round = rounds_of(slots)
    assert list(by_round) == [0, 1, 2, 3, 4]
    assert all(sorted(s.cell for s in r) == list(range(6)) for r in by_round.values())
    assert {s.phase for s in by_round[0]} == {"warmup"}
    assert {s.phase for s in slots[6:]} == {"measure"}
    assert all(s.pair is None and s.side is None for s in slots)
    orders = {tuple(s.cell for s in r) for r in by_round.values()}
    assert len(orders) > 1  # shuffled, not the same order every round
    assert plan(6, 4, seed=5, warmup=1) == slots  # seeded
    assert plan(6, 4, seed=6, warmup=1) != slots


def test_a_longer_plan_starts_with_the_shorter_one_so_resume_replays_it():
    short = plan(5, 3, seed=2, warmup=1, partner=[None, 0, 0, None, 3])
    long = plan(5, 7, seed=2, warmup=1, partner=[None, 0, 0, None, 3])
    assert long[: len(short)] == short
    assert plan(5, 1, seed=2, salt="instructions") != plan(5, 1, seed=2)


def test_compared_cells_run_next_to_their_partner_in_random_order():
    # cells 1 and 2 are compared with 0 (a reference of two); 4 with 3; 5 alone
    partner = [0, 0, 0, None, 3, None]
    slots = plan(6, 200, seed=1, partner=partner)
    by_round = rounds_of(slots)
    firsts = Counter()
    for r in by_round.values():
        # the reference of two runs twice a round, once beside each; everyone else once
        assert Counter(s.cell for s in r) == {0: 2, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1}
        for i, s in enumerate(r):
            if s.side == B:
                neighbours = {r[j].cell for j in (i - 1, i + 1) if 0 <= j < len(r)}
                mate = next(x for x in r if x.pair == s.pair and x.side == A)
                assert partner[s.cell] == mate.cell and mate.cell in neighbours
                assert abs(r.index(mate) - i) == 1  # adjacent: the two runs of one pair
                firsts[r[min(i, r.index(mate))].side] += 1
        assert all(s.pair is None for s in r if s.cell == 5)
    # AB and BA about equally often (600 pairs)
    assert 250 < firsts[A] < 350 and firsts[A] + firsts[B] == 600


def test_a_cell_that_is_its_own_reference_runs_alone():
    slots = plan(3, 2, seed=1, partner=[0, 0, None])
    assert all(s.pair is None for s in slots if s.cell == 2)
    assert Counter(s.cell for s in slots) == {0: 2, 1: 2, 2: 2}
    with pytest.raises(ValueError):
        plan(3, 1, seed=1, partner=[None])


def test_ab_schedule_pairs_a_and_b_of_each_workload():
    slots = ab_schedule(["hot", "mixed"], pairs=30, warmup_pairs=2, seed=9)
    assert len(slots) == 2 * 2 * 32
    assert Counter((s.phase, s.side) for s in slots) == {
        ("warmup", A): 4,
        ("warmup", B): 4,
        ("measure", A): 60,
        ("measure", B): 60,
    }
    assert sorted({s.pair for s in slots if s.phase == "measure"}) == list(range(30))
    assert {s.pair for s in slots if s.phase == "warmup"} == {-2, -1}
    for i in range(0, len(slots), 2):  # every pair is two consecutive processes
        a, b = slots[i], slots[i + 1]
        assert a.workload == b.workload and a.pair == b.pair and {a.side, b.side} == {A, B}
    workload_orders = {tuple(s.workload for s in slots[i : i + 4 : 2]) for i in range(0, 128, 4)}
    assert workload_orders == {("hot", "mixed"), ("mixed", "hot")}


def test_complete_pairs_puts_a_plans_pairs_back_together():
    from hakbench.engine.schedule import complete_pairs

    # a matrix plan: cells 1 and 2 compared with reference 0, two rounds
    slots = plan(3, 2, seed=4, partner=[None, 0, 0])
    samples = [
        {"phase": s.phase, "round": s.round, "pair": s.pair, "side": s.side, "cell": s.cell,
         "status": "ok", "workload": "w"}
        for s in slots
    ]  # fmt: skip
    samples[0]["status"] = "failed"  # one side of one pair failed: that pair goes
    lost = (samples[0]["round"], samples[0]["pair"])
    for cell in (1, 2):
        pairs = complete_pairs(samples, pair=cell)
        assert all(a["cell"] == 0 and b["cell"] == cell for a, b in pairs)
        assert all(a["round"] == b["round"] for a, b in pairs)
        assert len(pairs) == 2 - (lost[1] == cell)
    # an A/B: pairs of one workload, in pair order, warm-up left out
    ab = ab_schedule(["x", "y"], pairs=3, warmup_pairs=1, seed=2)
    samples = [{**vars(s), "status": "ok"} for s in ab]
    pairs = complete_pairs(samples, "y")
    assert [(a["pair"], a["side"], b["side"]) for a, b in pairs] == [(p, A, B) for p in range(3)]
    assert all(a["workload"] == "y" for a, _ in pairs)
