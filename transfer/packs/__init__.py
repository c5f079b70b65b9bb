"""Packs: K student runs of one class and variant trained together over one read of the stream
(DESIGN §6): the trainer (:mod:`~gemkd.transfer.packs.pack`; what can be packed:
:mod:`~gemkd.transfer.packs.members`, :mod:`~gemkd.transfer.packs.stackable`), its optimiser
and weight average (:mod:`~gemkd.transfer.packs.adamw`, :mod:`~gemkd.transfer.packs.pack_ema`), the
built-in students' stacked forwards, looked up by class
(:mod:`~gemkd.transfer.packs.stacked_students`), and their building blocks
(:mod:`~gemkd.transfer.packs.stacked`). Nothing is imported here: a student imports the
building blocks without the trainer's Lightning."""
