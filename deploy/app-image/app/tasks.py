"""The sample application's tasks: ``wheelq run app.tasks:app`` runs them (the image's
command). Its Redis is ``WHEELQ_REDIS_URL`` (or ``--redis-url``), as every role's is."""

import os

import humanize  # the application's own dependency (requirements.txt)

import wheelq

app = wheelq.App.from_url(os.environ.get("WHEELQ_REDIS_URL", "redis://localhost:6379/0"))


@app.task
def report(name: str, size_bytes: int) -> str:
    return f"{name}: {humanize.naturalsize(size_bytes)}"
