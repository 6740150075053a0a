"""Judging apart: the checks that only need to *call* a submission run in a process where its code never ran.

When grading (``conformance.grading.zygote``), two processes check a submission. The one beside its code (it loaded the
submission) first *serves* its roles (:func:`serve`): build a role, move it, set its mode, call it, map the
reference's weights onto it. The judge (the ``--impl=remote:FD`` implementation, :func:`connect`) runs the checks
named in :data:`JUDGED_APART` (``--judged-apart=only``) against those served roles and makes every comparison
itself; the process beside the code then runs the other checks, those that must look inside the submission
(``--judged-apart=skip``), watched by ``conformance.grading.integrity``.

Whatever comes back from the submission's side is data: one JSON line per answer, tensors as dtype, shape and raw
bytes that the judge turns into new ``torch.Tensor`` objects itself (:func:`decode`), anything else as a type name
and a repr. Nothing the submission made is ever called, compared or unpickled by the judge, so patching torch,
pytest or the checker beside the code cannot change these verdicts.
"""
import base64
import dataclasses
import functools
import json
import math
import re
import socket

import pytest
import torch
import torch.nn as nn

from adapters.submission import load_implementation
from conformance.contract import harness, weights
from conformance.collection import check_of, component_of, family_of, implementation
from conformance.diagnosis.classify import classify
from conformance.options import IMPL, PART_OF_A_RUN
from conformance.diagnosis.causes import is_listed
from conformance.grading import reproductions
from conformance.contract.interface import Config, MissingRole, Supports
from conformance.contract.verdicts import ERROR, FAIL, MISSING, Finding

JUDGED_APART = {
    "shapes": ("output_shape",),
    "masks": ("masked_keys_do_not_change_outputs", "future_positions_do_not_change_earlier_outputs",
              "padding_mask_helper", "subsequent_mask_helper"),
    "behaviour": ("eval_mode_is_deterministic", "dropout_acts_in_training", "samples_are_independent_of_batch",
                  "agrees_with_reference"),
}
"""The checks judged apart, by property family and check name: each builds roles and calls them with tensors,
and looks at nothing but what comes back (``tests/test_remote.py`` checks that they say the same either way:
verdict, cause and message). ``sublayer_connection`` stays beside the code: its canonical call passes a function."""
NOT_APART = ("sublayer_connection",)
CROSS_CHECKED = ("agrees_with_reference",)
"""Judged apart and run beside the code as well: the grader compares the two verdicts, so a submission that
changes the verdicts beside its code (patching the checker there, silencing its watch) shows as soon as it is
wrong anywhere the reference's outputs reach."""
DTYPES = {str(t).removeprefix("torch."): t for t in (torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                                     torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                                                     torch.bool, torch.complex64, torch.complex128)}
LINE_LIMIT = 256 << 20
"""The longest answer the judge reads (bytes)."""
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,79}")


def is_judged_apart(family, check, component):
    return check in JUDGED_APART.get(family, ()) and component not in NOT_APART


def runs_beside(family, check, component):
    """Whether the process beside the code runs this check (``--judged-apart=skip``)."""
    return not is_judged_apart(family, check, component) or check in CROSS_CHECKED


# -- the wire ---------------------------------------------------------------------------------------------------
def encode(value):
    """``value`` as JSON data: real tensors (not subclasses) as bytes, tuples and lists item by item, numbers and
    strings as they are, anything else as its type name and repr."""
    if type(value) is torch.Tensor or type(value) is nn.Parameter:
        t = value.detach().cpu().contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return {"tensor": [str(t.dtype).removeprefix("torch."), list(t.shape), str(value.device),
                           base64.b64encode(raw).decode()]}
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (tuple, list):
        return {type(value).__name__: [encode(v) for v in value]}
    try:
        text = repr(value)[:200]
    except Exception:
        text = "?"
    return {"object": [type(value).__name__, text]}


class Opaque:
    """What the judge holds in place of an object of the submission that is not a tensor: its type's name and
    repr, nothing else (``type(x).__name__`` is that name)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


def decode(data, device="cpu"):
    """The value :func:`encode` wrote, rebuilt from data only (tensors placed on ``device``)."""
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is not dict or len(data) != 1:
        raise ValueError(f"unreadable answer {str(data)[:80]}")
    (kind, body), = data.items()
    if kind == "tensor":
        dtype, shape, _, raw = body
        dtype = DTYPES[dtype]
        if not (type(shape) is list and all(type(n) is int and n >= 0 for n in shape)):
            raise ValueError(f"unreadable tensor shape {shape!r}")
        raw = base64.b64decode(raw, validate=True)
        if len(raw) != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"a tensor of shape {shape} with {len(raw)} bytes")
        flat = torch.frombuffer(bytearray(raw), dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        return flat.reshape(shape).clone().to(device)
    if kind in ("tuple", "list") and type(body) is list:
        items = [decode(v, device) for v in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "object" and type(body) is list and len(body) == 2 and all(type(s) is str for s in body):
        name = body[0] if IDENTIFIER.fullmatch(body[0]) else "object"
        return type(name, (Opaque,), {})(body[1])
    raise ValueError(f"unreadable answer {str(data)[:80]}")


class Channel:
    """One JSON message per line over a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.file = sock.makefile("rwb")

    def send(self, message):
        self.file.write(json.dumps(message).encode() + b"\n")
        self.file.flush()

    def receive(self):
        line = self.file.readline(LINE_LIMIT)
        if not line.endswith(b"\n"):
            raise EOFError("the submission's process ended (or sent an answer too long to read)")
        return json.loads(line)


# -- beside the code: serving the roles -------------------------------------------------------------------------
def serve(impl, fd):
    """Answer the judge's requests on socket ``fd`` until it is done (or gone); the submission's code runs here."""
    channel = Channel(socket.socket(fileno=fd))
    built = {}

    def chosen(request):
        """The implementation a request is for: the submission's, or its repaired one (``Implementation.repaired``),
        asked for by the judge's look behind an error."""
        if not request.get("repaired"):
            return impl
        if impl.repaired is None:
            raise LookupError("nothing to repair")
        return impl.repaired

    def answer(request):
        op, target_impl = request["op"], chosen(request)
        if op == "roles":
            return {"roles": sorted(target_impl.roles), "notes": [str(n) for n in target_impl.notes],
                    "spec": str(target_impl.spec), "read": target_impl.read,
                    "supports": {role: target_impl.supports(role).as_message()
                                 for role in {*target_impl.roles, *target_impl.unbuilt}}}
        if op == "build":
            harness.seed_generators(request["seed"], "cpu")
            module = target_impl.build(request["role"], Config(**request["cfg"]), causal=request.get("causal") is True)
            if not isinstance(module, nn.Module):
                return {"object": encode(module)}
            built[len(built)] = module
            return {"handle": len(built) - 1, "not_accepted": list(harness.inputs_not_accepted(module))}
        if op == "function":
            return {"not_accepted": list(harness.inputs_not_accepted(target_impl.function(request["role"])))}
        if op == "to":
            built[request["handle"]].to(device=request["device"], dtype=DTYPES[request["dtype"]])
            return {}
        if op == "train":
            built[request["handle"]].train(request["mode"])
            return {}
        if op == "call":
            target = target_impl.function(request["role"]) if request["handle"] is None else built[request["handle"]]
            args = [decode(a, request["device"]) for a in request["args"]]
            with torch.set_grad_enabled(request["grad"]):
                return {"result": encode(target(*args))}
        if op == "take_reference_weights":
            harness.seed_generators(request["seed"], "cpu")
            reference = load_implementation("reference").build(request["role"], Config(**request["cfg"]))
            reference.to(device=request["device"], dtype=DTYPES[request["dtype"]])
            reference.load_state_dict({k: decode(v, request["device"]) for k, v in request["state"].items()})
            module = built[request["handle"]]
            return {"mapping": weights.map_reference_weights(module, reference),
                    "shapes": [list(shape) for shape in weights.parameter_shapes(module, count=None)]}
        raise ValueError(f"unknown request {op!r}")

    while True:
        try:
            request = channel.receive()
        except (EOFError, OSError, ValueError):
            return
        if request["op"] == "done":
            return
        try:
            reply = answer(request)
        except Exception as exc:
            try:
                served = chosen(request)
            except Exception:
                served = impl
            verdict, cause, message = classify(pytest.ExceptionInfo.from_exception(exc),
                                                      request.get("role", "model"), served.locate, served)
            reply = {"raised": [verdict, cause, message]}
        try:
            channel.send(reply)
        except OSError:
            return


# -- the judge: the submission's roles seen from apart ----------------------------------------------------------
class Raised(Finding):
    """What the submission's side reported for a request that raised: its verdict (error, fail or missing), cause
    and message, as data; a cause the catalogue does not list (the submission's side answering what the checker
    cannot give) is an unreadable answer."""

    def __init__(self, verdict, cause, message):
        self.verdict = verdict if verdict in (ERROR, FAIL, MISSING) else ERROR
        self.text = str(message)[:2000]
        if not (type(cause) is str and is_listed(cause)):
            self.verdict, self.text = ERROR, f"an answer naming a cause the checker does not give: {str(cause)[:80]}"
            cause = "grading.unreadable_answer"
        super().__init__(cause, "", "", reproduction="")

    @property
    def message(self):
        return self.text


class RemoteImplementation:
    """The ``--impl=remote:FD`` implementation: roles served by another process over a :class:`Channel`; with
    ``repaired``, the roles of the submission with its crashes repaired (``Implementation.repaired``, for the look
    behind an error of ``conformance.reporting.look_behind``)."""

    locate = None

    def __init__(self, channel, repaired=False):
        self.channel, self.view = channel, repaired
        answer = self.ask(op="roles")
        self.spec = answer["spec"] if type(answer.get("spec")) is str else "the submission"
        self.roles = [r for r in answer.get("roles", []) if type(r) is str]
        self.notes = [n for n in answer.get("notes", []) if type(n) is str]
        self.read = read_findings(answer.get("read"))
        declared = answer.get("supports")
        self.declared = {role: Supports.from_message(data) for role, data in declared.items()
                         if type(role) is str} if type(declared) is dict else {}
        self.repair = None if repaired else functools.partial(RemoteImplementation, channel, repaired=True)

    @functools.cached_property
    def repaired(self):
        """The repaired roles, or None (nothing to repair: the submission's side says so by raising)."""
        try:
            return self.repair() if self.repair is not None else None
        except Raised:
            return None

    def supports(self, role):
        """As ``Implementation.supports``, as the submission's side declared it."""
        return self.declared.get(role, Supports(built=role in self.roles))

    def ask(self, **request):
        try:
            self.channel.send({**request, "repaired": self.view})
            answer = self.channel.receive()
        except (OSError, EOFError, ValueError) as exc:
            raise Raised("error", "grading.submission_process_ended", f"no answer from the submission's process: {exc}")
        if type(answer) is not dict:
            raise Raised("error", "grading.unreadable_answer", f"an answer that is not a message: {str(answer)[:80]}")
        if "raised" in answer:
            raise Raised(*(list(answer["raised"]) + ["", "", ""])[:3])
        return answer

    def close(self):
        try:
            self.channel.send({"op": "done"})
        except OSError:
            pass

    def has(self, role):
        return role in self.roles

    def function(self, role):
        if role not in self.roles:
            raise MissingRole(f"{self.spec} has no {role!r}")
        return RemoteCallable(self, None, role, not_accepted(self.ask(op="function", role=role)))

    def build(self, role, cfg, causal=False):
        cfg = dataclasses.asdict(cfg)
        answer = self.ask(op="build", role=role, cfg=cfg, seed=torch.initial_seed(), causal=causal)
        if "object" in answer:
            return decode(answer["object"])
        return RemoteModule(self, answer["handle"], role, not_accepted(answer), cfg)


def read_findings(data):
    """``Implementation.read`` (``{role: {cause: [message]}}``, what reading the code found) from data."""
    if type(data) is not dict:
        return {}
    return {role: {cause: [m for m in messages if type(m) is str]
                   for cause, messages in found.items() if type(cause) is str and type(messages) is list}
            for role, found in data.items() if type(role) is str and type(found) is dict}


def not_accepted(answer):
    """``(canonical inputs the forward takes no parameter for, its signature)`` as data (``harness.inputs_not_accepted``)."""
    names, signature = (list(answer.get("not_accepted") or []) + [[], None])[:2]
    return [n for n in names if type(n) is str] if type(names) is list else [], \
        signature if type(signature) is str else None


class RemoteCallable:
    """A function role of the submission, or a module's forward, called on its side."""

    def __init__(self, impl, handle, role, not_accepted=([], None), device="cpu"):
        self.impl, self.handle, self.role, self.not_accepted, self.device = impl, handle, role, not_accepted, device

    def inputs_not_accepted(self):
        return self.not_accepted

    def __call__(self, *args):
        answer = self.impl.ask(op="call", handle=self.handle, role=self.role, device=self.device,
                               args=[encode(a) for a in args], grad=torch.is_grad_enabled())
        return decode(answer.get("result"), self.device)


class RemoteModule(nn.Module):
    """A module of the submission, built and kept on its side; calling it sends the inputs and decodes the output."""

    def __init__(self, impl, handle, role, not_accepted, cfg):
        super().__init__()
        self.remote = RemoteCallable(impl, handle, role, not_accepted)
        self.cfg, self.dtype, self.parameter_shapes = cfg, "float32", []

    def forward(self, *args):
        return self.remote(*args)

    def to(self, *args, **kwargs):
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        self.remote.device = str(device or self.remote.device)
        self.dtype = str(dtype).removeprefix("torch.") if dtype is not None else self.dtype
        self.remote.impl.ask(op="to", handle=self.remote.handle, role=self.remote.role, device=self.remote.device,
                             dtype=self.dtype)
        return self

    def train(self, mode=True):
        self.remote.impl.ask(op="train", handle=self.remote.handle, role=self.remote.role, mode=bool(mode))
        self.training = mode
        return self

    def inputs_not_accepted(self):
        return self.remote.not_accepted

    def take_reference_weights(self, reference):
        """``weights.map_reference_weights`` done on the submission's side with these reference weights."""
        answer = self.remote.impl.ask(
            op="take_reference_weights", handle=self.remote.handle, role=self.remote.role, cfg=self.cfg,
            seed=torch.initial_seed(), device=self.remote.device, dtype=self.dtype,
            state={k: encode(v) for k, v in reference.state_dict().items()})
        shapes = answer.get("shapes") if type(answer.get("shapes")) is list else []
        self.parameter_shapes = [tuple(n for n in shape if type(n) is int) for shape in shapes if type(shape) is list]
        return answer.get("mapping") if answer.get("mapping") in ("exact", "by_order") else None


def connect(fd):
    """The implementation served on socket ``fd`` (``--impl=remote:FD``)."""
    return RemoteImplementation(Channel(socket.socket(fileno=fd)))


# -- the pytest plugin of grading's two processes (``-p conformance.grading.judge``) ----------------------------
def pytest_addoption(parser):
    group = parser.getgroup("conformance")
    group.addoption("--judged-apart", choices=("only", "skip"),
                    help="run only the checks that grading judges apart from the submission's code, or all but "
                         "those (JUDGED_APART; the CROSS_CHECKED ones run in both)")
    group.addoption("--serve-judge", type=int, metavar="FD",
                    help="before the checks, serve the implementation's roles to a judge on socket FD (serve)")


def pytest_configure(config):
    spec = str(config.getoption("impl"))
    if spec.startswith("remote:"):  # roles served by the process beside the submission's code
        config.stash[IMPL] = connect(int(spec.removeprefix("remote:")))
    if config.getoption("judged_apart") or config.getoption("serve_judge") is not None:
        config.stash[PART_OF_A_RUN] = True


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    apart = config.getoption("judged_apart")
    if not apart:
        return
    kept, left = [], []
    for item in items:
        where = (family_of(item), check_of(item), component_of(item))
        (kept if (is_judged_apart if apart == "only" else runs_beside)(*where) else left).append(item)
    items[:] = kept
    config.hook.pytest_deselected(items=left)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """``--serve-judge``: the judge's requests are answered before this process runs its own checks."""
    fd = session.config.getoption("serve_judge")
    if fd is not None:
        impl = implementation(session.config)
        serve(impl, fd)
        with torch.random.fork_rng():  # (the recipes build each role once: the checks' draws stay as they were)
            session.config.stash[RECIPES] = reproductions.recipes_of(impl)  # (written with the report)


RECIPES = pytest.StashKey[dict]()


def pytest_sessionfinish(session):
    if RECIPES in session.config.stash:
        reproductions.write_recipes(session.config.stash[RECIPES], session.config.getoption("report_json"))
    if isinstance(session.config.stash.get(IMPL, None), RemoteImplementation):
        session.config.stash[IMPL].close()
