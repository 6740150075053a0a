"""Reaching a cause of the catalogue (``conformance/diagnosis/causes.py``) that no mutant or answer key reaches: a small
implementation with the property, run through the check that names it (:func:`cause_of`). The tests that do so are
``tests/test_reach_*.py``, each asserting the cause (and, where two causes are easily confused, not the other)."""
import inspect

import pytest
import torch

from conformance.diagnosis import classify as diagnosis
from conformance.contract.interface import Config, Implementation
from reference import transformer as ref

CFG = Config(d_model=8, h=2, d_ff=16, dropout=0.0, N=2, vocab_size=11, src_vocab=11, tgt_vocab=13, max_len=12)
DRAWN = dict(cfg=CFG, batch=3, src_len=5, tgt_len=4, dtype=torch.float64, seed=1)


def cause_of(check, component, roles, contract="paper", grafts=None, **drawn):
    """The cause ``check`` gives for ``component`` on the reference with ``roles`` in place of its own ("pass" when
    it passes), on one drawn setting (:data:`DRAWN`, changed by ``drawn``), as the plugin reports it
    (``conformance.diagnosis.classify.classify``: a crash the checker's own doing is named so)."""
    impl = Implementation("test", {**ref.CONFORMANCE_ROLES, **roles}, grafts=grafts)
    run = check.hypothesis.inner_test
    arguments = dict(impl=impl, device="cpu", component=component, drawn={**DRAWN, **drawn})
    if "contract" in inspect.signature(run).parameters:
        arguments["contract"] = contract
    try:
        run(**arguments)
    except Exception as exc:  # noqa: BLE001 - what the plugin would make of it, the traceback from the check on
        exc = exc.with_traceback(exc.__traceback__.tb_next)  # (as under pytest, whose frames are library code)
        return diagnosis.classify(pytest.ExceptionInfo.from_exception(exc), component, impl=impl)[1]
    return "pass"
