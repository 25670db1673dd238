"""An impossible Ray placement is named before any waiting, with what it needs: ``ray.nodes()``
records of made-up clusters, no Ray needed."""

from __future__ import annotations

from grpo_run.core.placement.ray_fit import describe_nodes, why_unplaceable


def node(node_id: str, ip: str, **resources: float) -> dict:
    return {"NodeID": node_id, "Alive": True, "NodeManagerAddress": ip,
            "Resources": {"memory": 1e9, f"node:{ip}": 1.0, **resources}}


ONE = [node("aaaaaaaa11", "10.0.0.1", CPU=8.0)]
TWO = [node("aaaaaaaa11", "10.0.0.1", CPU=8.0, learner_slot=1.0), node("bbbbbbbb22", "10.0.0.2", CPU=8.0, learner_slot=1.0)]


def test_strict_spread_needs_a_node_per_actor() -> None:
    actors = [("learner", {"CPU": 1.0}, 2), ("engine", {"CPU": 1.0}, 1)]
    assert why_unplaceable(actors, "STRICT_SPREAD", ONE) == (
        'placement_strategy = "STRICT_SPREAD" needs 3 nodes, one per actor (2 learners, 1 engine), and at most 1 '
        'can each hold one (1 node: aaaaaaaa (10.0.0.1) CPU 8); add nodes, or use "SPREAD" or "PACK"')
    assert "needs 3 nodes" in why_unplaceable(actors, "STRICT_SPREAD", TWO)
    assert why_unplaceable(actors[:1], "STRICT_SPREAD", TWO) is None
    assert why_unplaceable(actors, "PACK", ONE) is None and why_unplaceable(actors, None, ONE) is None


def test_a_bundle_no_node_has_and_a_cluster_too_small() -> None:
    one_per_node = [("learner", {"CPU": 1.0, "learner_slot": 1.0}, 2)]
    assert why_unplaceable(one_per_node, None, TWO) is None
    assert why_unplaceable(one_per_node, None, ONE).startswith(
        "each learner actor asks for {'CPU': 1.0, 'learner_slot': 1.0}, and no node of the cluster has that")
    # Three learners with one slot per node: each fits somewhere, all three cannot.
    reason = why_unplaceable([("learner", {"CPU": 1.0, "learner_slot": 1.0}, 3)], None, TWO)
    assert reason.startswith("the 3 actors (3 learners) need {'CPU': 3.0, 'learner_slot': 3.0} together and the "
                             "whole cluster has {'learner_slot': 2.0} of learner_slot")
    assert why_unplaceable([("engine", {"CPU": 8.0}, 2)], "STRICT_PACK", TWO).startswith(
        'placement_strategy = "STRICT_PACK" needs one node with {\'CPU\': 16.0}')


def test_nodes_are_described_by_id_address_and_resources() -> None:
    dead = {**node("cccccccc33", "10.0.0.3", CPU=4.0), "Alive": False}
    assert describe_nodes([*TWO, dead]) == ("2 nodes: aaaaaaaa (10.0.0.1) CPU 8, learner_slot 1; "
                                            "bbbbbbbb (10.0.0.2) CPU 8, learner_slot 1")
