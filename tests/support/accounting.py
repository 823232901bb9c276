"""What each suite and module cost: seconds, and sandboxes started (counted by
the gateways and launchers the tests start). Filled by plugin.py and by
support.gateway / support.sandboxes; printed at the end of the run."""
from collections import defaultdict

# (suite, module) of the test running now: whatever starts sandboxes is
# charged to it (a gateway to the test that made it, even when it stops later).
current = (".", ".")
seconds = defaultdict(float)
sandboxes = defaultdict(int)


def charge(owner, n):
    if n > 0:
        sandboxes[owner] += n
