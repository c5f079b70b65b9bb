"""The synthetic ads world with known ground truth (DESIGN §2.3)."""

from transfer.data.synth.config import SynthConfig
from transfer.data.synth.generate import generate

__all__ = ["SynthConfig", "generate"]
