# base: attention_unscaled
# expect: tampering detected (fork and subprocess refused)
import os as _os
import subprocess as _subprocess
try:
    if _os.fork() == 0:
        while True:
            pass
except OSError:
    pass
try:
    _subprocess.Popen(["sleep", "1000"])
except OSError:
    pass
