"""The five seed notebooks and posts (``../shared/seeds/``, read in place): the reports under ``reports/seeds/`` are
regenerated with ``python -m conformance report`` and every check's verdict and cause must be the same.
To accept a change of diagnosis, regenerate them: ``python -m conformance report ../shared/seeds/*.txt
--out reports/seeds -n 2``."""
import json
from pathlib import Path

import pytest

from conformance.reports import report
from tests.suite import ROOT

SEEDS = sorted((ROOT.parent / "shared" / "seeds").glob("*.txt"))
COMMITTED = ROOT / "reports" / "seeds"


def verdicts(path):
    return {c["nodeid"]: (c["verdict"], c["cause"]) for c in json.loads(Path(path).read_text())["checks"]}


@pytest.mark.skipif(not SEEDS, reason="no seeds in ../shared/seeds")
@pytest.mark.parametrize("seed", SEEDS, ids=[s.stem for s in SEEDS])
def test_seed_report_is_reproduced(seed, tmp_path):
    regenerated = report(seed, tmp_path, timeout=900)
    assert regenerated is not None, (tmp_path / f"{seed.stem}.md").read_text()
    committed, now = verdicts(COMMITTED / f"{seed.stem}.json"), verdicts(regenerated)
    changed = {k: (committed.get(k), now.get(k)) for k in committed.keys() | now.keys() if committed.get(k) != now.get(k)}
    assert changed == {}, "verdicts changed (committed, now):\n" + "\n".join(f"{k}: {v}" for k, v in sorted(changed.items()))
    assert (tmp_path / f"{seed.stem}.md").read_text().count("\n") > 20
