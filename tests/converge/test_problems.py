"""The problems gcbench converge trains (gcbench/workloads/problems.py): tasks, zoo and user models, their metric and errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gcbench.core.errors import ParamError, SourceError, UnknownNameError
from gcbench.workloads.problems import (
    EVAL_BATCH_OFFSET,
    TASK_OPTIMIZERS,
    ConvergeError,
    ModelProblem,
    TaskProblem,
    make_optimizer,
    make_problem,
)
from gcbench.workloads.tasks import TASKS, sklearn_available


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_named_optimizer_of_each_task_is_the_one_the_task_builds(name: str) -> None:
    params = [torch.nn.Parameter(torch.zeros(3))]
    own = TASKS[name].optimizer(object.__new__(TASKS[name]), params, 0.1)  # optimizer() reads nothing of the task
    kind, momentum = TASK_OPTIMIZERS[name]
    ours = make_optimizer(kind, params, 0.1, momentum, 0.0)
    assert type(ours) is type(own)
    assert ours.param_groups[0].get("momentum") == own.param_groups[0].get("momentum")


def test_make_optimizer_knows_sgd_adam_adamw_and_names_the_rest() -> None:
    params = [torch.nn.Parameter(torch.zeros(3))]
    assert isinstance(make_optimizer("adamw", params, 1e-3, None, 0.01), torch.optim.AdamW)
    assert make_optimizer("sgd", params, 0.1, 0.5, 1e-4).param_groups[0]["weight_decay"] == 1e-4
    with pytest.raises(UnknownNameError, match="did you mean 'adam'"):
        make_optimizer("adan", params, 0.1, None, 0.0)


def test_charlstm_gives_each_worker_its_own_batches_and_the_seed_changes_them() -> None:
    p = TaskProblem("charlstm")
    assert p.metric == "accuracy" and p.defaults.optimizer == "adam"
    a = p.instance(0, 3, 4)
    step = next(a.batches)
    assert len(step) == 3 and not torch.equal(step[0][0], step[1][0])
    b = p.instance(1, 3, 4)
    assert not torch.equal(next(b.batches)[0][0], step[0][0])
    loss, acc = a.evaluate(a.model)
    assert loss > 0 and 0 <= acc <= 1


@pytest.mark.skipif(not sklearn_available(), reason="scikit-learn not installed")
def test_digits_cnn_trains_on_the_digits_images() -> None:
    p = TaskProblem("digits_cnn")
    sp = p.instance(0, 2, 16)
    x, _ = next(sp.batches)[0]
    assert sp.model(x).shape == (16, 10) and sum(q.numel() for q in sp.model.parameters()) == 38_282


def test_a_user_factory_with_labels_is_measured_by_accuracy_and_a_custom_loss_by_neg_loss() -> None:
    p = make_problem(None, "tests.user_factory:tiny")
    assert isinstance(p, ModelProblem) and p.metric == "accuracy" and p.user
    assert make_problem(None, "tests.user_factory:tiny_mse").metric == "neg_loss"
    sp = p.instance(2, 2, None)
    loss, acc = sp.evaluate(sp.model)
    assert 0 <= acc <= 1 and loss > 0


def test_held_out_batches_are_never_training_batches() -> None:
    seen = []
    p = make_problem(None, "tests.user_factory:tiny")
    p._load_model = lambda name, seed, **kw: _recording(seen, name, seed)  # type: ignore[method-assign]
    sp = p.instance(0, 2, None)
    next(sp.batches)
    assert {i for i, _ in seen if i >= EVAL_BATCH_OFFSET} == set(range(EVAL_BATCH_OFFSET, EVAL_BATCH_OFFSET + 8))
    assert {i for i, _ in seen if i < EVAL_BATCH_OFFSET} == {0}


def _recording(seen: list, name: str, seed: int):
    from gcbench.sources.zoo import load_model

    zm = load_model(name, seed)
    make = zm.make_batch

    def make_batch(i: int, w: int):
        seen.append((i, w))
        return make(i, w)

    zm.make_batch = make_batch
    return zm


def test_a_zoo_model_trains_on_its_live_data_with_accuracy() -> None:
    p = make_problem(None, "zoo:mlp", batch=8)
    assert p.spec == "mlp" and p.metric == "accuracy" and p.defaults.optimizer == "sgd"
    x, _ = next(p.instance(0, 2, 8).batches)[1]
    assert x.shape == (8, 784)


def test_a_factory_file_is_imported_by_path(tmp_path: Path) -> None:
    f = tmp_path / "my model.py"
    f.write_text("import torch\n\ndef factory(seed=0):\n    torch.manual_seed(seed)\n    m = torch.nn.Linear(4, 2)\n"
                 "    def make_batch(i, w):\n        g = torch.Generator().manual_seed(i * 7 + w)\n"
                 "        return torch.randn(5, 4, generator=g), torch.randint(0, 2, (5,), generator=g)\n"
                 "    return m, make_batch\n", encoding="utf-8")
    p = make_problem(None, f"{f}:factory")
    assert p.metric == "accuracy" and p.spec == f"{f}:factory"
    with pytest.raises(SourceError, match="no such file"):
        make_problem(None, f"{tmp_path / 'nope.py'}:factory")


def test_targets_that_need_a_loss_the_factory_does_not_give_are_one_error(tmp_path: Path) -> None:
    f = tmp_path / "regress.py"
    f.write_text("import torch\n\ndef factory(seed=0):\n"
                 "    return torch.nn.Linear(4, 1), lambda i, w: (torch.randn(3, 4), torch.randn(3, 1))\n", encoding="utf-8")
    with pytest.raises(ConvergeError, match="not integer class labels, and the factory returns no loss_fn"):
        make_problem(None, f"{f}:factory")


def test_naming_the_problem_needs_exactly_one_of_task_and_model() -> None:
    with pytest.raises(ParamError, match="exactly one"):
        make_problem("charlstm", "mlp")
    with pytest.raises(ParamError, match="exactly one"):
        make_problem(None, None)
    with pytest.raises(UnknownNameError, match="did you mean 'charlstm'"):
        make_problem("charlstn", None)
    with pytest.raises(SourceError):
        make_problem(None, "tests.user_factory:not_a_tuple")


def test_a_hugging_face_model_without_transformers_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    with pytest.raises(ConvergeError, match=r"needs transformers \(pip install 'gcbench\[hf\]'\)"):
        make_problem(None, "hf:gpt2")
