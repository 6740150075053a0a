"""A project whose modules import their package from a folder inside it (``from app.core import EncoderStack`` in
``backend/app/model.py``, its scripts run in ``backend/``; round 13 of public code, 2026-11-27): that folder is put
on the import path as its scripts have it, rather than a placeholder standing in for ``app`` as for a package not
installed here, which left every block built of its modules unbuildable."""
from tests import mutants
from tests.suite import run_suite

STUDENT = mutants.without_roles(mutants.reference_source())
MODEL_CLASS = STUDENT[STUDENT.index("class Transformer(nn.Module):"):STUDENT.index("# == Masks")]
CORE = STUDENT.replace(MODEL_CLASS, "")
MODEL = "import torch\nimport torch.nn as nn\n\nfrom app.core import *  # noqa\n\n\n" + MODEL_CLASS


def test_a_package_imported_from_a_folder_inside_the_project_is_the_projects_own(tmp_path):
    app = tmp_path / "translation" / "backend" / "app"
    app.mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "core.py").write_text(CORE)
    (app / "model.py").write_text(MODEL)
    code, output, report = run_suite(f"--impl={tmp_path / 'translation'}", "-k", "model and output_shape", "-p",
                                     "no:xdist", tmp_path=tmp_path)
    assert not any("No module named 'app'" in n for n in report["notes"]), report["notes"]
    record = next(c for c in report["checks"] if c["component"] == "model" and c["check"] == "output_shape")
    assert record["verdict"] == "pass", output
