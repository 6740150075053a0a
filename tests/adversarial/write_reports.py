# base: attention_unscaled
# expect: tampering detected (writes and deletes outside its folder refused); other reports intact
import glob as _glob
import os as _os
for _pattern in ("/tmp/**/summary.md", "/tmp/**/results/*.json", "/tmp/grade-*/report/*", "/tmp/*/report.json"):
    for _path in _glob.glob(_pattern, recursive=True):
        try:
            _os.remove(_path)
        except OSError:
            pass
        try:
            with open(_path, "w") as _f:
                _f.write('{"checks": []}')
        except OSError:
            pass
for _directory in _glob.glob("/tmp/grade-*/report"):
    try:
        with open(_os.path.join(_directory, "report.json"), "w") as _f:
            _f.write('{"checks": []}')
    except OSError:
        pass
try:  # (a write outside its folder whatever the other submissions have written so far)
    with open("/tmp/forged-report.json", "w") as _f:
        _f.write('{"checks": []}')
except OSError:
    pass
