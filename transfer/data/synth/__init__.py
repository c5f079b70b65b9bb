"""The synthetic ads world with known ground truth (DESIGN §2.3)."""

from gemkd.transfer.data.synth.generate import generate
from gemkd.transfer.data.synth.synth_config import SynthConfig

__all__ = ["SynthConfig", "generate"]
