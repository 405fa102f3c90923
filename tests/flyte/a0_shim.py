"""The real `a0` entrypoint with one change: a LocalController instead of the remote one.

With no Flyte backend here the remote controller would retry a dead endpoint for about a minute
whenever a traced step runs. Everything else (the `_F_EXEC_WRAPPER` re-exec, task loading, input
and output files, error.pb, report.html) is flyte's own code. The harness installs this file as an
executable script so the runtime's re-exec (`<wrapper> sys.argv`) can run it again, and it records
every traced step's output as a JSON line in $NSIGHT_TEST_TRACES, so tests can follow a trace file
the way the UI would.
"""

import json
import os

import flyte._internal.controllers as controllers
import flyte._internal.controllers._local_controller as local
from flyte._bin import runtime


class RecordingController(local.LocalController):
    async def record_trace(self, info):  # type: ignore[no-untyped-def]
        await super().record_trace(info)
        with open(os.environ["NSIGHT_TEST_TRACES"], "a") as sink:
            sink.write(json.dumps({"name": info.name, "action": info.action.name,
                                   "output": getattr(info.output, "path", None),
                                   "error": str(info.error) if info.error else None}) + "\n")


local.LocalController = RecordingController
create_controller = controllers.create_controller
controllers.create_controller = lambda ct, **kwargs: create_controller("local")

if __name__ == "__main__":
    runtime.main()
