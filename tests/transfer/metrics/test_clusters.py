"""The per-user evaluation files as stored: compressed, the loss sums in float32 (each within
2^-24 of its float64 sum), the counts whole and exact, read back as the float64 sums."""

from __future__ import annotations

import zipfile

import numpy as np
import torch

from gemkd.experiments.report.cluster_files import load_folder
from gemkd.transfer.metrics.clusters import LOSS_DTYPE, ClusterLoss, compact, load_clusters


def _thin(n: int = 4000, seed: int = 0) -> tuple[ClusterLoss, dict[str, np.ndarray]]:
    """A thin log's evaluation: most users with one row, two tasks, the second half labelled."""
    rng = np.random.default_rng(seed)
    user = rng.integers(0, 3 * n, n) * 1_000_003  # large, sparse ids
    labels = (rng.random((n, 2)) < 0.7).astype(np.float32)
    mask = np.ones((n, 2), bool)
    mask[:, 1] = rng.random(n) < 0.5
    sums = ClusterLoss(2)
    for part in np.array_split(np.arange(n), 3):  # batches
        sums.update(torch.from_numpy(rng.normal(0.8, 1.5, (len(part), 2))),
                    torch.from_numpy(labels[part]), torch.from_numpy(user[part]),
                    torch.zeros(len(part), dtype=torch.long), torch.from_numpy(mask[part]))
    return sums, sums.arrays()


def test_a_file_is_compressed_with_float32_loss_and_exact_counts(tmp_path):
    sums, exact = _thin()
    path = tmp_path / "kd__seed0.npz"
    sums.save(path, ["like", "love"], ["all"], {"like": 0.7, "love": None})
    with zipfile.ZipFile(path) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    stored = load_clusters(path)
    assert stored["loss"].dtype == LOSS_DTYPE == np.float32
    assert stored["n"].dtype == stored["pos"].dtype == np.int32
    np.testing.assert_array_equal(stored["user_id"], exact["user_id"])
    np.testing.assert_array_equal(stored["n"], exact["n"])
    np.testing.assert_array_equal(stored["pos"], exact["pos"])
    rel = np.abs(stored["loss"].astype(np.float64) - exact["loss"]) / np.maximum(exact["loss"],
                                                                                  1e-300)
    assert rel.max() <= 2.0**-24 and rel.max() > 0  # rounded, within half an ulp
    # the report's reader gives float64 sums equal to the stored values
    es = load_folder(tmp_path, world=0, lag=0)
    assert es is not None and es.sums.loss.dtype == np.float64
    np.testing.assert_array_equal(es.sums.loss[0], stored["loss"].astype(np.float64))
    np.testing.assert_array_equal(es.sums.n, exact["n"])
    assert np.isnan(es.sums.base_rate[1]) and es.sums.base_rate[0] == 0.7


def test_soft_counts_are_kept_as_they_are():
    """Counts that are not whole (soft labels summed) are not rounded into integers."""
    arrays = {"user_id": np.array([1, 2]), "domain": np.array([0, 0]),
              "loss": np.ones((2, 1)), "n": np.array([[1.0], [2.0]]),
              "pos": np.array([[0.5], [1.0]])}
    out = compact(arrays)
    assert out["n"].dtype == np.int32 and out["pos"].dtype == np.float64
    np.testing.assert_array_equal(out["pos"], arrays["pos"])
    assert out["domain"].dtype == np.int16 and out["user_id"].dtype == arrays["user_id"].dtype


def test_the_stored_file_is_a_fraction_of_the_float64_one(tmp_path):
    """A thin log's file: about one cluster per row. The compact file is under a fifth of the
    float64 ``np.savez`` the runs wrote before (its arrays, unchanged, side by side)."""
    sums, exact = _thin(n=9000)
    new = tmp_path / "new.npz"
    sums.save(new, ["like", "love"], ["all"], None)
    old = tmp_path / "old.npz"
    np.savez(old, **exact, tasks=np.array(["like", "love"]), domains=np.array(["all"]),
             base_rate=np.full(2, np.nan))
    assert new.stat().st_size < old.stat().st_size / 5
