"""Tests of the model zoo: parameter counts, names, deterministic batches, user factories, errors."""

from __future__ import annotations

import pytest
import torch

from gcbench.core.errors import ParamError, SourceError, UnknownNameError
from gcbench.sources import catalog, zoo

# (parameters, gradient tensors, largest tensor) — torchvision's counts where one exists
EXPECTED = {
    "resnet18": (11_689_512, 62, 2_359_296),
    "resnet50": (25_557_032, 161, 2_359_296),
    "vgg16": (138_357_544, 32, 102_760_448),
    "lstm_lm": (19_780_400, 11, 6_500_000),
    "transformer": (7_288_320, 53, 2_048_000),
    "mlp": (535_818, 6, 401_408),
    "smallcnn": (620_362, 10, 524_288),
    # the train tasks' models (tests/train/test_driver.py ties them to the tasks)
    "digits": (50_826, 6, 32_768),
    "digits_cnn": (38_282, 8, 32_768),
    "charlstm": (94_375, 7, 65_536),
}

# small configurations that run a forward/backward in well under a second
# (resnet50 and vgg16 share resnet18's data code; their forward is checked on the meta device below,
# since building VGG-16's 138M weights alone takes seconds)
SMALL = {
    "resnet18": {"image_size": 32, "batch_size": 2},
    "lstm_lm": {"batch_size": 2, "seq_len": 5, "vocab": 50, "hidden": 16},
    "transformer": {"batch_size": 2, "seq_len": 8, "vocab": 50, "d_model": 16, "heads": 2, "layers": 1},
    "mlp": {"batch_size": 4},
    "smallcnn": {"batch_size": 2},
    "digits": {"batch_size": 2},
    "digits_cnn": {"batch_size": 2},
    "charlstm": {"batch_size": 2, "seq_len": 5},
}


# 2 shared cores: a second intra-op thread only adds spin-wait under load (see conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


def test_zoo_has_the_documented_models() -> None:
    assert catalog.model_names() == list(EXPECTED)
    for name, spec in catalog.MODELS.items():
        assert spec.name == name and spec.description and callable(getattr(zoo, spec.build)) and callable(getattr(zoo, spec.factory))


@pytest.mark.parametrize("name", list(EXPECTED))
def test_parameter_and_tensor_counts(name: str) -> None:
    shapes = zoo.layer_shapes(name)
    params, tensors, largest = EXPECTED[name]
    assert sum(s.numel for s in shapes) == params
    assert len(shapes) == tensors
    assert max(s.numel for s in shapes) == largest
    assert all(s.dtype == torch.float32 for s in shapes)


def test_resnet50_exact_torchvision_count_and_names() -> None:
    shapes = zoo.layer_shapes("resnet50")
    assert sum(s.numel for s in shapes) == 25_557_032
    assert len(shapes) == 161
    names = [s.name for s in shapes]
    # torchvision's names, so its state dicts and published per-layer numbers line up
    assert names[0] == "conv1.weight" and names[-2:] == ["fc.weight", "fc.bias"]
    assert "layer1.0.downsample.0.weight" in names and "layer4.2.bn3.bias" in names
    by_name = {s.name: s.shape for s in shapes}
    assert by_name["layer4.0.conv2.weight"] == (512, 512, 3, 3)  # the 2.36M-element largest tensor
    assert by_name["fc.weight"] == (1000, 2048)
    # v1.5: the stride sits on the 3×3 conv; the 1×1 conv of the first block of layer2 keeps stride 1
    m = zoo.resnet50_build()
    assert m.layer2[0].conv2.stride == (2, 2) and m.layer2[0].conv1.stride == (1, 1)


@pytest.mark.parametrize(("name", "in_shape", "out_shape"), [
    ("resnet50", (8, 3, 224, 224), (8, 1000)),
    ("resnet50", (2, 3, 32, 32), (2, 1000)),
    ("vgg16", (8, 3, 224, 224), (8, 1000)),
    ("vgg16", (2, 3, 32, 32), (2, 1000)),
])
def test_large_models_forward_shapes_on_meta(name: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> None:
    # shape propagation only: no weights, no arithmetic
    with torch.device("meta"):
        m = getattr(zoo, catalog.MODELS[name].build)()
        out = m(torch.empty(in_shape))
    assert tuple(out.shape) == out_shape


def test_num_classes_changes_only_the_head() -> None:
    a = {s.name: s.shape for s in zoo.layer_shapes("resnet50")}
    b = {s.name: s.shape for s in zoo.layer_shapes("resnet50", num_classes=10)}
    assert b["fc.weight"] == (10, 2048)
    assert {k for k in a if a[k] != b[k]} == {"fc.weight", "fc.bias"}


@pytest.mark.parametrize("name", ["mlp", "smallcnn", "transformer", "lstm_lm", "resnet18"])
def test_meta_layout_matches_a_real_build(name: str) -> None:
    m = zoo.load_model(name, 0, **SMALL[name])
    built = zoo.gradient_layout(m.module)
    assert zoo.layer_shapes(name, **SMALL[name]) == built


@pytest.mark.parametrize("name", list(SMALL))
def test_batches_deterministic_and_distinct(name: str) -> None:
    a = zoo.load_model(name, 0, **SMALL[name])
    b = zoo.load_model(name, 0, **SMALL[name])
    c = zoo.load_model(name, 1, **SMALL[name])
    x0, y0 = a.make_batch(3, 1)
    x1, y1 = b.make_batch(3, 1)
    assert torch.equal(x0, x1) and torch.equal(y0, y1)
    # another worker, another batch index, another seed: other data
    assert not torch.equal(a.make_batch(3, 2)[0], x0)
    assert not torch.equal(a.make_batch(4, 1)[0], x0)
    assert not torch.equal(c.make_batch(3, 1)[0], x0)
    # same seed, same weights; other seed, other weights
    pa, pb, pc = (next(iter(m.module.parameters())) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


@pytest.mark.parametrize("name", list(SMALL))
def test_forward_backward_gives_finite_gradients_for_every_parameter(name: str) -> None:
    m = zoo.load_model(name, 0, **SMALL[name])
    x, y = m.make_batch(0, 0)
    loss = m.loss_fn(m.module(x), y)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    for n, p in m.module.named_parameters():
        assert p.grad is not None, n
        assert torch.isfinite(p.grad).all(), n


def test_default_batch_shapes() -> None:
    # defaults are documented; build the ResNet at the small image size but check the batch size
    r = zoo.load_model("resnet18", 0, image_size=32)
    x, y = r.make_batch(0, 0)
    assert x.shape == (8, 3, 32, 32) and y.shape == (8,) and y.dtype == torch.long
    assert catalog.MODELS["resnet50"].options["image_size"] == 224 and catalog.MODELS["resnet50"].options["batch_size"] == 8
    lm = zoo.load_model("lstm_lm", 0, hidden=8)
    t, target = lm.make_batch(0, 0)
    assert t.shape == (20, 35) and int(t.max()) < 10_000
    # targets are the next tokens
    assert torch.equal(target[:, :-1], t[:, 1:])
    gpt = zoo.load_model("transformer", 0, d_model=8, heads=2, layers=1)
    assert gpt.make_batch(0, 0)[0].shape == (8, 128)


def test_token_stream_is_zipfian_and_learnable() -> None:
    # low ids are the frequent ones (Zipf), and half the transitions follow a fixed successor rule:
    # after the most frequent token, one next token takes over half the mass (Zipf alone: ~10%)
    lm = zoo.load_model("lstm_lm", 0, hidden=8, batch_size=64, seq_len=60)
    t = lm.make_batch(0, 0)[0]
    counts = torch.bincount(t.reshape(-1), minlength=10_000)
    assert counts[:100].sum() > counts[5000:].sum()
    prev, nxt = t[:, :-1].reshape(-1), t[:, 1:].reshape(-1)
    after0 = nxt[prev == 0]
    share = torch.bincount(after0).max().item() / after0.numel()
    assert after0.numel() > 100 and share > 0.4


def test_loading_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    zoo.load_model("mlp", 5)
    zoo.load_model("tests.user_factory:tiny", 5)
    assert torch.equal(torch.get_rng_state(), before)


def test_unknown_model_did_you_mean() -> None:
    with pytest.raises(UnknownNameError, match=r"did you mean 'resnet50'"):
        zoo.load_model("resnet5")
    with pytest.raises(UnknownNameError, match=r"unknown model 'vgg61'"):
        zoo.layer_shapes("vgg61")


def test_bad_options_are_param_errors() -> None:
    with pytest.raises(ParamError, match=r"no option 'imagesize'"):
        zoo.load_model("resnet18", imagesize=32)
    with pytest.raises(ParamError, match=r"batch_size must be in \[1, 4096\], got 0"):
        zoo.load_model("mlp", batch_size=0)
    with pytest.raises(ParamError, match=r"image_size must be in \[32, 1024\], got 16"):
        zoo.load_model("resnet18", image_size=16)
    with pytest.raises(ParamError, match=r"batch norm needs batch_size >= 2 at image_size 32"):
        zoo.load_model("resnet18", image_size=32, batch_size=1)
    zoo.load_model("resnet18", image_size=33, batch_size=1)  # a 2×2 last stage is enough
    with pytest.raises(ParamError, match=r"divisible"):
        zoo.load_model("transformer", d_model=10, heads=3)


# ---- user factories --------------------------------------------------------------------------


def test_user_factory_with_seed() -> None:
    a = zoo.load_model("tests.user_factory:tiny", seed=1)
    b = zoo.load_model("tests.user_factory:tiny", seed=2)
    assert a.name == "tests.user_factory:tiny"
    assert isinstance(a.module, torch.nn.Module) and a.module.training
    assert not torch.equal(a.module[0].weight, b.module[0].weight)
    x, y = a.make_batch(0, 0)
    loss = a.loss_fn(a.module(x), y)
    assert torch.isclose(loss, torch.nn.functional.cross_entropy(a.module(x), y))
    # options reach the factory
    assert zoo.load_model("tests.user_factory:tiny", batch_size=7).make_batch(0, 0)[0].shape[0] == 7
    assert [s.name for s in zoo.layer_shapes("tests.user_factory:tiny")] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_user_factory_without_seed_is_still_deterministic() -> None:
    a = zoo.load_model("tests.user_factory:tiny_no_seed", seed=3)
    b = zoo.load_model("tests.user_factory:tiny_no_seed", seed=3)
    c = zoo.load_model("tests.user_factory:tiny_no_seed", seed=4)
    assert torch.equal(a.module.weight, b.module.weight)
    assert not torch.equal(a.module.weight, c.module.weight)


def test_user_factory_custom_loss() -> None:
    m = zoo.load_model("tests.user_factory:tiny_mse")
    x, y = m.make_batch(0, 0)
    out = m.module(x)
    assert torch.equal(m.loss_fn(out, y), torch.nn.functional.mse_loss(out, torch.nn.functional.one_hot(y, 3).float()))


@pytest.mark.parametrize(("path", "message"), [
    ("tests.user_factory:not_a_module", "first value must be a torch.nn.Module, got dict"),
    ("tests.user_factory:not_a_tuple", r"must return \(module, make_batch\)"),
    ("tests.user_factory:missing", "has no attribute 'missing'"),
    ("tests.no_such_module:f", "cannot import module 'tests.no_such_module'"),
    ("tests.user_factory:NOT_CALLABLE", "is not callable"),
    (":f", "package.module:factory"),
])
def test_user_factory_errors(path: str, message: str) -> None:
    with pytest.raises(SourceError, match=message) as info:
        zoo.load_model(path)
    assert "\n" not in str(info.value)


def test_user_factory_rejecting_options() -> None:
    with pytest.raises(SourceError, match=r"does not accept these options"):
        zoo.load_model("tests.user_factory:tiny_no_seed", batch_size=3)


def test_smallcnn_image_size_changes_only_the_first_fc() -> None:
    a = {s.name: s.shape for s in zoo.layer_shapes("smallcnn")}
    b = {s.name: s.shape for s in zoo.layer_shapes("smallcnn", image_size=16)}
    assert a["fc0.weight"] == (256, 128 * 4 * 4) and b["fc0.weight"] == (256, 128 * 2 * 2)
    assert {k for k in a if a[k] != b[k]} == {"fc0.weight"}
    with pytest.raises(ParamError, match="image_size"):
        zoo.load_model("smallcnn", image_size=4)


def test_layer_shapes_skip_initialisers_and_restore_them() -> None:
    """Shapes come from a meta build with ``nn.init`` skipped: the same shapes as a real build, and the initialisers back after."""
    from torch import nn

    from gcbench.sources.zoo import layer_shapes, load_model

    before = nn.init.kaiming_normal_
    shapes = layer_shapes("resnet18")
    assert nn.init.kaiming_normal_ is before
    real = load_model("resnet18", 0).module
    assert [(s.name, s.shape) for s in shapes] == [(n, tuple(p.shape)) for n, p in real.named_parameters()]
    t = torch.zeros(3, 3)
    nn.init.ones_(t)
    assert torch.equal(t, torch.ones(3, 3))


@pytest.mark.parametrize(("model", "options", "message"), [
    ("smallcnn", {"image_size": 100_000}, r"smallcnn: image_size must be in \[8, 1024\], got 100000"),
    ("resnet50", {"batch_size": 10**6}, r"resnet50: batch_size must be in \[1, 4096\], got 1000000"),
    ("lstm_lm", {"hidden": 10**7}, r"lstm_lm: hidden must be in \[1, 16384\], got 10000000"),
    ("mlp", {"sizes": (784, 10**7, 10)}, r"mlp: sizes must be in \[1, 65536\], got 10000000"),
    ("mlp", {"sizes": (784,)}, r"mlp: sizes must list 2 to 64 layer widths, got 1"),
])
def test_zoo_options_have_bounds_checked_without_building(model: str, options: dict, message: str) -> None:
    # image_size = 100000 validated and then ended in an allocation traceback in the live source
    with pytest.raises(ParamError, match=message):
        catalog.check_model(model, **options)
    with pytest.raises(ParamError, match=message):
        zoo.load_model(model, **options)


def test_hf_size_options_have_upper_bounds() -> None:
    with pytest.raises(ParamError, match=r"hidden must be in \[1, 16384\], got 1000000000"):
        catalog.check_model("hf:gpt2:hidden=1000000000")


@pytest.mark.parametrize("model", list(catalog.MODELS))
def test_the_torch_free_parameter_counts_match_the_models(model: str) -> None:
    from gcbench.measure.footprint import parameter_count

    options = {"image_size": 64} if model == "smallcnn" else {}
    built = sum(t.numel for t in zoo.layer_shapes(model, **options))
    assert parameter_count(model, catalog.with_defaults(catalog.MODELS[model], options)) == built
