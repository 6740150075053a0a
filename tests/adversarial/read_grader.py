# base: attention_unscaled
# expect: tampering detected (reading the checker's files and the grader's command line refused)
import os as _os
import conformance as _conformance
try:
    _SECRET = open(_os.path.join(_os.path.dirname(_conformance.__file__), "plugin.py")).read()
except OSError:
    _SECRET = None
try:
    _CMDLINE = open(f"/proc/{_os.getppid()}/cmdline").read()
except OSError:
    _CMDLINE = None
