"""2-process CPU DDP export through ``StoreCallback``: one store, each example_id exactly once.

The Trainer runs in a child ``sys.executable`` process (Lightning's subprocess launcher then
starts rank 1 from the same script), so this pytest process is never forked. Two exports over
an odd-length dataset (101 rows):

- ``default``: Lightning's own predict sampler (``UnrepeatedDistributedSampler``), which splits
  the rows 51/50 without padding;
- ``padded``: a plain ``DistributedSampler`` (``use_distributed_sampler=False``), which pads
  rank 1 with a repeat of row 0 — the duplicate the store must drop by example_id.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from gemkd.transfer.store import TeacherJoin, TeacherStore

ROOT = Path(__file__).resolve().parents[3]
N = 101
TASKS = ["click", "conversion"]

SCRIPT = textwrap.dedent('''
    import sys
    from pathlib import Path

    import lightning.pytorch as pl
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from gemkd.transfer.store import StoreCallback, weights_hash

    N, T, E = {n}, {t}, 6
    OUT = Path(sys.argv[1])


    def dataset():
        g = torch.Generator().manual_seed(1)
        return TensorDataset(torch.randn(N, 4, generator=g), torch.arange(N) * 5 + 3,
                             torch.arange(N) % 3 + 1, torch.arange(N) % 2,
                             torch.arange(N) % 7, torch.arange(N) + 10)


    class Teacher(pl.LightningModule):
        def __init__(self, padded):
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Linear(4, T + E)
            self.padded = padded

        def forward(self, x):
            return self.net(x)

        def predict_dataloader(self):
            ds = dataset()
            if not self.padded:
                return DataLoader(ds, batch_size=8)
            sampler = DistributedSampler(ds, num_replicas=self.trainer.world_size,
                                         rank=self.trainer.global_rank, shuffle=False)
            return DataLoader(ds, batch_size=8, sampler=sampler)

        def predict_step(self, batch, batch_idx):
            x, example_id, day, domain, user_id, ts = batch
            out = self(x)
            return dict(example_id=example_id, day=day, domain=domain, user_id=user_id, ts=ts,
                        logits=out[:, :T], emb=out[:, T:])


    if __name__ == "__main__":
        torch.set_num_threads(1)
        for name in ("default", "padded"):
            model = Teacher(padded=name == "padded")
            cb = StoreCallback(OUT / name, tasks={tasks!r}, layer="trunk", emb_dim=E,
                               emb_dtype="float16", teacher_name="fake",
                               teacher_version=weights_hash(model.state_dict()),
                               trained_until_day=0, rows_per_shard=16, row_group_rows=8)
            trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False,
                                 callbacks=[cb], enable_progress_bar=False,
                                 enable_model_summary=False, default_root_dir=OUT,
                                 use_distributed_sampler=not model.padded)
            trainer.predict(model, return_predictions=False)
            # every rank sees the finished store as soon as predict returns
            assert (OUT / name / "manifest.json").is_file(), trainer.global_rank
            if trainer.global_rank == 0:
                with torch.no_grad():
                    np.save(OUT / "expected.npy", model(dataset().tensors[0]).numpy())
''').format(n=N, t=len(TASKS), tasks=TASKS)


@pytest.mark.slow  # an integration run of several seconds: make test-slow
def test_ddp_export_has_each_example_once(tmp_path):
    script = tmp_path / "export.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(script), str(out)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    expected = np.load(out / "expected.npy")
    ids = np.arange(N) * 5 + 3
    for name, dups in (("default", 0), ("padded", 1)):
        store = TeacherStore(out / name)
        store.check_tasks(TASKS)
        got = store.read(columns=["example_id"]).column(0).to_numpy()
        assert sorted(got.tolist()) == ids.tolist(), name  # each example_id exactly once
        m = store.manifest
        assert m.extra["duplicates_removed"] == dups and m.extra["world_size"] == 2
        assert {s.file[:9] for s in m.shards} == {"part-r000", "part-r001"}, name
        assert sum(s.rows for s in m.shards) == N == m.total_rows
        res = TeacherJoin(store, with_emb=True)(ids[::-1])
        assert res.found.all()
        np.testing.assert_allclose(res.logits, expected[::-1, :2], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(res.emb, expected[::-1, 2:], rtol=1e-3, atol=1e-3)
        assert sorted(p.name for p in (out / name).iterdir() if not p.name.startswith("part-")) \
            == ["manifest.json"]
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert leftovers == []
