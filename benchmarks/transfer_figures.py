"""bench_transfer's figures: targets, the paired ratio of two candidates' per-round times and
the table ``benchmarks/bench_transfer.py`` prints and writes (docs/results/PERFORMANCE.md
renders it). Kept apart from the measuring so each reads on its own."""

from __future__ import annotations

import statistics

from benchmarks.common import figure

SEPARATE = "_separate"  # the variant with the Student Adapter's ``update: separate``
TARGETS = {"kd": "<= 1.15", "kd_aux_adapter": "<= 1.25", "full": "<= 1.5"}
FLOOR_TARGET = ">= 0.8"
ADDS = {"kd": "+ store join + KD loss", "kd_aux": "+ join + KD on an auxiliary head",
        "kd_aux_adapter": "+ Student Adapter (fused update) and aux head",
        "kd_repr": "+ join + KD + representation features",
        "full": "+ join + KD, aux head and representation features",
        "kd_aux_adapter" + SEPARATE: "+ Student Adapter (update: separate) and aux head"}


def paired(num: list[float], den: list[float]) -> tuple[float | None, str]:
    """The median of the rounds' own ratios ``num[i] / den[i]`` and their interquartile range.

    Each round runs every candidate once, seconds apart, so a round's ratio compares them at
    the same machine speed; this machine's speed drifts by up to 2x over a minute, which a
    ratio of the two lists' medians (different rounds' times) lets through: in one 15-round run
    it put kd_aux at 0.98x the labels-only epoch it extends, its rounds' ratios at 1.10-1.21."""
    ratios = [a / b for a, b in zip(num, den, strict=True)] if len(num) == len(den) else []
    if not ratios:
        return None, ""
    if len(ratios) < 4:
        return statistics.median(ratios), ""
    q = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), f"rounds' ratios: IQR {q[0]:.2f}-{q[2]:.2f}"


#: a student run's fixed costs at most its own work again
RUN_TARGET = "<= 2"


def ratio_figure(name: str, num: list[float], den: list[float], target: str | None = None,
                 error: str = "") -> dict:
    """A figure for the paired ratio of two candidates' per-round times (:func:`paired`)."""
    value, note = paired(num, den)
    return figure(name, None if error else value, "x", target, error or note)


def figures(r: dict, device: str) -> list[dict]:
    med, n = r["epoch_seconds"], r["examples"]
    base = med.get("baseline")
    fit = r["fit_seconds"].get("baseline")
    out = [figure(f"labels-only student epoch (mlp, quickstart student; {n:,} examples, "
                  f"{device})", base, "s"),
           figure(f"labels-only student training rate ({device})",
                  n / base if base else None, "examples/s"),
           figure("train_student's train_seconds ÷ its training epoch (labels-only; fit adds "
                  "Lightning's start-up)",
                  fit / base if fit and base else None)]
    check, times = r["floor_check"], r["epoch_seconds_all"]
    bare, base_all = r["bare_seconds_all"], times.get("baseline", [])
    out.append(ratio_figure(f"labels-only epoch speed ÷ bare PyTorch loop over the same batches "
                            f"held in memory ({device})", bare["bare_memory"], base_all,
                            FLOOR_TARGET))
    out.append(ratio_figure(f"labels-only epoch speed ÷ bare loop over the same loader ({device})",
                            bare["bare_loader"], base_all))
    out.append(ratio_figure("bare loop over the loader ÷ bare in-memory loop speed (what loading "
                            "still costs)", bare["bare_memory"], bare["bare_loader"]))
    out.append(figure(f"bare in-memory loop vs labels-only epoch, {check['steps']} steps: max "
                      "|Δ| of per-step losses and final raw weights (0 = bit-identical)",
                      max(check["max_loss_diff"], check["max_weight_diff"]), "", "<= 0",
                      "bit-identical" if check["identical"] else "NOT bit-identical"))
    for v in r["variants"][1:]:
        out.append(ratio_figure(f"{v} epoch ÷ labels-only ({ADDS[v]}; {device})", times[v],
                                base_all, TARGETS.get(v),
                                r["errors"].get(v) or ("" if v in med else "too few rounds")))
    rate = n / base if base else None
    for key, what in (("loader_projected", "student's columns, as train_student reads them in "
                                           "a sweep: row groups decoded once per worker"),
                      ("loader_decode", "student's columns, every pass decoding its row groups"),
                      ("loader", "every column")):
        reader_rate = r["loader_rows"][key] / r[f"{key}_seconds"]
        out.append(figure(f"student loader ({what})", reader_rate, "examples/s"))
        out.append(figure(f"student loader ({what}) ÷ labels-only training rate",
                          reader_rate / rate if rate else None, "x",
                          ">= 5" if key == "loader_projected" else None))
    for v in ("baseline", "full"):  # what a sweep pays per run beyond the work itself
        if v in med and v in r["eval_seconds"]:
            work = med[v] + r["eval_seconds"][v]
            out.append(figure(f"{v} student run (train_student: build, fit, evaluate, with the "
                              f"lag's inputs open, as a sweep's worker runs it) ÷ its training "
                              f"epoch + evaluation ({device})", r["call_seconds"][v] / work,
                              "x", RUN_TARGET))
    out.append(figure("per-run setup: open + verify teacher store, build join index",
                      r["store_teacher_open_s"], "s"))
    out.append(figure("per-run setup: open code store, build as-of index",
                      r["code_features_open_s"], "s"))
    return out
