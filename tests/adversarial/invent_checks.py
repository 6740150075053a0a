# base: attention_unscaled
# expect: tampering detected (records of checks that were never collected added to the report)
import gc

import _pytest.config
import conformance.options
_config = next(o for o in gc.get_objects() if isinstance(o, _pytest.config.Config))
for _i in range(50):
    _config.stash[conformance.options.RESULTS].append(dict(
        component="multi_head_attention", family="softmax", check="invented", verdict="pass", cause="",
        message="", nodeid=f"conformance/checks/test_softmax.py::test_invented_{_i}[multi_head_attention]"))
