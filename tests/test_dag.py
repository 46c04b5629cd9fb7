"""The pure scheduler: ready order, failure propagation to dependents, tolerant steps, cycles."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planexec.plan.scheduler import CycleError, Outcome, Scheduler, find_cycle

# a -> b, a -> c, (b, c) -> d: "x -> y" means y depends on x
DIAMOND = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}


def test_ready_hands_out_a_step_only_once_its_dependencies_succeeded():
    s = Scheduler(DIAMOND)
    assert s.ready().run == ["a"]
    assert s.ready().run == []  # nothing new until a settles; a is not handed out twice
    assert s.running() == {"a"} and s.is_handed_out("a")
    s.succeeded("a")
    assert sorted(s.ready().run) == ["b", "c"]
    s.succeeded("b")
    assert s.ready().run == []  # d still waits for c
    s.succeeded("c")
    batch = s.ready()
    assert (batch.run, batch.skipped) == (["d"], [])
    s.succeeded("d")
    assert [s.outcome(n) for n in DIAMOND] == [Outcome.SUCCEEDED] * 4


def test_a_failed_steps_dependents_are_skipped_transitively_with_the_blocking_dependency():
    graph = {"a": [], "b": ["a"], "c": ["b"], "d": ["c"], "free": []}
    s = Scheduler(graph)
    assert sorted(s.ready().run) == ["a", "free"]
    s.failed("a")
    batch = s.ready()
    assert batch.run == []
    assert batch.skipped == [("b", "a"), ("c", "b"), ("d", "c")]  # each names the dependency that blocked it
    assert [s.outcome(n) for n in "abcd"] == [Outcome.FAILED, Outcome.SKIPPED, Outcome.SKIPPED, Outcome.SKIPPED]
    assert s.outcome("free") is None and s.unsettled() == ["free"]
    assert s.is_active()
    s.succeeded("free")
    assert not s.is_active()


def test_the_blocker_is_a_dependency_that_did_not_succeed():
    s = Scheduler(DIAMOND)
    s.ready()
    s.succeeded("a")
    s.ready()
    s.succeeded("b")
    s.failed("c")
    batch = s.ready()
    assert batch.skipped == [("d", "c")]  # not b, which succeeded


def test_a_tolerant_step_is_handed_out_although_an_input_failed():
    s = Scheduler(DIAMOND, tolerant=["d"])
    s.ready()
    s.failed("a")
    batch = s.ready()
    # b and c are skipped; d accepts failed inputs, so it runs once both ended
    assert sorted(batch.skipped) == [("b", "a"), ("c", "a")]
    assert batch.run == ["d"]
    s.succeeded("d")
    assert not s.is_active()


def test_dependents_of_a_tolerant_step_follow_its_own_outcome():
    graph = {"a": [], "t": ["a"], "after": ["t"]}
    s = Scheduler(graph, tolerant=["t"])
    s.ready()
    s.failed("a")
    assert s.ready().run == ["t"]
    s.succeeded("t")
    assert s.ready().run == ["after"]  # t succeeded: its dependent runs although a failed

    s = Scheduler(graph, tolerant=["t"])
    s.ready()
    s.failed("a")
    s.ready()
    s.failed("t")
    assert s.ready().skipped == [("after", "t")]


def test_a_cancelled_step_blocks_its_dependents_unless_tolerant():
    s = Scheduler({"a": [], "b": ["a"], "c": ["a"]}, tolerant=["c"])
    s.ready()
    s.cancelled("a")
    assert s.outcome("a") is Outcome.CANCELLED
    batch = s.ready()
    assert batch.skipped == [("b", "a")]
    assert batch.run == ["c"]
    s.cancelled("c")
    assert s.outcome("c") is Outcome.CANCELLED
    assert not s.is_active()


def test_a_cycle_raises_cycle_error_carrying_the_cycle():
    with pytest.raises(CycleError) as info:
        Scheduler({"a": ["c"], "b": ["a"], "c": ["b"], "d": ["a"]})
    cycle = info.value.args[1]
    assert cycle[0] == cycle[-1]
    assert set(cycle[:-1]) == {"a", "b", "c"}  # d depends on the cycle but is not part of it
    graph = {"a": ["c"], "b": ["a"], "c": ["b"]}
    for before, after in itertools.pairwise(cycle):
        assert before in graph[after]  # each node is listed before the node that depends on it


def test_find_cycle():
    assert find_cycle(DIAMOND) is None
    assert find_cycle({}) is None
    assert find_cycle({"a": ["a"]}) == ["a", "a"]
    cycle = find_cycle({"a": ["b"], "b": ["a"], "x": []})
    assert cycle is not None and cycle[0] == cycle[-1] and sorted(cycle[:-1]) == ["a", "b"]


@pytest.mark.parametrize("settle", ["succeeded", "failed", "cancelled"])
def test_settling_a_step_not_handed_out_raises_value_error(settle):
    s = Scheduler(DIAMOND)
    with pytest.raises(ValueError, match="'b'"):
        getattr(s, settle)("b")  # not ready yet
    with pytest.raises(ValueError):
        getattr(s, settle)("nope")  # not a step at all
    s.ready()
    s.succeeded("a")
    with pytest.raises(ValueError, match="'a'"):
        getattr(s, settle)("a")  # settled already
    assert s.outcome("a") is Outcome.SUCCEEDED  # the refused call changed nothing


def test_settling_a_skipped_step_raises_value_error():
    s = Scheduler({"a": [], "b": ["a"]})
    s.ready()
    s.failed("a")
    s.ready()
    with pytest.raises(ValueError):
        s.succeeded("b")
    assert s.outcome("b") is Outcome.SKIPPED


def test_is_active_until_every_step_has_an_outcome():
    s = Scheduler(DIAMOND)
    assert s.is_active() and s.ready().run == ["a"]
    s.succeeded("a")
    assert s.is_active() and sorted(s.ready().run) == ["b", "c"]
    s.succeeded("b")
    s.succeeded("c")
    assert s.is_active() and s.ready().run == ["d"]
    assert s.is_active()  # handed out but not settled still counts
    s.succeeded("d")
    assert not s.is_active()
    assert s.unsettled() == [] and s.running() == set()
    assert s.ready().run == []


def test_an_empty_graph_is_inactive_from_the_start():
    s = Scheduler({})
    assert not s.is_active()
    batch = s.ready()
    assert (batch.run, batch.skipped) == ([], [])


# --- the scheduler against a model of itself ---------------------------------


@st.composite
def dags(draw):
    """A random DAG (each node depends on a subset of earlier ones), tolerant nodes, and each node's fate."""
    n = draw(st.integers(1, 15))
    nodes = [f"n{i}" for i in range(n)]
    graph = {nodes[i]: sorted(draw(st.sets(st.sampled_from(nodes[:i]), max_size=4)) if i else []) for i in range(n)}
    tolerant = {node for node in nodes if draw(st.booleans())}
    fate = {node: draw(st.sampled_from([Outcome.SUCCEEDED, Outcome.SUCCEEDED, Outcome.FAILED, Outcome.CANCELLED])) for node in nodes}
    order = draw(st.randoms(use_true_random=False))
    return graph, tolerant, fate, order


@settings(max_examples=100, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_scheduler_hands_out_each_step_once_after_its_inputs_and_skips_exactly_the_blocked(case):
    graph, tolerant, fate, order = case
    s = Scheduler(graph, tolerant)
    outcome: dict[str, Outcome] = {}
    handed: list[str] = []
    running: list[str] = []
    while True:
        batch = s.ready()
        for node, blocker in batch.skipped:
            assert node not in outcome and node not in tolerant
            assert blocker in graph[node] and outcome[blocker] is not Outcome.SUCCEEDED
            assert all(d in outcome for d in graph[node])
            outcome[node] = Outcome.SKIPPED
        for node in batch.run:
            assert node not in handed and node not in outcome
            assert all(d in outcome for d in graph[node])
            if node not in tolerant:
                assert all(outcome[d] is Outcome.SUCCEEDED for d in graph[node])
            handed.append(node)
            running.append(node)
        if not running:
            break
        node = running.pop(order.randrange(len(running)))  # settle in a random order
        getattr(s, fate[node].value)(node)
        outcome[node] = fate[node]
    assert not s.is_active()
    assert set(outcome) == set(graph)
    for node in graph:
        assert s.outcome(node) is outcome[node]
        blocked = any(outcome[d] is not Outcome.SUCCEEDED for d in graph[node])
        assert (outcome[node] is Outcome.SKIPPED) == (blocked and node not in tolerant)


def test_steps_added_while_running_are_scheduled_after_their_dependencies():
    from planexec.plan.scheduler import Scheduler

    s = Scheduler({"a": []})
    assert s.ready().run == ["a"]
    s.add("b", ["a"])
    assert s.ready().run == []  # a is still running
    s.add("c", [])
    assert s.ready().run == ["c"]
    s.succeeded("a")
    assert s.ready().run == ["b"]
    s.failed("c")
    s.add("d", ["c"])
    batch = s.ready()
    assert batch.run == [] and batch.skipped == [("d", "c")]
    s.add("e", ["c"], tolerant=True)
    assert s.ready().run == ["e"]
    s.succeeded("b")
    s.succeeded("e")
    assert not s.is_active()


def test_adding_a_step_with_an_unknown_dependency_is_refused():
    import pytest

    from planexec.plan.scheduler import Scheduler

    s = Scheduler({"a": []})
    with pytest.raises(ValueError, match="not in the graph: zz"):
        s.add("b", ["zz"])
    with pytest.raises(ValueError, match="already"):
        s.add("a", [])
