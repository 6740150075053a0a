"""hypothesis as the checks use it: the settings profiles (``ci`` by default, ``grade`` for grading, ``thorough``
by ``--hypothesis-profile``), and its digest of a check computed once (``conformance.startup`` runs first, before
anything imports hypothesis)."""
import conformance.startup  # noqa: F401  (first: before hypothesis is imported)
import inspect

import hypothesis.core
from hypothesis import HealthCheck, Phase, settings

settings.register_profile("ci", max_examples=6, deadline=None, derandomize=True, database=None,
                          report_multiple_bugs=False, phases=(Phase.explicit, Phase.generate),
                          suppress_health_check=list(HealthCheck))
settings.register_profile("grade", parent=settings.get_profile("ci"), max_examples=2)
settings.register_profile("thorough", max_examples=200, deadline=None, report_multiple_bugs=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])


DIGESTS = {}


def function_digest(function, compute=hypothesis.core.function_digest):
    """hypothesis's digest of a check (the seed of its derandomized examples), remembered: hypothesis reads the
    function's source again for it, twice a check, ~4 ms each, a second or more of every run; grading's worker
    computes them once for all its forks (``conformance.grading.zygote``). The digest also covers the key hypothesis's
    pytest plugin sets on the function for each parametrized item (its node id), so the key is part of ours."""
    key = (id(function), getattr(function, "_hypothesis_internal_add_digest", None))
    if key not in DIGESTS:
        getsource, inspect.getsource = inspect.getsource, source_of  # (one check, many items: its source read once)
        try:
            DIGESTS[key] = (function, compute(function))  # (the function is kept: its id stays its own)
        finally:
            inspect.getsource = getsource
    return DIGESTS[key][1]


SOURCES = {}


def source_of(function, getsource=inspect.getsource):
    """``inspect.getsource(function)``, read once a function (tokenizing the module from the function's first line
    each time, a millisecond an item): what hypothesis's digest reads for every parametrized item of a check."""
    if id(function) not in SOURCES:
        SOURCES[id(function)] = (function, getsource(function))
    return SOURCES[id(function)][1]


hypothesis.core.function_digest = function_digest
