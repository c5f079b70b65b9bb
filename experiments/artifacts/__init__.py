"""Student artifacts: a run's kept student exported as one folder (weights, config, input
contract with its id vocabularies, code table, ``torch.export`` program) and scored outside
``gemkd run`` (DESIGN §6.3)."""

from gemkd.experiments.artifacts.scoring import score_artifact
from gemkd.experiments.artifacts.student_artifact import StudentArtifact, encode_raw
from gemkd.experiments.artifacts.student_export import export_student

__all__ = ["StudentArtifact", "encode_raw", "export_student", "score_artifact"]
