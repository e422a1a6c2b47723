"""A worker for tests/localrun/test_run_isolation.py: reports where it runs, then waits to be released.

Rank 0 writes its pid to $PROBE_DIR/pid-<rank> once the process group (and so every store)
is up, then waits until the test creates $PROBE_DIR/release, so the test can look at the
listening sockets while the job runs.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import torch.distributed as dist

probe = Path(os.environ["PROBE_DIR"])
dist.init_process_group("gloo")
rank = dist.get_rank()
if len(sys.argv) > 1 and sys.argv[1] == "detach" and rank == 0:
    # A daemon the way a careless script starts one: its own session, a clean environment,
    # its parent gone at once, so it is no longer a descendant of the pod.
    code = (
        "import os, time\nif os.fork(): os._exit(0)\n"
        "open(os.environ['OUT'], 'w').write(str(os.getpid()))\ntime.sleep(600)"
    )
    subprocess.Popen([sys.executable, "-c", code], env={"OUT": str(probe / "daemon")}, start_new_session=True).wait()
(probe / f"pid-{rank}").write_text(str(os.getpid()))
deadline = time.monotonic() + 120  # a guard for a test that died, not a measure
while not (probe / "release").exists() and time.monotonic() < deadline:
    time.sleep(0.1)
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} released", flush=True)
