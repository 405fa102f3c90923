"""The real `a0` entrypoint with one change: a LocalController instead of the remote one.

With no Flyte backend here the remote controller would retry a dead endpoint for about a minute
whenever a traced step runs. Everything else (the `_F_EXEC_WRAPPER` re-exec, task loading, input
and output files, error.pb, report.html) is flyte's own code. The harness installs this file as an
executable script so the runtime's re-exec (`<wrapper> sys.argv`) can run it again, and it records
every traced step's output as a JSON line in $NSIGHT_TEST_TRACES, so tests can follow a trace file
the way the UI would.

The controller is swapped in when the runtime runs the action, not at import: a process that re-execs
itself under the wrapper (every profiled task's first one) never runs it, and importing the controllers
there cost about 0.4 s of CPU per action (the runtime keeps its own imports light for that reason).
"""

import json
import os

from flyte._bin import runtime


def _record_traced_steps() -> None:
    """Every controller the runtime creates is a LocalController that also writes each traced step's output to
    $NSIGHT_TEST_TRACES."""
    import flyte._internal.controllers as controllers
    import flyte._internal.controllers._local_controller as local

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


_run_action = runtime._run_action


def _run_action_recording(*args, **kwargs):  # type: ignore[no-untyped-def]
    _record_traced_steps()
    return _run_action(*args, **kwargs)


runtime._run_action = _run_action_recording

if __name__ == "__main__":
    runtime.main()
