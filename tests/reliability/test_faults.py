"""The fault matrix (docs/troubleshooting.md): every case through the real `a0` entrypoint under real nsys.

A fake `nsys` appears only where nsys cannot fail on cue: it wraps the real one and injects one fault
into one subcommand. For every case the test asserts what a user is promised: the task's return value
or exception exactly as unprofiled, one warning line naming cause and remedy, no hang (bounded
timeouts, never timing assertions), no nsys session, process or temp file left behind, and the trace
kept whenever nsys wrote one.
"""

from __future__ import annotations

import html
import os
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from capture_helpers import nsys_whose_importer_fails_once, stand_in_nsys
from fault_tasks import EPOCHS, EXPORT_GAUNTLET, GAUNTLET, HOSTILE_NAMES, HOSTILE_REGIONS, expected
from flyte_harness import BIN, ActionResult, nvtx_counts, parse_report, report_tabs, run_action_with, without_nsys_env
from shared_runs import once_per_run

from nsight_core import find_nsys
from nsight_core.settings import sanitize

pytestmark = [pytest.mark.flyte, pytest.mark.nsys, pytest.mark.reliability]

HERE = Path(__file__).resolve().parent
MODULE = "fault_tasks"
STEPS = 4
# Flyte logs the plugin's warnings as bare messages; these are the beginnings of every one of them.
NSIGHT_WARNING = re.compile(
    r"^(nsight: WARNING|could not |publishing the profile|region .* was cancelled|nsys\.range\()")


def warnings_of(result: ActionResult) -> list[str]:
    """Our warning lines (flyte's own runtime banner is not one of them)."""
    return [line for line in result.stderr.splitlines() if NSIGHT_WARNING.search(line)]


def one_warning(result: ActionResult) -> str:
    found = warnings_of(result)
    assert len(found) == 1, result.stderr
    return found[0]


def sections(page: str) -> list[str]:
    return [h for h in parse_report(page).headings if h.startswith("Nsight")]


def own_sleeper() -> str:
    """A `sleep` command line no other test runs: wait_gone() must not wait for another test's hang."""
    return f"sleep 600.{uuid.uuid4().int % 10**6:06d}"


def wait_gone(pattern: str, timeout: float = 20.0) -> list[str]:
    """Processes whose command line matches PATTERN, after waiting up to TIMEOUT for them to exit."""
    deadline = time.monotonic() + timeout
    while True:
        found = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout.splitlines()
        found = [line for line in found if "pgrep" not in line]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def assert_nothing_left(result: ActionResult) -> None:
    """No process or nsys session of this run, and nothing in its temp folder but kept traces."""
    name = sanitize(result.run_name)  # as in the session's name, which the processes' command lines hold
    assert wait_gone(name) == []
    sessions = subprocess.run([str(find_nsys().path), "sessions", "list"], capture_output=True, text=True).stdout
    assert name not in sessions
    tmp = result.workdir / "tmp"
    left = [str(p.relative_to(tmp)) for p in tmp.rglob("*")
            if p.relative_to(tmp).parts[0] != "nvidia"  # nsys' own lock files
            and not (p.is_dir() and p.parent == tmp / "nsight") and p != tmp / "nsight"
            and p.suffix != ".nsys-rep"
            and not (p.parent == tmp and p.name in GAUNTLET_LEFT and result_task(result) == "gauntlet")]
    assert left == [], f"left in the task's temp space: {left}"


def kept_traces(result: ActionResult) -> list[str]:
    return sorted(p.name for p in (result.workdir / "tmp").glob("nsight/*/*.nsys-rep"))


def fake_nsys(tmp_path: Path, subcommand: str, script: str, real: Path | None = None) -> dict[str, str]:
    """A stand-in nsys that runs SCRIPT for SUBCOMMAND ($REAL is the real nsys, or REAL) and is $REAL otherwise."""
    fake = stand_in_nsys(tmp_path, f'if [ "$1" = {subcommand} ]; then\n{script}\nfi\nexec "$REAL" "$@"\n', real)
    return {"NSIGHT_NSYS": str(fake)}


def assert_unprofiled_value(result: ActionResult, task: str) -> None:
    assert result.error is None, result.stderr
    assert result.output == expected(task, STEPS)


# -- nsys, nsight and the decorator's wrapper --------------------------------------------------------

def test_nsys_missing_runs_unprofiled(run_action, without_nsys):
    result = run_action(HERE, MODULE, "whole", {"steps": STEPS}, env=without_nsys)
    assert_unprofiled_value(result, "whole")
    warning = one_warning(result)
    assert "runs unprofiled" in warning and "No usable nsys" in warning and "install-nsys.sh" in warning
    assert report_tabs(result.report) == [] and result.traces == []
    assert_nothing_left(result)


HOSTILE_RUN_NAME = "r$(touch pwned)`touch pwned`;'\"x"


@pytest.fixture
def unusual_pod(a0: Path, tmp_path_factory: pytest.TempPathFactory) -> ActionResult:
    """One whole-task run of `hostile_nvtx` shared by the cases that must not show at all: `nsight` is not on
    PATH (an unactivated venv, a --target install), the run and action names are hostile to a shell, and so are
    the task's NVTX names. And nsys' importer fails on the trace once, as it did here under load: a run lost its
    trace to it, and nsight now imports the raw stream nsys kept once more."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != BIN)

    def make(folder: Path) -> ActionResult:
        nsys, _imports = nsys_whose_importer_fails_once(folder)
        return run_action_with(a0, folder, HERE, MODULE, "hostile_nvtx", {"steps": STEPS},
                               env={"PATH": path, "ACTION_NAME": "a0/../\nx", **nsys}, run_name=HOSTILE_RUN_NAME)

    return once_per_run(tmp_path_factory, "unusual-pod", make)


STEP_COUNTS = {f"step_{i}": 1 for i in range(STEPS)}


def test_nsight_not_on_path_still_profiles(unusual_pod):
    """An unactivated venv / --target install: the wrapper finds nsight-core through a0's interpreter."""
    result = unusual_pod
    assert_unprofiled_value(result, "hostile_nvtx")
    assert warnings_of(result) == [], result.stderr
    [counts] = nvtx_counts(result.report)
    assert STEP_COUNTS.items() <= counts.items()
    assert kept_traces(result) == ["hostile_nvtx.nsys-rep"]
    assert_nothing_left(result)


def test_hostile_run_and_action_names(unusual_pod):
    """The runtime expands $RUN_NAME into the wrapper: it must stay data, never become shell code."""
    result = unusual_pod
    assert_unprofiled_value(result, "hostile_nvtx")
    [counts] = nvtx_counts(result.report)
    assert STEP_COUNTS.items() <= counts.items()
    assert not (HERE / "pwned").exists()


def test_a_failed_import_never_shows(unusual_pod):
    """nsys' importer failed, nsight's second import wrote the trace: the task's profile is whole, nobody is
    warned, and no raw stream is left (assert_nothing_left, above)."""
    imports = unusual_pod.workdir.parent / "imports.log"
    assert len(imports.read_text().splitlines()) == 2  # nsys' failed import, then nsight's
    assert kept_traces(unusual_pod) == ["hostile_nvtx.nsys-rep"]
    assert sections(unusual_pod.report) == ["Nsight task: hostile_nvtx"]


def test_hostile_nvtx_names_keep_the_summary(unusual_pod):
    result = unusual_pod
    assert_unprofiled_value(result, "hostile_nvtx")
    assert warnings_of(result) == [], result.stderr
    [counts] = nvtx_counts(result.report)
    assert STEP_COUNTS.items() <= counts.items()
    assert len(counts) == STEPS + len(HOSTILE_NAMES)


def test_nsys_launch_fails_runs_unprofiled(run_action, tmp_path):
    fault = fake_nsys(tmp_path, "launch", 'echo "Error: could not launch the target" >&2; exit 1')
    result = run_action(HERE, MODULE, "whole", {"steps": STEPS}, env=fault)
    assert_unprofiled_value(result, "whole")
    warning = one_warning(result)
    assert "runs unprofiled" in warning and "could not launch the target" in warning
    assert report_tabs(result.report) == []
    assert_nothing_left(result)


def test_nsys_launch_that_never_starts_the_task_runs_it_unprofiled(run_action, tmp_path):
    """nsys 2023.4.4 on a loaded machine loses its agent: exit 0, the task never ran (a CI run saw
    it). The launch is tried again (3 attempts in all), then the task runs unprofiled: never a job that did nothing."""
    lost = 'echo "Connection to Agent lost. This is most likely a bug." >&2; exit 0'
    result = run_action(HERE, MODULE, "whole", {"steps": STEPS}, env=fake_nsys(tmp_path, "launch", lost))
    assert_unprofiled_value(result, "whole")
    warning = one_warning(result)
    assert "runs unprofiled: nsys ended without starting it (its last words: Connection to Agent lost." in warning
    assert report_tabs(result.report) == []


# -- nsys start / stop, the trace and its summary ---------------------------------------------------
# A fault that needs no setting of its own (the 3 s timeout of a hang, a summary memory) is injected into one region
# of a shared run, by the region's name: `gauntlet` holds a region per fault of start, stop and the trace, and
# `export_gauntlet` one per fault of `nsys export`. One `a0` run for eight cases and one for two, instead of one each
# (a run costs seconds of CPU). Each case asserts of its region what it asserted of its run
# alone; test_gauntlet_warns_once_per_fault asserts what they share: one warning each, nothing else in the page.

def fake_nsys_by_region(folder: Path, faults: dict[str, str]) -> dict[str, str]:
    """A stand-in nsys that runs FAULTS["<subcommand>:<region>"] (a sh case pattern) for that subcommand of that
    region, and is the real one ($REAL) otherwise. A region is named by `nsys start`'s -o, `nsys stop` stops the one
    started last (the regions follow one another), and `export` and `stats` name it by their files."""
    started = folder / "started-region"
    cases = "".join(f"{pattern})\n{script}\n;;\n" for pattern, script in faults.items())
    fake = stand_in_nsys(folder, f"""REGION=
case "$1" in
start) prev=; for a; do [ "$prev" = -o ] && REGION=$(basename "$a"); prev=$a; done; echo "$REGION" > {started};;
stop) REGION=$(cat {started});;
*) for a; do case "$a" in *.nsys-rep|*.sqlite|*.arrowdir) REGION=$(basename "$a"); REGION=${{REGION%%.*}};; esac; done;;
esac
case "$1:$REGION" in
{cases}esac
exec "$REAL" "$@"
""")
    return {"NSIGHT_NSYS": str(fake)}


START_FAULTS = {  # script, cause, the gauntlet's region (None: a run of its own)
    "fails": ('echo "Error: collection could not be started" >&2; exit 1', "collection could not be started",
              "start_fails"),
    "hangs": ("exec sleep 600", "did not finish within 3 s", None),
    "succeeds for a missing session": ("exit 0", "wrote no", "start_missing"),
}


def a_run_of_its_own(run_action, fault_env: dict[str, str]) -> tuple[ActionResult, str]:  # type: ignore[no-untyped-def]
    return run_action(HERE, MODULE, "region", {"steps": STEPS}, env=fault_env), "training"


@pytest.mark.parametrize("fault", START_FAULTS)
def test_nsys_start_fault(run_action, request, tmp_path, fault):
    script, cause, region = START_FAULTS[fault]
    sleeper = own_sleeper()
    if region is None:
        env = {**fake_nsys(tmp_path, "start", script.replace("sleep 600", sleeper)), "NSIGHT_QUICK_TIMEOUT": "3"}
        result, region = a_run_of_its_own(run_action, env)
    else:
        result = request.getfixturevalue("gauntlet")
    assert_unprofiled_value(result, result_task(result))
    warning = warning_of(result, region)
    assert cause in warning and f"'{region}'" in warning
    assert f"Nsight region: {region}" not in sections(result.report)
    assert wait_gone(sleeper) == []
    assert_nothing_left(result)


# A stop that loses the report loses the raw stream too, which nsys keeps beside it when its import fails under load:
# nsight would import it again and have a trace.
LOSE_TRAINING = 'rm -f "$NSIGHT_OUTPUT_DIR"/training.nsys-rep "$NSIGHT_OUTPUT_DIR"/training.qdstrm'
STOP_FAULTS = {  # script, cause, the gauntlet's region (None: a run of its own)
    "fails": ('echo "Error: stop failed" >&2; exit 1', "stop failed", "stop_fails"),
    "hangs": ("exec sleep 600", "did not finish within 3 s", None),
    "loses the report": (f'"$REAL" "$@" >/dev/null; {LOSE_TRAINING}; exit 0', "wrote no", "stop_loses"),
    "fills the disk": (f'"$REAL" "$@" >/dev/null; {LOSE_TRAINING}; '
                       'echo partial > "$TMPDIR/nsys-report-dead.qdstrm"; '
                       'echo live > "$TMPDIR/nsys-report-live.qdstrm"; '
                       'echo "[QuadDCommon::tag_report_file_name*] = \\"$TMPDIR/nsys-report-dead.qdstrm\\"" >&2; '
                       'echo "Error writing file: No space left on device" >&2; exit 1', "disk filled up",
                       "stop_fills_disk"),
}
# A failed stop leaves the region's collection running, as the task's end finds it alone: the gauntlet's last region.


@pytest.mark.parametrize("fault", STOP_FAULTS)
def test_nsys_stop_fault(run_action, request, tmp_path, fault):
    script, cause, region = STOP_FAULTS[fault]
    sleeper = own_sleeper()
    if region is None:
        # Only the hanging stop gets a short timeout: the others run the real stop, slow on a loaded machine.
        env = {**fake_nsys(tmp_path, "stop", script.replace("sleep 600", sleeper)),
               "NSIGHT_STOP_TIMEOUT": "3" if fault == "hangs" else "300"}
        result, region = a_run_of_its_own(run_action, env)
    else:
        result = request.getfixturevalue("gauntlet")
    assert_unprofiled_value(result, result_task(result))
    mine = warning_of(result, region)
    assert "could not stop" in mine and cause in mine, result.stderr
    assert f"Nsight region: {region}" not in sections(result.report)
    assert wait_gone(sleeper) == []
    if fault == "fills the disk":  # only the stream nsys named is deleted: another session's is live
        tmp = result.workdir / "tmp"
        assert not (tmp / "nsys-report-dead.qdstrm").exists() and (tmp / "nsys-report-live.qdstrm").exists()
    assert_nothing_left(result)


def test_a_failed_import_at_the_sessions_end_is_imported_again(run_action, tmp_path):
    """A region whose stop hangs records on until the task ends, and nsys' import at the session's end fails, as
    2023.4.4's does under load, keeping the raw stream: `nsight launch` imports it once more when the task has ended.
    The trace is kept, no stream is left."""
    installed, imports = nsys_whose_importer_fails_once(tmp_path)
    sleeper = own_sleeper()
    env = {**fake_nsys(tmp_path, "stop", f"exec {sleeper}", Path(installed["NSIGHT_NSYS"])),
           "NSIGHT_STOP_TIMEOUT": "3"}
    result, region = a_run_of_its_own(run_action, env)
    assert "did not finish within 3 s" in warning_of(result, region)
    assert len(imports.read_text().splitlines()) == 2, result.stderr  # nsys' import, then nsight launch's
    assert kept_traces(result) == ["training.nsys-rep"], result.stderr
    assert wait_gone(sleeper) == []
    assert_nothing_left(result)


@pytest.fixture
def retried_region(a0: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[ActionResult, ActionResult]:
    """`region` run twice under one run name (a retried attempt), made once per test run. The first attempt's
    `nsys start` also prints permission words on success (its own case, below): neither case needs a run alone."""

    def make(folder: Path) -> tuple[ActionResult, ActionResult]:
        words = fake_nsys(folder, "start", 'echo "note: insufficient privileges for CPU sampling"; exec "$REAL" "$@"')
        first = run_action_with(a0, folder, HERE, MODULE, "region", {"steps": STEPS}, env=words)
        again = run_action_with(a0, folder, HERE, MODULE, "region", {"steps": STEPS}, run_name=first.run_name)
        return first, again

    return once_per_run(tmp_path_factory, "retried-region", make)


def test_permission_words_in_a_successful_start_do_not_fail_it(retried_region):
    result, _ = retried_region
    assert_unprofiled_value(result, "region")
    assert warnings_of(result) == [], result.stderr
    assert sections(result.report) == ["Nsight region: training"]


def test_retried_attempt_never_replays_the_previous_trace(retried_region):
    first, again = retried_region
    for result in (first, again):
        assert_unprofiled_value(result, "region")
    [one] = [t for t in first.traces if t["name"] == "capture_report_file"]
    [two] = [t for t in again.traces if t["name"] == "capture_report_file"]
    assert one["action"] != two["action"], "the same traced-step identity would replay attempt 1's output"
    assert one["output"] != two["output"]


# A report damaged whatever nsys' own import did: one its failed import deleted is cut to nothing, and the raw stream
# it then keeps beside the report is damaged too, so that nsight's import of it again fails and leaves the report as
# damaged (a sound stream would give a whole report, and no damaged one to attach).
REPORT_FAULTS = {
    "truncated": 'head -c 4096 "$REP" > "$REP.cut"; mv "$REP.cut" "$REP"',
    "corrupt": 'printf "not a trace" > "$REP"',
}
DAMAGE_KEPT_STREAM = 'STREAM="${REP%.nsys-rep}.qdstrm"; [ ! -f "$STREAM" ] || printf "not a stream" > "$STREAM"'

POST_FAULTS = {  # subcommand, script, the region of `gauntlet` or `export_gauntlet`
    "export fails": ("export", 'echo "Error: export failed" >&2; exit 1', "export_fails"),
    "export corrupt": ("export", 'for a; do o=$a; done; OUT=$(echo "$@" | sed -n "s/.*-o \\([^ ]*\\).*/\\1/p"); '
                                 'printf garbage > "$OUT"; exit 0', "export_corrupt"),
    "stats fails": ("stats", 'echo "Error: stats failed" >&2; exit 1', "stats_fails"),
}

GAUNTLET_FAULTS = {
    **{f"start:{region}": script for script, _, region in START_FAULTS.values() if region},
    **{f"stop:{region}": script.replace("training", region) for script, _, region in STOP_FAULTS.values() if region},
    **{f"stop:{region}": f'"$REAL" "$@"; REP="$NSIGHT_OUTPUT_DIR/{region}.nsys-rep"; {script}; {DAMAGE_KEPT_STREAM}; '
                         'exit 0'
       for region, script in REPORT_FAULTS.items()},
    # Every `nsys stats`, as in a run of its own: of the regions, only stats_fails' trace gets that far.
    "stats:*": POST_FAULTS["stats fails"][1],
}
EXPORT_FAULTS = {
    **{f"export:{region}": script for sub, script, region in POST_FAULTS.values() if sub == "export"},
    # and `nsys export --help`, as in a run of either case alone (its script ran for every export): no arrowdir
    # export is offered, so nsight exports SQLite.
    "export:": POST_FAULTS["export fails"][1],
}
GAUNTLET_LEFT = frozenset({"nsys-report-live.qdstrm"})
"""What the gauntlet's temp space keeps: the stream of "another session" that stop_fills_disk's nsys made."""


@pytest.fixture
def gauntlet(a0: Path, tmp_path_factory: pytest.TempPathFactory) -> ActionResult:
    """`gauntlet` (a region per fault of GAUNTLET_FAULTS) run once per test run."""
    assert {pattern.split(":")[1] for pattern in GAUNTLET_FAULTS} - {"*"} | {"stats_fails"} == set(GAUNTLET)

    def make(folder: Path) -> ActionResult:
        env = {**fake_nsys_by_region(folder, GAUNTLET_FAULTS), "NSIGHT_STOP_TIMEOUT": "300"}
        return run_action_with(a0, folder, HERE, MODULE, "gauntlet", {"steps": STEPS}, env=env)

    return once_per_run(tmp_path_factory, "gauntlet", make)


@pytest.fixture
def export_gauntlet(a0: Path, tmp_path_factory: pytest.TempPathFactory) -> ActionResult:
    """`export_gauntlet` (a region per fault of EXPORT_FAULTS) run once per test run."""
    assert {pattern.split(":")[1] for pattern in EXPORT_FAULTS} - {""} == set(EXPORT_GAUNTLET)

    def make(folder: Path) -> ActionResult:
        return run_action_with(a0, folder, HERE, MODULE, "export_gauntlet", {"steps": STEPS},
                               env=fake_nsys_by_region(folder, EXPORT_FAULTS))

    return once_per_run(tmp_path_factory, "export-gauntlet", make)


GAUNTLET_TASK = {"gauntlet": GAUNTLET, "export_gauntlet": EXPORT_GAUNTLET}


def result_task(result: ActionResult) -> str:
    """The task RESULT ran (its work folder is named after it)."""
    return result.workdir.name.rsplit("-", 1)[0]


def warning_of(result: ActionResult, region: str) -> str:
    """The one warning of REGION: the run's one warning, or the one of a gauntlet's warnings that names it."""
    if result_task(result) not in GAUNTLET_TASK:
        return one_warning(result)
    [mine] = [w for w in warnings_of(result) if f"'{region}'" in w] or [""]
    assert mine, result.stderr
    return mine


def region_trace(result: ActionResult, region: str) -> Path:
    """The trace of REGION the traced step capture_report_file returned: the run's one, or the gauntlet's of REGION."""
    traces = result.traces_named("capture_report_file")
    [trace] = [t for t in traces if t.stem == region] if result_task(result) in GAUNTLET_TASK else traces
    return trace


@pytest.mark.parametrize("task", GAUNTLET_TASK)
def test_gauntlet_warns_once_per_fault(request, task):
    """What each region's case asserted of its run alone, for the whole of a shared run: every warning names
    one region, none twice; the page holds only the summaries that could be built; every region but the
    summarised one is recorded unprofiled or not summarised."""
    result = request.getfixturevalue(task)
    regions = GAUNTLET_TASK[task]
    assert_unprofiled_value(result, task)
    named = [[r for r in regions if f"'{r}'" in w] for w in warnings_of(result)]
    assert all(len(names) == 1 for names in named), result.stderr
    assert sorted(names[0] for names in named) == sorted(r for r in regions if r != "stats_fails"), result.stderr
    assert sections(result.report) == (["Nsight region: stats_fails"] if task == "gauntlet" else [])
    assert sorted(t.stem for t in result.traces_named("capture_report_file")) == sorted(
        {"gauntlet": ["truncated", "corrupt", "stats_fails"], "export_gauntlet": list(regions)}[task])


@pytest.mark.parametrize("fault", REPORT_FAULTS)
def test_damaged_trace_is_attached_but_not_summarised(gauntlet, fault):
    result, region = gauntlet, fault
    assert_unprofiled_value(result, "gauntlet")
    warning = warning_of(result, region)
    assert "could not summarise" in warning and "nsys-ui" in warning
    assert f"Nsight region: {region}" not in sections(result.report)
    # the tab says so instead of showing nothing
    assert f"Nsight region: {region}: not summarised" in html.unescape(result.report)
    assert region_trace(result, region).is_relative_to(result.workdir / "raw")
    assert_nothing_left(result)


def test_a_summary_that_would_not_fit_in_memory_is_not_built(run_action):
    """The task's container cannot spare what summarising the trace needs (here: a limit of 1 MB, as
    NSIGHT_SUMMARY_MEMORY states one nsight cannot see): no summary, one warning with the numbers and the
    remedies, the trace attached, the task as unprofiled."""
    result = run_action(HERE, MODULE, "region", {"steps": STEPS}, env={"NSIGHT_SUMMARY_MEMORY": "1M"})
    assert_unprofiled_value(result, "region")
    warning = one_warning(result)
    assert "could not summarise" in warning and "needs about" in warning and "allows 1.00 MiB" in warning
    assert sections(result.report) == []
    assert "not summarised" in result.report and "NSIGHT_SUMMARY_MEMORY=off" in html.unescape(result.report)
    [trace] = result.traces_named("capture_report_file")
    assert trace.is_relative_to(result.workdir / "raw")
    assert_nothing_left(result)


@pytest.mark.parametrize("fault", POST_FAULTS)
def test_post_processing_fault_never_shows_a_false_profile(request, fault):
    subcommand, _, region = POST_FAULTS[fault]
    result = request.getfixturevalue("export_gauntlet" if subcommand == "export" else "gauntlet")
    assert_unprofiled_value(result, result_task(result))
    assert len([w for w in warnings_of(result) if f"'{region}'" in w]) <= 1, result.stderr
    page = html.unescape(result.report)
    # Either the capture is left out with a note, or its reports say they failed: never "no data"
    # for the NVTX ranges this CPU trace does have.
    assert "nvtx_pushpop_sum: no data" not in page
    assert f"Nsight region: {region}: not summarised" in page or f"Nsight region: {region}" in sections(result.report)
    assert "failed" in page or "not summarised" in page
    assert region_trace(result, region).exists()
    assert_nothing_left(result)


@pytest.fixture
def hostile_regions(a0: Path, tmp_path_factory: pytest.TempPathFactory) -> ActionResult:
    """`hostile_regions` (regions of hostile names, then EPOCHS `epoch` regions in a loop), run once per test run:
    read by the case of the loop and by the case of the names (below)."""
    return once_per_run(tmp_path_factory, "hostile-regions",
                        lambda folder: run_action_with(a0, folder, HERE, MODULE, "hostile_regions", {"steps": STEPS}))


EPOCH = "Nsight region: epoch"


def test_exports_of_regions_in_a_loop_do_not_pile_up(hostile_regions):
    result = hostile_regions
    assert_unprofiled_value(result, "hostile_regions")
    assert sections(result.report)[len(HOSTILE_REGIONS):] == [EPOCH] * EPOCHS
    traces = kept_traces(result)
    assert [t for t in traces if t.startswith("epoch")] == ["epoch.1.nsys-rep", "epoch.nsys-rep"]
    assert len(traces) == len(HOSTILE_REGIONS) + EPOCHS
    assert_nothing_left(result)  # no .sqlite, no .stats/, no scratch folder


# -- storage ----------------------------------------------------------------------------------------



def test_read_only_output_folder_runs_unprofiled(run_action, read_only):
    result = run_action(HERE, MODULE, "region", {"steps": STEPS}, env={"TMPDIR": str(read_only)})
    assert_unprofiled_value(result, "region")
    warning = one_warning(result)
    assert "runs unprofiled" in warning and "Read-only file system" in warning
    assert report_tabs(result.report) == []
    assert wait_gone(result.run_name) == []


def test_raw_data_upload_fails_keeps_the_task_and_the_profile(run_action, read_only):
    result = run_action(HERE, MODULE, "region", {"steps": STEPS}, raw_data=read_only)
    assert_unprofiled_value(result, "region")
    warning = one_warning(result)
    assert "could not upload the trace" in warning and "raw data" in warning
    assert sections(result.report) == ["Nsight region: training"]
    assert "not uploaded" in result.report
    assert kept_traces(result) == ["training.nsys-rep"]
    assert_nothing_left(result)


# -- the task itself --------------------------------------------------------------------------------

def test_body_raises_keeps_its_error_and_its_profile(run_action):
    result = run_action(HERE, MODULE, "raises", {"steps": STEPS})
    assert result.output is None and result.error is not None, result.stderr
    assert result.error.error.code == "TrainingDiverged"
    assert result.error.error.message == f"loss is nan after {STEPS} steps"
    assert nvtx_counts(result.report) == [{f"step_{i}": 1 for i in range(STEPS)}]
    assert warnings_of(result) == [], result.stderr
    [trace] = result.traces_named("capture_report_file")  # the trace is uploaded with the error
    assert trace.suffix == ".nsys-rep" and trace.is_relative_to(result.workdir / "raw")
    assert trace.stat().st_size > 10_000
    assert_nothing_left(result)


def assert_recorded_alone(result: ActionResult, task: str) -> None:
    """Regions "first" and "second" of TASK: one capture each, holding its own NVTX ranges only."""
    assert_unprofiled_value(result, task)
    assert warnings_of(result) == [], result.stderr
    assert sorted(sections(result.report)) == ["Nsight region: first", "Nsight region: second"]
    counts = sorted(nvtx_counts(result.report), key=lambda c: sorted(c))
    assert counts == [{f"first_{i}": 1 for i in range(STEPS)}, {f"second_{i}": 1 for i in range(STEPS)}]
    assert kept_traces(result) == ["first.nsys-rep", "second.nsys-rep"]
    assert_nothing_left(result)


def test_concurrent_regions_each_record_alone(run_action):
    """Two regions at once on one event loop (`gathered`): the second waits for the first (bounded) and then
    records on its own: nothing is stretched or mixed. Two threads' regions: the next case."""
    assert_recorded_alone(run_action(HERE, MODULE, "gathered", {"steps": STEPS}), "gathered")


def test_concurrent_regions_wait_out_a_slow_nsys(run_action, tmp_path):
    """Two regions at once from two threads (`threaded`), and what a loaded CI machine did: the first
    region's nsys work alone outlasts the 7 s a region waits for another one's block. Here its `nsys start`
    takes 8 s more (the first start only: mkdir is atomic); the second region waits that out, uncounted,
    and still records on its own."""
    slow = fake_nsys(tmp_path, "start", f"mkdir {tmp_path / 'slowed'} 2>/dev/null && sleep 8")
    assert_recorded_alone(run_action(HERE, MODULE, "threaded", {"steps": STEPS}, env=slow), "threaded")


def test_nested_region_runs_unprofiled_and_the_outer_section_says_so(run_action):
    """Also attach_report=False: the profile is rendered, but no traced step carries the trace."""
    result = run_action(HERE, MODULE, "nested", {"steps": STEPS})
    assert_unprofiled_value(result, "nested")
    warning = one_warning(result)
    assert "could not start collection for region 'inner'" in warning and "Do not nest" in warning
    assert sections(result.report) == ["Nsight region: outer"]
    assert nvtx_counts(result.report) == [{f"step_{i}": 1 for i in range(STEPS)}]
    assert "also holds the activity of 'inner'" in html.unescape(result.report)
    assert result.traces == []
    assert_nothing_left(result)


def test_cancelled_region_start_leaves_no_collection_running(run_action):
    result = run_action(HERE, MODULE, "cancelled", {"steps": STEPS})
    assert_unprofiled_value(result, "cancelled")
    assert not any("could not start" in w for w in warnings_of(result)), result.stderr
    assert "Nsight region: after" in sections(result.report)
    assert nvtx_counts(result.report)[-1] == {f"step_{i}": 1 for i in range(STEPS)}
    assert_nothing_left(result)



# -- signals ----------------------------------------------------------------------------------------

SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


def exit_status(returncode: int) -> int:
    """A shell's view of an exit: 128+N for a process killed by signal N (nsys reports it that way)."""
    return 128 - returncode if returncode < 0 else returncode


def signalled(run_action, tmp_path: Path, signum: int, target: str, env: dict[str, str]) -> ActionResult:
    """Run `preempted` (RUN_ACTION: the fixture's callable) and send SIGNUM to TARGET once it records (child,
    nsys, or the whole group)."""
    ready = tmp_path / f"ready-{target}-{len(env)}"

    def send(process: subprocess.Popen[str], work: Path) -> None:
        deadline = time.monotonic() + 120
        while not ready.exists() or not ready.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the task never started recording:\n{(work / 'output.txt').read_text()}")
            time.sleep(0.1)
        if target == "child":
            os.kill(int(ready.read_text()), signum)
        elif target == "nsys":
            nsys = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
            os.kill(int(nsys[0]), signum)  # a0 exec'd into the wrapper and `nsight launch`, nsys' parent
        else:
            os.killpg(process.pid, signum)

    return run_action(HERE, MODULE, "preempted", {"steps": STEPS}, env={**env, "NSIGHT_TEST_READY": str(ready)},
                      started=send)


@pytest.fixture
def unprofiled_sigterm(a0: Path, tmp_path_factory: pytest.TempPathFactory) -> ActionResult:
    """`preempted` without nsys, given SIGTERM: the exit every profiled SIGTERM case is compared with."""

    def make(folder: Path) -> ActionResult:
        def run(*args, **options):  # type: ignore[no-untyped-def]
            return run_action_with(a0, folder, *args, **options)

        return signalled(run, folder, signal.SIGTERM, "child", without_nsys_env(folder))

    return once_per_run(tmp_path_factory, "unprofiled-sigterm", make)


@pytest.mark.parametrize(("name", "target"), [  # SIGTERM (a preempted pod) at each target, SIGINT at the program
    *(("SIGTERM", target) for target in ("child", "nsys", "group")), ("SIGINT", "child"),
    *(pytest.param("SIGINT", target, marks=pytest.mark.exhaustive) for target in ("nsys", "group"))],
    ids=lambda v: str(v))
def test_signal_flushes_the_trace_and_exits_as_unprofiled(run_action, request, tmp_path, name, target):
    """A preempted pod: the signal stops the collection, the trace is written, the exit is the unprofiled one."""
    signum = SIGNALS[name]
    result = signalled(run_action, tmp_path, signum, target, {})
    if signum == signal.SIGTERM:  # as unprofiled: the task dies of SIGTERM
        plain = request.getfixturevalue("unprofiled_sigterm")
        assert exit_status(result.returncode) == exit_status(plain.returncode) == 143, result.stderr
    elif target == "child":  # flyte's own handling, profiled or not: it cancels the task, "Aborted!", 1
        assert exit_status(result.returncode) in {0, 1}, result.stderr  # (0 at times under load, unprofiled too)
    elif target == "group":  # nsight launch, the pod's first process, got it
        assert exit_status(result.returncode) == 130, result.stderr
    # SIGINT to nsys alone: nsys 2023.4.4 exits 0 whatever the task did (docs/troubleshooting.md).
    assert result.output is None
    assert kept_traces(result) == ["training.nsys-rep"], result.stderr
    assert_nothing_left(result)


def test_a_preempted_tasks_failed_import_is_imported_again(run_action, tmp_path):
    """SIGTERM stops the collection and nsys' importer fails, as 2023.4.4's does under load, keeping the raw stream
    beside the trace it did not write. The task's own stop imports it once more, as a region's stop does, and where
    that import fails too under load, `nsight launch` imports it again once the task has died. The trace is kept, no
    stream is left."""
    env, imports = nsys_whose_importer_fails_once(tmp_path)
    result = signalled(run_action, tmp_path, signal.SIGTERM, "child", env)
    assert exit_status(result.returncode) == 143, result.stderr
    assert len(imports.read_text().splitlines()) >= 2, result.stderr  # nsys' import, then nsight's
    assert kept_traces(result) == ["training.nsys-rep"], result.stderr
    assert_nothing_left(result)


# -- hostile names ----------------------------------------------------------------------------------

def test_hostile_region_names(hostile_regions):
    result = hostile_regions
    assert_unprofiled_value(result, "hostile_regions")
    assert warnings_of(result) == [], result.stderr
    assert len([s for s in sections(result.report) if s != EPOCH]) == len(HOSTILE_REGIONS)
    traces = [t for t in kept_traces(result) if not t.startswith("epoch")]
    assert len(traces) == len(HOSTILE_REGIONS) and all("/" not in t and len(t) < 120 for t in traces)
    assert not (HERE / "pwned").exists() and not (result.workdir / "pwned").exists()
    assert_nothing_left(result)

