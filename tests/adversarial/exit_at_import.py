# base: none
# expect: graded with every role missing (score 0): sys.exit(0) and os._exit(0) at import end nothing
import os
import sys
sys.exit(0)
os._exit(0)
