"""Suites run no code they did not earn; validate tells the truth; user code fails in one line.

Issue 13, items 3, 4, 10 and 12: a ``package.module:factory`` named in a suite FILE is imported
only with ``--trust-code`` / ``GCBENCH_TRUST_CODE=1``; ``validate`` imports nothing and says what a
suite would import; seeds handed to user code are in ``[0, 2**31)`` and the user-model example of
``docs/sources.md`` runs as written; a raising factory, ``make_batch`` or loss is one line naming it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.compressors import registry
from gcbench.core.errors import GcbenchError, ParamError
from gcbench.measure.suite import parse_suite
from gcbench.measure.suite_checks import imported_code, require_trusted_code
from gcbench.sources.synthetic import SyntheticSource
from gcbench.sources.trace import write_trace

runner = CliRunner()
#: the page that shows users how to name their own model (it moved there from the README)
SOURCES_DOC = Path(__file__).resolve().parents[2] / "docs" / "sources.md"

# a module whose import and call leave marks on disk, so a test can prove nothing ran
SENTINEL = '''
import pathlib
import torch

HERE = pathlib.Path(__file__).parent
(HERE / "imported.flag").write_text("imported")


def factory(seed: int = 0):
    (HERE / "called.flag").write_text(str(seed))
    torch.manual_seed(seed)
    model = torch.nn.Linear(6, 3)

    def make_batch(batch_index: int, worker: int):
        g = torch.Generator().manual_seed(seed * 1_000_003 + batch_index * 101 + worker)
        return torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)

    return model, make_batch


def raising(seed: int = 0):
    raise ValueError("bad config: layers must be > 0")


def bad_batches(seed: int = 0):
    def make_batch(batch_index: int, worker: int):
        raise RuntimeError("shard file missing")

    return torch.nn.Linear(6, 3), make_batch


def bad_loss(seed: int = 0):
    _, make_batch = factory(seed)

    def loss_fn(out, y):
        raise KeyError("logits")

    return torch.nn.Linear(6, 3), make_batch, loss_fn


def bad_forward(seed: int = 0):
    _, make_batch = factory(seed)
    return torch.nn.Linear(5, 3), make_batch  # 6 features in, 5 expected


def bad_batch_value(seed: int = 0):
    return torch.nn.Linear(6, 3), lambda batch_index, worker: torch.zeros(4, 6)


def seed_echo(seed: int = 0):
    model, make_batch = factory(seed)
    model.seen_seed = seed
    return model, make_batch
'''


@pytest.fixture
def usermod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[tuple[str, Path]]:
    """A fresh importable module (unique name per test) in its own folder; yields (name, folder)."""
    name = "gcb_user_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:12]
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / f"{name}.py").write_text(SENTINEL, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delenv("GCBENCH_TRUST_CODE", raising=False)
    yield name, folder
    sys.modules.pop(name, None)


def _suite(tmp_path: Path, model: str, kind: str = "live") -> Path:
    p = tmp_path / "shared.toml"
    p.write_text(textwrap.dedent(f"""
        name = "shared"
        [[sources]]
        kind = "{kind}"
        model = "{model}"
        workers = 2
        steps = 1
        [metrics]
        timing = false
        repeats = 2
        [[compressors]]
        name = "topk"
        """), encoding="utf-8")
    return p


def _flat(output: str) -> str:
    return output.replace("\n", "")


# -- item 3: a suite file cannot make gcbench import code ------------------------------------


@pytest.mark.parametrize("kind", ["live", "synthetic"])
def test_suite_code_is_refused_without_opt_in_and_nothing_runs_or_is_written(tmp_path: Path, usermod: tuple[str, Path],
                                                                             kind: str) -> None:
    name, folder = usermod
    suite = _suite(tmp_path, f"{name}:factory", kind)
    runs = tmp_path / "runs"
    r = runner.invoke(app, ["run", str(suite), "--out", str(runs), "-q"])
    assert r.exit_code == 1, r.output
    line = _flat(r.output)
    assert "Traceback" not in r.output
    # one line naming the file, the key, the code and how to allow it
    assert f"error: {suite}: sources[0].model = '{name}:factory'" in line
    assert "--trust-code" in line and "GCBENCH_TRUST_CODE=1" in line
    assert not (folder / "imported.flag").exists() and not (folder / "called.flag").exists()
    assert not runs.exists() or not list(runs.iterdir())  # no empty "running" file left behind


def test_validate_imports_nothing_and_lists_the_code(tmp_path: Path, usermod: tuple[str, Path]) -> None:
    name, folder = usermod
    r = runner.invoke(app, ["validate", str(_suite(tmp_path, f"{name}:factory"))])
    assert r.exit_code == 0, r.output
    assert "ok:" in r.output
    assert f"would import: {name}:factory (needs --trust-code)" in _flat(r.output)
    assert not (folder / "imported.flag").exists()


def test_validate_of_a_zoo_suite_lists_no_code(tmp_path: Path) -> None:
    r = runner.invoke(app, ["validate", str(_suite(tmp_path, "mlp"))])
    assert r.exit_code == 0, r.output
    assert "would import" not in r.output


@pytest.mark.parametrize("opt_in", ["flag", "env"])
def test_trust_code_opt_in_runs_the_suite(tmp_path: Path, usermod: tuple[str, Path], monkeypatch: pytest.MonkeyPatch,
                                          opt_in: str) -> None:
    name, folder = usermod
    args = ["run", str(_suite(tmp_path, f"{name}:factory")), "--out", str(tmp_path / "runs"), "-q"]
    if opt_in == "flag":
        args.append("--trust-code")
    else:
        monkeypatch.setenv("GCBENCH_TRUST_CODE", "1")
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert (folder / "called.flag").exists()


def test_env_zero_is_not_an_opt_in(tmp_path: Path, usermod: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    name, folder = usermod
    monkeypatch.setenv("GCBENCH_TRUST_CODE", "0")
    r = runner.invoke(app, ["run", str(_suite(tmp_path, f"{name}:factory")), "--out", str(tmp_path / "runs"), "-q"])
    assert r.exit_code == 1 and not (folder / "imported.flag").exists()


def test_a_model_named_on_the_command_line_needs_no_opt_in(tmp_path: Path, usermod: tuple[str, Path]) -> None:
    name, folder = usermod
    r = runner.invoke(app, ["run", "--model", f"{name}:factory", "--workers", "2", "--steps", "1", "-c", "topk",
                            "--no-timing", "--out", str(tmp_path / "runs"), "-q"])
    assert r.exit_code == 0, r.output
    assert (folder / "called.flag").exists()
    # the suite's own code is replaced by the command line's model: the file's factory is never called
    r = runner.invoke(app, ["run", str(_suite(tmp_path, f"{name}:raising")), "--model", f"{name}:factory", "--no-timing",
                            "--out", str(tmp_path / "runs2"), "-q"])
    assert r.exit_code == 0, r.output


def test_run_help_states_the_trust_rule() -> None:
    r = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    text = " ".join(r.output.split())
    assert "--trust-code" in text and "GCBENCH_TRUST_CODE" in text
    assert "no --trust-code needed" in text


def test_imported_code_classifies_names() -> None:
    def suite(model: str, kind: str = "live") -> object:
        return parse_suite({"name": "x", "sources": [{"kind": kind, "model": model}], "compressors": [{"name": "topk"}]})

    assert [(r.key, r.target) for r in imported_code(suite("os:abort"))] == [("sources[0].model", "os:abort")]
    assert [r.target for r in imported_code(suite("a.b:c", "synthetic"))] == ["a.b:c"]  # layer shapes build it too
    assert imported_code(suite("resnet18")) == [] and imported_code(suite("hf:gpt2")) == []
    with pytest.raises(GcbenchError, match=r"^f\.toml: sources\[0\]\.model = 'os:abort'"):
        require_trusted_code(suite("os:abort"), "f.toml", trust_code=False)
    require_trusted_code(suite("os:abort"), "f.toml", trust_code=True)
    require_trusted_code(suite("resnet18"), "f.toml", trust_code=False)


# -- item 4: seeds handed to user code; the docs' example runs as written -----------------


def _readme_user_model() -> str:
    blocks = re.findall(r"```python\n(.*?)```", SOURCES_DOC.read_text(encoding="utf-8"), re.S)
    [code] = [b for b in blocks if b.startswith("# mypkg/models.py")]
    return code


@pytest.fixture
def readme_pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pkg = tmp_path / "readme" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "models.py").write_text(_readme_user_model(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(pkg.parent))
    yield
    for mod in ("mypkg.models", "mypkg"):
        sys.modules.pop(mod, None)


def test_readme_user_model_runs_as_written(tmp_path: Path, readme_pkg: None) -> None:
    r = runner.invoke(app, ["run", "--model", "mypkg.models:factory", "--workers", "2", "--steps", "2", "-c", "topk",
                            "--no-timing", "--json", "--out", str(tmp_path / "runs")])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert [c["status"] for c in data["cases"]] == ["ok"]
    r = runner.invoke(app, ["compare", "topk", "randomk", "--model", "mypkg.models:factory", "--workers", "2", "--steps", "1",
                            "--rounds", "1", "--json", "--out", str(tmp_path / "runs")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["record", "--model", "mypkg.models:factory", "--steps", "1", "--workers", "2", "--seed", "12345",
                            "--out", str(tmp_path / "trace"), "-q"])
    assert r.exit_code == 0, r.output


# -- item 10: user code that raises is one line naming it ------------------------------------


@pytest.mark.parametrize(("factory", "message"), [
    ("raising", " raised ValueError: bad config: layers must be > 0"),
    ("bad_batches", ": make_batch(0, 0) raised RuntimeError: shard file missing"),
    ("bad_loss", ": loss_fn raised KeyError"),
    ("bad_forward", ": the forward pass raised RuntimeError"),
    ("bad_batch_value", ": make_batch(0, 0) must return (inputs, targets), got Tensor"),
])
def test_raising_user_code_is_one_line_in_run_compare_record(tmp_path: Path, usermod: tuple[str, Path], factory: str,
                                                              message: str) -> None:
    name, _ = usermod
    model = f"{name}:{factory}"
    cmds = [
        ["run", "--model", model, "-c", "topk", "-c", "qsgd", "--no-timing", "--out", str(tmp_path / "runs"), "-q"],
        ["compare", "topk", "randomk", "--model", model, "--out", str(tmp_path / "runs"), "-q"],
        ["record", "--model", model, "--out", str(tmp_path / "trace"), "-q"],
    ]
    for cmd in cmds:
        r = runner.invoke(app, cmd)
        assert r.exit_code == 1, (cmd, r.output)
        assert "Traceback" not in r.output, (cmd, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), cmd
        assert f"model '{model}'{message}" in _flat(r.output), (cmd, r.output)
    # run reports the source failure of every case in its one summary line
    r = runner.invoke(app, cmds[0])
    assert _flat(r.output).count("case(s) failed") == 1


# -- item 12: validate tells the truth; specs are strict --------------------------------------


def _validate(tmp_path: Path, text: str) -> tuple[int, str]:
    p = tmp_path / "v.toml"
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    r = runner.invoke(app, ["validate", str(p)])
    assert "Traceback" not in r.output
    return r.exit_code, _flat(r.output)


def test_validate_unknown_zoo_model_did_you_mean(tmp_path: Path) -> None:
    for kind in ("live", "synthetic"):
        code, out = _validate(tmp_path, f'[[sources]]\nkind = "{kind}"\nmodel = "resnet19"\n[[compressors]]\nname = "topk"\n')
        assert code == 1
        assert "v.toml: sources[0].model: unknown model 'resnet19'; did you mean 'resnet18'" in out


def test_validate_zoo_options_and_user_model_syntax(tmp_path: Path) -> None:
    code, out = _validate(tmp_path, '[[sources]]\nkind = "live"\nmodel = "mlp"\nimage_size = 32\n[[compressors]]\nname = "topk"\n')
    assert code == 1 and "sources[0].model: model 'mlp' has no option 'image_size'" in out
    code, out = _validate(tmp_path, '[[sources]]\nkind = "live"\nmodel = "os:"\n[[compressors]]\nname = "topk"\n')
    assert code == 1 and "package.module:factory" in out


def test_validate_trace_folders(tmp_path: Path) -> None:
    suite = '[[sources]]\nkind = "trace"\npath = "{path}"\n{extra}\n[[compressors]]\nname = "{comp}"\n'
    code, out = _validate(tmp_path, suite.format(path=tmp_path / "nope", extra="", comp="topk"))
    assert code == 1 and "sources[0].path:" in out and "trace folder does not exist" in out
    (tmp_path / "empty").mkdir()
    code, out = _validate(tmp_path, suite.format(path=tmp_path / "empty", extra="", comp="topk"))
    assert code == 1 and "manifest.json: missing" in out
    trace = write_trace(SyntheticSource([(8, 4)], workers=1, steps=2, seed=1), tmp_path / "t", "syn", 1)
    assert _validate(tmp_path, suite.format(path=trace, extra="", comp="topk"))[0] == 0
    code, out = _validate(tmp_path, suite.format(path=trace, extra="steps = 3", comp="topk"))
    assert code == 1 and "sources[0].steps: 3 requested, the trace" in out and "has 2" in out
    # LGC is defined across workers: a one-worker trace cannot run it
    code, out = _validate(tmp_path, suite.format(path=trace, extra="", comp="lgc"))
    assert code == 1 and "compressors[0] (lgc) needs at least 2 workers; sources[0] has 1" in out


def test_validate_every_bundled_suite() -> None:
    from gcbench.measure.suite import measurement_suites

    for path in measurement_suites():
        r = runner.invoke(app, ["validate", str(path)])
        assert r.exit_code == 0, (path, r.output)
        assert "would import" not in r.output  # bundled suites use the zoo only


@pytest.mark.parametrize(("line", "message"), [
    ("workers = true", "sources[0].workers: Input should be a valid integer"),
    ("steps = 2.0", "sources[0].steps: Input should be a valid integer"),
    ('scale = "2"', "sources[0].scale: Input should be a valid number"),
    ("shapes = [[4294967296, 4294967296]]", "at most 2,147,483,648"),
    ("shapes = [[true, 3]]", "sources[0].shapes[0][0]: Input should be a valid integer"),
])
def test_suite_values_are_not_coerced(tmp_path: Path, line: str, message: str) -> None:
    code, out = _validate(tmp_path, f'[[sources]]\nkind = "synthetic"\nshapes = [[8]]\n{line}\n[[compressors]]\nname = "topk"\n'
                          if not line.startswith("shapes") else
                          f'[[sources]]\nkind = "synthetic"\n{line}\n[[compressors]]\nname = "topk"\n')
    assert code == 1 and message in out, out


def test_repeated_spec_key_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ParamError, match="parameter 'density' is given twice"):
        registry.parse_spec("topk:density=0.1,density=0.2")
    with pytest.raises(ParamError, match="given twice"):
        registry.parse_spec("topk:density=0.1, density =0.1")
    assert registry.parse_spec("topk:density=0.1,index_coding=int32")[1] == {"density": 0.1, "index_coding": "int32"}
    runs = tmp_path / "runs"
    r = runner.invoke(app, ["run", "-c", "topk:density=0.1,density=0.2", "--out", str(runs), "-q"])
    assert r.exit_code == 1 and "given twice" in _flat(r.output) and not runs.exists()


def test_unknown_model_on_the_command_line_leaves_no_results_file(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    r = runner.invoke(app, ["run", "--model", "resnet19", "-c", "topk", "--out", str(runs), "-q"])
    assert r.exit_code == 2 and "did you mean 'resnet18'" in _flat(r.output)
    assert not runs.exists() or not list(runs.iterdir())


def test_user_factories_get_seeds_below_2_31(usermod: tuple[str, Path]) -> None:
    from gcbench.measure.runner import derive_seed
    from gcbench.sources import zoo

    name, _ = usermod
    for seed in (0, 5, 2**31 - 1, 2**31, 2**62 + 7, derive_seed(0, "source", 0)):
        got = zoo.load_model(f"{name}:seed_echo", seed).module.seen_seed
        assert 0 <= got < zoo.USER_SEED_LIMIT == 2**31
        assert got == seed % 2**31  # small seeds (record's --seed) reach the factory unchanged


def test_user_code_errors_chain_their_cause(usermod: tuple[str, Path]) -> None:
    from gcbench.core.errors import SourceError
    from gcbench.sources import zoo
    from gcbench.sources.live import LiveSource

    name, folder = usermod
    with pytest.raises(SourceError) as exc:
        zoo.load_model(f"{name}:raising")
    assert isinstance(exc.value.__cause__, ValueError)  # --debug prints this traceback
    with pytest.raises(SourceError) as exc:
        LiveSource(f"{name}:bad_batches", workers=1, steps=1).gradients(0, 0)
    assert isinstance(exc.value.__cause__, RuntimeError) and "make_batch(0, 0)" in str(exc.value)
    (folder / "gcb_broken_import.py").write_text("raise RuntimeError('needs a GPU')\n", encoding="utf-8")
    try:
        with pytest.raises(SourceError, match=r"^model 'gcb_broken_import:f': importing 'gcb_broken_import' raised "
                                              r"RuntimeError: needs a GPU$"):
            zoo.load_model("gcb_broken_import:f")
    finally:
        sys.modules.pop("gcb_broken_import", None)


def test_a_zoo_model_failing_is_a_bug_and_keeps_its_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcbench.sources import architectures
    from gcbench.sources.live import LiveSource

    def broken(self: object, x: object) -> object:
        raise RuntimeError("zoo bug")

    monkeypatch.setattr(architectures.MLP, "forward", broken)
    with pytest.raises(RuntimeError, match="zoo bug"):
        LiveSource("mlp", workers=1, steps=1, batch_size=2).gradients(0, 0)
