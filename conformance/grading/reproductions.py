"""Standalone reproduction scripts for the feedback (``OUT/reproductions/<name>/<n>-<check>.py``): each needs only
torch and the student's own file, never this project, and shows the evidence when run.

The process beside the submission's code writes, for each role it could build, a *recipe*
(:func:`recipes_of`, from ``adapters.recipes`` or the code's own ``CONFORMANCE_ROLES``): which class of the
student's is built with which hyperparameters (sub-blocks built the same way) and how its forward is called. The
grader keeps it as data (:func:`valid_recipes`) and writes one script per finding: the student's file imported by
its path (a notebook's or a post's code cells run in order), the block built and called on the check's own
configuration, seed and inputs (written out as literals), the check's call, then, for the properties that plain
torch can state (the output's shape, masked keys, future positions, batch independence, determinism, the
positional encoding's closed form, normalisation), the property itself, whose failure prints what was observed
against what is required and raises AssertionError. A crash is its own evidence (the script stops with it). The
checks that compare with the paper's reference say so, and print the checker's observation for comparison."""
import ast
import dataclasses
import json
import os
import re

import torch

from conformance.contract import harness
from conformance.contract.harness import TABLE_ATOL
from conformance.grading.files import write_atomic
from conformance.contract.interface import FUNCTION_ROLES, Config, Supports

IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
SOURCE = re.compile(r"[A-Za-z_]\w*|value:[\w.'\"+-]{0,40}")
SNIPPET = re.compile(r"Case\(load_implementation\((?P<spec>'[^'\n]*'|\"[^\"\n]*\")\), (?P<cfg>Config\([^)]*\)), "
                     r"batch=(?P<batch>\d+), src_len=(?P<src>\d+), tgt_len=(?P<tgt>\d+), dtype=torch\.(?P<dtype>\w+), "
                     r"seed=(?P<seed>\d+), device='cpu'\)\nm = case\.build\('(?P<role>\w+)'\)\n(?P<call>.*)", re.S)


# -- beside the code ------------------------------------------------------------------------------------------
def recipes_of(impl):
    """``{role: recipe}`` of each module role of ``impl`` (runs the student's code: only beside it)."""
    found = {}
    for role, builder in impl.roles.items():
        if role in FUNCTION_ROLES:
            found[role] = {"not_expressible": f"the checker calls the {role} function through an adapter of its "
                                              "own (not written out as a script yet)"}
            continue
        template = getattr(builder, "template", None)
        if template is not None:
            try:
                found[role] = template()
            except Exception as exc:  # (the student's code, run to read the call: never the run's end)
                found[role] = {"not_expressible": f"reading how it is called raised {type(exc).__name__}"}
        elif isinstance(builder, type) and getattr(builder, "__name__", "").isidentifier():
            found[role] = {"roles": role}  # CONFORMANCE_ROLES: built with the hyperparameters it names
    return found


def write_recipes(recipes, report_json):
    """``recipes`` (:func:`recipes_of`) as ``recipes.json`` beside ``report_json``."""
    if report_json:
        with open(os.path.join(os.path.dirname(report_json), "recipes.json"), "w") as f:
            json.dump(recipes, f)


# -- in the grader: the recipes as data -----------------------------------------------------------------------
def valid_build(build, depth=0):
    return (depth < 6 and isinstance(build, dict) and IDENTIFIER.fullmatch(str(build.get("name", "")))
            and IDENTIFIER.fullmatch(str(build.get("role", ""))) and isinstance(build.get("arguments"), list)
            and all(isinstance(a, list) and len(a) == 2 and IDENTIFIER.fullmatch(str(a[0])) and (
                SOURCE.fullmatch(a[1]) if isinstance(a[1], str) else
                valid_build(a[1]["layers"], depth + 1) if isinstance(a[1], dict) and "layers" in a[1]
                else valid_build(a[1], depth + 1)) for a in build["arguments"]))


def valid_recipe(recipe):
    if not isinstance(recipe, dict):
        return False
    if "not_expressible" in recipe or "roles" in recipe:
        return isinstance(recipe.get("not_expressible", recipe.get("roles")), str)
    call = recipe.get("call")
    return valid_build(recipe.get("build")) and (call is None or isinstance(call, list) and all(
        isinstance(a, list) and len(a) == 2 and IDENTIFIER.fullmatch(str(a[0])) and SOURCE.fullmatch(str(a[1]))
        for a in call)) and (recipe.get("masks") is None or re.fullmatch(r"[\w+ -]{1,40}", str(recipe["masks"])))


def valid_recipes(data):
    """The recipes (``recipes.json`` of the process beside the code) that have the expected form."""
    return {role: r for role, r in data.items() if IDENTIFIER.fullmatch(str(role)) and valid_recipe(r)} \
        if isinstance(data, dict) else {}


# -- the script ------------------------------------------------------------------------------------------------
LOADER = '''import importlib.util
import json
import pathlib
import re
import sys
import types

import torch

SUBMISSION = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else {file!r})


def compiles(source):
    try:
        compile(source, "<cell>", "exec")
        return True
    except SyntaxError:
        return False


def code_cells(text):
    \"\"\"The code of a notebook (its JSON, whatever the file's suffix), of a Python file, of a post (its fenced
    python blocks) or of a notebook's text export (after each 'In [n]:' line, the longest run of lines that
    compiles).\"\"\"
    try:
        return ["".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
    except (ValueError, KeyError, TypeError):
        pass
    if compiles(text):
        return [text]
    fenced = re.findall(r"^ {{0,3}}```(?:python|py)[^\\n]*\\n(.*?)^ {{0,3}}```", text, re.S | re.M)
    if fenced:
        return fenced
    cells = []
    for chunk in re.split(r"^In ?\\[[^\\]\\n]*\\]:[ \\t]*$", text, flags=re.M)[1:]:
        lines = chunk.strip("\\n").splitlines()
        cells.append(next(("\\n".join(lines[:k]) for k in range(len(lines), 0, -1)
                           if compiles("\\n".join(lines[:k]))), ""))
    return cells


def load(path):
    \"\"\"Your code's names: a .py file imported by its path, a folder's package, or the code cells of a notebook, a
    post or a text export run in order (lines starting with % or ! left out; a cell that raises is reported and
    skipped, as the checker does).\"\"\"
    if path.is_dir():
        sys.path.insert(0, str(path.parent))
        return importlib.import_module(path.name)
    if path.suffix == ".py":
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = sys.modules[path.stem] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    module = sys.modules[path.stem] = types.ModuleType(path.stem)
    for number, cell in enumerate(code_cells(path.read_text(encoding="utf-8", errors="replace")), 1):
        source = "\\n".join(line for line in cell.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            exec(compile(source, f"{{path}} (cell {{number}})", "exec"), module.__dict__)
        except Exception as exc:
            print(f"cell {{number}} raised {{type(exc).__name__}}: {{exc}} (skipped)", file=sys.stderr)
    return module


code = load(SUBMISSION)
'''

WRAPPER = '''

class Canonical(torch.nn.Module):
    """Your block, called as the checker calls it: the inputs by your forward's own argument names."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, *inputs):
        named = dict(zip({names!r}, inputs))
        out = {call}
        while isinstance(out, (tuple, list)) and out:
            out = out[0]
        return out
'''

PROPERTIES = {
    "output_shape": '''out = m(*inputs)
observed, required = tuple(out.shape), {shape!r}
holds = observed == required''',
    "eval_mode_is_deterministic": '''m.eval()
difference = (m(*inputs) - m(*inputs)).abs().max().item()
observed, required = f"two calls differ by {{difference:.3g}}", "two calls in eval mode give equal outputs"
holds = difference <= tolerance''',
    "dropout_acts_in_training": '''m.train()
difference = (m(*inputs) - m(*inputs)).abs().max().item()
observed, required = f"two calls differ by {{difference:.3g}}", "two calls in training differ (dropout acts)"
holds = difference > 0''',
    "samples_are_independent_of_batch": '''whole = m(*inputs)
alone = torch.cat([m(*[t[i:i + 1] if torch.is_tensor(t) and t.size(0) == {batch} else t for t in inputs])
                   for i in range({batch})])
difference = (whole - alone).abs().max().item()
observed = f"each sample alone differs from it in the batch by {{difference:.3g}}"
required = "each sample alone gives what it gives in the batch"
holds = difference <= tolerance''',
    "masked_keys_do_not_change_outputs": '''keys, mask, dim, self_attention = {keys!r}
keep = inputs[mask].reshape(inputs[mask].size(0), -1, inputs[mask].size(-1)).any(1)  # (batch, key): may attend
changed = list(inputs)
for k in keys:
    shape = [1] * changed[k].dim()
    shape[0], shape[dim] = keep.shape
    noise = torch.randn(changed[k].shape, generator=torch.Generator().manual_seed(1), dtype=changed[k].dtype)
    changed[k] = torch.where(keep.reshape(shape), changed[k], noise)
before, after = m(*inputs), m(*changed)
if self_attention:  # (the masked positions are queries too: only the others are compared)
    before, after = before[keep], after[keep]
difference = (before - after).abs().max().item()
observed = f"changing the masked keys changes the outputs by {{difference:.3g}}"
required = "masked keys do not change the outputs (§3.2.3)"
holds = difference <= tolerance''',
    "future_positions_do_not_change_earlier_outputs": '''changed = list(inputs)
changed[0] = inputs[0].clone()
changed[0][:, -1] = torch.randn(changed[0][:, -1].shape, generator=torch.Generator().manual_seed(1),
                                dtype=changed[0].dtype)
difference = (m(*inputs)[:, :-1] - m(*changed)[:, :-1]).abs().max().item()
observed = f"changing the last target position changes the earlier outputs by {{difference:.3g}}"
required = "no position reads a later one (§3.2.3)"
holds = difference <= tolerance''',
    "values_match_closed_form": '''x = torch.zeros(1, sizes["max_len"], sizes["d_model"], dtype=inputs[0].dtype)
position = torch.arange(x.size(1), dtype=torch.float64).unsqueeze(1)
rate = torch.pow(10000.0, -torch.arange(0, x.size(-1), 2, dtype=torch.float64) / x.size(-1))
table = torch.zeros(x.size(1), x.size(-1), dtype=torch.float64)
table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
difference = (m(x).double()[0] - table).abs().max().item()
observed = f"its output on zeros (positions 0..{{x.size(1) - 1}}) differs from the sinusoid table by {{difference:.3g}}"
required = "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...) added to the input (§3.5)"
holds = difference <= {table_atol}  # the check's own tolerance for a table of sines (float32 tables are common)''',
    "normalizes_each_position": '''out = m(*inputs)
mean, variance = out.mean(-1).abs().max().item(), (out.var(-1, unbiased=False) - 1).abs().max().item()
observed = f"per position: mean up to {{mean:.3g}}, variance off 1 by up to {{variance:.3g}}"
required = "each position normalised over d_model (mean 0, variance 1 with the initial gain and bias)"
holds = mean <= 1e-3 and variance <= 1e-2''',
}
KEYS = {"multi_head_attention": ((1, 2), 3, 1, False), "attention": ((1, 2), 3, 2, False),
        "encoder_layer": ((0,), 1, 1, True), "encoder": ((0,), 1, 1, True),
        "decoder_layer": ((1,), 2, 1, False), "decoder": ((1,), 2, 1, False)}
ONLY = {"masked_keys_do_not_change_outputs": tuple(KEYS),
        "future_positions_do_not_change_earlier_outputs": ("decoder_layer", "decoder"),
        "values_match_closed_form": ("positional_encoding",), "normalizes_each_position": ("layer_norm",)}
"""The roles whose canonical call lets a property be stated as written (a multi-head attention block's future
positions, say, are checked with a target mask its canonical call does not take)."""
NOT_RESTATED = ("ran without a crash; this check's property is not restated here (it needs the paper's reference "
                "or the checker's probes): compare with what the checker observed, in the docstring above")
VERDICT = '''
print("required:", required)
print("observed:", observed)
assert holds, f"observed: {observed}; required: {required}"
print("holds here")
'''


def literal(value):
    """Python source for a canonical input."""
    if torch.is_tensor(value):
        return f"torch.tensor({value.tolist()!r}, dtype={value.dtype})"
    if value is torch.tanh:
        return "torch.tanh"
    return repr(value)


class Stub:
    """The implementation a :class:`harness.Case` needs to draw canonical inputs (it never builds anything)."""
    spec, size_knobs, padding = "", [], None

    @staticmethod
    def supports(role):
        return Supports()


def parse(reproduction):
    """The check's case and call from its reproduction snippet (``harness.Case.reproduction``), or None."""
    found = SNIPPET.search(reproduction or "")
    if not found:
        return None
    cfg = ast.parse(found["cfg"], mode="eval").body
    return dict(spec=ast.literal_eval(found["spec"]), role=found["role"], call=found["call"].strip(),
                cfg=Config(**{k.arg: ast.literal_eval(k.value) for k in cfg.keywords}), batch=int(found["batch"]),
                src_len=int(found["src"]), tgt_len=int(found["tgt"]), dtype=getattr(torch, found["dtype"]),
                seed=int(found["seed"]))


def builder_lines(recipe, role, cfg, seed):
    """The lines that build ``m`` (the block under the canonical call) from ``recipe``."""
    if "roles" in recipe:  # the code's own CONFORMANCE_ROLES, given the hyperparameters its builder names
        return ["import inspect", "", f"torch.manual_seed({seed})", f"builder = code.CONFORMANCE_ROLES[{role!r}]",
                "named = inspect.signature(builder).parameters",
                "m = builder(**{k: v for k, v in sizes.items() if k in named or any(p.kind is p.VAR_KEYWORD "
                "for p in named.values())})"]
    from adapters.names import CANONICAL_CALLS
    from adapters.recipes import call_expression, expression, mask_conversion
    lines = [f"torch.manual_seed({seed})", f"block = {expression(recipe['build'], cfg)}"]
    if recipe.get("call") is None:
        return lines + ["raise SystemExit('built; the checker could not call it (see the feedback)')"]
    return [*mask_conversion(recipe["masks"] or "keep"),
            WRAPPER.format(names=CANONICAL_CALLS[role], call=call_expression(recipe["call"])), "", *lines,
            "m = Canonical(block)"]


def script(reproduction, check, recipes, header):
    """The standalone script of a finding (its reproduction snippet, the check it came from, the submission's
    recipes, the docstring ``header``), or ``(None, why not)``."""
    case = parse(reproduction)
    if case is None:
        return None, "the check left no case to rebuild"
    role = case["role"]
    recipe = recipes.get(role)
    if recipe is None:
        return None, f"the grader has no record of how the checker built the {role}"
    if "not_expressible" in recipe:
        return None, recipe["not_expressible"]
    drawn = harness.Case(Stub(), case["cfg"], case["batch"], case["src_len"], case["tgt_len"], case["dtype"],
                         case["seed"])
    snippet = PROPERTIES[check] if states(check, reproduction) else None
    if snippet is not None:  # (inputs long enough for the property to show: masked keys, later positions)
        drawn = drawn.with_lengths_at_least(5)
    inputs = harness.canonical_inputs(drawn, role)
    lines = [f'"""{header}"""', LOADER.format(file=case["spec"]), f"sizes = {dataclasses.asdict(case['cfg'])!r}",
             *builder_lines(recipe, role, case["cfg"], case["seed"]), f"m = m.to({case['dtype']}).eval()",
             f"tolerance = {harness.tolerance(case['dtype'])[0]!r}", f"inputs = ({', '.join(map(literal, inputs))},)", "case = None", "", "",
             "def canonical_inputs(case, role):", '    """The inputs the check drew."""', "    return inputs", "",
             ""]
    body = [line for line in case["call"].splitlines()  # (a comment pointing into this project: not the student's)
            if not (line.lstrip().startswith("#") and re.search(r"\b(conformance|adapters)\.", line))]
    if snippet is not None:
        body.append(snippet.format(shape=tuple(harness.expected_shape(drawn, role)), batch=case["batch"], table_atol=TABLE_ATOL,
                                   keys=KEYS.get(role)))
        body.append(VERDICT)
    else:
        body.append(f'print({NOT_RESTATED!r})')
    return "\n".join(lines + body) + "\n", None


def header(result, f, filename):
    """The script's docstring: what it reproduces, how to run it, what the paper requires and what was observed."""
    text = "\n".join([f"Reproduces '{f['check']}' of {f['component']} ({f['verdict']}: {f['cause']}) in "
                      f"{result.get('submission', result['name'])}.", "",
                      f"Run: python {filename} PATH_OF_YOUR_SUBMISSION   (it needs only torch and your file)", "",
                      f"The paper requires: {f['requirement']}", f"The checker observed: {f['observed'][0]}"])
    return text.replace("\\", "/").replace('"""', "'''")


def states(check, reproduction):
    """Whether a script can state the property of ``check`` for the role its ``reproduction`` builds."""
    case = parse(reproduction)
    return check in PROPERTIES and case is not None and case["role"] in ONLY.get(check, (case["role"],))


def key(finding):
    return finding["component"], finding["cause"]


def write_scripts(out, result, findings):
    """Write the scripts of ``findings`` (``analytics.digest``'s mistakes) under ``out/reproductions/<name>/``;
    ``{(component, cause): (relative path, None) or (None, why there is none)}`` (:func:`key`)."""
    recipes, written = result.get("recipes") or {}, {}
    for number, f in enumerate(findings, 1):
        if not f.get("reproduction"):
            continue
        check, reproduction = next(((c, r) for c, r in f.get("by_check", {}).items() if states(c, r)
                                    and f["verdict"] == "fail"),  # (a fail's check whose property it can state)
                                   (f["check"], f["reproduction"]))
        filename = f"reproductions/{result['name']}/{number:02d}-{check}.py"
        text, why = script(reproduction, check, recipes, header(result, dict(f, check=check), filename))
        if text is not None:
            write_atomic(out / filename, text)
        written[key(f)] = (filename if text is not None else None, why)
    return written
