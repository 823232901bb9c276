"""What the confinement suites (the hostile battery and the commands beside
the kernel) share: the runtimes they run under and small limits, so that
every bomb reaches its limit quickly."""
MiB = 1 << 20

RUNTIMES = ["runc", "runsc"]
LIMITS = {"memory_bytes": 512 * MiB, "pids": 64, "cpu_millis": 1000,
          "workspace_bytes": 32 * MiB, "tmp_bytes": 16 * MiB}
