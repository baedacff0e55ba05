"""The plan object, its TOML and its checks, and matching rules to a model's tensors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gcbench.plan import (
    KINDS,
    Outer,
    Plan,
    PlanError,
    Rule,
    TensorInfo,
    assign,
    load_plan,
    overlaps,
    parse_plan,
    plan_from_spec,
    tensor_infos,
)
from gcbench.plan.reader import check_run_length, needs_every_step

TOPK_EF = "topk:density=0.01,error_feedback=true"


def _doc(*rules: dict, **plan: object) -> dict:
    return {"plan": {"name": "p", **plan, "rule": list(rules)}}


SMALL_DENSE = _doc({"numel_below": 1000, "compressor": "none"}, {"default": True, "compressor": TOPK_EF}, warmup_steps=20)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 8)
        self.conv = torch.nn.Conv1d(8, 8, 3)
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 4)
        self.scale = torch.nn.Parameter(torch.ones(3))


def test_parse_small_dense() -> None:
    plan = parse_plan(SMALL_DENSE, "f.toml")
    assert plan == Plan("p", (Rule("none", numel_below=1000), Rule(TOPK_EF, default=True)), warmup_steps=20)
    assert plan.label == "plan:p"
    assert [r.label() for r in plan.rules] == ["numel < 1000 → none", f"default → {TOPK_EF}"]
    assert plan.spec_at(0, 19) == "bf16" and plan.spec_at(0, 20) == "none" and plan.spec_at(1, 20) == TOPK_EF


def test_toml_round_trip(tmp_path: Path) -> None:
    plans = [parse_plan(SMALL_DENSE, "f"),
             Plan("loco", (Rule("bf16", kind="norm"), Rule("none", name="fc.*", numel_below=10),
                           Rule("blockint:bits=8", default=True)), local_steps=8, outer=Outer(lr=0.5, momentum=0.8, nesterov=False))]
    for plan in plans:
        path = tmp_path / "x.toml"
        path.write_text(plan.to_toml())
        assert load_plan(path) == plan
        assert plan_from_spec(f"plan:{path}") == plan


def test_plan_from_spec_other_text() -> None:
    assert plan_from_spec("topk:density=0.1") is None


def test_name_defaults_to_file_stem(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[plan]\n[[plan.rule]]\ndefault = true\ncompressor = "bf16"\n')
    assert load_plan(path).name == "mine"


def test_spec_spelled_as_registered() -> None:
    plan = parse_plan(_doc({"default": True, "compressor": "topk:density=0.01"}), "f")
    assert plan.rules[0].compressor == "topk:density=0.01"


def test_describe_is_json_and_complete() -> None:
    import json

    d = parse_plan(SMALL_DENSE, "f").describe()
    assert json.loads(json.dumps(d)) == d
    assert d["rules"][0] == {"numel_below": 1000, "compressor": "none", "label": "numel < 1000 → none"}
    assert d["warmup_steps"] == 20 and d["local_steps"] == 1


@pytest.mark.parametrize("doc, message", [
    (_doc({"numel_below": 10, "compressor": "none"}), "no default rule"),
    (_doc({"default": True, "compressor": "none"}, {"numel_below": 10, "compressor": "none"}), "must be the last"),
    (_doc({"default": True, "compressor": "none", "kind": "norm"}), "takes no kind norm"),
    (_doc({"default": True, "compressor": "none"}, {"default": True, "compressor": "bf16"}), "both default"),
    (_doc({"kind": "normal", "compressor": "none"}, {"default": True, "compressor": "none"}), "unknown kind 'normal'"),
    (_doc({"compressor": "none"}, {"default": True, "compressor": "none"}), "needs name, kind or numel_below"),
    (_doc({"default": True, "compressor": "topk:densty=0.1"}), "rule 1: compressor"),
    (_doc({"default": True, "compressor": "nosuch"}), "unknown compressor"),
    (_doc({"default": True, "compressor": "none", "colour": 1}), "unknown key 'colour'"),
    (_doc({"default": True, "compressor": "none"}, local_steps=0), "local_steps: expected an integer ≥ 1"),
    (_doc({"default": True, "compressor": "powersgd"}, local_steps=8), "powersgd is a stateful powersgd protocol"),
    (_doc({"default": True, "compressor": "onebit"}, local_steps=2), "onebit is a stateful"),
    (_doc({"default": True, "compressor": "none"}, outer={"lr": 0.7}), "local_steps > 1 only"),
    (_doc({"default": True, "compressor": "none"}, local_steps=2, outer={"lr": -1}), "lr: expected a number"),
    (_doc({"default": True, "compressor": "none"}, local_steps=2, outer={"beta": 1}), "unknown key 'beta'"),
    (_doc({"default": True, "compressor": "none"}, warmup="bogus"), "warmup"),
    (_doc({"default": True, "compressor": "none"}, speed=3), "unknown key 'speed'"),
    ({"plan": {"name": "p"}}, "needs [[plan.rule]]"),
])
def test_bad_plans(doc: dict, message: str) -> None:
    with pytest.raises(PlanError) as err:
        parse_plan(doc, "f.toml")
    assert message in str(err.value) and str(err.value).startswith("f.toml")
    assert "\n" not in str(err.value)


def test_local_steps_with_error_feedback_is_fine() -> None:
    plan = parse_plan(_doc({"default": True, "compressor": "blockint:bits=8"}, local_steps=8), "f")
    assert plan.local_steps == 8 and plan.outer == Outer()
    assert needs_every_step(TOPK_EF) is None and needs_every_step("lgc") is not None


def test_load_plan_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"no \[plan\] table"):
        (tmp_path / "a.toml").write_text("x = 1\n")
        load_plan(tmp_path / "a.toml")
    with pytest.raises(PlanError):
        load_plan(tmp_path / "missing.toml")
    with pytest.raises(PlanError, match="not valid TOML"):
        (tmp_path / "b.toml").write_text("[plan\n")
        load_plan(tmp_path / "b.toml")
    with pytest.raises(PlanError, match="needs a file"):
        plan_from_spec("plan:")


def test_warmup_longer_than_run() -> None:
    plan = parse_plan(SMALL_DENSE, "f")
    check_run_length(plan, 21)
    with pytest.raises(PlanError, match="warmup_steps = 20 is not shorter than the run's 20 steps"):
        check_run_length(plan, 20)


def test_tensor_kinds() -> None:
    infos = {i.name: i for i in tensor_infos(Net())}
    assert {n: i.kind for n, i in infos.items()} == {
        "emb.weight": "embedding", "conv.weight": "convolution", "conv.bias": "bias", "norm.weight": "norm",
        "norm.bias": "bias", "fc.weight": "linear", "fc.bias": "bias", "scale": None}
    assert infos["fc.weight"].numel == 32 and infos["fc.weight"].shape == (4, 8)
    assert set(KINDS) >= {i.kind for i in infos.values() if i.kind}


def test_assign_first_match_wins_and_rows() -> None:
    infos = tensor_infos(Net())
    plan = parse_plan(_doc({"kind": "bias", "compressor": "none"}, {"numel_below": 100, "compressor": "bf16"},
                           {"name": "conv.*", "compressor": "fp16"}, {"default": True, "compressor": TOPK_EF}), "f")
    a = assign(plan, infos)
    assert a.spec_of("conv.bias") == "none"  # a bias, small and conv.*: rule 1 first
    assert a.spec_of("norm.weight") == "bf16" and a.spec_of("conv.weight") == "fp16" and a.spec_of("emb.weight") == TOPK_EF
    rows = a.rows({i.name: 1.0 for i in infos})
    assert [r["tensors"] for r in rows] == [3, 3, 1, 1]
    assert sum(r["elements"] for r in rows) == sum(i.numel for i in infos)
    assert [r["bytes_share"] for r in rows] == [3 / 8, 3 / 8, 1 / 8, 1 / 8]
    assert a.to_dict()["conv.bias"] == 1
    assert overlaps(plan, infos) == ["rule 2 (numel < 100) also matches 3 tensors rule 1 took (first wins)",
                                     "rule 3 (name 'conv.*') also matches 1 tensor rule 1 took (first wins)"]


def test_rule_that_matches_nothing() -> None:
    infos = tensor_infos(Net())
    plan = parse_plan(_doc({"name": "decoder.*", "compressor": "none"}, {"default": True, "compressor": "bf16"}), "f")
    with pytest.raises(PlanError, match=r"rule 1 \(name 'decoder.\*'\) matches no tensor of the model's 8"):
        assign(plan, infos)
    shadowed = parse_plan(_doc({"numel_below": 10**9, "compressor": "none"}, {"kind": "norm", "compressor": "bf16"},
                               {"default": True, "compressor": "bf16"}), "f")
    with pytest.raises(PlanError, match="taken by earlier rules"):
        assign(shadowed, infos)
    no_kind = [TensorInfo("a", 10, None, (10,))]
    plan = parse_plan(_doc({"kind": "norm", "compressor": "none"}, {"default": True, "compressor": "bf16"}), "f")
    with pytest.raises(PlanError, match="no module"):
        assign(plan, no_kind)


def test_kinds_by_class_name() -> None:
    """Hugging Face's Conv1D is GPT-2's linear layer; RMSNorm-like and *Embeddings classes by their names."""

    class Conv1D(torch.nn.Module):  # transformers.pytorch_utils.Conv1D: weight (in, out), bias
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(4, 6))
            self.bias = torch.nn.Parameter(torch.zeros(6))

    class LlamaRMSNorm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))

    class ViTEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cls_token = torch.nn.Parameter(torch.zeros(1, 1, 4))

    m = torch.nn.ModuleDict({"c_attn": Conv1D(), "ln": LlamaRMSNorm(), "emb": ViTEmbeddings(),
                             "conv": torch.nn.Conv2d(1, 2, 3, bias=False)})
    assert {i.name: i.kind for i in tensor_infos(m)} == {"c_attn.weight": "linear", "c_attn.bias": "bias", "ln.weight": "norm",
                                                        "emb.cls_token": "embedding", "conv.weight": "convolution"}
