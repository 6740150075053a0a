"""The one-way layout of ``../shared/design/architecture.md``, as the tree shows it: the contract and the test
machinery (``conformance/contract/``) at the bottom; ``adapters/``, which turns a submission into an Implementation;
the diagnosis of what the checks find (``conformance/diagnosis/``: the catalogue of causes, crashes, variants,
evidence); the checks (``conformance/checks/``); the pytest plugin and the reports at the top of ``conformance/``;
grading above them all. Each tier imports only the tiers below it."""
import ast
import functools
import subprocess
import sys

import pytest

from tests.mutants import ROOT

TIERS = ("reference", "conformance.contract", "adapters", "conformance.diagnosis", "conformance.checks",
         "conformance", "conformance.grading", "conformance.__main__")
"""The tiers, bottom first (the command line, ``python -m conformance``, dispatches to them all); a module belongs to the longest prefix that names it (``conformance.plugin`` to
``conformance``, ``conformance.grading.runner`` to ``conformance.grading``)."""


def tier(module):
    return max((t for t in TIERS if module == t or module.startswith(t + ".")), key=len)


LAYERS = {
    "conformance.diagnosis.causes": ("adapters", "conformance.checks", "conformance.plugin", "conformance.grading",
                                     "conformance.contract", "reference"),
    "adapters.submission": ("conformance.plugin", "conformance.checks", "conformance.diagnosis", "conformance.grading",
                            "conformance.contract.weights"),
    "conformance.contract.interface": ("adapters", "conformance.plugin", "conformance.grading"),
    "conformance.contract.harness": ("adapters", "conformance.diagnosis", "conformance.checks", "conformance.plugin",
                                     "conformance.grading"),
    "conformance.plugin": ("conformance.grading",),
}
"""What a fresh interpreter must not hold once it has imported a module: the tiers above it."""


@functools.cache
def loaded_by(module):
    """The names of the modules a fresh interpreter holds once it has imported ``module`` (one launch a module for
    the whole session: the tests below ask for ``adapters.submission`` twice)."""
    code = f"import {module}, sys; print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return ast.literal_eval(done.stdout.strip())


@pytest.mark.parametrize("module", sorted(LAYERS))
def test_a_stage_imports_nothing_above_it(module):
    above = [m for m in loaded_by(module) if m.startswith(LAYERS[module])]
    assert above == [], f"importing {module} imported {above}, which sit above it"


SHARED = ["adapters.names", "adapters.masks", "adapters.lint", "adapters.alignment", "adapters.multipliers",
          "adapters.module_copies", "adapters.projections", "adapters.torch_nn"]
"""Helpers every stage may use: the vocabulary of names, mask conventions, code reading, small readings of blocks."""
STAGES = ["adapters.cells", "adapters.cell_failures", "adapters.loading", "adapters.observe", "adapters.call_plans",
          "adapters.building", "adapters.construction", "adapters.recipes", "adapters.candidates", "adapters.wrapping",
          "adapters.behaviour", "adapters.assembly", "adapters.binding", "adapters.calls", "adapters.repairs",
          "adapters.in_place", "adapters.submission"]
"""The stages of ``adapters/`` in the order a submission goes through them (``docs/reading-code.md``): cut into
cells, say what of a cell runs past a failure, load, observe its author's own runs, plan calls, build, plan
construction, say how a role is built and called as plain code (for reproduction scripts), find candidates, wrap under the canonical call, try behaviour, read the
assembly, bind roles; then read the calls for misplaced arguments, keep a way to repair crashes, record the
sub-blocks' calls inside the author's own forward pass (the checks in place), and hand the checks an
Implementation."""
ORDER = SHARED + STAGES
PACKAGES = ("adapters", "conformance", "reference")
MAX_LINES = 650


def module_file(name):
    path = ROOT.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def is_module(name):
    return module_file(name).is_file()


def imported(name, everywhere=True):
    """The project modules that module ``name`` imports: every ``import`` and ``from ... import`` statement, inside
    functions too (``everywhere``), or those run when the module is imported (not inside a function or class)."""
    tree = ast.parse(module_file(name).read_text())
    package = name if module_file(name).name == "__init__.py" else name.rpartition(".")[0]
    nodes = ast.walk(tree) if everywhere else module_level(tree.body)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # a relative import
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found |= {f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base for alias in node.names}
    return {m for m in found if m.split(".")[0] in PACKAGES and is_module(m)}


def module_level(body):
    """The statements run when a module is imported: not the bodies of its functions and classes."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        for field_name in ("body", "orelse", "finalbody", "handlers"):
            yield from module_level(getattr(node, field_name, []))


def project_modules():
    return sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                  for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_every_adapters_module_has_its_place_in_the_order():
    assert sorted(m for m in project_modules() if m.startswith("adapters.")) == sorted(ORDER)


@pytest.mark.parametrize("module", ORDER)
def test_a_stage_imports_only_the_stages_before_it(module):
    allowed = set(ORDER[:ORDER.index(module)]) | {"adapters"}
    later = sorted(m for m in imported(module) if m.startswith("adapters") and m not in allowed)
    assert later == [], f"{module} imports {later}, which come at or after it in the order of the stages"


ABOVE_ADAPTERS = ("conformance.plugin", "conformance.diagnosis", "conformance.checks", "conformance.grading")


PLUGIN = ["conformance.hypothesis_setup", "conformance.options", "conformance.collection", "conformance.reporting",
          "conformance.console", "conformance.plugin"]
"""The plugin's modules, one per concern (``conformance/plugin.py`` says which), each importing only those before
it: the hypothesis set-up, the options, the collection of the checks, the verdict records (which read what a check
raised with ``conformance.diagnosis.classify``), the terminal summary; ``plugin`` registers them all with pytest."""


@pytest.mark.parametrize("module", PLUGIN)
def test_a_plugin_module_imports_only_the_plugin_modules_before_it(module):
    later = sorted(m for m in imported(module) if m in PLUGIN[PLUGIN.index(module):])
    assert later == [], f"{module} imports {later}, which come at or after it in the plugin's order"


@pytest.mark.parametrize("module", PLUGIN[:-1])
def test_a_plugin_module_loads_neither_the_checks_nor_grading_nor_a_later_concern(module):
    above = ("conformance.checks.test_", "conformance.grading", *PLUGIN[PLUGIN.index(module) + 1:])
    loaded = [m for m in loaded_by(module) if m.startswith(above)]
    assert loaded == [], f"importing {module} imported {loaded}"


def test_the_plugin_registers_every_concern():
    """pytest registers ``conformance.plugin`` alone: a concern it does not import would have its hooks unheard."""
    assert set(PLUGIN[:-1]) - imported("conformance.plugin", everywhere=False) == set()


@pytest.mark.parametrize("module", ["adapters", "adapters.submission"])
def test_adapters_import_neither_the_checks_nor_grading(module):
    above = [m for m in loaded_by(module) if m.startswith(ABOVE_ADAPTERS)]
    assert above == [], f"importing {module} imported {above}: the checks or grading"


def cycles_in(graph):
    """The import cycles of ``graph`` ({module: modules it imports}), each as the path that closes it."""
    state, cycles = {}, []

    def visit(module, path):
        state[module] = "open"
        for other in sorted(graph.get(module, ())):
            if state.get(other) == "open":
                cycles.append(path[path.index(other):] + [other])
            elif other not in state:
                visit(other, path + [other])
        state[module] = "done"
    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_every_import_goes_down_the_tiers():
    """Every import, inside functions too, reaches a module of the importer's own tier or one below it."""
    upward = {m: sorted(o for o in imported(m) if TIERS.index(tier(o)) > TIERS.index(tier(m)))
              for m in project_modules()}
    assert {m: up for m, up in upward.items() if up} == {}


def test_no_import_cycle_among_the_projects_packages():
    assert cycles_in({m: imported(m, everywhere=False) for m in project_modules()}) == []


def test_no_import_circle_inside_grading_even_through_functions():
    """The grader, the Dask placement and the reports share what they share through modules below them
    (``checking``, ``files``, ``assignment``), never by importing each other back, not even inside a function."""
    grading = [m for m in project_modules() if m.startswith("conformance.grading.")]
    assert cycles_in({m: {o for o in imported(m) if o in grading} for m in grading}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_reads_in_one_sitting(package):
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / package).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"
