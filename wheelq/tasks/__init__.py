"""Tasks: typed functions run later as wheelq jobs (`App`, `Task`, `TaskHandle`)."""

from wheelq.tasks.app import App
from wheelq.tasks.handle import TaskHandle
from wheelq.tasks.task import Task, TaskCall

__all__ = ["App", "Task", "TaskCall", "TaskHandle"]
