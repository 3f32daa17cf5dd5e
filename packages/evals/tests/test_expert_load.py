"""The eval stage's expert-load tally over the engine's routing decisions."""


def test_expert_load_counts_routing_decisions():
    import torch
    from codemoe.evals.stages import ExpertLoad

    load = ExpertLoad()
    # 2 tokens, 2 layers, top-2: layer 0 picks {0,1} then {0,2}; layer 1 picks {1,1}... then {3,1}
    load.add(torch.tensor([[[0, 1], [1, 1]], [[0, 2], [3, 1]]]))
    load.add(None)
    assert load.shares() == [[0.5, 0.25, 0.25, 0.0], [0.0, 0.75, 0.0, 0.25]]
