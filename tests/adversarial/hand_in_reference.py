# base: none
# expect: reference handed in (score 0)
from reference.transformer import CONFORMANCE_ROLES  # noqa: F401
