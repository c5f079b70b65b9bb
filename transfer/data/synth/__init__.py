"""The synthetic ads world with known ground truth (DESIGN §2.3)."""

from gemkd.transfer.data.synth.config import SynthConfig
from gemkd.transfer.data.synth.generate import generate

__all__ = ["SynthConfig", "generate"]
