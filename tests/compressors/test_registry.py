"""The compressor registry: loud lookups, typed parameters, complete info records.

``test_deterministic_flag_matches_reality`` runs over every registered compressor, so a new
compressor that declares the wrong ``deterministic`` flag fails here without edits.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from gcbench.compressors import registry
from gcbench.compressors._common import k_of
from gcbench.compressors.registry import parse_spec
from gcbench.core.compressor import State
from gcbench.core.errors import GcbenchError, ParamError, UnknownNameError
from gcbench.core.info import CompressorInfo, Param
from tests.conftest import normal

NAMES = registry.names()


def test_foundation_compressors_registered() -> None:
    for name in ("none", "fp16", "bf16", "topk", "randomk", "signsgd", "efsignsgd", "onebit", "terngrad", "qsgd"):
        assert name in NAMES
    assert NAMES == sorted(NAMES)


def test_unknown_name_suggests_close_match() -> None:
    with pytest.raises(UnknownNameError) as exc:
        registry.get("qsdg")
    msg = str(exc.value)
    assert "did you mean 'qsgd'" in msg and "'qsdg'" in msg
    assert isinstance(exc.value, GcbenchError) and isinstance(exc.value, KeyError)
    with pytest.raises(UnknownNameError, match="did you mean 'topk'"):
        registry.create("topkk")
    with pytest.raises(UnknownNameError, match="known: "):
        registry.get("zzzzzz")  # nothing close: no suggestion, but the known names


def test_unknown_parameter_suggests_close_match() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'density'"):
        registry.create("topk", desnity=0.1)
    with pytest.raises(UnknownNameError, match="did you mean 'bucket'"):
        parse_spec("qsgd:buckett=64")


def _card(name: str, **kw: Any) -> CompressorInfo:
    base = {"impl": "tests.compressors.test_registry:_Probe", "version": 1, "description": "d", "paper": "—", "biased": True,
            "stateful": False, "traffic_bytes": 4.0}
    return CompressorInfo(name=name, **{**base, **kw})


def test_registering_a_name_twice_raises() -> None:
    before = registry.get("topk")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(_card("topk"))
    assert registry.get("topk") is before  # the original entry is untouched


def test_a_card_rejects_a_bad_error_feedback_mode() -> None:
    with pytest.raises(ValueError, match="error_feedback"):
        _card("x_never_registered", error_feedback="sometimes")
    assert "x_never_registered" not in registry.names()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"density": 5}, "topk.density: must be in (0, 1], got 5"),
        ({"density": 0}, "topk.density: must be in (0, 1], got 0"),
        ({"density": -0.5}, "must be in (0, 1], got -0.5"),
        ({"density": float("nan")}, "must be in (0, 1], got nan"),
        ({"density": "0.1"}, "must be in (0, 1], got '0.1'"),
        ({"index_coding": "golomb"}, "topk.index_coding: must be one of 'fixed', 'int32', 'delta-varint', 'elias', got 'golomb'"),
        ({"error_feedback": 1}, "topk.error_feedback: must be true or false, got 1"),
    ],
)
def test_parameter_validation_messages(params: dict[str, object], message: str) -> None:
    with pytest.raises(ParamError) as exc:
        registry.create("topk", **params)
    assert message in str(exc.value)


def test_int_parameters() -> None:
    with pytest.raises(ParamError, match=r"qsgd.s: must be in \[1, 1.04858e\+06\], got 0"):
        registry.create("qsgd", s=0)
    with pytest.raises(ParamError, match=r"got 2\.5"):
        registry.create("qsgd", s=2.5)
    with pytest.raises(ParamError, match="got True"):
        registry.create("qsgd", s=True)  # a bool is not an int parameter
    assert registry.create("qsgd", s=4.0).params["s"] == 4 and isinstance(registry.create("qsgd", s=4.0).params["s"], int)


def test_param_range_text() -> None:
    assert Param("a", float, 0.5, "", low=0.0, high=1.0, low_open=True).range_text() == "in (0, 1]"
    assert Param("a", int, 1, "", low=1).range_text() == "in [1, inf)"
    assert Param("a", float, 1.0, "", high=2.0, high_open=True).range_text() == "in (-inf, 2)"
    assert Param("a", float, 1.0, "").range_text() == "a float"


def test_params_are_read_only_and_defaults_filled() -> None:
    c = registry.create("topk", density=0.25)
    assert dict(c.params) == {"density": 0.25, "index_coding": "fixed", "error_feedback": False}
    with pytest.raises(TypeError):
        c.params["density"] = 0.5  # type: ignore[index]
    assert "density=0.25" in repr(c)


def test_parse_spec() -> None:
    assert parse_spec("topk:density=0.1,index_coding=int32") == ("topk", {"density": 0.1, "index_coding": "int32"})
    assert parse_spec(" qsgd : s=4, bucket=64 ,norm=2") == ("qsgd", {"s": 4, "bucket": 64, "norm": "2"})
    assert parse_spec("topk:error_feedback=yes") == ("topk", {"error_feedback": True})
    assert parse_spec("onebit") == ("onebit", {})
    _, params = parse_spec("qsgd:s=1e3")
    assert params == {"s": 1000} and isinstance(params["s"], int)
    with pytest.raises(ParamError, match="key=value"):
        parse_spec("topk:density")
    with pytest.raises(ParamError, match=r"topk.density: must be in \(0, 1\], got 5"):
        parse_spec("topk:density=5")
    with pytest.raises(ParamError, match="got 'abc'"):
        parse_spec("topk:density=abc")
    with pytest.raises(UnknownNameError, match="did you mean 'qsgd'"):
        parse_spec("qsdg:s=4")


def test_split_specs_joins_parameters_to_the_compressor_before_them() -> None:
    """The one comma-list reader, behind ``train``'s compressor list and the CLI's old comma form."""
    assert registry.split_specs("none,topk:density=0.1,error_feedback=true,qsgd") == [
        "none", "topk:density=0.1,error_feedback=true", "qsgd"]
    assert registry.split_specs(["topk", "density=0.1", " , qsgd:s=4,bucket=64"]) == ["topk:density=0.1", "qsgd:s=4,bucket=64"]
    assert registry.split_specs("density=0.1,topk") == ["density=0.1", "topk"]  # nothing before it to continue
    assert registry.split_specs(" , ") == []


def test_k_of_is_ceil_of_density_times_d() -> None:
    assert k_of(0.07, 100) == 7  # 0.07·100 = 7.000000000000001 in binary floating point
    assert k_of(0.29, 100) == 29 and k_of(0.57, 100) == 57
    assert k_of(0.071, 100) == 8  # a real fraction still rounds up
    assert k_of(0.01, 1000) == 10 and k_of(0.001, 999) == 1 and k_of(1.0, 7) == 7
    assert k_of(1e-9, 10) == 1 and k_of(0.5, 0) == 0


@pytest.mark.parametrize("name", NAMES)
def test_info_is_complete(name: str) -> None:
    info = registry.get(name)
    assert info.name == name
    assert isinstance(info.version, int) and info.version >= 1
    assert info.description.strip() and info.paper.strip()
    assert info.error_feedback in ("no", "optional", "always", "own")
    flags = info.flags()
    assert flags.startswith("biased" if info.biased else "unbiased")
    if info.reconstructed:
        assert "RECONSTRUCTED" in flags
    if info.error_feedback in ("always", "own"):
        assert info.stateful
    if info.error_feedback == "optional":
        assert info.param("error_feedback").kind is bool
    d = info.to_dict()
    assert d["name"] == name and len(d["params"]) == len(info.params)
    # every default is itself valid, so create(name) always works
    for p in info.params:
        assert p.validate(p.default) == p.default
    assert registry.create(name).params == info.defaults


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_flag_matches_reality(name: str) -> None:
    """Same input, fresh states with different seeds: identical bytes iff the info says deterministic.

    A 1000-element normal vector first; when its bytes agree, a 400×500 matrix too, since some
    compressors only draw random numbers on large tensors or on matrices (DGC's sampled threshold
    falls back to an exact sort on small tensors and sends vectors dense).
    """
    comp = registry.create(name)
    same = True
    for shape in ((1000,), (400, 500)):
        x = normal(shape, seed=4)
        a = comp.compress(x, State(1)).to_bytes()
        same = a == comp.compress(x, State(2)).to_bytes() == comp.compress(x, State(3)).to_bytes()
        # the same seed always reproduces, whatever torch's global generator holds
        torch.manual_seed(len(shape))
        assert comp.compress(x, State(1)).to_bytes() == a
        if not same:
            break
    declared = registry.get(name).deterministic
    outcome = "identical" if same else "different"
    assert same == declared, f"{name}: declared deterministic={declared}, but different seeds gave {outcome} bytes"


# ----------------------------------------------------------------------------- flags: one rule for list and results


def test_flags_follow_the_resolved_parameters() -> None:
    """Optional error feedback and parameter-dependent bias show in the flags of each configuration."""
    dither = registry.get("topk_dither")
    assert dither.resolve_flags().stateful and dither.resolve_flags().error_feedback == "on"  # EF on by default
    off = dither.resolve_flags({"error_feedback": False})
    assert not off.stateful and off.error_feedback == "off"
    assert registry.get("topk").flags() == "biased, EF:off"
    assert registry.get("topk").flags({"error_feedback": True}) == "biased, stateful, EF:on"
    tern = registry.get("terngrad")
    assert tern.resolve_flags().biased and tern.resolve_flags({"clip": 1.0}).biased  # clipping: E[C(x)] = clip(x) ≠ x
    assert not tern.resolve_flags({"clip": 0.0}).biased
    assert tern.bias_note() == "unbiased when clip=0.0" and registry.get("qsgd").bias_note() == ""
    assert registry.create("topk_dither").stateful and not registry.create("topk_dither", error_feedback=False).stateful
    with pytest.raises(ParamError, match=r"terngrad\.clip"):
        tern.resolve_flags({"clip": -1.0})


def test_unbiased_when_must_name_a_valid_setting_of_a_biased_compressor() -> None:
    params = (Param("c", float, 1.0, "c", low=0.0),)
    with pytest.raises(UnknownNameError):
        _card("test_probe_a", unbiased_when={"nope": 0.0}, params=params)
    with pytest.raises(ValueError, match="needs biased=True"):
        _card("test_probe_b", biased=False, unbiased_when={"c": 0.0}, params=params)
    with pytest.raises(ParamError):
        _card("test_probe_c", unbiased_when={"c": -1.0}, params=params)


def test_random_when_must_name_a_valid_setting_of_a_deterministic_compressor() -> None:
    params = (Param("c", float, 1.0, "c", low=0.0),)
    card = _card("test_probe_d", random_when={"c": 0.0}, params=params)
    assert card.resolve_flags().deterministic and not card.resolve_flags({"c": 0.0}).deterministic
    with pytest.raises(UnknownNameError):
        _card("test_probe_e", random_when={"nope": 0.0}, params=params)
    with pytest.raises(ValueError, match="needs deterministic=True"):
        _card("test_probe_f", deterministic=False, random_when={"c": 0.0}, params=params)
    with pytest.raises(ParamError):
        _card("test_probe_g", random_when={"c": -1.0}, params=params)


@pytest.fixture(scope="module")
def default_run() -> dict[str, dict]:
    """One tiny run of every registered compressor at its default parameters (plus TernGrad unclipped)."""
    import tempfile

    from gcbench.measure.runner import run_suite
    from gcbench.measure.suite import parse_suite

    suite = {
        "name": "flags", "seed": 1,
        "sources": [{"kind": "synthetic", "shapes": [[40, 50]], "workers": 2, "steps": 1}],
        "metrics": {"repeats": 3, "timing": False},
        "compressors": [{"name": n, "label": n} for n in NAMES]
        + [{"name": "terngrad", "label": "terngrad-noclip", "params": {"clip": 0.0}}],
    }
    with tempfile.TemporaryDirectory() as out:
        outcome = run_suite(parse_suite(suite), out)
    assert not outcome.failed, outcome.failed
    return {r["label"]: r for r in outcome.records}


@pytest.fixture(scope="module")
def listed() -> dict[str, dict]:
    """``gcbench list --json``, by name."""
    import json

    from typer.testing import CliRunner

    from gcbench.cli import app

    res = CliRunner().invoke(app, ["list", "--json"])
    assert res.exit_code == 0, res.output
    return {d["name"]: d for d in json.loads(res.output)}


@pytest.mark.parametrize("name", NAMES)
def test_listed_flags_equal_the_flags_a_run_records(name: str, default_run: dict[str, dict], listed: dict[str, dict]) -> None:
    """``gcbench list`` and a results record of the same (default) configuration agree on every flag."""
    recorded = default_run[name]["flags"]
    assert recorded == registry.get(name).resolve_flags().to_dict()
    assert {k: listed[name][k] for k in recorded} == recorded
    # the table's text is the same Flags object's text
    assert registry.get(name).flags() == registry.get(name).resolve_flags(default_run[name]["params"]).text()


def test_terngrad_records_omega_hat_only_without_clipping(default_run: dict[str, dict]) -> None:
    """Clipped TernGrad is biased: no ω̂ (it would hide the bias); unclipped it is unbiased and has one."""
    clipped, plain = default_run["terngrad"], default_run["terngrad-noclip"]
    assert clipped["flags"]["biased"] and clipped["fidelity"]["omega_hat"] is None
    assert not plain["flags"]["biased"] and plain["fidelity"]["omega_hat"]["mean"] == plain["fidelity"]["q"]["mean"]


def test_list_table_shows_the_resolved_flags() -> None:
    """The table row says topk_dither is stateful (EF on by default) and TernGrad biased unless clip = 0."""
    from typer.testing import CliRunner

    from gcbench.cli import app

    res = CliRunner().invoke(app, ["list"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    rows = {line.split("│")[1].strip(): line for line in res.output.splitlines() if line.count("│") > 3}
    assert "biased, stateful, EF:on" in rows["topk_dither"]
    assert "biased (unbiased when clip=0.0)" in rows["terngrad"]
    assert "unbiased" not in rows["terngrad"].split("│")[3].replace("(unbiased when", "")


def test_cards_are_read_without_importing_torch_or_an_implementation() -> None:
    """`gcbench list` and suite validation read every card without torch (the reason list starts in well under a second)."""
    import subprocess
    import sys

    code = ("import sys\nfrom gcbench.compressors import registry\n"
            "cards = registry.infos()\nassert len(cards) >= 20\n"
            "[c.resolve_flags() for c in cards]\n"
            "heavy = [m for m in ('torch', 'numpy', 'numba', 'gcbench.compressors.topk') if m in sys.modules]\n"
            "print(','.join(heavy))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"reading the cards imported {out}"


@pytest.mark.parametrize("name", registry.names())
def test_every_card_names_a_class_that_carries_it(name: str) -> None:
    card = registry.get(name)
    cls = card.load()
    assert cls.info is card and registry.create(name).info is card
    assert card.traffic_bytes > 0
    assert isinstance(registry.create(name).params, card.record)


def test_params_are_a_typed_frozen_record() -> None:
    comp = registry.create("powersgd", rank=4)
    assert comp.params.rank == 4 and comp.params["rank"] == 4 and dict(comp.params)["ef_residual"] == "aggregate"
    assert comp.params == {**registry.get("powersgd").defaults, "rank": 4}
    with pytest.raises(AttributeError):
        comp.params.rank = 5  # type: ignore[misc]
    with pytest.raises(KeyError):
        comp.params["nope"]
    card = registry.get("powersgd")
    assert card.resolve(comp.params) is comp.params  # a record of this card is not validated again


def test_a_card_whose_class_does_not_carry_it_is_one_clear_error() -> None:
    card = _card("test_orphan", impl="gcbench.compressors.topk:TopK")
    with pytest.raises(GcbenchError, match="does not carry this card"):
        card.load()
    with pytest.raises(GcbenchError, match="cannot load its implementation"):
        _card("test_missing", impl="no_such_module:X").load()


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["list"], ["list", "--params"], ["list", "dgc"], ["list", "suites"],
                                  ["validate", "suites/cnn.toml"], ["validate", "suites/llm.toml"]],
                         ids=lambda a: " ".join(a))
def test_quick_commands_never_import_torch(argv: list[str]) -> None:
    """The start-up budget (list and validate under 1 s, --help under 0.5 s) holds because these import no torch (~2 s alone)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\nfrom gcbench.__main__ import main\n"
            f"sys.argv = ['gcbench', *{argv!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
            "sys.stderr.write(f'\\nRC={code} TORCH={\"torch\" in sys.modules}\\n')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert "RC=0 TORCH=False" in r.stderr, r.stderr[-2000:]
