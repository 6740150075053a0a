"""Verdicts of a check, and the exceptions a check raises to give one.

A check passes by returning (after :func:`note_on_pass` when it found a conforming form worth naming). Otherwise it
raises:

* :class:`Failure` - the implementation contradicts the paper;
* :class:`Deviation` - the implementation follows a named, known variant (pre-norm, GELU, ...);
* :class:`conformance.contract.interface.MissingRole` or :class:`Missing` - it has nothing to check;
* :class:`Unusable` - the implementation's code for it exists but cannot run at all (an *error*);
* anything else raised by the implementation's code is an *error*.

Each finding carries a stable ``cause`` identifier (``"attention.scale.sqrt_d_model"``), what the paper
requires (with its section) and what was observed.
"""
PASS, FAIL, DEVIATION, MISSING, ERROR = "pass", "fail", "deviation", "missing", "error"
PASS_NOTES = []
"""What the running check found that conforms and is worth saying (the plugin writes it on a pass, then clears it)."""


def note_on_pass(text):
    """Say what a passing check found when the paper allows more than one form (projections with or without
    biases): the plugin reports it as the pass's message."""
    if text not in PASS_NOTES:
        PASS_NOTES.append(text)
SEVERITY = {PASS: 0, MISSING: 1, DEVIATION: 2, FAIL: 3, ERROR: 4}


class Finding(Exception):
    verdict = None

    def __init__(self, cause, requirement, observed, reproduction=None):
        self.cause, self.requirement, self.observed, self.reproduction = cause, requirement, observed, reproduction
        super().__init__(self.message)

    @property
    def message(self):
        text = f"{self.cause}: the paper requires {self.requirement}; observed {self.observed}"
        if self.reproduction:
            text += "\nReproduce:\n" + self.reproduction
        return text


def parse_message(message, cause):
    """``(requirement, observed, reproduction)`` of a check record's message as :attr:`Finding.message` writes it;
    any other message (a crash) gives ``(None, its text, reproduction)``."""
    text, _, reproduction = message.partition("\nReproduce:\n")
    head = f"{cause}: the paper requires "
    if text.startswith(head) and "; observed " in text:
        requirement, _, observed = text[len(head):].partition("; observed ")
        return requirement, observed, reproduction
    return None, text, reproduction


class Failure(Finding, AssertionError):
    verdict = FAIL


class Deviation(Finding):
    verdict = DEVIATION


class Missing(Finding):
    verdict = MISSING


class Unusable(Finding):
    verdict = ERROR


def worst(verdicts):
    """The most severe verdict of a group (a table cell)."""
    return max(verdicts, key=SEVERITY.__getitem__, default=PASS)


def summary_table(records):
    """``{component: {family: worst verdict}}`` over check records (dicts with component, family and verdict)."""
    table = {}
    for r in records:
        table.setdefault(r["component"], {}).setdefault(r["family"], []).append(r["verdict"])
    return {c: {f: worst(v) for f, v in fams.items()} for c, fams in table.items()}
