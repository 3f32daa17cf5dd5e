import torch


def test_noise_only_while_training(router_factory):
    router = router_factory({"name": "noisy_topk", "top_k": 2, "learned_noise": False, "noise_std": 5.0})
    x = torch.randn(64, 16)
    router.eval()
    a, b = router(x), router(x)
    assert torch.equal(a.indices, b.indices)
    torch.testing.assert_close(a.weights, torch.softmax((x @ router.weight.t()).gather(-1, a.indices), dim=-1))
    router.train()
    torch.manual_seed(1)
    noisy = router(x)
    assert not torch.equal(noisy.indices, a.indices)
    torch.testing.assert_close(noisy.probs, a.probs)  # the balance loss sees the clean probabilities


def test_learned_noise_scale_gets_gradients(router_factory):
    router = router_factory({"name": "noisy_topk", "top_k": 2})
    router.train()
    out = router(torch.randn(32, 16))
    (out.weights * torch.randn_like(out.weights)).sum().backward()
    assert router.noise_weight.grad is not None and router.noise_weight.grad.abs().sum() > 0
