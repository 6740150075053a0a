"""Judging apart (conformance/remote.py): what crosses from the submission's process is read as data only, and the
checks judged apart say what they say beside the code (verdict, cause and message, what is found behind an error
included)."""
import json
import socket
import subprocess
import sys

import pytest
import torch

from conformance.contract.interface import Supports
from conformance.grading.judge import JUDGED_APART, Opaque, decode, encode
from tests import mutants
from tests.suite import SEEDS, seed

PYTEST = [sys.executable, "-m", "pytest", "--pyargs", "conformance", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "conformance.grading.judge",
          "--hypothesis-profile=grade"]


class Liar(torch.Tensor):
    def __eq__(self, other):
        return True


def test_tensors_come_back_as_new_tensors_with_their_values():
    sent = torch.randn(2, 3, dtype=torch.float64)
    back = decode(json.loads(json.dumps(encode((sent, torch.ones(2, dtype=torch.bool), None, 3)))))
    assert type(back) is tuple and type(back[0]) is torch.Tensor and back[0] is not sent
    assert torch.equal(back[0], sent) and back[0].dtype == torch.float64
    assert back[1].dtype == torch.bool and back[2] is None and back[3] == 3


def test_a_tensor_subclass_comes_back_as_an_opaque_object_with_its_name():
    back = decode(json.loads(json.dumps(encode(torch.zeros(2).as_subclass(Liar)))))
    assert isinstance(back, Opaque) and type(back).__name__ == "Liar"
    assert not isinstance(back, torch.Tensor)


@pytest.mark.parametrize("answer", [
    {"tensor": ["float32", [2, 2], "cpu", "AAAA"]},          # 3 bytes for 4 floats
    {"tensor": ["object", [1], "cpu", ""]},                   # not a tensor dtype
    {"tensor": ["float32", [-1], "cpu", ""]},                 # a negative size
    {"pickle": "gASVAAAAAAAAAA=="},                           # anything but the few kinds of data
    {"object": ["os.system", "x"], "tuple": []},
])
def test_answers_that_are_not_well_formed_data_are_refused(answer):
    with pytest.raises((ValueError, KeyError, TypeError)):
        decode(answer)


def test_an_object_with_an_odd_type_name_is_named_object():
    assert type(decode({"object": ["not a name; import os", "x"]})).__name__ == "object"


def judged_apart(spec, report):
    """Run the checks judged apart against ``spec``'s roles served by another process; their JSON report."""
    beside_end, judge_end = socket.socketpair()
    beside = subprocess.Popen(PYTEST + [f"--impl={spec}", f"--serve-judge={beside_end.fileno()}", "-k", "not test_"],
                              pass_fds=[beside_end.fileno()], stdout=subprocess.DEVNULL)
    judge = subprocess.Popen(PYTEST + [f"--impl=remote:{judge_end.fileno()}", "--judged-apart=only",
                                       f"--report-json={report}"], pass_fds=[judge_end.fileno()],
                             stdout=subprocess.DEVNULL)
    beside_end.close()
    judge_end.close()
    judge.wait(timeout=600)
    beside.wait(timeout=60)
    return {c["nodeid"]: c for c in json.loads(report.read_text())["checks"]}


@pytest.mark.parametrize("name", ["reference", "attention_mask_after_softmax", "decoder_layers_not_chained",
                                  "seed 001", "seed 004"])
def test_checks_judged_apart_say_what_they_say_beside_the_code(tmp_path, name):
    if name.startswith("seed"):
        spec = seed(next(stem for stem in SEEDS if stem.startswith(name.split()[1] + "_")))
    else:
        spec = tmp_path / f"{name}.py"
        spec.write_text(mutants.reference_source() if name == "reference" else
                        mutants.header(mutants.BY_NAME[name]) + mutants.apply(mutants.BY_NAME[name]))
    apart = judged_apart(spec, tmp_path / "apart.json")
    subprocess.run(PYTEST + [f"--impl={spec}", "--judged-apart=only", f"--report-json={tmp_path / 'here.json'}"],
                   stdout=subprocess.DEVNULL, timeout=600)
    here = {c["nodeid"]: c for c in json.loads((tmp_path / "here.json").read_text())["checks"]}
    assert set(apart) == set(here) and len(here) >= sum(map(len, JUDGED_APART.values()))
    said = lambda c: (c["verdict"], c["cause"], c["message"])  # noqa: E731
    differ = {n: (said(here[n]), said(c)) for n, c in apart.items() if said(c) != said(here[n])}
    assert not differ
    if name != "reference":
        assert any(c["verdict"] != "pass" for c in apart.values())


def test_what_a_role_supports_crosses_to_the_judge_as_declared():
    """The judge asks the submission's side what each role supports (``Implementation.supports``): the declaration
    reads back as it was made, and a malformed one as nothing declared (every size taken, any precision)."""
    declared = Supports(built=True, written=True, hyperparameters=frozenset({"d_model", "h"}), dtype="float32")
    assert Supports.from_message(json.loads(json.dumps(declared.as_message()))) == declared
    assert not declared.takes("dropout") and declared.takes("h")
    assert Supports.from_message({"hyperparameters": "d_model", "dtype": "float128", "built": 1}) == Supports()
    assert Supports.from_message(["not", "a", "message"]).takes("dropout")
