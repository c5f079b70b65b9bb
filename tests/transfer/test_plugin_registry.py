"""Built-in plug-in names registered beside their classes (``transfer.plugins.Registry``): each
table holds exactly the classes its layer's modules register, a name resolves to its class,
and a name taken twice is one ConfigError naming both classes."""

from __future__ import annotations

import pytest

from gemkd.adapters.methods import BUILTIN_METHODS
from gemkd.students.student_registry import BUILTIN_STUDENTS, resolve_student_class
from gemkd.teachers.teacher_registry import BUILTIN_TEACHERS, resolve_teacher_class
from gemkd.transfer.errors import ConfigError
from gemkd.transfer.plugins import Registry, resolve_class
from gemkd.transfer.solaris import BUILTIN_POLICIES, SpeculationPolicy, build_policy


def test_each_table_names_the_classes_registered_beside_them():
    assert dict(BUILTIN_STUDENTS) == {"mlp": "gemkd.students.mlp_student.MLPStudent",
                                      "dcn": "gemkd.students.dcn.DCNStudent",
                                      "seq_pool": "gemkd.students.seq_pool.SeqPoolStudent"}
    assert dict(BUILTIN_TEACHERS) == {"gem": "gemkd.teachers.gem.gem_model.GEM",
                                      "domain_fm": "gemkd.teachers.domain_fm.DomainFM",
                                      "mlp": "gemkd.teachers.mlp_ranker.MLPRanker"}
    assert dict(BUILTIN_METHODS) == {
        "kd": "gemkd.transfer.methods.kd.KD",
        "aux_head": "gemkd.adapters.methods.aux_head_method.AuxHead",
        "adapter": "gemkd.adapters.methods.student_adapter_method.Adapter",
        "repr": "gemkd.adapters.methods.repr_features.Repr",
        "param_share": "gemkd.adapters.methods.param_share.ParamShare",
        "solaris": "gemkd.adapters.methods.solaris.Solaris"}
    assert list(BUILTIN_POLICIES) == ["recent", "popular", "cooccur"]


def test_kd_registers_in_transfer_where_its_class_lives():
    from gemkd.transfer.methods.base import BUILTIN_METHODS as core
    from gemkd.transfer.methods.kd import KD

    assert core is BUILTIN_METHODS
    assert resolve_class("kd", "method", core) is KD


def test_names_resolve_to_their_classes():
    from gemkd.students.mlp_student import MLPStudent
    from gemkd.teachers.gem.gem_model import GEM
    from gemkd.transfer.solaris.policy import Popular

    assert resolve_student_class("mlp") is MLPStudent
    assert resolve_teacher_class("gem") is GEM
    assert isinstance(build_policy("popular"), Popular)
    assert issubclass(Popular, SpeculationPolicy)


def test_a_name_taken_twice_names_both_classes():
    reg = Registry("widget")

    @reg.register("a")
    class First:
        pass

    assert reg["a"].endswith("First") and len(reg) == 1
    assert reg.register("a")(First) is First  # the same class again: no change
    with pytest.raises(ConfigError, match=r"built-in widget name 'a' is registered twice: "
                                          r".*First and .*Second"):
        @reg.register("a")
        class Second:
            pass
    assert list(reg) == ["a"] and reg["a"].endswith("First")


def test_an_unknown_name_lists_the_registered_ones():
    with pytest.raises(ConfigError, match=r"not a built-in \(mlp, dcn, seq_pool\)"):
        resolve_student_class("mlpp")
