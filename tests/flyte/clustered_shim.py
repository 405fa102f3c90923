"""flyte's real `clustered` entrypoint (what a clustered task's pod runs), on one machine.

Only the two lookups that need a Kubernetes JobSet are pointed at this machine: the headless-service
DNS name of worker 0 becomes 127.0.0.1, and the wait for that name to resolve is skipped. Everything
else — reading the JobSet variables, exporting FLYTE_CLUSTERED_WORKER/NODE_RANK/MASTER_ADDR, building
the torchrun command line and exec'ing torchrun, which starts one `a0` per process — is flyte's code.
"""

import sys

from flyte._bin import clustered

clustered._master_addr = lambda jobset_name, namespace: "127.0.0.1"
clustered._wait_for_dns = lambda hostname, *args, **kwargs: None

if __name__ == "__main__":
    sys.exit(clustered.main())
