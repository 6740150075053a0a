# base: attention_unscaled
# expect: tampering detected (the checks beside the code forced to pass, the watch silenced; the checks judged apart disagree)
import conformance.harness
import conformance.grading.integrity
import conformance.diagnosis
for _name in ("compare_snapshot", "critical_unchanged", "canaries", "record"):
    setattr(conformance.grading.integrity, _name, lambda *args, **kwargs: None)
conformance.diagnosis.classify = lambda *args, **kwargs: ("pass", "", "")
conformance.harness.difference = lambda *args, **kwargs: None
