"""What @nsys_profile does where the task is defined (import time) and in a local `flyte.run`."""

from __future__ import annotations

import logging
import shlex

import flyte
import pytest
from flyte_harness import HERE, load_module

from flyteplugins.nsight import DEFAULT_REPORTS, nsys_profile

env = flyte.TaskEnvironment(name="nsight_decorator_tests")


def test_wrong_decorator_order_fails_at_import():
    with pytest.raises(TypeError, match=r"place @nsys_profile above @env.task"):

        @env.task
        @nsys_profile
        async def below(x: int) -> int:
            return x

    with pytest.raises(TypeError, match=r"place @nsys_profile above @env.task"):

        @nsys_profile(trace=["nvtx"])
        async def bare(x: int) -> int:
            return x


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"capture": "region"}, ValueError, r"capture='region' is not a capture mode: use 'task' .* or 'manual'"),
    ({"trace": []}, ValueError, r"trace is empty"),
    ({"trace": ["cuda,nvtx"]}, ValueError, r"trace domain 'cuda,nvtx' is not valid"),
    ({"trace": ["cuda", "os rt"]}, ValueError, r"trace domain 'os rt' is not valid"),
    ({"reports": ["cuda_api_sum", 7]}, TypeError, r"report 7 is not a report name: .*cuda_gpu_kern_sum"),
    ({"sample": "cpu --x"}, ValueError, r"sample='cpu --x' is not an nsys --sample value"),
    ({"cuda_graph_trace": "nodes"}, ValueError, r"cuda_graph_trace='nodes' is not an nsys --cuda-graph-trace value"),
    ({"python_backtrace": True, "sample": "none"}, ValueError, r"python_backtrace needs nsys' CPU sampling"),
])
def test_bad_arguments_fail_at_decoration_time(kwargs, error, message):
    with pytest.raises(error, match=message):
        nsys_profile(**kwargs)
    with pytest.raises(error, match=message):
        nsys_profile(enabled=False, **kwargs)  # checked even when off: a typo fails on the first import


def test_disabled_returns_the_same_task():
    async def body(x: int) -> int:
        return x

    task = env.task(body)
    before = dict(task.env_vars or {})
    assert nsys_profile(enabled=False)(task) is task
    assert (task.env_vars or {}) == before and task.report is False


def test_stamps_the_wrapper_and_turns_on_the_report():
    tasks = load_module(HERE, "profiled_tasks")
    task = tasks.whole_task
    assert task.report is True
    wrapper = shlex.split(task.env_vars["_F_EXEC_WRAPPER"])
    # /bin/sh, not `nsight`: the runtime execvp's the first word (tests/reliability runs it without nsight)
    assert wrapper[:2] == ["/bin/sh", "-c"]
    assert wrapper[3:] == ["nsight-wrapper", "nsight-${RUN_NAME}-${ACTION_NAME}", "nvtx,osrt", "", ""]
    assert "_F_EXEC_WRAPPER_CLUSTERED" not in task.env_vars
    assert tasks.clustered.env_vars["_F_EXEC_WRAPPER_CLUSTERED"] == "1"
    # `flyte deploy` serialises the environment's registry: it must hold the profiled task.
    assert tasks.env.tasks[task.name] is task


def test_sample_and_existing_env_vars_are_kept():
    sampled_env = flyte.TaskEnvironment(name="nsight_sampled", env_vars={"KEEP": "1"})

    @nsys_profile(trace=("cuda", "nvtx"), sample="cpu", reports=DEFAULT_REPORTS[:2])
    @sampled_env.task
    async def sampled(x: int) -> int:
        return x

    assert sampled.env_vars["KEEP"] == "1"
    assert shlex.split(sampled.env_vars["_F_EXEC_WRAPPER"])[5:] == ["cuda,nvtx", "cpu", ""]


def test_cuda_graph_trace_reaches_the_wrapper():
    graphs_env = flyte.TaskEnvironment(name="nsight_graph_nodes")

    @nsys_profile(cuda_graph_trace="node")
    @graphs_env.task
    async def replayed(x: int) -> int:
        return x

    assert shlex.split(replayed.env_vars["_F_EXEC_WRAPPER"])[5:] == ["cuda,nvtx", "", "node"]


def test_python_backtrace_reaches_nsight_launch_through_the_task_environment():
    """The exec wrapper's words stay those of a task without it: `nsight launch` under it reads the variable."""
    traced_env = flyte.TaskEnvironment(name="nsight_python_backtrace")

    @nsys_profile(python_backtrace=True)
    @traced_env.task
    async def traced(x: int) -> int:
        return x

    @nsys_profile
    @traced_env.task
    async def plain(x: int) -> int:
        return x

    assert traced.env_vars["NSIGHT_PYTHON_BACKTRACE"] == "1" and "NSIGHT_PYTHON_BACKTRACE" not in plain.env_vars
    assert traced.env_vars["_F_EXEC_WRAPPER"] == plain.env_vars["_F_EXEC_WRAPPER"]


def test_override_keeps_profiling():
    tasks = load_module(HERE, "profiled_tasks")
    overridden = tasks.whole_task.override(env_vars={"EXTRA": "1"})
    assert overridden is not tasks.whole_task
    assert overridden.env_vars["EXTRA"] == "1"
    assert overridden.env_vars["_F_EXEC_WRAPPER"] == tasks.whole_task.env_vars["_F_EXEC_WRAPPER"]
    assert overridden.report is True
    assert overridden.execute.__qualname__ == tasks.whole_task.execute.__qualname__


def test_local_run_is_unprofiled_with_one_debug_line(caplog):
    tasks = load_module(HERE, "profiled_tasks")
    flyte.init()
    with caplog.at_level(logging.DEBUG, logger="flyteplugins.nsight"):
        run = flyte.run(tasks.regions_sync, steps=3)
    assert run.outputs()[0] == tasks.work(3, "train") + tasks.work(2, "eval")
    lines = [r.getMessage() for r in caplog.records if r.name == "flyteplugins.nsight"]
    assert lines == ["regions_sync is not running under nsys launch (a local run, or nsys is missing); "
                     "it runs unprofiled"]
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "flyteplugins.nsight")
