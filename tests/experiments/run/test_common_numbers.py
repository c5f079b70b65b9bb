"""Common random numbers across variants (DESIGN §6): a seed gives every variant whose student
takes no representation input the same initial student, as ``build_module`` makes it (the
variant's methods first, then the student, seeded once before both), so a paired difference
does not carry two initialisations' luck; a representation input (kd_repr, full) widens the
student and shares only the tensors drawn before it; another seed shares none."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from gemkd.experiments.run.methods import build_methods
from gemkd.experiments.spec import load_spec
from gemkd.students import build_student
from gemkd.transfer.data.schema import DatasetSchema

SHARED = ("kd", "kd_aux", "kd_aux_adapter", "hierarchical")


def _student(spec, schema, variant: str, seed: int, repr_dim: int = 0) -> dict:
    pl.seed_everything(seed, verbose=False)
    build_methods(spec, next(v for v in spec.variants if v.name == variant), {})
    args = {**spec.student.init_args, **({"repr_dim": repr_dim} if repr_dim else {})}
    student = build_student({"class_path": spec.student.class_path, "init_args": args},
                            schema, list(spec.student_tasks))
    return student.state_dict()


@pytest.fixture(scope="module")
def setup(tiny_data):
    return load_spec("experiments/quickstart.yaml"), DatasetSchema.load(tiny_data)


@pytest.mark.parametrize("variant", SHARED)
def test_a_seed_gives_every_variant_the_same_initial_student(setup, variant):
    spec, schema = setup
    base, other = _student(spec, schema, "baseline", 3), _student(spec, schema, variant, 3)
    assert base.keys() == other.keys()
    assert all(torch.equal(base[k], other[k]) for k in base)


def test_a_representation_input_and_another_seed_draw_other_weights(setup):
    spec, schema = setup
    base = _student(spec, schema, "baseline", 3)
    wide = _student(spec, schema, "kd_repr", 3, repr_dim=8)
    same = [k for k in base if k in wide and base[k].shape == wide[k].shape
            and torch.equal(base[k], wide[k])]
    assert 0 < len(same) < len(base)
    again = _student(spec, schema, "baseline", 4)
    drawn = [k for k in base if not torch.equal(base[k], again[k])]
    assert len(drawn) > len(base) / 2  # (a constant init, e.g. a norm's ones, is the same)
