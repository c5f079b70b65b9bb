"""The tuning table and the "Tuned knobs" line: searched knobs as a range, choices per study."""

import pandas as pd

from gemkd.experiments.report.tuning_table import (
    MAX_LISTED,
    fmt_knob,
    knob_rows,
    tried_cell,
    tuned_line,
)


def _search(worlds=(0, 1), lags=(0,), trials=10) -> pd.DataFrame:
    """A replicated search: ``trials`` values of alpha per (lag, world) study, one chosen."""
    rows = []
    for lag in lags:
        for w in worlds:
            for t in range(trials):
                alpha = 0.1 + 0.08 * t + 0.001 * w + 0.0001 * lag
                val_ne = 0.9 + 0.01 * w + 0.002 * abs(t - 3 - w)  # a search that mattered
                rows.append({"variant": "kd", "teacher_lag_days": lag, "world": w, "trial": t,
                             "param": "alpha", "value": alpha, "val_ne": val_ne,
                             "chosen": t == 3 + w})
    return pd.DataFrame(rows)


def test_fmt_knob_rounds_floats_keeps_integers_and_text():
    assert fmt_knob(0.8152168007913249) == "0.8152"
    assert fmt_knob(16.0) == "16"
    assert fmt_knob(1e-5) == "1e-05"
    assert fmt_knob("adam") == "adam"


def test_a_short_list_is_listed_a_search_shows_its_range_and_trials():
    few = pd.Series([0.5, 1.0, 2.0, 1.0])
    assert tried_cell(few, 4) == "0.5, 1, 2"
    many = pd.Series([0.1 * i for i in range(1, MAX_LISTED + 3)])
    assert tried_cell(many, 16, 2) == "0.1 – 0.8 (8 trials × 2 studies)"
    assert tried_cell(many, 8) == "0.1 – 0.8 (8 trials)"
    assert tried_cell(many, 9, 2) == "0.1 – 0.8 (9 trials in 2 studies)"


def test_knob_rows_label_each_studys_choice_and_average_their_val_ne():
    rows = knob_rows(_search(worlds=(0, 1), lags=(0, 3)), ["kd"])
    assert len(rows) == 1
    variant, param, tried, chosen, val_ne = rows[0]
    assert (variant, param) == ("kd", "alpha")
    assert tried.endswith("(10 trials × 4 studies)")
    # world w chose trial 3 + w; the lag adds 0.0001 (shown in 4 significant digits)
    assert chosen == ("0.34 (lag 0, world 0); 0.421 (lag 0, world 1); "
                      "0.3403 (lag 3, world 0); 0.4213 (lag 3, world 1)")
    assert val_ne == "0.9050"  # mean of 0.90 and 0.91 over the four studies


def test_one_study_shows_the_bare_choice():
    rows = knob_rows(_search(worlds=(0,)).drop(columns=["world"]), ["kd"])
    assert rows[0][3] == "0.34"


def test_tuned_line_groups_knobs_by_world_at_the_reports_lag():
    tuning = _search(worlds=(0, 1), lags=(0, 3))
    line = tuned_line(tuning, ["kd", "absent"], lag=3)
    assert line == "kd: alpha=0.3403 (world 0); alpha=0.4213 (world 1)"
    assert tuned_line(_search(worlds=(2,)), ["kd"], lag=0) == "kd: alpha=0.502"  # trial 5
    assert tuned_line(None, ["kd"], lag=0) == "none"


def test_per_seed_draws_are_studies_of_their_own():
    """``tuning.draws: per_seed``: each final seed's search is a study, labelled by its seed;
    its edge choices are counted per draw, and the plot tells the draws apart."""
    from gemkd.experiments.report.tuning_edges import edge_sentences

    tuning = _search(worlds=(0,)).assign(draw=0)
    other = _search(worlds=(0,)).assign(draw=1, chosen=lambda d: d.trial == 9)
    both = pd.concat([tuning, other], ignore_index=True)
    both["at_edge"] = (both.chosen & (both.trial == 9)).map({True: "high", False: ""})
    (row,) = knob_rows(both, ["kd"])
    assert row[2].endswith("(10 trials × 2 studies)")
    assert row[3] == "0.34 (seed 0); 0.82 (seed 1)"
    assert tuned_line(both, ["kd"], lag=0) == "kd: alpha=0.34 (seed 0); alpha=0.82 (seed 1)"
    (sentence,) = edge_sentences(both)
    assert "in 1 of 2 studies (0.82 at lag 0, world 0, seed 1)" in sentence
    shared = tuning.assign(draw=float("nan"))  # one search for every seed: no draw label
    assert tuned_line(shared, ["kd"], lag=0) == "kd: alpha=0.34"


def test_tuning_plot_labels_each_draw(tmp_path):
    from gemkd.experiments.report import tuning_plots

    labels = [tuning_plots._study_label(0, 1.0, d) for d in (0, float("nan"), None)]
    assert labels == ["lag 0, world 1, seed 0", "lag 0, world 1", "lag 0, world 1"]
    rows = pd.concat([_search(worlds=(0,)).assign(draw=d) for d in (0, 1)], ignore_index=True)
    (png,) = tuning_plots.write_tuning_plots(rows, tmp_path)
    assert png.name == "tuning_kd.png" and png.read_bytes()[:4] == b"\x89PNG"


def test_tuned_rows_are_a_row_per_variant_and_study_a_column_per_knob():
    from gemkd.experiments.report.tuning_table import tuned_rows

    kd = _search(worlds=(0, 1), lags=(0, 3))
    aux = kd.assign(variant="kd_aux", param="aux_beta", value=kd["value"] * 10)
    header, rows = tuned_rows(pd.concat([kd, kd.assign(param="temperature"), aux]),
                              ["kd_aux", "absent", "kd"], lag=3)
    assert header == ["variant", "world", "aux_beta", "alpha", "temperature"]
    # world w chose trial 3 + w; lag 3 adds 0.0003 to alpha
    assert rows == [["kd_aux", "0", "3.403", "—", "—"], ["kd_aux", "1", "4.213", "—", "—"],
                    ["kd", "0", "—", "0.3403", "0.3403"], ["kd", "1", "—", "0.4213", "0.4213"]]
    header, rows = tuned_rows(_search(worlds=(2,)), ["kd"], lag=0)
    assert (header, rows) == (["variant", "alpha"], [["kd", "0.502"]])  # one study: no labels
    assert tuned_rows(None, ["kd"], lag=0) == ([], [])
