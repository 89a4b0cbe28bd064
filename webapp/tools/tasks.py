from __future__ import annotations

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded

from trainer.mdp import ToolCallRecord
from webapp.tools.models import CHECK_ENTRY_POINT_TASK, MAX_TIMEOUT_S, RUN_TRIAL_TASK, TeamTool, ToolTrial


@shared_task(name=CHECK_ENTRY_POINT_TASK)
def check_entry_point(tool_id: int) -> None:
    """Import a python tool's class on a worker: where it will run, not where it was registered."""
    tool = TeamTool.objects.filter(pk=tool_id).first()
    if tool is None:
        return
    tool.check_entry_point()


# run_tool_call's timeout cannot interrupt a tool that blocks its event loop; the soft limit can
# (prefork pools only), and the trial still ends with an answer.
@shared_task(name=RUN_TRIAL_TASK, soft_time_limit=MAX_TIMEOUT_S + 15, time_limit=MAX_TIMEOUT_S + 30)
def run_trial(trial_id: int) -> None:
    trial = ToolTrial.objects.filter(pk=trial_id).select_related("tool", "team_reward").first()
    if trial is None:
        return
    try:
        trial.run()
    except SoftTimeLimitExceeded:
        message = f"Error: tool {trial.tool_name!r} did not return within the worker's time limit"
        trial.finish(
            ToolCallRecord(name=trial.tool_name, arguments=trial.arguments, error="timeout", result=message)
        )
