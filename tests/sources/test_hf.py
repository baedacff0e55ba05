"""Hugging Face models as gradient sources: name grammar, sizes, seeded batches, the model's own loss, dispatch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from gcbench.core.errors import ParamError, SourceError, UnknownNameError
from gcbench.sources import hf_models as hf
from gcbench.sources import zoo
from gcbench.sources.live import LiveSource

needs_hf = pytest.mark.skipif(not hf.available(), reason="transformers is not installed (pip install 'gcbench[hf]')")

#: tiny sizes of every hf model: a forward/backward in milliseconds
TINY = {
    "hf:gpt2": "layers=2,hidden=32,heads=2,vocab=300,seq_len=12,batch_size=2",
    "hf:bert": "layers=2,hidden=32,heads=2,vocab=300,seq_len=12,batch_size=3",
    "hf:llama": "layers=2,hidden=32,heads=4,kv_heads=2,vocab=300,seq_len=12,batch_size=2",
    "hf:vit": "layers=2,hidden=32,heads=2,image_size=32,patch=8,num_classes=5,batch_size=2",
}


def tiny(name: str) -> str:
    return f"{name}:{TINY[name]}"


# 2 shared cores: a second intra-op thread only adds spin-wait under load (see conftest.one_thread)
pytestmark = pytest.mark.usefixtures("one_thread")


# --------------------------------------------------------------------------------------------
# the name grammar (no transformers needed)


def test_parse_reads_options_and_canonical_name_lists_changed_ones() -> None:
    info, opts = hf.parse_name("hf:gpt2:layers=2, hidden=64")
    assert info.name == "gpt2" and opts == {"layers": 2, "hidden": 64}
    _, full, canonical = hf.resolve("hf:gpt2:hidden=96,layers=2,heads=12")
    assert full["vocab"] == 50257 and full["layers"] == 2
    assert canonical == "hf:gpt2:layers=2,hidden=96"  # defaults' order; heads=12 is the default
    assert hf.resolve("hf:vit")[2] == "hf:vit"


def test_unknown_option_names_the_allowed_ones() -> None:
    allowed = r"\(allowed: layers, hidden, heads, vocab, positions, seq_len, batch_size\)"
    with pytest.raises(ParamError, match=r"unknown option 'depth' " + allowed):
        hf.parse_name("hf:gpt2:depth=2")


def test_repeated_option_is_an_error() -> None:
    with pytest.raises(ParamError, match="'layers' is given twice"):
        hf.parse_name("hf:gpt2:layers=2,layers=2")


@pytest.mark.parametrize("value", ["two", "0", "-3", "1.5", ""])
def test_option_values_are_positive_integers(value: str) -> None:
    with pytest.raises(ParamError, match="layers must be a positive integer"):
        hf.parse_name(f"hf:gpt2:layers={value}")


def test_option_without_equals_is_an_error() -> None:
    with pytest.raises(ParamError, match="must look like key=value"):
        hf.parse_name("hf:gpt2:layers")


@pytest.mark.parametrize("name", ["hf:openai-community/gpt2", "hf:gpt2-medium", "hf:bert-base-uncased", "hf:meta-llama/Llama-2-7b-hf"])
def test_hub_checkpoints_fail_with_one_line_and_no_download(name: str) -> None:
    with pytest.raises(SourceError, match="would need a download") as exc:
        hf.parse_name(name)
    assert "\n" not in str(exc.value)


def test_unknown_model_suggests_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'llama'"):
        hf.parse_name("hf:lama")


def test_inconsistent_sizes_are_rejected_with_the_reason() -> None:
    with pytest.raises(ParamError, match=r"hidden \(100\) must be a multiple of heads \(12\)"):
        hf.resolve("hf:gpt2:hidden=100")
    with pytest.raises(ParamError, match=r"seq_len \(2048\) must be at most positions \(1024\)"):
        hf.resolve("hf:gpt2:seq_len=2048")
    with pytest.raises(ParamError, match=r"image_size \(100\) must be a multiple of patch \(16\)"):
        hf.resolve("hf:vit:image_size=100")
    with pytest.raises(ParamError, match=r"heads \(8\) must be a multiple of kv_heads \(3\)"):
        hf.resolve("hf:llama:kv_heads=3")


def test_options_given_twice_must_agree() -> None:
    assert hf.resolve("hf:gpt2:batch_size=2", {"batch_size": 2})[1]["batch_size"] == 2
    assert hf.resolve("hf:gpt2", {"batch_size": 3})[1]["batch_size"] == 3
    with pytest.raises(ParamError, match="batch_size is 2 in the name but 3 in the options"):
        hf.resolve("hf:gpt2:batch_size=2", {"batch_size": 3})
    with pytest.raises(ParamError, match="has no option 'image_size'"):
        hf.resolve("hf:gpt2", {"image_size": 32})


def test_hf_names_never_reach_the_user_factory_import(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(path: str) -> None:
        raise AssertionError(f"{path} was imported as user code")

    monkeypatch.setattr(zoo, "_import_factory", boom)
    with pytest.raises(ParamError):  # parsed by the hf module (and rejected there), not imported
        zoo.load_model("hf:gpt2:layers=0")
    with pytest.raises(ParamError):
        zoo.layer_shapes("hf:gpt2:layers=0")


def test_missing_transformers_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` raise ImportError
    with pytest.raises(SourceError, match=r"pip install 'gcbench\[hf\]'") as exc:
        zoo.load_model(tiny("hf:gpt2"))
    assert "\n" not in str(exc.value)


# --------------------------------------------------------------------------------------------
# the models (transformers needed)


@needs_hf
def test_published_sizes_on_the_meta_device() -> None:
    gpt2 = zoo.layer_shapes("hf:gpt2")
    assert sum(s.numel for s in gpt2) == 124_439_808 and len(gpt2) == 148
    assert gpt2[0].name == "transformer.wte.weight" and gpt2[0].shape == (50257, 768)  # 38.6M elements, tied head
    assert sum(s.numel for s in zoo.layer_shapes("hf:vit:num_classes=2")) == 85_800_194  # ViTConfig()'s default
    assert sum(s.numel for s in zoo.layer_shapes("hf:vit")) == 86_567_656
    assert sum(s.numel for s in zoo.layer_shapes("hf:bert")) == 109_514_298
    llama = zoo.layer_shapes("hf:llama")
    assert sum(s.numel for s in llama) == 60_039_680
    assert {s.name: s.shape for s in llama}["model.layers.0.mlp.gate_proj.weight"] == (1536, 512)  # 256·⌈8·512/3/256⌉


@needs_hf
@pytest.mark.parametrize("name", list(TINY))
def test_layer_shapes_match_the_built_model_and_every_tensor_gets_a_gradient(name: str) -> None:
    m = zoo.load_model(tiny(name), 0)
    assert zoo.layer_shapes(tiny(name)) == zoo.gradient_layout(m.module)
    inputs, targets = m.make_batch(0, 0)
    loss = m.loss_fn(m.module(inputs), targets)
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    missing = [n for n, p in m.module.named_parameters() if p.grad is None]
    assert not missing


@needs_hf
@pytest.mark.parametrize("name", list(TINY))
def test_seeded_models_and_batches_leave_the_callers_rng_alone(name: str) -> None:
    before = torch.get_rng_state()
    a, b, c = (zoo.load_model(tiny(name), s) for s in (0, 0, 1))
    assert torch.equal(torch.get_rng_state(), before)
    pa, pb, pc = (torch.cat([p.detach().flatten() for p in m.module.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    xa, xb = a.make_batch(3, 1), b.make_batch(3, 1)
    key = "pixel_values" if name == "hf:vit" else "input_ids"
    assert torch.equal(xa[0][key], xb[0][key])
    assert not torch.equal(xa[0][key], a.make_batch(3, 0)[0][key])  # workers see different data
    assert not torch.equal(xa[0][key], a.make_batch(4, 1)[0][key])  # and each step new data


@needs_hf
def test_causal_lm_loss_is_next_token_cross_entropy() -> None:
    m = zoo.load_model(tiny("hf:gpt2"), 0)
    m.module.eval()  # no dropout: the two losses see the same logits
    inputs, targets = m.make_batch(0, 0)
    out = m.module(inputs)
    manual = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 300), targets[:, 1:].reshape(-1))
    assert torch.allclose(m.loss_fn(out, targets), manual, rtol=1e-5)
    assert torch.equal(inputs["attention_mask"], torch.ones_like(inputs["input_ids"]))


@needs_hf
def test_bert_batches_pad_mask_and_predict_real_tokens_only() -> None:
    m = zoo.load_model("hf:bert:layers=1,hidden=32,heads=2,vocab=300,seq_len=40,batch_size=16", 0)
    inputs, labels = m.make_batch(0, 0)
    mask, ids = inputs["attention_mask"].bool(), inputs["input_ids"]
    assert (~mask).any() and mask.all(1).any() is not None  # some rows are padded
    assert (ids[~mask] == 0).all() and (labels[~mask] == -100).all()  # padding is [PAD] and never predicted
    assert ((labels != -100).sum(1) >= 1).all()  # every row predicts something: the loss is a real mean
    chosen = labels != -100
    assert (ids[chosen] == 103).float().mean() > 0.5  # mostly [MASK] at predicted positions
    assert (ids[mask & ~chosen] != 103).all()  # and [MASK] nowhere else
    frac = chosen.sum() / mask.sum()
    assert 0.1 < float(frac) < 0.3


@needs_hf
def test_live_source_gives_hf_parameter_names_and_repeatable_gradients() -> None:
    a = LiveSource(tiny("hf:llama"), workers=2, steps=2, seed=5)
    b = LiveSource(tiny("hf:llama"), workers=2, steps=2, seed=5)
    assert a.name == f"live {tiny('hf:llama')}"
    names = [s.name for s in a.layout()]
    assert names[0] == "model.embed_tokens.weight" and names[-1] == "lm_head.weight"
    for step in (0, 1):
        ga, gb = a.gradients(step, 1), b.gradients(step, 1)
        assert all(torch.equal(ga[k], gb[k]) for k in names)
    assert not torch.equal(a.gradients(1, 0)[names[0]], a.gradients(1, 1)[names[0]])
    # only tokens that occur get embedding gradient: rows of unused ids are exactly zero
    emb = a.gradients(0, 0)[names[0]]
    assert (emb.abs().sum(1) == 0).any() and (emb.abs().sum(1) > 0).any()


@needs_hf
def test_run_with_an_hf_model_from_the_cli(tmp_path: Path) -> None:
    from gcbench.cli import app
    from gcbench.results.store import load_run

    res = CliRunner().invoke(app, ["run", "suites/quick.toml", "--model", tiny("hf:vit"), "--steps", "1", "--workers", "2",
                                   "-c", "topk", "-c", "qsgd", "--no-timing", "-q", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    cases = load_run(next(tmp_path.glob("*.json"))).cases
    assert [c.status for c in cases] == ["ok", "ok"]
    assert cases[0].source.model == tiny("hf:vit")


def test_bad_hf_spec_on_the_cli_is_one_error_line(tmp_path: Path) -> None:
    from gcbench.cli import app

    res = CliRunner().invoke(app, ["run", "suites/quick.toml", "--model", "hf:gpt2:layers=2,layers=3", "-q", "--out", str(tmp_path)])
    assert res.exit_code == 1
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    # one line, caught when the suite is validated (before any model is built or file written)
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert lines[0].endswith("model 'hf:gpt2:layers=2,layers=3': option 'layers' is given twice")
    assert not list(tmp_path.iterdir())


@needs_hf
def test_list_models_shows_hf_sizes_and_the_extra() -> None:
    import json

    from gcbench.cli import app

    res = CliRunner().invoke(app, ["list", "models", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert rows["hf:gpt2"]["parameters"] == 124_439_808 and rows["hf:gpt2"]["tensors"] == 148
    assert rows["hf:gpt2"]["extra"] == "gcbench[hf]" and rows["resnet50"]["extra"] is None
    assert rows["resnet50"]["parameters"] == 25_557_032 and rows["resnet50"]["tensors"] == 161
    table = CliRunner().invoke(app, ["list", "models"])
    assert "gcbench[hf]" in table.output and "124,439,808" in table.output


def test_list_models_without_the_extra_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from gcbench.cli import app

    monkeypatch.setattr(hf, "available", lambda: False)
    rows = {r["name"]: r for r in json.loads(CliRunner().invoke(app, ["list", "models", "--json"]).output)}
    assert rows["hf:llama"]["parameters"] is None and rows["hf:llama"]["extra"] == "gcbench[hf]"
    assert rows["mlp"]["parameters"] == 535_818
    assert "(not installed)" in CliRunner().invoke(app, ["list", "models"]).output
