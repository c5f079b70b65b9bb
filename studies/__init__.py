"""Research studies: scripts that measure what gemkd's methods and teachers are worth (teacher
aging and scaling, the teacher ablation, the Student Adapter probe, base-rate drift), each run
from the repository root as ``python -m studies.<name>`` and writing the figures that
docs/results/TEACHER.md, docs/results/STALENESS.md and docs/results/RESULTS.md cite. Speed
benchmarks live in ``benchmarks/``; both read a run directory only through
:class:`gemkd.experiments.run_dir.RunDir`. Not part of the installed package."""
