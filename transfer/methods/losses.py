"""Distillation losses (DESIGN §5), elementwise so callers can mask rows without a teacher."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def kd_bce(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
           temperature: float | torch.Tensor = 1.0) -> torch.Tensor:
    """``T² · BCE(σ(z_s/T), σ(z_t/T))`` per element: the soft-target loss of Hinton et al.

    The T² keeps gradient magnitudes comparable across temperatures. The teacher side carries
    no gradient (targets are data). At T = 1 (the default) the divisions and the scale are
    skipped: ``x / 1`` and ``1 · x`` are ``x`` bit for bit, and so are their gradients. A tensor
    ``temperature`` (a pack's per-member knob) always takes the general form.

    Parameters
    ----------
    student_logits
        The student's logits ``[B, T]`` (or any shape the teacher's broadcast to).
    teacher_logits
        The teacher's (or a Student Adapter's) logits; detached here.
    temperature
        T > 0: softens both sides; the loss is scaled by T².

    Returns
    -------
    torch.Tensor
        The loss per element, in ``student_logits``' shape (mask rows without a teacher
        before reducing).
    """
    t = _knob(temperature, student_logits)
    if not isinstance(t, torch.Tensor) and t == 1.0:
        target = torch.sigmoid(teacher_logits.detach()).expand_as(student_logits)
        return F.binary_cross_entropy_with_logits(student_logits, target, reduction="none")
    target = torch.sigmoid(teacher_logits.detach() / t).expand_as(student_logits)
    return t * t * F.binary_cross_entropy_with_logits(student_logits / t, target,
                                                      reduction="none")


def _knob(value: float | torch.Tensor, like: torch.Tensor) -> float | torch.Tensor:
    """A knob as a loss's arithmetic takes it: a float; a pack's per-member 0-dim float64
    tensor as it is (vmap casts it as a Python float); a stacked pack's ``[K, 1, 1]`` one in
    ``like``'s dtype (a float64 tensor with dimensions would promote the loss to float64)."""
    if isinstance(value, torch.Tensor):
        return value.to(like.dtype) if value.dim() else value
    return float(value)


def kd_mse(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Squared logit difference per element (logit matching)."""
    return (student_logits - teacher_logits.detach()).pow(2)


def kd_bce_calibrated(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      temperature: float | torch.Tensor = 1.0,
                      found: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`kd_bce` whose temperature shapes the student's deviations from its mean but
    leaves the mean itself to the untempered, calibrated target (``kd loss: bce_cal``).

    Why: the tempered loss's gradient per row is ``r = T·(σ(z_s/T) − σ(z_t/T))``; a shift δ of
    every student logit (its output bias) moves with the batch mean r̄, so a student that cannot
    match the teacher row by row settles where ``mean σ(z_s/T) = mean σ(z_t/T)`` — the means of
    targets pulled toward 0.5 — not where ``mean σ(z_s) = mean σ(z_t)``: as T grows the loss
    tends to logit matching, which for logits around −4 fits the mean *logit* and leaves the
    student under-predicting whenever its logits spread less than the teacher's (Jensen: σ is
    convex there). The calibration term replaces that mean component of the gradient with the
    untempered residual's, ``u = σ(z_s) − σ(z_t)``, per task over the ``found`` rows:

        ∂ℓ_i/∂z_s,i = r_i − r̄ + ū,     via     ℓ_i = kd_bce_i + (z_s,i − sg(z_s,i))·sg(ū − r̄)

    (sg: stop-gradient). The term's value is exactly 0, so the logged loss is kd_bce's; its
    gradient along δ is ū, so a student with an output bias is stationary only where its mean
    probability is the target's — the teacher's, or the Student Adapter's realigned one — at
    any T, while the deviations r_i − r̄ are Hinton's tempered ones. The row-wise optimum
    (z_s = z_t: r = u = 0) is unchanged. At T = 1, r = u and the term vanishes: a float
    ``temperature`` of 1 returns :func:`kd_bce` itself, bit for bit (a tensor one, a pack's
    knob, equals it to rounding).
    """
    soft = kd_bce(student_logits, teacher_logits, temperature)
    t = _knob(temperature, student_logits)
    if not isinstance(t, torch.Tensor) and t == 1.0:
        return soft
    s, z_t = student_logits.detach(), teacher_logits.detach()
    tempered = t * (torch.sigmoid(s / t) - torch.sigmoid(z_t / t))
    plain = torch.sigmoid(s) - torch.sigmoid(z_t)
    shift = _row_mean(plain - tempered, found)  # [tasks]: ū − r̄
    return soft + (student_logits - s) * shift.to(soft.dtype)


def _row_mean(values: torch.Tensor, found: torch.Tensor | None) -> torch.Tensor:
    """Per-column mean of ``values [B, T]`` over the rows where ``found [B]`` is true (each
    member's, ``[K, 1, T]``, of a stacked ``[K, B, T]``)."""
    stacked = values.dim() == 3
    if found is None or (found.device.type == "cpu" and bool(found.all())):
        return values.mean(-2, keepdim=stacked)
    m = found.to(values.dtype).unsqueeze(-1)
    return (values * m).sum(-2, keepdim=stacked) / m.sum().clamp_min(1.0)


#: KD's ``loss`` forms: ``(student_logits, teacher_logits, temperature, found) → [B, T]``
KD_LOSSES = {
    "bce": lambda s, t, temperature=1.0, found=None: kd_bce(s, t, temperature),
    "bce_cal": kd_bce_calibrated,
    "mse": lambda s, t, temperature=1.0, found=None: kd_mse(s, t),
}


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over the rows where ``mask`` is true (``values [B, T]``, ``mask [B]``); 0 if none;
    each member's (``[K, 1, 1]``) of a stacked pack's ``values [K, B, T]``.

    A host mask that is all true (every row found its teacher, the usual case) takes
    ``values.mean()``: the masked form's sum of ``values · 1`` over ``B·T`` is that mean bit for
    bit, gradient included, in 2 ops instead of 8 (a check on the host costs no sync; a device
    mask keeps the masked form rather than wait for one)."""
    if values.dim() == 3:  # a stacked pack's [K, B, T]: each member's, [K, 1, 1]
        if mask is None or (mask.device.type == "cpu" and bool(mask.all())):
            return values.mean(dim=(1, 2), keepdim=True)
        m = mask.to(values.dtype).unsqueeze(-1).expand_as(values[0])
        return (values * m).sum(dim=(1, 2), keepdim=True) / m.sum().clamp_min(1.0)
    if mask is None or (mask.device.type == "cpu" and bool(mask.all())):
        return values.mean()
    m = mask.to(values.dtype).unsqueeze(-1).expand_as(values)
    return (values * m).sum() / m.sum().clamp_min(1.0)
