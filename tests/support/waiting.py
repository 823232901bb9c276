"""Waiting for a condition the way every suite does."""
import time


def wait_for(cond, what="the condition", timeout=30, step=0.1):
    """`cond()`'s first true value, tried every `step` s; AssertionError naming `what` after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    v = cond()
    if v:
        return v
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
