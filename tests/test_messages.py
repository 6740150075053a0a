"""What the README promises a finding says, recomputed here from the paper: the section cited, the required and the
observed numbers (from the configuration the message names), and a reproduction that runs the implementation's own
file and shows the same thing."""
import json
import math
import re

import pytest
import torch

from conformance.contract.interface import Config
from tests import mutants as catalogue
from tests.mutation_score import family_checks, run_mutant


def finding(mutant, tmp_path, check):
    """The record of ``check`` on ``mutant``'s component (its family's checks only)."""
    result = run_mutant(mutant, tmp_path, markers=mutant.component, in_process=True,
                        target=family_checks(mutant.family))
    assert result.caught, result.output
    report = json.loads(next(tmp_path.glob("report-*.json")).read_text())
    return next(c for c in report["checks"] if c["component"] == mutant.component and c["check"] == check)


def reproduce(message):
    """Run the reproduction printed under a finding; its namespace (``m``, ``out``, ``case``)."""
    script = message.split("Reproduce:\n", 1)[1]
    namespace = {}
    exec(compile(script, "<reproduction>", "exec"), namespace)
    return namespace


def test_scale_finding_cites_the_section_and_both_numbers(tmp_path):
    mutant = catalogue.BY_NAME["attention_scale_sqrt_d_model"]
    record = finding(mutant, tmp_path, "scores_scaled_by_inverse_sqrt_d_k")
    message = record["message"]
    d_k, d_model, h = map(int, re.search(r"§3\.2\.1; d_k=(\d+), d_model=(\d+), h=(\d+)\)", message).groups())
    assert d_k * h == d_model
    assert f"scores multiplied by 1/sqrt(d_k) = {1 / math.sqrt(d_k):.6g}" in message
    assert f"observed scores multiplied by {1 / math.sqrt(d_model):.6g} (sqrt d model)" in message
    namespace = reproduce(message)
    assert namespace["case"].impl.spec.endswith(f"{mutant.name}.py")  # the implementation's own file
    output = namespace["out"][0] if isinstance(namespace["out"], tuple) else namespace["out"]
    q, k, v, mask = torch.randn(1, h, 2, d_k), torch.randn(1, h, 3, d_k), torch.randn(1, h, 3, d_k), None
    weights = namespace["m"](q, k, v, mask)[1]
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_model), dim=-1)
    assert output.shape[-1] == d_k + 1 and torch.allclose(weights, expected, atol=1e-6)  # what the finding says


def test_parameter_count_finding_recomputes_the_closed_form(tmp_path):
    mutant = catalogue.BY_NAME["mha_projections_shared_by_heads"]
    message = finding(mutant, tmp_path, "parameter_count")["message"]
    cfg = eval(re.search(r"Config\([^)]*\)", message)[0], {"Config": Config})
    d, d_k = cfg.d_model, cfg.d_model // cfg.h
    paper, observed = 4 * (d * d + d), 3 * (d_k * d_k + d_k) + d * d + d
    assert f"the paper requires {paper} parameters, §3.2.2" in message
    assert f"observed {observed} parameters ({observed - paper:+d}: 3 projection(s) of d_k x d_k" in message
    assert "shared by the heads" in message


SHOWN = {  # mutant -> (check, what its reproduction's own calls show, read from the script's namespace)
    "model_memory_zeroed": ("output_depends_on_the_source", lambda ns: torch.equal(ns["before"][0], ns["after"][0])),
    "model_embeddings_unused": ("output_depends_on_the_target_tokens",
                                lambda ns: torch.equal(ns["before"][0, -1], ns["after"][0, -1])),
    "model_positional_encoding_unused": ("positions_reach_the_decoder",
                                         lambda ns: torch.allclose(ns["out"], ns["out"][:, :1].expand_as(ns["out"]))),
    "decoder_mask_dropped_in_training": ("future_target_tokens_do_not_change_earlier_outputs_in_training",
                                         lambda ns: not torch.equal(ns["before"][:, :-1], ns["after"][:, :-1])),
    "cross_attention_over_own_input": ("decoder_attends_to_the_memory",
                                       lambda ns: torch.equal(ns["before"], ns["after"])),
}


@pytest.mark.parametrize("name", sorted(SHOWN))
def test_reproduction_runs_the_authors_own_model_and_shows_the_failure(name, tmp_path):
    """The script printed under an information-flow finding rebuilds the block from the mutant's own file, calls it
    as the check did (the model through its own forward) and ends on the evidence the finding states."""
    mutant = catalogue.BY_NAME[name]
    check, shows = SHOWN[name]
    record = finding(mutant, tmp_path, check)
    assert record["verdict"] == "fail", record
    namespace = reproduce(record["message"])
    assert namespace["case"].impl.spec.endswith(f"{mutant.name}.py")
    assert shows(namespace), record["message"]
