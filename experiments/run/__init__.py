"""``gemkd run``: the benchmark protocol of DESIGN §6.1 as one resumable job."""
