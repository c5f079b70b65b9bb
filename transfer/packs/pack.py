"""K student runs of one student class trained together over one read of the stream.

Why: a tiny student's step is dispatch-bound, and every seed and trial of one variant streams
the same batches in the same order. A pack builds its members as their own runs are built
(each seeded, each a :class:`~gemkd.transfer.distill.DistillModule`) and trains them in one
pass: each batch is read once and the teacher asked once; the optimiser
(:class:`~gemkd.transfer.packs.adamw.PackAdamW`) and the weight average
(:class:`~gemkd.transfer.packs.pack_ema.PackEMA`) update every member's weights in one member-major
buffer, each at the member's own lr, weight decay and EMA decay; there is no Trainer.

Two ways to run the members' steps (``batched``):

* ``False`` (exact): each member's :meth:`DistillModule.training_loss` on its own module, one
  backward over the sum of the losses (each member's gradient is its own: the sum passes it
  exactly 1), torch's foreach AdamW and StreamEMA's update. Every op is the one a Lightning run
  alone calls, so each member's losses, weights and evaluation equal that run's bit for bit.
* ``True`` (batched): the members' parameters stacked ``[K, ...]``. A student with a stacked
  forward registered for its class (the built-ins: :mod:`gemkd.transfer.packs.stacked_students`)
  runs its K copies natively, one kernel per op; the methods' hooks and losses (and any other
  student's whole step) run once under ``torch.func.vmap`` over ``functional_call`` of the first
  member (the template). Knobs the members differ in (KD's α and T, the auxiliary head's β: any
  float attribute that differs) enter the vmapped part as per-member float64 0-dim tensors; the
  methods cast them to the loss's dtype where they weight a loss, as torch casts a Python float.
  The optimiser is torch's fused AdamW kernel and the average a lerp, each per member. On the
  CPU every member's slice is computed as its own call (batched matmuls, per-member optimiser
  and average calls, index ops that accumulate a member's column in its own row order), so a
  member's numbers do not depend on K or on the other members: a member of a pack of K equals
  the same run in a pack of one bit for bit (losses, weights, evaluation; every built-in
  variant, ``tests/experiments/run/test_packs.py``). They differ from the exact mode's in the
  last bits (another kernel per op, and training grows those bits), so the experiments define a
  run alone as a batched pack of one (:func:`gemkd.experiments.run.packs.run_alone`).

The loop is written by hand, not Lightning's: Lightning's per-step hook dispatch is a cost the
pack removes, and a Trainer drives one module's optimisers. A run today is not checkpointed
mid-fit (a killed run is run again); a killed pack is run again the same way. Members that
cannot be packed (parameter shapes, their own optimisers, a gradient clip; in batched mode also
attributes other than floats that differ) raise :class:`PackError` at construction; an op vmap
cannot batch raises on the first step. The caller then trains them one by one. Those checks
and the members' knobs: :mod:`~gemkd.transfer.packs.members`; whether a step runs stacked:
:mod:`~gemkd.transfer.packs.stackable`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from gemkd.transfer.data.batch import Batch
from gemkd.transfer.distill.module import DistillModule
from gemkd.transfer.methods.base import StepState, TeacherTargets, TransferMethod
from gemkd.transfer.models import StudentOutput
from gemkd.transfer.packs.adamw import MemberGroup, PackAdamW
from gemkd.transfer.packs.members import (
    PackError,
    aliases,
    member_knobs,
    param_settings,
    same_value,
)
from gemkd.transfer.packs.pack_ema import PackEMA
from gemkd.transfer.packs.stackable import method_stacks, stacked_forward
from gemkd.transfer.training.table_optim import ROW_RULES

__all__ = ["PackError", "PackedDistill", "member_knobs", "method_stacks", "stacked_forward"]

log = logging.getLogger(__name__)


class _Call(nn.Module):
    """Calls a named method of ``module``, so ``functional_call`` can run any of them."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, name: str, *args: Any) -> Any:
        return getattr(self.module, name)(*args)


class PackedDistill:
    """``members``: built, set-up ``DistillModule``\\ s of one student class and variant (each
    as its own run builds it, seeded); ``ema_decays``: each member's weight-average decay
    (None: evaluate the last weights; all or none); ``batched``: stack the members' steps (see
    the module doc). The teacher of the first member answers for all (the same store and
    batches: ``coverage`` is the same for every member)."""

    def __init__(self, members: list[DistillModule], ema_decays: list[float | None],
                 batched: bool = False) -> None:
        if not members:
            raise PackError("a pack needs at least one member")
        if len(ema_decays) != len(members):
            raise ValueError("one ema decay per member")
        if len({d is None for d in ema_decays}) > 1:
            raise PackError("members with and without a weight average")
        if any(m.grad_clip is not None for m in members):
            raise PackError("a gradient clip is per run; a pack does not clip")
        self.members, self.k, self.batched = members, len(members), batched
        self.knobs = member_knobs(members) if batched else {}
        settings = []
        for m in members:
            s, rest = param_settings(m)
            if rest:
                raise PackError(f"a method has an optimiser of its own "
                                f"({type(rest[0]).__name__}): it steps per run")
            settings.append(s)
        names = list(settings[0])
        if any(list(s) != names for s in settings[1:]):
            raise PackError("the members train different parameters")
        shared = {(s[n]["betas"], s[n]["eps"]) for s in settings for n in names}
        if len(shared) > 1:
            raise PackError("the members' AdamW betas or eps differ")
        rules = [settings[0][n]["rule"] for n in names]
        if any([s[n]["rule"] for n in names] != rules for s in settings[1:]):
            raise PackError("the members' table optimisers differ")
        if not batched and any(r in ROW_RULES for r in rules):
            raise PackError("an exact pack updates tables densely (table_optimizer "
                            "dense_adamw); row-wise tables need a batched pack")
        own = [dict(m.named_parameters()) for m in members]
        shapes = {n: p.shape for n, p in own[0].items()}
        if any({n: p.shape for n, p in o.items()} != shapes for o in own[1:]):
            raise PackError("the members' parameters differ in name or shape")
        with torch.no_grad():
            self.params = {n: torch.stack([o[n].detach() for o in own])
                           .requires_grad_(batched and n in names) for n in own[0]}
            bufs = [dict(m.named_buffers()) for m in members]
            self.buffers = {n: torch.stack([b[n] for b in bufs]) for n in bufs[0]
                            if not all(same_value(bufs[0][n], b[n]) for b in bufs[1:])}
        if self.buffers and not batched:
            self.buffers = {}
        trained = [self.params[n] for n in names]
        groups = [MemberGroup([s[n]["lr"] for s in settings],
                              [s[n]["weight_decay"] for s in settings]) for n in names]
        betas, eps = next(iter(shared)) if shared else ((0.9, 0.999), 1e-8)
        leaves = None if batched else [[o[n] for o in own] for n in names]
        self.optimizer = PackAdamW(trained, groups, betas=betas, eps=eps, leaves=leaves,
                                   fused=batched, rules=rules)
        self.ema = None
        if ema_decays[0] is not None:
            # all or none are None (checked above)
            decays = [float(d) for d in ema_decays if d is not None]
            self.ema = PackEMA(trained, decays, lerp=batched,
                               lazy=set(self.optimizer.tables))
        self._call = _Call(members[0])
        self._template = members[0]
        if batched:
            members[0].train()  # as Lightning's fit starts (every submodule)
        # every name a stacked tensor goes by in the template (a tied weight under each of its
        # names), so functional_call swaps them without its per-call search for ties
        self._names = {n: [f"module.{a}" for a in aliases(members[0], n)]
                       for n in [*self.params, *self.buffers]}
        self.teacher = members[0].teacher
        self.steps = 0
        self._averaged = False
        self._stacked, self._student, self._shared_features = self._stacked_student()
        #: the methods' step once for every member (no vmap): a stacked student and methods
        #: that stack; their per-member knobs ``[K, 1, 1]`` float64
        self._stacked_step = self._stacked is not None and all(
            method_stacks(m) for m in self._template.transfer_methods)
        self._stacked_knobs = {key: torch.tensor(v, dtype=torch.float64).view(-1, 1, 1)
                               for key, v in self.knobs.items()}

    def _stacked_student(self) -> tuple[Any, dict[str, Tensor], bool]:
        """The template student's stacked forward (None: vmap the whole step), its stacked
        parameters by the student's own names, and whether the methods' representation
        features are every member's (computed once) rather than each member's."""
        template = self._template
        forward = stacked_forward(template.model) if self.batched else None
        if self.batched and forward is None:
            log.info("%s has no stacked forward registered: its pack of %d runs the student's "
                     "forward under torch.func.vmap (the same numbers to rounding, slower)",
                     type(template.model).__name__, self.k)
        own = ("model.",)
        if forward is None or any(p.startswith(own) for p, _ in self.knobs) \
                or any(n.startswith(own) for n in self.buffers):
            return None, {}, False
        params = {n.removeprefix("model."): t for n, t in self.params.items()
                  if n.startswith("model.")}
        feeding = [i for i, m in enumerate(template.transfer_methods)
                   if type(m).features is not TransferMethod.features]
        per_member = [f"methods.{i}." for i in feeding]
        shared = not any(any(True for _ in template.transfer_methods[i].parameters())
                         for i in feeding) \
            and not any(p.startswith(tuple(per_member)) for p, _ in self.knobs) \
            and not any(n.startswith(tuple(per_member)) for n in self.buffers)
        return forward, params, shared

    # ------------------------------------------------------------------ the batched calls
    @contextmanager
    def _knobs_set(self, values: dict[tuple[str, str], Tensor]) -> Iterator[None]:
        template = self._call.module
        saved = []
        try:
            for (path, name), value in values.items():
                module = template.get_submodule(path)
                saved.append((module, name, getattr(module, name)))
                object.__setattr__(module, name, value)
            yield
        finally:
            for module, name, value in reversed(saved):
                object.__setattr__(module, name, value)

    def _vmapped(self, name: str, make_args: Callable[..., tuple], extra: Any = None) -> Any:
        """``template.name(*make_args(x))`` for every member under vmap, with each member's
        parameters, buffers and knobs; ``extra``: a pytree of ``[K, ...]`` tensors whose member
        slice ``x`` is passed to ``make_args``."""
        device = next(iter(self.params.values())).device
        # float64 0-dim: vmap casts a 0-dim operand to the other's dtype, as a Python float is
        knobs = {k: torch.tensor(v, dtype=torch.float64, device=device)
                 for k, v in self.knobs.items()}

        def one(p: dict[str, Tensor], b: dict[str, Tensor], kn: dict, x: Any) -> Any:
            names = self._names
            state = {a: t for n, t in p.items() for a in names[n]}
            state.update({a: t for n, t in b.items() for a in names[n]})
            args = make_args() if extra is None else make_args(x)
            with self._knobs_set(kn):
                return functional_call(self._call, state, (name, *args), tie_weights=False)

        return vmap(one, in_dims=(0, 0, 0, None if extra is None else 0),
                    randomness="error")(self.params, self.buffers, knobs, extra)

    def _stacked_call(self, name: str, args: tuple) -> Any:
        """``template.name(*args)`` once for every member: the members' stacked parameters,
        buffers and ``[K, 1, 1]`` knobs swapped into the template (no vmap; its modules and
        methods take them: a registered stacked forward, ``TransferMethod.stacks``)."""
        names = self._names
        state = {a: t for n, t in self.params.items() for a in names[n]}
        state.update({a: t for n, t in self.buffers.items() for a in names[n]})
        with self._knobs_set(self._stacked_knobs):
            return functional_call(self._call, state, (name, *args), tie_weights=False)

    def _features(self, batch: Batch) -> Tensor | None:
        """The methods' representation features for the stacked student: ``[B, F]`` computed
        once (methods without parameters: LoopFM mean codes, SOLARIS pairs), ``[K, B, F]``
        (a method with parameters: attention pooling), or None."""
        if self._shared_features:
            return self._template.features(batch)
        return self._vmapped("features", lambda: (batch,))

    def _student_output(self, batch: Batch) -> StudentOutput:
        """Every member's student output ``[K, B, ...]`` through the stacked forward."""
        out = self._stacked(self._student, batch, self._features(batch))
        if not isinstance(out, StudentOutput):
            raise TypeError(f"the stacked forward of {type(self._call.module.model).__name__} "
                            f"must return a StudentOutput, got {type(out).__name__}")
        return out

    def targets(self, batch: Batch) -> TeacherTargets | None:
        """The teacher's answer for ``batch``, once for every member."""
        if self.teacher is None:
            return None
        device = batch.labels.device
        t = self.teacher(batch)
        return TeacherTargets(t.logits.to(device, torch.float32), t.found.to(device),
                              None if t.emb is None else t.emb.to(device, torch.float32))

    def train_step(self, batch: Batch) -> Tensor:
        """One optimiser step of every member on ``batch``; the members' losses ``[K]``
        (detached)."""
        if self._averaged:
            raise RuntimeError("the pack's weight averages are in place: training is over")
        targets = self.targets(batch)
        device = batch.labels.device
        day = self.members[0].trained_until_day

        def state(members: int | None = None) -> StepState:
            return StepState(batch, None, device, targets=targets, trained_until_day=day,
                             members=members)

        if self.batched:
            if not self._call.module.training:  # (train() walks every submodule: not per step)
                self._call.module.train()
            if self._stacked_step:
                out = self._student_output(batch)
                losses = self._stacked_call("training_loss", (state(self.k), out)).view(self.k)
            elif self._stacked is not None:
                losses = self._vmapped("training_loss", lambda out: (state(), out),
                                       extra=self._student_output(batch))
            else:
                losses = self._vmapped("training_loss", lambda: (state(),))
        else:
            losses = torch.stack([m.training_loss(state()) for m in self.members])
        self.optimizer.zero_grad()
        losses.sum().backward()  # each member's loss gets gradient 1: its own backward
        rows = self.optimizer.table_rows()  # row-wise tables: the rows the step touches
        if self.ema is not None:
            self.ema.catch_up(rows)
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update(rows)
        self.steps += 1
        return losses.detach()

    def fit(self, batches: Iterable[Batch]) -> tuple[list[Tensor], int]:
        """One pass over ``batches``, then each member's weight average put in place of its
        weights (as Lightning's weight averaging does at the end of a fit); the per-step
        losses ``[K]`` and the examples seen."""
        losses, examples = [], 0
        for batch in batches:
            losses.append(self.train_step(batch))
            examples += len(batch)
        self.use_average()
        return losses, examples

    @torch.no_grad()
    def use_average(self) -> None:
        """Put each member's weight average in place of its weights (no-op without one)."""
        if self.ema is not None and not self._averaged:
            self.ema.put_in_place()
        self._averaged = True

    @torch.no_grad()
    def member(self, k: int) -> DistillModule:
        """Member ``k``'s module holding its weights as the pack has them now (after
        :meth:`use_average`: the averaged, evaluated weights): a batched pack trains stacked
        copies, so its members' own modules are brought up to date here (an exact pack's
        already are: their parameters are views of the stacked ones)."""
        if not 0 <= k < self.k:
            raise IndexError(f"member {k} of a pack of {self.k}")
        module = self.members[k]
        own = dict(module.named_parameters())
        bufs = dict(module.named_buffers())
        for name, stacked_ in self.params.items():
            if own[name].data_ptr() != stacked_[k].data_ptr():
                own[name].copy_(stacked_[k])
        for name, stacked_ in self.buffers.items():
            bufs[name].copy_(stacked_[k])
        return module

    @torch.no_grad()
    def serving_logits(self, batch: Batch) -> Tensor:
        """``[K, B, T]``: every member's evaluated logits for ``batch``."""
        if self.batched:
            template = self._call.module
            template.eval()
            try:
                if self._stacked is not None:
                    return self._student_output(batch).logits
                return self._vmapped("serving_logits", lambda: (batch,))
            finally:
                template.train()
        out = []
        for m in self.members:
            m.eval()
            out.append(m.serving_logits(batch))
            m.train()
        return torch.stack(out)
