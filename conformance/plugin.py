"""The pytest plugin: ``--impl``, ``--device``, ``--contract``, ``--expected``, ``--report-json``, verdicts per
check, and the component-by-property table at the end of the run. pytest's own ``--strict`` (which also makes
markers strict) makes deviations fail the run.

Registered through the ``pytest11`` entry point ``conformance`` (see pyproject.toml). Each concern has its module,
each importing only those above it in this list:

* ``conformance.hypothesis_setup``: hypothesis's profiles, and its digest of a check computed once;
* ``conformance.options``: the options, markers and what the run keeps in pytest's stash;
* ``conformance.collection``: a check's component, family and name, and the fixtures (``impl``, ...);
* ``conformance.reporting``: each check's verdict record (what it raised read by ``conformance.diagnosis.classify``),
  pytest's outcome, ``--report-json``;
* ``conformance.console``: what the terminal shows at the end of the run.

This module registers their hooks and fixtures with pytest.
"""
import conformance.startup  # noqa: F401  (first: before hypothesis is imported)
import conformance.hypothesis_setup  # noqa: F401  (its profiles, registered on import)
from conformance.collection import contract, device, impl, pytest_collection_modifyitems
from conformance.console import pytest_terminal_summary
from conformance.options import pytest_addoption, pytest_configure
from conformance.reporting import (pytest_pyfunc_call, pytest_runtest_makereport, pytest_sessionfinish,
                                   pytest_sessionstart)

__all__ = ["contract", "device", "impl", "pytest_addoption", "pytest_collection_modifyitems", "pytest_configure",
           "pytest_pyfunc_call", "pytest_runtest_makereport", "pytest_sessionfinish", "pytest_sessionstart",
           "pytest_terminal_summary"]
