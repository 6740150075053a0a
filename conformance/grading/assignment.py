"""What an assignment asks for and how a submission is scored on it (``conformance/grading/rubric.toml``): the roles
required (every role of the paper, the rubric's list, or the roles of the teacher's solution), the weights of
components, families and checks, what each verdict earns, and the checks whose results students do not see until
the grades are released (``hidden = true``)."""
import ast
import json
import math
import tomllib
from pathlib import Path

from conformance.contract.interface import ROLES

DEFAULT_RUBRIC = Path(__file__).with_name("rubric.toml")
VERDICTS = ("pass", "deviation", "missing", "fail", "error")
SUITE = Path(__file__).resolve().parents[1] / "checks"


class RubricError(ValueError):
    """A rubric or a solution that cannot define the assignment; the message says what to change."""


def check_names():
    """The names of the suite's checks (its ``test_*`` functions without the prefix), read without running it."""
    names = set()
    for path in SUITE.glob("test_*.py"):
        names |= {node.name.removeprefix("test_") for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    return names


def number(value, where, low=0.0, high=math.inf):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RubricError(f"{where} = {value!r}: not a number from {low:g} to {high:g}")
    return float(value)


def entries(table, section, known, describe):
    """``(weights, hidden)`` of a rubric section whose entries are a weight or ``{weight = W, hidden = true}``;
    ``known(key)`` tells a key the suite knows, ``describe`` what such a key is."""
    if not isinstance(table, dict):
        raise RubricError(f"[{section}] is not a table")
    weights, hidden = {}, []
    for key, value in table.items():
        if not known(key):
            raise RubricError(f"[{section}] {key!r}: not {describe}")
        if isinstance(value, dict):
            unknown = set(value) - {"weight", "hidden"}
            if unknown:
                raise RubricError(f"[{section}] {key!r}: unknown field(s) {sorted(unknown)} (a weight and "
                                  "hidden = true are known)")
            if not isinstance(value.get("hidden", False), bool):
                raise RubricError(f"[{section}] {key!r}: hidden = {value['hidden']!r} is not true or false")
            hidden += [key] if value.get("hidden") else []
            if "weight" not in value:
                continue
            value = value["weight"]
        weights[key] = number(value, f"[{section}] {key!r}")
    return weights, hidden


SECTIONS = ("score", "credit", "components", "families", "checks")


def read_toml(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise RubricError(f"rubric {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"rubric {path}: not valid TOML ({exc})") from None


def layered(base, changes):
    """The default rubric ``base`` with what a rubric file sets; an entry ``{hidden = true}`` without a weight keeps
    the default's weight."""
    for section, table in changes.items():
        if section not in SECTIONS or not isinstance(table, dict):
            raise RubricError(f"[{section}]: not a section of a rubric (those are {', '.join(SECTIONS)})")
        for key, value in table.items():
            default = base.setdefault(section, {}).get(key)
            if isinstance(value, dict) and "weight" not in value and isinstance(default, (int, float)):
                value = {**value, "weight": default}
            base[section][key] = value
    return base


def load_rubric(path=None):
    """The default rubric (``rubric.toml`` beside this module) changed by what the rubric file ``path`` sets, checked
    and put in one form: ``score.required`` the list of roles asked for (``"all"``: every role of the paper),
    ``components``, ``families`` and ``checks`` weights by name, ``credit`` by verdict, and ``hidden``: the
    components and ``component/check`` keys marked ``hidden = true``. A rubric that cannot be read or names what the
    suite does not know raises :class:`RubricError`."""
    rubric = read_toml(DEFAULT_RUBRIC)
    try:
        return checked(layered(rubric, read_toml(path)) if path else rubric)
    except RubricError as exc:
        raise RubricError(f"rubric {path or DEFAULT_RUBRIC}: {exc}") from None


def checked(rubric):
    """``rubric`` (the TOML's tables) checked and put in :func:`load_rubric`'s form, or :class:`RubricError`."""
    score = rubric.setdefault("score", {})
    unknown = set(score) - {"max", "required", "a_mistake_costs_the_component"}
    if unknown:
        raise RubricError(f"[score] {sorted(unknown)}: unknown (max, required and a_mistake_costs_the_component are "
                          "known)")
    score["max"] = number(score.get("max", 100), "[score] max", low=1e-9)
    if not isinstance(score.setdefault("a_mistake_costs_the_component", True), bool):
        raise RubricError(f"[score] a_mistake_costs_the_component = {score['a_mistake_costs_the_component']!r}: "
                          "not true or false")
    required = score.get("required", "all")
    if required == "all":
        required = list(ROLES)
    if not isinstance(required, list) or not required or not all(r in ROLES for r in required):
        raise RubricError(f"[score] required = {required!r}: give \"all\" or a list of roles among {list(ROLES)}")
    score["required"] = [role for role in ROLES if role in required]
    rubric["credit"] = {verdict: number(value, f"[credit] {verdict}", high=1.0)
                        for verdict, value in rubric.get("credit", {}).items()}
    if set(rubric["credit"]) - set(VERDICTS):
        raise RubricError(f"[credit] {sorted(set(rubric['credit']) - set(VERDICTS))}: not a verdict (those are "
                          f"{', '.join(VERDICTS)})")
    rubric["components"], hidden = entries(rubric.get("components", {}), "components", ROLES.__contains__,
                                           "one of the roles " + ", ".join(ROLES))
    rubric["families"], _ = entries(rubric.get("families", {}), "families", lambda key: True, "")
    names = check_names() if rubric.get("checks") else set()
    rubric["checks"], hidden_checks = entries(
        rubric.get("checks", {}), "checks",
        lambda key: key.count("/") == 1 and key.split("/")[0] in ROLES and key.split("/")[1] in names,
        "\"component/check\" naming a role and a check of the suite")
    rubric["hidden"] = hidden + hidden_checks
    return rubric


def is_hidden(rubric, record):
    """Whether the result of a check record is kept from students until the grades are released."""
    return record["component"] in rubric["hidden"] or f"{record['component']}/{record['check']}" in rubric["hidden"]


ENCLOSING = {"attention": "multi_head_attention", "multi_head_attention": "encoder_layer",
             "feed_forward": "encoder_layer", "layer_norm": "encoder_layer", "sublayer_connection": "encoder_layer",
             "encoder_layer": "encoder", "decoder_layer": "decoder", "encoder": "model", "decoder": "model",
             "embedding": "model", "positional_encoding": "model", "generator": "model", "padding_mask": "model",
             "subsequent_mask": "model"}
"""The block a role is written inside when the code has no class or function of its own for it."""


def score(result, rubric):
    """Fill ``score``, ``max_score``, ``components`` (``{component: (share, weight)}``), the verdict counts and
    ``assignment``: the required roles not found (``lacking``, each earning 0), those graded through the block they
    are written in (``inline``, role: block) and the components checked that the assignment does not ask for
    (``not_asked``, out of the score).

    A component's share is the weighted credit of its checks that reached a verdict (a ``missing`` check claims
    nothing and stays out); with ``a_mistake_costs_the_component``, one fail or error makes it 0. Only the roles the
    rubric requires count; a required role whose every check is ``missing`` is graded through the nearest enclosing
    block that was checked (a role written inline), else earns 0; one the run did not check at all (checks selected
    with ``-m``) stays out."""
    maximum = rubric["score"]["max"]
    required = rubric["score"]["required"]
    counts = {v: 0 for v in VERDICTS}
    components, flagged = {}, set()
    for c in result["checks"]:
        counts[c["verdict"]] += 1
        if c["verdict"] == "missing":
            continue
        flagged |= {c["component"]} if c["verdict"] in ("fail", "error") else set()
        weight = float(rubric["checks"].get(f"{c['component']}/{c['check']}",
                                            rubric["families"].get(c["family"], 1)))
        credit = float(rubric["credit"].get(c["verdict"], 0.0))
        earned, total = components.get(c["component"], (0.0, 0.0))
        components[c["component"]] = (earned + weight * credit, total + weight)
    shares = {c: (0.0 if c in flagged and rubric["score"]["a_mistake_costs_the_component"] else e / t if t else 0.0)
              for c, (e, t) in components.items()}
    checked = {c["component"] for c in result["checks"]}
    lacking, inline = [], {}
    for role in required:
        if role in shares or role not in checked:
            continue
        enclosing = ENCLOSING.get(role)
        while enclosing is not None and enclosing not in shares:
            enclosing = ENCLOSING.get(enclosing)
        if enclosing is None:
            lacking.append(role)
        else:
            inline[role] = enclosing
        shares[role] = shares[enclosing] if enclosing is not None else 0.0
    weighted = {c: (s, float(rubric["components"].get(c, 1))) for c, s in shares.items() if c in required}
    weights = sum(w for _, w in weighted.values())
    value = maximum * sum(s * w for s, w in weighted.values()) / weights if weights else 0.0
    if result["status"] != "graded":
        value = 0.0
    result.update(score=round(value, 2), max_score=maximum, counts=counts,
                  components={c: [round(s, 4), w] for c, (s, w) in weighted.items()},
                  assignment=dict(lacking=lacking, inline=inline,
                                  not_asked=sorted(set(shares) - set(required), key=ROLES.index)))
    return result


def student_view(result, rubric, release=False):
    """What the student sees of a scored ``result``: all of it once the grades are released (``release``) or when
    nothing is hidden; else the result without the hidden checks, scored on the checks shown (a role graded through
    a hidden block is left out with it), with ``withheld``: how many check results are kept back."""
    if release or not rubric["hidden"]:
        return result
    kept_back = set(rubric["hidden"]) | {role for role, block in result.get("assignment", {}).get("inline", {}).items()
                                         if block in rubric["hidden"]}
    shown = [c for c in result["checks"]
             if c["component"] not in kept_back and not is_hidden(rubric, c)]
    view = score(dict(result, checks=shown), dict(rubric, score=dict(
        rubric["score"], required=[role for role in rubric["score"]["required"] if role not in kept_back])))
    view["withheld"] = len(result["checks"]) - len(shown)
    return view


def for_solution(rubric, result, name):
    """The rubric of the assignment that the teacher's solution defines: the roles its checked ``result`` contains
    (those with a verdict other than ``missing``) are the roles required. A solution that was not graded, holds
    none of the roles or does not earn full marks raises :class:`RubricError` listing what it lost points on."""
    from conformance.grading.analytics import digest
    if result["status"] != "graded":
        raise RubricError(f"--solution {name}: {result['status']}: {result.get('reason', '')}")
    roles = [role for role in ROLES
             if any(c["component"] == role and c["verdict"] != "missing" for c in result["checks"])]
    if not roles:
        raise RubricError(f"--solution {name}: the checks found none of the paper's roles in it")
    assigned = dict(rubric, score=dict(rubric["score"], required=roles))
    score(result, assigned)
    maximum = assigned["score"]["max"]
    if result["score"] < maximum:
        digested = digest(result)
        lost = [f"  - {f['verdict']} in {f['component']}: {f['cause']} ({', '.join(f['checks'])})"
                + (f" at {', '.join(f['where'])}" if f["where"] else "")
                for f in digested["mistakes"] + digested["deviations"]
                if result["components"].get(f["component"], [1.0])[0] < 1]
        raise RubricError(f"--solution {name} grades {result['score']:g} / {maximum:g}, not full marks, so it cannot "
                          "be the assignment's answer; what it lost points on:\n" + "\n".join(lost))
    return assigned


def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    return json.dumps(str(value))


def toml_text(rubric):
    """The rubric as TOML that :func:`load_rubric` reads back the same (the assignment as graded, for the students'
    self-check)."""
    def section(title, weights, hidden=()):
        lines = [f"\n[{title}]"]
        for key in dict.fromkeys([*weights, *hidden]):
            weight = toml_value(weights[key]) if key in weights else None
            lines.append(f"{json.dumps(key)} = " + (weight if key not in hidden else "{ " + ", ".join(
                ([f"weight = {weight}"] if weight else []) + ["hidden = true"]) + " }"))
        return lines

    score_ = rubric["score"]
    lines = ["# The assignment's rubric, as the grader used it (python -m conformance check FILE --rubric THIS_FILE).",
             "[score]"] + [f"{key} = {toml_value(score_[key])}" for key in ("max", "required",
                                                                           "a_mistake_costs_the_component")]
    lines += section("credit", rubric["credit"])
    lines += section("components", rubric["components"], [k for k in rubric["hidden"] if "/" not in k])
    lines += section("families", rubric["families"])
    lines += section("checks", rubric["checks"], [k for k in rubric["hidden"] if "/" in k])
    return "\n".join(lines) + "\n"


def hidden_finding(result, rubric, finding):
    """Whether a finding of :func:`conformance.grading.analytics.digest` comes from a hidden check."""
    causes = {finding["cause"], *finding.get("also", [])}
    return any(is_hidden(rubric, c) for c in result["checks"]
               if c["check"] in finding["checks"] and c["cause"] in causes)


def hidden_component(result, rubric, component):
    """Whether some check result of ``component`` is hidden."""
    return component in rubric["hidden"] or any(is_hidden(rubric, c) for c in result["checks"]
                                                if c["component"] == component)
