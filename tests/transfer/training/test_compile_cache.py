"""torch.compile's cache folder: gemkd's own by default, the user's when named, and a
``TORCHINDUCTOR_CACHE_DIR`` already set left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from gemkd.transfer.training.compile_cache import (
    ENV,
    TORCH_ENV,
    compile_cache_dir,
    use_compile_cache,
)


def test_default_folder_follows_xdg_and_the_gemkd_variable(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache_dir() == tmp_path / "xdg" / "gemkd" / "torch_compile"
    monkeypatch.setenv(ENV, str(tmp_path / "mine"))
    assert compile_cache_dir() == tmp_path / "mine"


def test_use_points_inductor_at_the_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(TORCH_ENV, raising=False)
    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    got = use_compile_cache()
    assert got == (tmp_path / "cache").resolve() and got.is_dir()
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    assert Path(cache_dir()) == got  # where inductor writes its FX graphs


def test_a_folder_the_user_set_for_torch_wins(monkeypatch, tmp_path):
    monkeypatch.setenv(TORCH_ENV, str(tmp_path / "torch_own"))
    assert use_compile_cache(tmp_path / "ignored") == tmp_path / "torch_own"
    assert not (tmp_path / "ignored").exists()


def test_an_uncreatable_folder_raises(monkeypatch, tmp_path):
    monkeypatch.delenv(TORCH_ENV, raising=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError):
        use_compile_cache(tmp_path / "file" / "sub")
