"""Transfer methods end to end on the tiny world, with a teacher whose knowledge is known.

The "oracle teacher" writes the world's true logits (optionally shifted: a miscalibrated,
stale-looking teacher) into a real teacher store, so each method's effect has a known sign.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from torch import nn

from gemkd.adapters import StudentAdapter, scale_grad
from gemkd.adapters.methods import Adapter, AuxHead
from gemkd.transfer.data.batch import Batch
from gemkd.transfer.data.datamodule import AdsDataModule
from gemkd.transfer.data.dataset_reader import DatasetReader
from gemkd.transfer.data.schema import DatasetSchema
from gemkd.transfer.distill import DistillModule, StoreTeacher
from gemkd.transfer.errors import StoreError
from gemkd.transfer.methods import KD, MethodContext
from gemkd.transfer.methods.losses import kd_bce
from gemkd.transfer.models import StudentOutput
from gemkd.transfer.store import StoreWriter, TeacherStore

TASKS = ["click", "conversion", "engage"]
LR = 1e-2
EPOCHS = 1


def _oracle_store(data: Path, out: Path, shift: float = 0.0, drop_every: int = 0) -> Path:
    with StoreWriter(out, tasks=TASKS, layer="oracle", emb_dim=1, emb_dtype="float16",
                     teacher_name="oracle", teacher_version="v", trained_until_day=5) as w:
        for b in DatasetReader(data, batch_size=4000):
            keep = torch.ones(len(b), dtype=torch.bool)
            if drop_every:
                keep[::drop_every] = False
            p = b.oracle.clamp(1e-6, 1 - 1e-6)
            logits = torch.log(p) - torch.log1p(-p) + shift
            w.write(example_id=b.example_id[keep], day=b.day[keep], domain=b.domain[keep],
                    user_id=b.user_id[keep], ts=b.ts[keep], logits=logits[keep],
                    emb=p[keep, :1])
    return out


class TinyStudent(nn.Module):
    """User, ad, category and mean history-category embeddings with their products → MLP."""

    def __init__(self, schema: DatasetSchema, n_tasks: int = 1) -> None:
        super().__init__()
        names = [f.name for f in schema.categorical]
        self.cat_col = names.index("ad_category")
        self.id_cols = [names.index("user_id"), names.index("ad_id")]
        self.emb = nn.Embedding(64, 4)
        self.ids = nn.Embedding(4096, 4)
        self.trunk = nn.Sequential(nn.Linear(21 + len(schema.domains), 16), nn.ReLU())
        self.head = nn.Linear(16, n_tasks)
        self.n_domains = len(schema.domains)

    def forward(self, batch: Batch, features=None) -> StudentOutput:
        cat = self.emb(batch.categorical[:, self.cat_col] % 64)
        hist = batch.seq_values["hist_category"].long() % 64
        seg = torch.repeat_interleave(torch.arange(len(batch)), batch.seq_lengths)
        pooled = torch.zeros(len(batch), 4).index_add_(0, seg, self.emb(hist))
        pooled = pooled / batch.seq_lengths.clamp_min(1).unsqueeze(-1)
        dom = nn.functional.one_hot(batch.domain, self.n_domains).float()
        user, ad = self.ids(batch.categorical[:, self.id_cols] % 4096).unbind(1)
        h = self.trunk(torch.cat([cat, pooled, cat * pooled, user, ad, (user * ad).sum(-1,
                                  keepdim=True), dom], dim=-1))
        return StudentOutput(logits=self.head(h), embedding=h)


def _run(data: Path, teacher=None, kd: float | None = None, aux=False, adapter=False,
         seed: int = 0, tasks=("click",)) -> DistillModule:
    """A student trained with plain KD of weight ``kd`` (None: labels only), optionally an
    auxiliary head and a Student Adapter, built as the experiment runner builds them."""
    pl.seed_everything(seed, verbose=False)
    schema = DatasetSchema.load(data)
    tasks = list(tasks)
    student = TinyStudent(schema, len(tasks))
    methods = ([KD(kd_weight=kd)] if kd is not None else []) + ([AuxHead()] if aux else []) \
        + ([Adapter()] if adapter else [])
    store = StoreTeacher(TeacherStore(teacher), tasks) if teacher else None
    ctx = MethodContext(schema=schema, tasks=tasks, domains=schema.domains, lr=LR,
                        student=student, teacher=store, trained_until_day=1,
                        sample_batch=lambda: next(iter(DatasetReader(data, batch_size=8))))
    for m in methods:
        m.setup(ctx)
    module = DistillModule(student, tasks, schema.domains, methods=methods, teacher=store,
                           lr=LR, compute_auc=False, trained_until_day=1)
    dm = AdsDataModule(data, train_days=(0, 4), test_days=(4, 6), batch_size=128,
                       shuffle=False, tasks=tasks, max_seq_len=20)
    trainer = pl.Trainer(max_epochs=EPOCHS, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         accelerator="cpu", deterministic=True)
    trainer.fit(module, datamodule=dm)
    trainer.test(module, datamodule=dm, verbose=False)
    return module


def _ne(module: DistillModule, task: str = "click") -> float:
    return module.last_metrics["test"][f"ne/{task}/all"]


@pytest.fixture(scope="module")
def stores(tiny_data, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stores")
    return {"oracle": _oracle_store(tiny_data, tmp / "oracle"),
            "shifted": _oracle_store(tiny_data, tmp / "shifted", shift=-1.5),
            "holes": _oracle_store(tiny_data, tmp / "holes", drop_every=3)}


@pytest.fixture(scope="module")
def baseline(tiny_data):
    return _ne(_run(tiny_data))


def test_plain_kd_from_a_knowing_teacher_beats_labels_only(tiny_data, stores, baseline):
    kd = _ne(_run(tiny_data, stores["oracle"], 1.0))
    assert kd < baseline - 0.01, (kd, baseline)


def test_no_teacher_rows_means_labels_only(tiny_data, stores, baseline, tmp_path):
    """KD weight 0 with a teacher attached trains exactly like the baseline."""
    same = _ne(_run(tiny_data, stores["oracle"], 0.0))
    assert same == pytest.approx(baseline, abs=1e-9)


def test_masked_rows_get_no_kd(tiny_data, stores):
    teacher = StoreTeacher(TeacherStore(stores["holes"]), ["click"])
    b = next(iter(DatasetReader(tiny_data, batch_size=30)))
    t = teacher(b)
    logits, found = t.logits, t.found
    assert found.tolist() == [i % 3 != 0 for i in range(30)]
    assert torch.all(logits[~found] == 0)
    assert teacher.coverage == pytest.approx(20 / 30)
    with pytest.raises(StoreError, match="student expects"):
        StoreTeacher(TeacherStore(stores["oracle"]), ["purchase"])


def test_auxiliary_head_transfers_and_scales_gradients(tiny_data, stores, baseline):
    x = torch.ones(3, requires_grad=True)
    (scale_grad(x, 0.25) * 2).sum().backward()
    assert torch.allclose(x.grad, torch.full((3,), 0.5))
    aux = _ne(_run(tiny_data, stores["oracle"], 1.0, aux=True))
    assert aux < baseline - 0.005, (aux, baseline)


def test_student_adapter_starts_as_identity_and_fixes_a_miscalibrated_teacher(
        tiny_data, stores, baseline):
    adapter = StudentAdapter(1, 3)
    z = torch.randn(5, 1)
    assert torch.equal(adapter(z, torch.zeros(5, dtype=torch.long)), z)
    kd_weight = 1.0
    plain = _ne(_run(tiny_data, stores["shifted"], kd_weight))
    adapted = _run(tiny_data, stores["shifted"], kd_weight, adapter=True)
    # the adapter learned to undo the -1.5 logit shift, so KD through it beats plain KD
    assert _ne(adapted) < plain - 0.005, (_ne(adapted), plain)
    # and on the evaluation days the adapter's own predictions beat the teacher it adapts
    teacher = StoreTeacher(TeacherStore(stores["shifted"]), ["click"])
    loss = {"teacher": 0.0, "adapter": 0.0}
    with torch.no_grad():
        for b in DatasetReader(tiny_data, days=(4, 6), batch_size=4000, tasks=["click"]):
            z = teacher(b).logits
            za = adapted.methods[-1].adapter(z, b.domain, (b.day - 1).float())
            for name, logits in (("teacher", z), ("adapter", za)):
                loss[name] += nn.functional.binary_cross_entropy_with_logits(
                    logits, b.labels, reduction="sum").item()
    assert loss["adapter"] < 0.97 * loss["teacher"], loss


def test_kd_bce_matches_formula():
    zs, zt, t = torch.tensor([[0.3, -1.0]]), torch.tensor([[2.0, 0.5]]), 2.0
    q, p = torch.sigmoid(zt / t), torch.sigmoid(zs / t)
    expect = t * t * -(q * torch.log(p) + (1 - q) * torch.log(1 - p))
    assert torch.allclose(kd_bce(zs, zt, t), expect, atol=1e-6)
    assert np.isfinite(kd_bce(zs, zt * 100, t).numpy()).all()
