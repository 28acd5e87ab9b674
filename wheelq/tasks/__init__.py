"""Tasks: typed functions run later as wheelq jobs (`App`, `Task`, `TaskHandle`), and
flows of them (`Flow`: one inside `App.flow`)."""

from wheelq.tasks.app import App
from wheelq.tasks.handle import TaskHandle
from wheelq.tasks.signature import Flow
from wheelq.tasks.task import Task, TaskCall

__all__ = ["App", "Flow", "Task", "TaskCall", "TaskHandle"]
