"""The plugin's options (``--impl``, ``--device``, ``--contract``, ``--expected``, ``--report-json``), its markers
(one per property family and per component), the hypothesis profile of a run, and what the run keeps in pytest's
stash: the records of the checks, the expected results, the notes on how the code was read."""
import os
import tomllib

import pytest
import torch

from conformance.hypothesis_setup import settings
from conformance.contract.interface import IMPL_ENV_VAR, ROLES

FAMILIES = ("shapes", "masks", "embeddings", "positional_encoding", "softmax", "norm_order", "parameters",
            "layer_norm", "behaviour", "construction", "information_flow", "in_place")
"""The property families, one module ``conformance/checks/test_<family>.py`` each, in the order of the verdict table."""
CONTRACTS = ("paper", "practice")

RESULTS = pytest.StashKey[list]()
"""The verdict record of every check of the run (a dict: component, family, check, verdict, cause, message...)."""
EXPECTED = pytest.StashKey[dict]()
NOTES = pytest.StashKey[list]()
"""How the implementation was loaded and mapped onto the roles (the discovery's notes)."""
IMPL = pytest.StashKey[object]()
"""The implementation under test; a plugin may put one here before the first check (grading's judge does)."""
PART_OF_A_RUN = pytest.StashKey[bool]()
"""Set by a plugin that runs only part of the checks in this process (grading's two processes): whether anything
was checked is then judged from the merged records of both."""


def pytest_addoption(parser):
    group = parser.getgroup("conformance", "Transformer conformance checks")
    group.addoption("--impl", default=os.environ.get(IMPL_ENV_VAR, "reference"),
                    help="implementation under test: 'reference', 'torch', a module name, a .py file, a project "
                         "folder or package, a Jupyter notebook (.ipynb) or its text export, a markdown post "
                         f"(default: ${IMPL_ENV_VAR} or 'reference')")
    group.addoption("--device", default="cpu", help="device every check runs on (cpu, cuda, cuda:1, ...)")
    group.addoption("--contract", default="paper", choices=CONTRACTS,
                    help="the contract claimed: 'paper' (post-norm) or 'practice' (pre-norm with final LayerNorm)")
    group.addoption("--expected", metavar="TOML", help="expected-results file: accepted failures and deviations")
    group.addoption("--report-json", metavar="PATH", help="write the verdict of every check as JSON")



def pytest_configure(config):
    for family in FAMILIES:
        config.addinivalue_line("markers", f"{family}: checks of the {family.replace('_', ' ')} property family")
    for role in ROLES:
        config.addinivalue_line("markers", f"{role}: checks of the {role.replace('_', ' ')} component")
    torch.set_num_threads(1)  # the checks use small tensors: threads cost more than they give, and xdist forks
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile("ci")
    config.stash[RESULTS] = []
    config.stash[EXPECTED] = read_expected(config.getoption("expected"))


def read_expected(path):
    """``{"component/check": {"verdict": ..., "reason": ...}}`` from a TOML file with ``[[expected]]`` tables; a
    file that cannot be read, or an entry naming no component or check, stops the run as a usage error."""
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            entries = tomllib.load(f).get("expected", [])
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise pytest.UsageError(f"--expected={path}: {exc}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and {"component", "check"} <= set(e)
                                                for e in entries):
        raise pytest.UsageError(f"--expected={path}: each [[expected]] entry names a component and a check")
    return {f"{e['component']}/{e['check']}": e for e in entries}
