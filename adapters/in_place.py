"""Record in place (issue 23): what the author's own model passes to each of its sub-blocks, and what each returns,
while the model runs its own forward pass.

A sub-block's own calling convention may stay unknown (an add-and-norm taking a function, an attention taking the
keys' lengths and a causal flag): the author's model calls it as its author meant, by definition. Forward hooks on
every module of the model write each call down as a :class:`Call` (its arguments, its output, the calls made while
it ran), so that the checks can verify the sub-blocks against the paper's math with their own weights
(``conformance.in_place``) without ever calling them themselves.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from adapters.building import PROBE
from adapters.call_plans import first_tensor

ROLES = ("layer_norm", "multi_head_attention", "sublayer_connection")
"""The roles whose instances inside the author's model are checked in place (``conformance.checks.test_in_place``)."""


def kept(value):
    """A tensor detached and copied (code may change it in place after the call), a tuple or list of such, or the
    value itself."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(kept(v) for v in value)
    return value


@dataclass(eq=False)
class Call:
    """One forward call of a module inside the model: ``args``/``kwargs`` as given, ``output`` as returned, the
    ``calls`` of modules made while it ran (in order, those nested deeper inside them), ``marks``: what the
    ``mark`` function of :func:`record` read when the call started and when it ended (None when none was given), and
    ``ended``: how many calls of the recording had returned before it."""
    module: nn.Module
    path: str
    args: tuple
    kwargs: dict
    output: object = None
    returned: bool = False
    calls: list = field(default_factory=list)
    marks: tuple = (None, None)
    ended: int = -1

    @property
    def tensors(self):
        """The tensor arguments, positional first, then keyword ones in the order given."""
        return [a for a in (*self.args, *self.kwargs.values()) if isinstance(a, torch.Tensor)]

    @property
    def out(self):
        """The output tensor (a block returning ``(output, weights)`` is read by its output), or None."""
        out = first_tensor(self.output)
        return out if isinstance(out, torch.Tensor) else None

    def walk(self):
        """This call and every call made inside it, in the order they started."""
        yield self
        for inner in self.calls:
            yield from inner.walk()


class Recording:
    """The calls recorded while :func:`record` lasted: ``top``, the calls made from outside the model's modules
    (the model's own call first), and :meth:`of` the calls of given modules."""

    def __init__(self):
        self.top, self.open, self.returned = [], [], 0

    def every(self):
        for call in self.top:
            yield from call.walk()

    def of(self, modules):
        """The calls of the modules ``modules`` (compared by identity), in the order they started."""
        wanted = {id(m) for m in modules}
        return [call for call in self.every() if id(call.module) in wanted and call.returned]

    def in_return_order(self):
        """The calls that returned, innermost first: in the order they returned."""
        return sorted((call for call in self.every() if call.returned), key=lambda call: call.ended)


@contextlib.contextmanager
def record(model, mark=None):
    """While it lasts, every forward call of ``model`` and of the modules inside it is written down in the
    :class:`Recording` it yields; ``mark`` (a function of no argument, such as the number of softmaxes another
    recorder has seen) is read when each call starts and ends. The hooks are removed always."""
    recording, names = Recording(), {id(m): path for path, m in model.named_modules()}

    def before(module, args, kwargs):
        call = Call(module, names.get(id(module), ""), kept(tuple(args)), {k: kept(v) for k, v in kwargs.items()},
                    marks=(mark() if mark else None, None))
        (recording.open[-1].calls if recording.open else recording.top).append(call)
        recording.open.append(call)

    def after(module, args, kwargs, output):
        while recording.open:  # (a call that raised inside, caught by the code, never reached its hook)
            call = recording.open.pop()
            if call.module is module:
                call.output, call.returned, call.ended = kept(output), True, recording.returned
                recording.returned += 1
                call.marks = (call.marks[0], mark() if mark else None)
                break

    handles = []
    try:
        for module in model.modules():
            handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
            handles.append(module.register_forward_hook(after, with_kwargs=True))
        yield recording
    finally:
        for handle in handles:
            handle.remove()


def reading_note(bindings, observation, model_builder):
    """The mapping note saying how each bound role was read: observed (its class built or called while the author's
    own entry points ran, ``adapters.observe``), guessed (names, signatures and probe calls alone), and, of
    :data:`ROLES`, those checked in place: their class has instances inside the model ``model_builder`` builds on the
    probe configuration. None when nothing is bound."""
    if not bindings:
        return None
    seen = set(observation.calls) | set(observation.constructed) if observation is not None else set()
    observed = [r for r, b in bindings.items() if getattr(b.target, "__name__", None) in seen]
    try:
        model = model_builder(**dataclasses.asdict(PROBE)) if model_builder is not None else None
    except Exception:  # noqa: BLE001 (the author's model does not build: its own checks say why)
        model = None
    inside = {type(m) for m in model.modules()} if isinstance(model, nn.Module) else set()
    in_place = [r for r in ROLES if r in bindings and bindings[r].target in inside]
    parts = [f"observed in the author's own run: {', '.join(observed)}" if observed else "",
             f"guessed from names, signatures and probe calls: {', '.join(r for r in bindings if r not in observed)}"
             if len(observed) < len(bindings) else "",
             f"checked in place, inside the model's own forward pass: {', '.join(in_place)}" if in_place else ""]
    return "how the roles were read: " + "; ".join(p for p in parts if p)
