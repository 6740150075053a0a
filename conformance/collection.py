"""Collecting the checks: each check's component (its ``component`` parameter or marker), family (its module
``test_<family>.py``) and name, the markers they get, and the fixtures every check takes: ``impl`` (the
implementation under test, loaded once), ``device`` and ``contract``."""
import gc
import traceback

import pytest

from adapters import module_copies, torch_nn
from adapters.submission import ImplementationNotFound, load_implementation
from conformance.contract.interface import ROLES
from conformance.options import FAMILIES, IMPL


def is_a_check(item):
    """Whether ``item`` is one of the conformance checks (not a test of some other plugin's or the user's)."""
    return getattr(item, "module", None) is not None and item.module.__name__.startswith("conformance.")


def brief_failure(excinfo, style=None):
    """A check's failure in one line. pytest's own formatting (which hypothesis also asks for each failing example)
    parses the source file of every frame of the traceback, torch's included, again for each frame: most of the
    time of a run on a buggy implementation. The report gives the verdict's message in its place anyway."""
    return "".join(traceback.format_exception_only(excinfo.type, excinfo.value)).strip()


def pytest_collection_modifyitems(config, items):
    if items and all(is_a_check(item) for item in items) and config.option.tbstyle == "auto":
        config.option.tbstyle = "no"  # the conformance summary gives each finding once, not once a check
    for item in items:
        if is_a_check(item):
            item.repr_failure = brief_failure
        component, family = component_of(item), family_of(item)
        if component in ROLES:
            item.add_marker(getattr(pytest.mark, component))
        if family in FAMILIES:
            item.add_marker(getattr(pytest.mark, family))


BUG_REPORT = ("This is a bug in the checker, not in the code under test: please report it with the traceback above "
              "and the code it was run on.")


def implementation(config):
    """The implementation under test (``--impl``), loaded once. Loading records every failure of the author's code
    as a note, so an exception escaping it is the checker's own: the run stops once, with the checker's traceback,
    as pytest's internal error (exit status 3), never as hundreds of errors blamed on the author."""
    if IMPL not in config.stash:
        module_copies.install()  # (code deep-copying prototype layers at every build: the same copies, faster)
        torch_nn.without_nested_tensors()  # (torch's encoder stacks on padded batches, which hooks can read)
        kept_out_of_collections()  # (torch and the checks, which loading's builds would make it scan again and again)
        try:
            config.stash[IMPL] = load_implementation(config.getoption("impl"))
        except ImplementationNotFound as exc:  # nothing at that path or name: the command line's mistake
            pytest.exit(f"--impl: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
        except Exception:  # noqa: BLE001 (the checker's own crash: stop the run and say so)
            pytest.exit(f"INTERNAL ERROR of the checker while reading --impl={config.getoption('impl')}:\n"
                        f"{traceback.format_exc()}{BUG_REPORT}", returncode=pytest.ExitCode.INTERNAL_ERROR)
        kept_out_of_collections()
    return config.stash[IMPL]


def kept_out_of_collections():
    """Move what the run keeps to its end (torch, hypothesis, the checks; then the implementation loaded) out of the
    garbage collector's view: each full collection while loading and checking, and pytest's own at the end of the
    run, then scans only what was made since, not the 200,000 objects before (a second or two of a run)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def impl(request):
    """The implementation under test (``--impl``)."""
    return implementation(request.config)


@pytest.fixture(scope="session")
def device(request):
    return request.config.getoption("device")


@pytest.fixture(scope="session")
def contract(request):
    return request.config.getoption("contract")


def component_of(item):
    callspec = getattr(item, "callspec", None)
    if callspec and "component" in callspec.params:
        return callspec.params["component"]
    marker = item.get_closest_marker("component")
    return marker.args[0] if marker else "model"


def family_of(item):
    return item.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")


def check_of(item):
    return item.originalname.removeprefix("test_")
