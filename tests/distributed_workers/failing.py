"""Run under the launcher: rank 1 dies (``die``) or hangs (``hang``) while the others wait in an
all-reduce with a 3-second timeout; the job must end non-zero, naming the failure."""

import sys
import time
from datetime import timedelta

import tinyattn as ta
import tinyattn.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(seconds=3))
if dist.get_rank() == 1:
    if sys.argv[1] == "die":
        raise ValueError("rank 1 fails on purpose")
    time.sleep(60)  # stuck: the others time out
dist.all_reduce(ta.ones(3))
print("unreachable: the all-reduce cannot finish without rank 1")
