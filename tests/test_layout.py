"""The one-way layout of ``../shared/design/architecture.md``: a submission becomes an Implementation in
``adapters/`` (which may use the contract and the reference, never the checks or grading), the checks consume it,
and grading sits above the checks. The catalogue of causes (``conformance.causes``) sits below them all."""
import subprocess
import sys

import pytest

from tests.mutants import ROOT

LAYERS = {
    "conformance.causes": ("adapters", "conformance.test_", "conformance.plugin", "conformance.grading",
                           "conformance.interface", "conformance.verdicts", "conformance.harness", "reference"),
    "adapters.submission": ("conformance.plugin", "conformance.test_", "conformance.grading", "conformance.weights"),
    "conformance.interface": ("adapters", "conformance.plugin", "conformance.grading"),
    "conformance.plugin": ("conformance.grading",),
}


@pytest.mark.parametrize("module", sorted(LAYERS))
def test_a_stage_imports_nothing_above_it(module):
    forbidden = LAYERS[module]
    code = (f"import sys, {module}; print('\\n'.join(n for n in sys.modules if n.startswith({forbidden!r})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [], f"importing {module} imported {done.stdout.split()}, which sit above it"
